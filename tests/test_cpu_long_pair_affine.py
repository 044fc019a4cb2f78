"""CPU: a lone long affine-gap pair on column blocks.

A pair alone in its group (batch 1, or one pair a thread), in the probability
domain (T > 0, float32, inside the range rule) and at least 64 columns wide,
runs with its columns cut into up to 16 blocks, one per SIMD lane, in a
wavefront: the forward (inference, and training with the state of
csrc/kernels/cpu/affine_long_pair.h: the row checkpoints and the wavefront's
own, every k steps) and the backward (the reverse wavefront, the forward run
again one block of k steps at a time). These tests hold it against the
float64 kernel (scores, gradients of scores and per-cell gaps, the
Hessian-vector product that reads its row checkpoints) for lengths shorter
than the padded tensor, a last block narrower than the others and cut
inside a chunk, several blocks of steps, one to three rows, "max" and "soft",
large and small temperatures inside the range rule; and against the same pair
in a group of a batch: the same bits (its blocks hold whole chunks, so every
cell is computed from the same values, and "soft" sums are folded in a
group's order).

The tests of a pair in a group run at two threads (conftest.two_cpu_threads).
"""
import os

import pytest
import torch

import softsw
from conftest import assert_close, fill_padding, grad_tol, hvp_tol, leaf, randn, score_tol

# 1990 of 2000 columns: blocks of 128 (k = 25 steps a checkpoint), the last
# one 70 columns; 97 of 100 rows: 112 steps, five blocks of steps.
M, N = 100, 2000
LENGTH = torch.tensor([[97, 1990]])


def pair(gen, gap_tensor, scale=1.0, M=M, N=N, lengths=LENGTH):
    S = randn(gen, 1, M, N, scale=scale).clamp(-4 * scale, 4 * scale)
    S = fill_padding(S.float().double(), lengths, gen)
    if gap_tensor:
        go = (-torch.rand(1, M, N, generator=gen, dtype=torch.float64) - 0.4).float().double()
        ge = (-torch.rand(1, M, N, generator=gen, dtype=torch.float64) * 0.5).float().double()
    else:
        go, ge = -0.9, -0.25
    return S, go, ge


def first_derivatives(S, go, ge, dtype, reduction, lengths, T=1.0, create_graph=False):
    x = leaf(S.to(dtype))
    gaps = [leaf(g.to(dtype)) if isinstance(g, torch.Tensor) else g for g in (go, ge)]
    out = softsw.align(x, gaps[0], T, gap_extend=gaps[1], lengths=lengths, reduction=reduction)
    ins = [x] + [g for g in gaps if isinstance(g, torch.Tensor)]
    grads = torch.autograd.grad(out.sum(), ins, create_graph=create_graph)
    return out, ins, grads


def column_blocks(S, go, ge, lengths, T=1.0, reduction=0, pair=0):
    """The column blocks the raw forward's state of a pair says it ran on (0: a group)."""
    gt = [g.float() if isinstance(g, torch.Tensor) else None for g in (go, ge)]
    gv = [0.0 if isinstance(g, torch.Tensor) else g for g in (go, ge)]
    out = torch.ops.softsw.forward(S.float(), gt[0], gt[1], gv[0], gv[1], True, T, lengths,
                                   reduction, True)
    _, rows, cols = S.shape
    return int(out[1][pair * 3 * rows * cols + 1].item())


@pytest.mark.parametrize("gap_tensor", [False, True], ids=["constant-gaps", "gap-tensors"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T,scale", [(1.0, 1.0), (0.2, 0.35), (8.0, 6.0)],
                         ids=["T1", "T0.2", "T8"])
def test_matches_float64(gen, reduction, gap_tensor, T, scale):
    S, go, ge = pair(gen, gap_tensor, scale)
    assert column_blocks(S, go, ge, LENGTH, T, 0 if reduction == "max" else 1) == 16
    res = {}
    for dt in (torch.float64, torch.float32):
        out, _, grads = first_derivatives(S, go, ge, dt, reduction, LENGTH, T)
        res[dt] = (out.detach(), *grads)
    ref, got = res[torch.float64], res[torch.float32]
    assert_close(got[0], ref[0], torch.float32, "score", tol=score_tol(torch.float32, M, N))
    tol = grad_tol(torch.float32, M, N, T, ref[0].abs().max().item())
    for name, a, e in zip(["d/d S", "d/d open", "d/d extend"], got[1:], ref[1:]):
        assert_close(a, e, torch.float32, name, tol=tol)
    m, n = LENGTH[0].tolist()
    assert got[1][0, :m, :n].abs().sum() > 0 and (got[1][0, m:] == 0).all()
    assert (got[1][0, :, n:] == 0).all()
    f32 = [x.float() if isinstance(x, torch.Tensor) else x for x in (S, go, ge)]
    with torch.no_grad():  # inference: the forward on column blocks without state
        inf = softsw.align(f32[0], f32[1], T, gap_extend=f32[2], lengths=LENGTH,
                           reduction=reduction)
    assert_close(inf, ref[0], torch.float32, "inference score",
                 tol=score_tol(torch.float32, M, N))


@pytest.mark.parametrize("gap_tensor", [False, True], ids=["constant-gaps", "gap-tensors"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("copies", [4, 24], ids=["narrow-groups", "wide-groups"])
def test_alone_equals_group(two_cpu_threads, gen, reduction, gap_tensor, copies):
    """The pair alone (column blocks) and in a batch of copies (groups of 2
    or of 12: the narrow and the wide rows): scores (training and inference)
    and gradients, the same bits."""
    S, go, ge = pair(gen, gap_tensor)
    o1, _, g1 = first_derivatives(S, go, ge, torch.float32, reduction, LENGTH)
    rep = [x.repeat(copies, 1, 1) if isinstance(x, torch.Tensor) else x for x in (S, go, ge)]
    lengths = LENGTH.repeat(copies, 1)
    red = 0 if reduction == "max" else 1
    assert column_blocks(S, go, ge, LENGTH, reduction=red) == 16
    assert column_blocks(*rep, lengths, reduction=red, pair=copies - 1) == 0
    out, _, grads = first_derivatives(*rep, torch.float32, reduction, lengths)
    last = slice(copies - 1, copies)  # (the first may be alone on a thread)
    assert torch.equal(o1, out[last])
    for a, e in zip(g1, grads):
        assert torch.equal(a, e[last])
    f32 = [x.float() if isinstance(x, torch.Tensor) else x for x in rep]
    with torch.no_grad():
        alone = softsw.align(f32[0][:1], f32[1][:1] if gap_tensor else f32[1], 1.0,
                             gap_extend=f32[2][:1] if gap_tensor else f32[2], lengths=LENGTH,
                             reduction=reduction)
        batch = softsw.align(f32[0], f32[1], 1.0, gap_extend=f32[2], lengths=lengths,
                             reduction=reduction)
    assert torch.equal(alone, batch[last])


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_hessian_vector_product(gen, reduction):
    """The double backward of a pair whose forward ran on column blocks reads
    the row checkpoints that forward saved, block by block."""
    Mh, Nh = 30, 300
    lengths = torch.tensor([[27, 291]])
    S, go, ge = pair(gen, True, M=Mh, N=Nh, lengths=lengths)
    assert column_blocks(S, go, ge, lengths) > 1
    V = randn(gen, *S.shape)
    res = {}
    for dt in (torch.float64, torch.float32):
        out, ins, grads = first_derivatives(S, go, ge, dt, reduction, lengths, create_graph=True)
        hvp = torch.autograd.grad((grads[0] * V.to(dt)).sum(), ins)
        res[dt] = (out.detach(), *hvp)
    tol = hvp_tol(torch.float32, Mh, Nh, 1.0, res[torch.float64][0].abs().max().item())
    for name, a, e in zip(["HVP d/d S", "HVP d/d open", "HVP d/d extend"],
                          res[torch.float32][1:], res[torch.float64][1:]):
        assert_close(a, e, torch.float32, name, tol=tol)


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_few_rows(gen, rows):
    """Fewer rows than blocks: most steps have idle lanes."""
    lengths = torch.tensor([[rows, 500]])
    S, go, ge = pair(gen, False, M=3, N=512, lengths=lengths)
    assert column_blocks(S, go, ge, lengths) == 16
    for reduction in ("max", "soft"):
        res = {}
        for dt in (torch.float64, torch.float32):
            out, _, grads = first_derivatives(S, go, ge, dt, reduction, lengths)
            res[dt] = (out.detach(), *grads)
        ref, got = res[torch.float64], res[torch.float32]
        assert_close(got[0], ref[0], torch.float32, "score", tol=score_tol(torch.float32, 3, 512))
        assert_close(got[1], ref[1], torch.float32, "d/d S",
                     tol=grad_tol(torch.float32, 3, 512, 1.0, ref[0].abs().max().item()))


def test_small_region_after_blocks(gen):
    """"max" whose best cell is near the top-left: the region (12 x 40) is too
    narrow for the blocks, and the backward runs it as a group of one, from the
    row checkpoints the forward on column blocks saved."""
    S, _, _ = pair(gen, False, scale=0.5)
    S = S - 3.0  # (the padding's garbage stays garbage)
    S[0, 11, 39] = 8.0  # the best cell by far (kernel units 11.5: inside the range rule)
    S[0, 10, 38] = 6.0
    go, ge = -3.0, -2.0  # gap paths fade: nothing later beats it
    assert column_blocks(S, go, ge, LENGTH) == 16
    res = {}
    for dt in (torch.float64, torch.float32):
        out, _, grads = first_derivatives(S, go, ge, dt, "max", LENGTH)
        res[dt] = (out.detach(), *grads)
    ref, got = res[torch.float64], res[torch.float32]
    assert_close(got[0], ref[0], torch.float32, "score", tol=score_tol(torch.float32, M, N))
    assert_close(got[1], ref[1], torch.float32, "d/d S",
                 tol=grad_tol(torch.float32, M, N, 1.0, ref[0].abs().max().item()))
    assert got[1][0, 11, 39] > 0.5
    assert (got[1][0, 12:] == 0).all() and (got[1][0, :, 40:] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_half_types(two_cpu_threads, gen, dtype, reduction):
    """Half types (float accumulate) take the same path: against float64 at
    their tolerance, and the same bits alone and in a group."""
    Mh, Nh = 20, 300
    lengths = torch.tensor([[19, 290]])
    S, go, ge = pair(gen, True, M=Mh, N=Nh, lengths=lengths)
    S, go, ge = (x.to(dtype).double() for x in (S, go, ge))
    assert column_blocks(S, go, ge, lengths) > 1
    ref_out, _, ref = first_derivatives(S, go, ge, torch.float64, reduction, lengths)
    out, _, grads = first_derivatives(S, go, ge, dtype, reduction, lengths)
    assert_close(out, ref_out, dtype, "score", tol=score_tol(dtype, Mh, Nh))
    tol = grad_tol(dtype, Mh, Nh, 1.0, ref_out.abs().max().item())
    for name, a, e in zip(["d/d S", "d/d open", "d/d extend"], grads, ref):
        assert_close(a, e, dtype, name, tol=tol)
    rep = [x.repeat(4, 1, 1) for x in (S, go, ge)]
    assert column_blocks(*rep, lengths.repeat(4, 1), pair=3) == 0
    out4, _, grads4 = first_derivatives(*rep, dtype, reduction, lengths.repeat(4, 1))
    assert torch.equal(out, out4[3:])
    for a, e in zip(grads, grads4):
        assert torch.equal(a, e[3:])


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_torch_set_num_threads_bounds_the_kernels(gen, threads):
    """torch.set_num_threads limits the CPU kernels as it does torch's own ops:
    4 copies of a long pair make max(1, threads) groups, a pair alone in its
    group runs on column blocks (16), one in a group of several does not (0)."""
    if os.environ.get("SOFTSW_NUM_THREADS"):
        pytest.skip("SOFTSW_NUM_THREADS overrides torch.set_num_threads")
    S, go, ge = pair(gen, False)
    rep = S.repeat(4, 1, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        blocks = [column_blocks(rep, go, ge, LENGTH.repeat(4, 1), pair=b) for b in range(4)]
    finally:
        torch.set_num_threads(before)
    assert blocks == ([16] * 4 if threads == 4 else [0] * 4), blocks
