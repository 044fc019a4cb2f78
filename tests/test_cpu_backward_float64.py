"""CPU float64 backward on SIMD lanes.

At T > 0 the float64 backward runs on the reverse rows of
csrc/kernels/cpu/reverse_simd.h (linear gaps) and reverse_affine_simd.h
(affine gaps) as float32 does, with double lanes, 16 pairs to a group (a lone
short linear pair: a group of one; a lone long linear pair: its columns in
blocks on the lanes; a lone affine pair: the narrow rows). It reads the
log-domain state the float64 forward keeps (H; C, U, L), whichever domain that
forward ran a pair in. Linear gaps: every pair with a non-empty region. Affine
gaps: the pairs inside the double range rule of csrc/kernels/probability.h
(their weights from the shares of the nodes, 4 exp2 a cell); the others, and
empty and invalid pairs, and T = 0, on the scalar passes. These tests hold the
gradients (scores and gap tensors) against the float64 reference
(tests/reference.py) at the float64 tolerance: batches of 1, 15, 16, 17 and 37
pairs (full groups and remainders), lengths shorter than the tensor with
garbage padding, temperatures 1e-3 .. 1e3, |S| up to 1e4 (pairs in and out of
the range rule in one batch), "max" and "soft"; and they show that the SIMD
backward is what ran: on the same forward state, its gradients differ from
the scalar passes' (SOFTSW_CPU_ISA=scalar) in the last bits. (The training
tests of test_cpu_probability_domain_float64.py go through it too: scores
and gaps at the limit of the range rule among them, where an affine C the
forward flushed to -inf must carry nothing.)
"""
import math
import textwrap

import pytest
import torch

import softsw
from conftest import fill_padding, grad_tol, leaf, rand_lengths, randn
from helpers import (DOUBLE_LOG2_LIMIT, assert_simd_ran, compare_with_reference, gap_tensor,
                     outputs_under_isa, scores_across_a_range_rule, small_padded_problem)
from reference import ref_align
from softsw import _ops

F64 = torch.float64


AFFINE = pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [1, 15, 16, 17, 37])
def test_batches_with_padding(two_cpu_threads, gen, B, reduction, affine):
    """Full groups, remainders and a lone pair; lengths shorter than the
    tensor, garbage (NaN, inf, 1e30) in the padding; gradients with respect to
    the scores, exactly zero in the padding (compare_with_reference)."""
    M, N = 21, 26
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    compare_with_reference(gen, S, -0.8, 1.0, gap_extend=-0.3 if affine else None,
                           lengths=lengths, reduction=reduction)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_temperatures_and_magnitudes(two_cpu_threads, gen, T, magnitude, reduction, affine):
    """Small T or large |S| puts a pair out of the range rule (the log-domain
    forward; affine: the scalar backward), the rest inside; mixed within a
    batch where the magnitude puts pairs on either side."""
    B, M, N = 18, 15, 19
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=magnitude), lengths, gen)
    compare_with_reference(gen, S, -0.5 * magnitude, T,
                           gap_extend=-0.2 * magnitude if affine else None, lengths=lengths,
                           reduction=reduction)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_range_rule_mixed_in_one_group(two_cpu_threads, gen, reduction, affine):
    """One group of 17 pairs: some far out of the double range rule (a single
    dominating cell, scores scaled by 1e3), the rest inside."""
    B, M, N = 17, 18, 27
    T = 0.7
    S = scores_across_a_range_rule(gen, B, M, N, 4 * DOUBLE_LOG2_LIMIT * T * math.log(2))
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    compare_with_reference(gen, S, -1.0, T, gap_extend=-0.25 if affine else None,
                           lengths=lengths, reduction=reduction)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [1, 17])
def test_gap_tensors(two_cpu_threads, gen, B, reduction, affine):
    """Per-cell gap scores: gradients with respect to the scores and to the
    gap tensors; one pair's open gaps out of the range rule."""
    M, N = 16, 22
    T = 0.5
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N), lengths, gen)
    go = gap_tensor(gen, B, M, N, 0.0, 2.0)
    go[B // 2, 3, 5] = -2 * DOUBLE_LOG2_LIMIT * T * math.log(2)
    ge = gap_tensor(gen, B, M, N, 0.0, 0.5) if affine else None
    compare_with_reference(gen, S, go, T, gap_extend=ge, lengths=lengths, reduction=reduction)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_lone_pairs(gen, T, reduction, affine):
    """A lone pair: short and long (linear: a group of one, or its columns in
    blocks on the lanes with the messages handed from block to block; affine:
    the narrow rows), constant gaps of either sign and gap tensors."""
    for M, N in ((30, 63), (30, 200), (9, 700)):
        S = randn(gen, 1, M, N, scale=1.5)
        gaps = [(-1.0, -0.3), (0.5 * T, -0.5 * T),
                (gap_tensor(gen, 1, M, N, 0.5, 1.5), gap_tensor(gen, 1, M, N, 0.1, 0.6))]
        for gap, extend in gaps:
            compare_with_reference(gen, S, gap, T, gap_extend=extend if affine else None,
                                   reduction=reduction)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_pair_alone_equals_pair_in_group(two_cpu_threads, gen, reduction, affine):
    """Each pair alone (a group of one) gets the gradient bits, with respect
    to the scores and the gap tensors, that it gets in a padded batch of 17
    (groups of masked rows)."""
    B, M, N = 17, 23, 40  # (N < 64: no column blocks for the lone pair)
    T = 0.8
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=2.0), lengths, gen)
    gaps = [gap_tensor(gen, B, M, N, 0.2, 1.2)]
    if affine:
        gaps.append(gap_tensor(gen, B, M, N, 0.1, 0.5))
    x, gl = leaf(S), [leaf(g) for g in gaps]
    out = softsw.align(x, gl[0], T, gap_extend=gl[1] if affine else None, lengths=lengths,
                       reduction=reduction)
    batch = torch.autograd.grad(out.sum(), [x, *gl])
    for b in range(B):
        m, n = lengths[b].tolist()
        xb, gb = leaf(S[b, :m, :n]), [leaf(g[b, :m, :n]) for g in gaps]
        one = softsw.align(xb, gb[0], T, gap_extend=gb[1] if affine else None,
                           reduction=reduction)
        alone = torch.autograd.grad(one, [xb, *gb])
        assert torch.equal(one.detach(), out[b].detach()), f"pair {b}: score alone != in group"
        for name, a, g in zip(("scores", "gap_open", "gap_extend"), alone, batch):
            assert torch.equal(a, g[b, :m, :n]), f"pair {b}: d/d {name} alone != in group"


@AFFINE
def test_gradcheck(gen, affine):
    """torch.autograd.gradcheck through the SIMD backward: a padded batch of
    17 (a group and a lone pair on two threads), both reductions, gap
    tensors."""
    inputs, align_of = small_padded_problem(gen, affine)
    for reduction in ("max", "soft"):
        assert torch.autograd.gradcheck(align_of(reduction), inputs, eps=1e-6, atol=1e-7)


# The backward op alone on the problems and forward states of a file (as the
# test wrote them), under the process's SOFTSW_CPU_ISA: its gradients saved.
BACKWARD_SCRIPT = textwrap.dedent("""
    import sys, torch
    from softsw import _ops
    cases = torch.load(sys.argv[1])
    grads = [_ops.backward_without_autograd(c["grad"], *c["args"], *c["state"]) for c in cases]
    torch.save(grads, sys.argv[2])
    print("OK")
""")


def problems(seed):
    """37 pairs, some empty, pairs 3..6 out of the range rule: linear and
    affine gaps, constant and per-cell, "max" and "soft". Each with its
    arguments of the forward and backward ops (api._prepare), a cotangent, and
    the float64 reference's gradients."""
    gen = torch.Generator().manual_seed(seed)
    B, M, N = 37, 20, 23
    T = 0.5
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = randn(gen, B, M, N, scale=1.5)
    S[3:7] *= 1e3
    S = fill_padding(S, lengths, gen)
    go, ge = gap_tensor(gen, B, M, N, 0.2, 1.5), gap_tensor(gen, B, M, N, 0.1, 0.5)
    cases = []
    for affine in (False, True):
        for gap, extend in ((-0.7, -0.2), (go, ge)):
            extend = extend if affine else None
            for reduction in ("max", "soft"):
                args, _ = softsw.api._prepare(S, gap, T, extend, lengths, reduction)
                w = randn(gen, B)
                x = leaf(S)
                ref = ref_align(x, gap, T, gap_extend=extend, lengths=lengths, reduction=reduction)
                (want,) = torch.autograd.grad(ref, x, w)
                tol = grad_tol(F64, M, N, T, ref[torch.isfinite(ref)].abs().max().item())
                cases.append({"args": args, "grad": w, "want": {"d/d S": want}, "tol": tol,
                              "what": f"affine={affine} tensor gaps={gap is go} {reduction}"})
    return cases


def backward_under(isa, path, cases):
    """The backward op's gradients of `cases` (their states in them) in a
    process under SOFTSW_CPU_ISA=isa."""
    payload = [{"args": c["args"], "grad": c["grad"], "state": c["state"]} for c in cases]
    return [{"d/d S": g[0]} for g in outputs_under_isa(isa, path, BACKWARD_SCRIPT, payload)]


def check_against_scalar(isa, seed, tmp_path):
    """On the same forward states (this process's forward), the backward under
    `isa` and under the scalar passes: both match the reference's gradients
    with respect to the scores, and they differ in the last bits somewhere in
    each case, linear and affine, constant gaps and tensors, "max" and
    "soft": the SIMD backward ran."""
    cases = problems(seed)
    for c in cases:
        _, hidden, argmax, total = _ops.forward_without_autograd(*c["args"], True)
        c["state"] = (hidden, argmax, total)
    simd = backward_under(isa, tmp_path, cases)
    scalar = backward_under("scalar", tmp_path, cases)
    assert_simd_ran(isa, cases, simd, scalar, "d/d S")


@pytest.mark.parametrize("isa", ["avx512", pytest.param("baseline", marks=pytest.mark.slow),
                                 pytest.param("avx2", marks=pytest.mark.slow)])
def test_simd_backward_ran(seed, tmp_path, isa):
    """The best instruction set the CPU has (a cap above it runs the best),
    and each narrower cap (2 doubles to a vector on the baseline), against
    SOFTSW_CPU_ISA=scalar, 3 threads."""
    check_against_scalar(isa, seed, tmp_path)
