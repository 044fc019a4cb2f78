"""CPU affine training state: checkpoints, and the backward block by block.

The training forward of an affine-gap pair in the probability domain (T > 0,
a float accumulator, scores and gaps inside the range rule) keeps only a few
rows of its own state, every k rows (k from the number of columns: 4 at 700
columns), and the backward runs the forward again from them one block of
rows at a time (csrc/kernels/cpu/checkpoints.h). These tests make many
blocks and hold, against the float64 kernel, the scores, first derivatives
(scores and per-cell gaps) and Hessian-vector products of pairs whose
lengths end inside a block, on a block's edge, before the first checkpoint,
beside a pair out of the range rule (full state, log domain) and an empty
one; a pair's gradient is the same, bit for bit, alone and in any batch (the
forward repeated exactly whatever group it runs in); the small state the
raw forward op returns is the same from call to call.
"""
import pytest
import torch

import softsw
from conftest import assert_close, fill_padding, grad_tol, hvp_tol, leaf, randn, score_tol

M, N = 29, 700  # k = 4 rows a block at 700 columns
LENGTHS = torch.tensor([[29, 700], [3, 700], [7, 650], [12, 333], [8, 699], [29, 17],
                        [0, 5], [10, 690]])
OUT_OF_RANGE = 7  # its scores x 40: the log-domain passes, full state


def inputs(gen, gap_tensor):
    B = len(LENGTHS)
    S = randn(gen, B, M, N, scale=1.3)
    S[OUT_OF_RANGE] *= 40
    S = fill_padding(S.float().double(), LENGTHS, gen)
    if gap_tensor:
        go = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.4).float().double()
        ge = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.5).float().double()
    else:
        go, ge = -0.9, -0.25
    return S, go, ge


def first_derivatives(S, go, ge, dtype, reduction, lengths=LENGTHS, create_graph=False):
    x = leaf(S.to(dtype))
    gaps = [leaf(g.to(dtype)) if isinstance(g, torch.Tensor) else g for g in (go, ge)]
    out = softsw.align(x, gaps[0], 1.0, gap_extend=gaps[1], lengths=lengths, reduction=reduction)
    ins = [x] + [g for g in gaps if isinstance(g, torch.Tensor)]
    grads = torch.autograd.grad(out.sum(), ins, create_graph=create_graph)
    return out, ins, grads


@pytest.mark.parametrize("gap_tensor", [False, True], ids=["constant-gaps", "gap-tensors"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_blocks_match_float64(gen, reduction, gap_tensor):
    S, go, ge = inputs(gen, gap_tensor)
    res = {}
    for dt in (torch.float64, torch.float32):
        out, _, grads = first_derivatives(S, go, ge, dt, reduction)
        res[dt] = (out.detach(), *grads)
    ref, got = res[torch.float64], res[torch.float32]
    scale = ref[0][torch.arange(len(LENGTHS)) != OUT_OF_RANGE].abs().max().item()
    assert_close(got[0], ref[0], torch.float32, "score", tol=score_tol(torch.float32, M, N))
    tol = grad_tol(torch.float32, M, N, 1.0, scale)
    in_range = torch.arange(len(LENGTHS)) != OUT_OF_RANGE
    for name, a, e in zip(["d/d S", "d/d open", "d/d extend"], got[1:], ref[1:]):
        assert_close(a[in_range], e[in_range], torch.float32, name, tol=tol)
        assert torch.isfinite(a).all(), name
    # A pair's gradient sums to its soft path's cells: nonzero inside, 0 outside.
    assert (got[1][0].abs().sum() > 0) and (got[1][6] == 0).all()


@pytest.mark.parametrize("copies", [1, 3], ids=["narrow-groups", "wide-groups"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_alone_equals_batched(two_cpu_threads, gen, reduction, copies):
    """A pair alone (a group of one: the narrow rows, 8 lanes) against the
    same pair in a batch of 8 (groups of at most 8) or of 24 (groups of 12 or
    more: the wide rows, 16 lanes): the same bits."""
    S, go, ge = inputs(gen, True)
    lengths = LENGTHS.repeat(copies, 1)
    S, go, ge = (x.repeat(copies, 1, 1) for x in (S, go, ge))
    out, _, grads = first_derivatives(S, go, ge, torch.float32, reduction, lengths=lengths)
    for b in range(len(LENGTHS)):
        one = slice(b, b + 1)
        o1, _, g1 = first_derivatives(S[one], go[one], ge[one], torch.float32, reduction,
                                      lengths=LENGTHS[one])
        assert torch.equal(o1, out[one]), b
        for a, e in zip(g1, grads):
            assert torch.equal(a, e[one]), b


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_hessian_vector_product_over_blocks(gen, reduction):
    S, go, ge = inputs(gen, True)
    V = randn(gen, *S.shape)
    res = {}
    for dt in (torch.float64, torch.float32):
        out, ins, grads = first_derivatives(S, go, ge, dt, reduction, create_graph=True)
        hvp = torch.autograd.grad((grads[0] * V.to(dt)).sum(), ins)
        res[dt] = (out.detach(), *hvp)
    in_range = torch.arange(len(LENGTHS)) != OUT_OF_RANGE
    scale = res[torch.float64][0][in_range].abs().max().item()
    tol = hvp_tol(torch.float32, M, N, 1.0, scale)
    for name, a, e in zip(["HVP d/d S", "HVP d/d open", "HVP d/d extend"],
                          res[torch.float32][1:], res[torch.float64][1:]):
        assert_close(a[in_range], e[in_range], torch.float32, name, tol=tol)


def test_small_state_repeats(gen):
    """The raw forward's state, small: the same from call to call (the
    parts the checkpoints leave are zero), so the op's outputs repeat."""
    S = randn(gen, 3, 9, 11).float()
    args = (S, None, None, -0.8, -0.3, True, 1.0, None, 0, True)
    outs = [torch.ops.softsw.forward(*args) for _ in range(3)]
    torch.empty(10**6).fill_(float("nan"))  # garbage where the next state may land
    outs.append(torch.ops.softsw.forward(*args))
    for o in outs[1:]:
        for a, e in zip(o, outs[0]):
            assert torch.equal(a, e)
