"""softsw.align (linear gaps, float gap scores): scores and gradients against the
float64 reference of docs/semantics.md, on fresh random inputs, on every device."""
import math

import pytest
import torch

import softsw
from conftest import (DEVICES, assert_close, fill_padding, grad_tol, grads, leaf, rand_lengths,
                      randn, score_tol)
from helpers import compare_with_reference, quantized

SHAPES = [(1, 1), (1, 17), (13, 1), (31, 33), (100, 7), (64, 64)]
TEMPERATURES = [0.1, 1.0, 5.0, 0.0]
GAPS = [-0.3, -2.0]
REDUCTIONS = ["max", "soft"]


def shape_id(s):
    return "x".join(map(str, s))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("gap", GAPS)
@pytest.mark.parametrize("T", TEMPERATURES)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_float64_vs_reference(device, gen, shape, T, gap, reduction):
    S = randn(gen, 2, *shape, device=device)
    compare_with_reference(gen, S, gap, T, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", TEMPERATURES)
@pytest.mark.parametrize("shape", [(31, 33), (100, 7), (64, 64)], ids=shape_id)
def test_float32_vs_reference(device, gen, shape, T, reduction):
    if T == 0:
        # Hard mode picks one path: use dyadic data so that float32 sums are
        # exact and no near-tie can resolve differently from float64.
        S, gap = quantized(gen, 2, *shape, dtype=torch.float32, device=device), -0.375
    else:
        S, gap = randn(gen, 2, *shape, dtype=torch.float32, device=device), -0.3
    compare_with_reference(gen, S, gap, T, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_types_vs_reference(device, gen, dtype, T, reduction):
    # Tolerance: conftest.TOL -- one ulp of the half type (outputs are rounded
    # to it) plus float32 accumulation; reference on the same rounded inputs.
    if T == 0:
        S = quantized(gen, 3, 31, 33, dtype=dtype, device=device, step=0.25)
    else:
        S = randn(gen, 3, 31, 33, dtype=dtype, device=device)
    compare_with_reference(gen, S, -0.5, T, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.1, 0.0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_padded_batch_lengths(device, gen, dtype, T, reduction):
    """Pairs padded at the end: padding holds NaN / inf / huge values and must
    not matter; the gradient there is exactly zero."""
    B, M, N = 4, 29, 23
    lengths = rand_lengths(gen, B, M, N)
    S = quantized(gen, B, M, N, dtype=dtype) if T == 0 else randn(gen, B, M, N, dtype=dtype)
    S = fill_padding(S, lengths, gen).to(device)
    compare_with_reference(gen, S, -0.375 if T == 0 else -0.3, T, lengths=lengths.to(device),
                           reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
def test_padding_content_never_matters(device, gen):
    """Same pairs, two different paddings: bitwise the same scores and gradients."""
    B, M, N = 3, 17, 21
    lengths = rand_lengths(gen, B, M, N, full_first=False)
    S = randn(gen, B, M, N)
    for reduction in REDUCTIONS:
        outs = []
        for _ in range(2):
            x = leaf(fill_padding(S, lengths, gen).to(device))
            out = softsw.align(x, -0.4, 0.7, lengths=lengths.to(device), reduction=reduction)
            (g,) = grads(out, [x])
            outs.append((out, g))
        assert torch.equal(outs[0][0], outs[1][0])
        assert torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_lengths_equal_separate_calls(device, gen, dtype):
    """A padded batch gives each pair what the unpadded pair gives alone."""
    B, M, N = 5, 40, 37
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, dtype=dtype), lengths, gen).to(device)
    for reduction in REDUCTIONS:
        x = leaf(S)
        out = softsw.align(x, -0.7, 1.0, lengths=lengths.to(device), reduction=reduction)
        (g,) = grads(out, [x])
        for b, (m, n) in enumerate(lengths.tolist()):
            xb = leaf(S[b, :m, :n])
            ob = softsw.align(xb, -0.7, 1.0, reduction=reduction)
            (gb,) = grads(ob, [xb])
            assert_close(out[b], ob, dtype, f"pair {b} score", tol=score_tol(dtype, M, N))
            gtol = grad_tol(dtype, M, N, 1.0, out.abs().max().item())
            assert_close(g[b, :m, :n], gb, dtype, f"pair {b} gradient", tol=gtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.0])
def test_two_dimensional_scores(device, gen, T):
    """(M, N) scores give a 0-d score equal to the (1, M, N) batch."""
    S = randn(gen, 19, 26, device=device)
    out, (g,) = compare_with_reference(gen, S, -0.6, T)
    assert out.dim() == 0 and g.shape == S.shape
    x2, x3 = leaf(S), leaf(S.unsqueeze(0))
    out, out3 = softsw.align(x2, -0.6, T), softsw.align(x3, -0.6, T)
    (g,) = grads(out, [x2])
    (g3,) = grads(out3, [x3])
    assert torch.equal(out3[0], out) and torch.equal(g3[0], g)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=["fp64", "fp32", "fp16", "bf16"])
def test_output_dtype_follows_input(device, gen, dtype):
    x = leaf(randn(gen, 2, 5, 6, dtype=dtype, device=device))
    out = softsw.align(x, -1.0, 1.0)
    assert out.dtype == dtype and out.shape == (2,) and out.device == x.device
    (g,) = grads(out, [x])
    assert g.dtype == dtype and g.shape == x.shape
    score, expected = softsw.alignment(x.detach(), -1.0, 1.0)
    assert score.dtype == dtype and expected.dtype == dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_any_strides(device, gen, dtype):
    """Non-contiguous scores (transposed, strided slices) give the contiguous result."""
    cases = [
        (randn(gen, 3, 2 * 23, 3 * 17, dtype=dtype, device=device), lambda t: t[:, ::2, ::3]),
        (randn(gen, 3, 17, 23, dtype=dtype, device=device), lambda t: t.transpose(1, 2)),
        (randn(gen, 23, 3, 17, dtype=dtype, device=device), lambda t: t.permute(1, 0, 2)),
    ]
    for base, view in cases:
        for reduction in REDUCTIONS:
            xb = leaf(base)
            xv = view(xb)  # a non-contiguous view in the graph
            assert not xv.is_contiguous()
            xc = leaf(view(base).contiguous())
            ov = softsw.align(xv, -0.5, 1.0, reduction=reduction)
            oc = softsw.align(xc, -0.5, 1.0, reduction=reduction)
            (gv,) = grads(ov, [xv])
            (gc,) = grads(oc, [xc])
            assert torch.equal(ov, oc) and torch.equal(gv, gc)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_path_equals_grad_path(device, gen):
    """Without requires_grad the forward keeps no state; the score is the same
    (at T > 0 to rounding: an inference forward may run in the probability
    domain; exactly at T = 0)."""
    S = randn(gen, 3, 33, 40, device=device)
    for T in (1.0, 0.0):
        for reduction in REDUCTIONS:
            a = softsw.align(S, -0.5, T, reduction=reduction)
            with torch.no_grad():
                b = softsw.align(leaf(S), -0.5, T, reduction=reduction)
            c = softsw.align(leaf(S), -0.5, T, reduction=reduction)
            assert torch.equal(a, b)
            if T == 0:
                assert torch.equal(a, c.detach())
            else:
                assert_close(a, c, S.dtype, "score", tol=score_tol(S.dtype, 33, 40))
            assert not a.requires_grad and c.requires_grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_alignment_is_the_gradient(device, gen, T, reduction):
    """softsw.alignment returns (align(...), d align / d scores)."""
    B, M, N = 3, 27, 31
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N), lengths, gen).to(device)
    lengths = lengths.to(device)
    score, expected = softsw.alignment(S, -0.5, T, lengths=lengths, reduction=reduction)
    x = leaf(S)
    out = softsw.align(x, -0.5, T, lengths=lengths, reduction=reduction)
    (g,) = grads(out, [x])
    assert torch.equal(score, out.detach())
    assert_close(expected, g, torch.float64, "expected alignment")
    s2, e2 = softsw.alignment(S[0], -0.5, T, reduction=reduction)
    assert s2.dim() == 0 and e2.shape == S[0].shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [2.0, 1.0, 0.2])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_expected_alignment_is_a_probability(device, gen, T, reduction):
    """At T > 0 each query position is matched to at most one target position in
    every path: 0 <= P(i, j), sum_j P(i, j) <= 1, sum_i P(i, j) <= 1 (larger sizes,
    no reference)."""
    S = randn(gen, 2, 150, 220, device=device)
    _, P = softsw.alignment(S, -0.5, T, reduction=reduction)
    eps = 1e-12
    assert bool((P >= -eps).all()) and bool((P <= 1 + eps).all())
    assert bool((P.sum(2) <= 1 + 1e-10).all()) and bool((P.sum(1) <= 1 + 1e-10).all())
    assert bool((P.sum((1, 2)) > 0).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_soft_reduction_at_zero_temperature_is_max(device, gen, dtype):
    S = quantized(gen, 3, 45, 38, dtype=dtype, device=device)
    x = leaf(S)
    out = softsw.align(x, -0.5, 0.0, reduction="soft")
    (g,) = grads(out, [x])
    y = leaf(S)
    ref = softsw.align(y, -0.5, 0.0, reduction="max")
    (gr,) = grads(ref, [y])
    assert torch.equal(out, ref) and torch.equal(g, gr)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_hard_mode_ties_follow_documented_order(device, gen, reduction):
    """Coarse integer scores make many exactly tied paths; the T = 0 traceback
    must break them as documented (start, match, gap down, gap right; first
    cell in row-major order), i.e. like the reference, bit for bit."""
    S = quantized(gen, 3, 37, 41, device=device, step=1.0, scale=2.0)
    for gap in (-1.0, -2.0, -0.5):
        compare_with_reference(gen, S, gap, 0.0, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.25])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_transpose_symmetry(device, gen, T, reduction):
    """Swapping query and target (S -> S^T) swaps gap down and gap right: same
    score, transposed gradient. Checked at sizes beyond the reference's."""
    S = randn(gen, 2, 180, 260, device=device)
    x, y = leaf(S), leaf(S.transpose(1, 2).contiguous())
    a = softsw.align(x, -0.8, T, reduction=reduction)
    b = softsw.align(y, -0.8, T, reduction=reduction)
    (ga,) = grads(a, [x])
    (gb,) = grads(b, [y])
    assert_close(a, b, torch.float64, "score of S^T", tol=score_tol(torch.float64, 180, 260))
    gtol = grad_tol(torch.float64, 180, 260, T, a.abs().max().item())
    assert_close(ga, gb.transpose(1, 2), torch.float64, "gradient of S^T", tol=gtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scale_equivariance(device, gen, reduction):
    """align(c S, c g, c T) = c align(S, g, T) and the same gradient (c > 0)."""
    S = randn(gen, 2, 210, 170, device=device)
    for T in (1.0, 0.0):
        x, y = leaf(S), leaf(3.0 * S)
        a = softsw.align(x, -0.6, T, reduction=reduction)
        b = softsw.align(y, -1.8, 3.0 * T, reduction=reduction)
        (ga,) = grads(a, [x])
        (gb,) = grads(b, [y])
        assert_close(b, 3.0 * a, torch.float64, "scaled score",
                     tol=score_tol(torch.float64, 210, 170))
        if T > 0:
            assert_close(gb, ga, torch.float64, "scaled gradient",
                         tol=grad_tol(torch.float64, 210, 170, T, a.abs().max().item()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.2])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_float32_vs_float64_kernel_large(device, gen, T, reduction):
    """A 400 x 500 problem in float32 against the float64 kernel (no reference
    at this size). Tolerances: conftest.score_tol / grad_tol."""
    S = randn(gen, 2, 400, 500, device=device)
    x64, x32 = leaf(S), leaf(S.float())
    a = softsw.align(x64, -0.5, T, reduction=reduction)
    b = softsw.align(x32, -0.5, T, reduction=reduction)
    (ga,) = grads(a, [x64])
    (gb,) = grads(b, [x32])
    assert_close(b, a, torch.float32, "float32 score", tol=score_tol(torch.float32, 400, 500))
    gtol = grad_tol(torch.float32, 400, 500, T, a.abs().max().item())
    assert_close(gb, ga, torch.float32, "float32 gradient", tol=gtol)



def assert_sub_probability(P, dtype, T, score_scale, what):
    """Expected alignment: entries in [0, 1], each query / target position
    matched at most once in expectation (row and column sums <= 1). Rounding
    may push a probability above 1 by the weights' relative error
    (conftest.grad_tol: u sqrt(M+N) |score| / T, which grows without bound as
    T -> 0), but never by 1/2 or more: that is not rounding any more but one
    path counted twice."""
    M, N = P.shape[-2:]
    slack = min(0.5, grad_tol(dtype, M, N, T, score_scale))
    P = P.detach().double().cpu()
    assert bool(torch.isfinite(P).all()), f"{what}: non-finite expected alignment"
    assert P.min().item() >= -slack, f"{what}: entry {P.min().item()} < 0"
    for name, v in (("entry", P.max()), ("row sum", P.sum(-1).max()),
                    ("column sum", P.sum(-2).max())):
        assert v.item() <= 1 + slack, f"{what}: {name} {v.item()} > 1 + {slack:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype,temps", [
    (torch.float64, (1e-2, 1e-8, 1e-100, 1e-300, 1e-306, 1e-307, 1e-308, 1e-320)),
    (torch.float32, (1e-2, 1e-8, 1e-30, 1e-36, 1e-37, 1e-38, 1e-40, 1e-45)),
], ids=["fp64", "fp32"])
def test_small_temperatures_approach_hard_mode(device, gen, dtype, temps, reduction):
    """softmax_T -> max as T -> 0: for any T > 0 (however small, down to
    subnormals) the score lies within [hard - rounding, hard + T log(#paths)]
    (#paths ending anywhere <= (M+1)(N+1) 3^(M+N)), and the gradient is a finite
    expected alignment."""
    B, M, N = 2, 40, 35
    S = randn(gen, B, M, N, dtype=dtype, device=device)
    hard = softsw.align(S, -0.5, 0.0)
    rounding = score_tol(dtype, M, N) * max(1.0, hard.abs().max().item())
    log_paths = math.log((M + 1) * (N + 1)) + (M + N) * math.log(3.0)
    for T in temps:
        _, P = softsw.alignment(S, -0.5, T, reduction=reduction)
        out = softsw.align(S, -0.5, T, reduction=reduction)
        assert bool(torch.isfinite(out).all()), f"T={T}: score {out.tolist()}"
        assert bool((out >= hard - rounding).all()), f"T={T}: {out.tolist()} < hard {hard.tolist()}"
        assert bool((out <= hard + rounding + T * log_paths).all()), f"T={T}: {out.tolist()}"
        assert_sub_probability(P, dtype, T, hard.abs().max().item(), f"T={T}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype,temps", [
    (torch.float64, (1e-3, 1e-10, 1e-14, 1e-16)),
    (torch.float32, (1e-3, 1e-5, 1e-6, 1e-7)),
], ids=["fp64", "fp32"])
def test_exact_ties_at_small_temperature(device, gen, dtype, temps, reduction):
    """Integer scores (as with BLOSUM) make exactly tied alignments; at small T
    the Gibbs distribution splits between them, and the expected alignment
    stays a (sub-)probability however large the scores are in units of T."""
    S = torch.randint(-3, 4, (4, 30, 30), generator=gen).to(dtype).to(device)
    hard = softsw.align(S, -1.0, 0.0)
    for T in temps:
        score, P = softsw.alignment(S, -1.0, T, reduction=reduction)
        assert bool((score >= hard - score_tol(dtype, 30, 30) * hard.abs().max()).all())
        assert_sub_probability(P, dtype, T, hard.abs().max().item(), f"T={T}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_minus_inf_gap_is_ungapped_alignment(device, gen, dtype):
    """gap_open = -inf forbids gaps: hard mode is the best ungapped local
    alignment, i.e. the best contiguous run along any diagonal (Kadane)."""
    B, M, N = 3, 23, 31
    S = quantized(gen, B, M, N, dtype=dtype, device=device)
    out = softsw.align(S, -math.inf, 0.0)
    Sd = S.double().cpu()
    for b in range(B):
        best = 0.0
        for off in range(-(M - 1), N):
            run = 0.0
            for v in torch.diagonal(Sd[b], offset=off).tolist():
                run = max(0.0, run + v)
                best = max(best, run)
        assert out[b].item() == best, (b, out[b].item(), best)
    # Soft mode with -inf gaps against the reference (no gap path contributes).
    compare_with_reference(gen, randn(gen, 2, 17, 19, dtype=dtype, device=device), -math.inf,
                           0.8, reduction="soft")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.01])
def test_large_score_magnitudes(device, gen, T):
    """Scores of magnitude ~1e3 (and T = 0.01: arguments of exp ~1e5) stay exact."""
    S = randn(gen, 2, 24, 29, device=device, scale=1000.0)
    compare_with_reference(gen, S, -700.0, T, reduction="soft")
    compare_with_reference(gen, randn(gen, 2, 24, 29, device=device), -0.5, T)


@pytest.mark.parametrize("device", DEVICES)
def test_storage_offset(device, gen):
    """Views that start inside their storage (contiguous or not) give the
    result of a fresh contiguous copy; the gradient lands in the viewed part only."""
    base = randn(gen, 4, 20, 26, device=device)
    for sl in ((slice(1, None),), (slice(1, None), slice(2, None), slice(3, None)),
               (slice(None), slice(None), slice(1, None))):
        xb = leaf(base)
        view = xb[sl]
        assert view.storage_offset() > 0
        out = softsw.align(view, -0.5, 1.0)
        (gb,) = grads(out, [xb])
        y = leaf(base[sl].contiguous())
        ref = softsw.align(y, -0.5, 1.0)
        (gy,) = grads(ref, [y])
        assert torch.equal(out, ref)
        assert torch.equal(gb[sl], gy)
        assert gb.abs().sum().item() == pytest.approx(gy.abs().sum().item(), rel=1e-14)
