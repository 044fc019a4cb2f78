"""CPU affine-gap backward on SIMD lanes.

At T > 0 with a float accumulator (float32, float16, bfloat16), the affine
backward runs 16 pairs to a SIMD group, its weights in the probability domain
(ratios of the cell's nodes, csrc/kernels/probability.h) when a pair's scores
and gaps are inside the range rule; a pair outside it (small T, large |S|,
large gaps, inf / NaN) takes the scalar log-domain pass, in the same batch.
These tests hold the gradients with respect to the scores and both gap scores
against the float64 reference (tests/reference.py) on inputs chosen for either
domain and for the lanes of a group: mixed lengths (1 x 1 pairs next to full
ones), garbage in the padding, groups of every size, per-cell gaps.
"""
import math

import pytest
import torch

from conftest import fill_padding, rand_lengths, randn
from helpers import compare_with_reference

# ProbabilityRange<float>::kMaxLog2Weight (csrc/kernels/probability.h).
FLOAT_LOG2_LIMIT = 12.0


def compare(gen, S, open_, extend, T, lengths, reduction, dtype=torch.float32):
    return compare_with_reference(gen, S.to(dtype), open_, T, gap_extend=extend,
                                  lengths=lengths, reduction=reduction)


def leaf_gap(x):
    return x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [2, 5, 16, 21, 37])
def test_mixed_lengths_in_one_group(gen, B, reduction):
    """Lanes of one group with different extents (1 x 1 pairs included) and
    garbage (NaN, inf, 1e30) in the padding; group sizes that leave lanes idle."""
    M, N = 19, 27
    S = randn(gen, B, M, N, scale=1.5)
    lengths = rand_lengths(gen, B, M, N)
    if B > 2:
        lengths[1] = torch.tensor([1, 1])
        lengths[2] = torch.tensor([M, 1])
    S = fill_padding(S, lengths, gen)
    for open_, extend in ((-1.0, -0.5), (-0.3, -1.2), (0.4, -0.2)):
        compare(gen, S, open_, extend, 1.0, lengths, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 0.3, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0])
def test_temperatures_and_magnitudes(gen, T, magnitude, reduction):
    """Small T or large |S| runs the scalar log-domain pass, the rest the
    SIMD probability-domain pass; both against the reference."""
    B, M, N = 18, 14, 22
    S = randn(gen, B, M, N, scale=magnitude)
    lengths = rand_lengths(gen, B, M, N)
    compare(gen, fill_padding(S, lengths, gen), -1.0 * magnitude, -0.4 * magnitude, T, lengths,
            reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_mixed_domains_in_one_batch(gen, reduction):
    """Pairs out of range (one cell, or the whole pair) in the same batch and
    group as pairs in range."""
    B, M, N = 20, 17, 23
    S = randn(gen, B, M, N)
    S[2, 4, 5] = 100.0
    S[6] *= 1e3
    S[9, 0, 0] = -1e4
    lengths = rand_lengths(gen, B, M, N)
    compare(gen, fill_padding(S, lengths, gen), -1.0, -0.25, 0.5, lengths, reduction)


@pytest.mark.parametrize("side", ["inside", "outside"])
def test_gaps_at_the_limit(gen, side):
    """Scores and both gap scores at the range limit: just inside (SIMD), just
    outside (scalar). A large positive open gap makes the forward flush nodes
    far below their row (C = -inf in the state): they carry no gradient.
    "soft" only: scores clamped to +-limit tie often, and under "max" the
    argmax among near-tied cells is a matter of rounding (the float32 scalar
    passes disagree with float64 there as well)."""
    reduction = "soft"
    B, M, N = 17, 15, 21
    T = 1.0
    factor = 0.98 if side == "inside" else 1.02
    s = factor * FLOAT_LOG2_LIMIT * T * math.log(2)
    S = randn(gen, B, M, N).clamp(-1, 1) * s
    S[:4] = s
    for open_, extend in ((-s, -s), (-s, s), (s, -1.0), (s / 3, s / 2)):
        compare(gen, S, open_, extend, T, None, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.3, 1.0])
def test_gap_tensors(gen, T, reduction):
    """Per-cell open and extend scores (the weights 2^g cell by cell), one of
    them a tensor and the other a float, broadcast shapes, and a pair with one
    gap out of range (scalar) in the batch."""
    B, M, N = 19, 16, 24
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    go = -torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.5
    ge = -torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.5
    compare(gen, S, go, ge, T, lengths, reduction)
    compare(gen, S, go, -0.3, T, lengths, reduction)
    compare(gen, S, -1.1, ge, T, lengths, reduction)
    compare(gen, S, go[:1], ge[0], T, lengths, reduction)  # (1, M, N) and (M, N)
    go[3, 2, 2] = -50.0
    compare(gen, S, go, ge, T, lengths, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_larger_pairs(gen, reduction):
    """Rows longer than one chunk of the forward and many rows: the shares of
    the row above carried from one row's pass to the next."""
    B, M, N = 18, 70, 90
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    compare(gen, fill_padding(S, lengths, gen), -1.0, -0.5, 1.0, lengths, reduction)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_half_types(gen, dtype, reduction):
    B, M, N = 18, 13, 20
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    compare(gen, fill_padding(S, lengths, gen), -1.0, -0.5, 1.0, lengths, reduction, dtype)


def test_deterministic_and_independent_of_the_batch(gen):
    """The same pair gets the same gradient alone, in a small group and in a
    large batch (up to the scalar pass a lone pair takes: float tolerance)."""
    B, M, N = 33, 12, 18
    S = randn(gen, B, M, N).float()
    lengths = rand_lengths(gen, B, M, N)

    def grad(x, lens):
        x = x.detach().clone().requires_grad_(True)
        import softsw
        softsw.align(x, -1.0, 1.0, gap_extend=-0.5, lengths=lens, reduction="soft").sum().backward()
        return x.grad

    g1 = grad(S, lengths)
    assert torch.equal(g1, grad(S, lengths))
    g_part = grad(S[:9], lengths[:9])
    torch.testing.assert_close(g_part, g1[:9], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_empty_pairs_and_boundary_argmax(gen, reduction):
    """Empty pairs (zero gradient) and, under "max", pairs whose best cell is
    the boundary (all scores negative: zero gradient) between pairs of a group."""
    B, M, N = 20, 11, 16
    S = randn(gen, B, M, N)
    S[5] = -abs(S[5]) - 2.0
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    lengths[3] = torch.tensor([0, 7])
    lengths[4] = torch.tensor([6, 0])
    compare(gen, fill_padding(S, lengths, gen), -1.0, -0.5, 1.0, lengths, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.05, 0.3, 1.0])
def test_double_backward_vs_float64(gen, T, reduction):
    """The double backward (its affine weights with SIMD along each row from
    the probability-domain shares when a pair is in range) in float32 against
    the float64 kernel on the same rounded inputs: per-cell open and extend
    gaps, padding, a pair out of range (and, at T = 0.05, most of them) in the
    batch. Tolerances: conftest.grad_tol / hvp_tol."""
    import softsw
    from conftest import assert_close, grad_tol, hvp_tol, leaf
    B, M, N = 7, 21, 26
    S = randn(gen, B, M, N).float().double()
    S[2, 3, 4] = 60.0  # out of range
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    V = randn(gen, B, M, N).float().double()
    go = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.5).float().double()
    ge = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.5).float().double()
    w = randn(gen, B).float().double()
    res = []
    for dt in (torch.float64, torch.float32):
        ins = [leaf(S.to(dt)), leaf(go.to(dt)), leaf(ge.to(dt))]
        out = softsw.align(ins[0], ins[1], T, gap_extend=ins[2], lengths=lengths,
                           reduction=reduction)
        first = torch.autograd.grad(out, ins, grad_outputs=w.to(dt), create_graph=True)
        second = torch.autograd.grad((first[0] * V.to(dt)).sum(), ins)
        res.append(first + second)
        if dt == torch.float64:
            scale = out.detach().abs().max().item()
    names = ["d/d S", "d/d open", "d/d extend", "HVP d/d S", "HVP d/d open", "HVP d/d extend"]
    for k, (name, a, e) in enumerate(zip(names, res[1], res[0])):
        tol = (grad_tol if k < 3 else hvp_tol)(torch.float32, M, N, T, scale)
        assert a.dtype == torch.float32
        assert_close(a, e, torch.float32, name, tol=tol)
