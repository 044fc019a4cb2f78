"""CUDA forward in the probability domain (skipped without CUDA).

A linear-gap problem with a constant gap at T > 0 runs the probability-domain
forward, with or without the state the backward reads: Z = 2^H kept as a
mantissa with a per-row power-of-two exponent. Where the scaled form cannot hold a score (|S| / T too
large, inf, NaN) a band switches to the log domain before it computes such a
cell. These tests take the float64 CPU kernel (itself checked against the slow
reference elsewhere) as the reference, on inputs chosen to land in either
domain and in the switch: temperatures 1e-3 .. 1e3, |S| up to 1e4, one band
and many, short pairs with garbage in the padding. The training forward's
state feeds the backward: its gradients are checked the same way, and so are
the double backward's Hessian-vector products, whose tangent pass runs on the
same skeleton. Affine gaps (constant open and extend) run the inference
forward on it too: the inference tests run both gap models (GAPS).
"""
import math
import subprocess
import sys
import textwrap

import pytest
import torch

import softsw
from conftest import (HAS_CUDA, assert_close, fill_padding, grad_tol, grads, hvp_tol, leaf,
                      rand_lengths, randn, score_tol, tolerance_used)
from helpers import first_and_second

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")]

# ProbabilityRange<float>::kMaxLog2Weight (csrc/kernels/probability.h): the
# largest |S| / (T ln 2) the float kernels keep in the probability domain.
FLOAT_LOG2_LIMIT = 12.0


def cpu_reference(S, gap, T, lengths, reduction, gap_extend=None):
    """The float64 CPU kernel on exactly the values the CUDA kernel sees."""
    with torch.no_grad():
        return softsw.align(S.detach().cpu().double(), gap, T, gap_extend=gap_extend,
                            lengths=None if lengths is None else lengths.cpu(),
                            reduction=reduction)


def cuda_inference(S, gap, T, lengths, reduction, gap_extend=None):
    with torch.no_grad():
        return softsw.align(S.cuda(), gap, T, gap_extend=gap_extend,
                            lengths=None if lengths is None else lengths.cuda(),
                            reduction=reduction)


# Inference tests run linear gaps and affine gaps (constant open and extend:
# the affine inference forward runs on the same skeleton); extend(gap, gaps)
# is the gap_extend of either.
GAPS = pytest.mark.parametrize("gaps", ["linear", "affine"])


def extend(gap, gaps):
    return gap / 2 if gaps == "affine" else None


def check(S, gap, T, lengths, reduction, dtype, gap_extend=None):
    out = cuda_inference(S.to(dtype), gap, T, lengths, reduction, gap_extend)
    ref = cpu_reference(S.to(dtype), gap, T, lengths, reduction, gap_extend)
    M, N = S.shape[-2:]
    assert out.dtype == dtype
    assert_close(out, ref, dtype, f"score (T={T}, {reduction})", tol=score_tol(dtype, M, N))
    return out, ref


SHAPES = [(3, 1, 1), (4, 5, 3), (2, 31, 33), (3, 32, 32), (2, 33, 65), (2, 97, 130), (1, 300, 257)]


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@GAPS
def test_in_range_matches_float64(gen, shape, dtype, reduction, gaps):
    B, M, N = shape
    S = randn(gen, B, M, N, scale=1.5)
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)  # garbage (NaN, inf, 1e30) outside the pairs
    check(S, -0.8, 1.0, lengths, reduction, dtype, extend(-0.8, gaps))


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 0.3, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
@GAPS
def test_temperatures_and_magnitudes(gen, T, magnitude, reduction, gaps):
    """Both domains: small T or large |S| goes to the log domain, the rest stays."""
    B, M, N = 3, 70, 90
    S = randn(gen, B, M, N, scale=magnitude)
    gap = -0.5 * magnitude
    for dtype in (torch.float32, torch.float64):
        out, ref = check(S, gap, T, None, reduction, dtype, extend(gap, gaps))
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("where", ["first_band", "late_column", "last_row"])
@GAPS
def test_switch_to_log_domain_mid_band(gen, where, reduction, gaps):
    """A pair in range except one cell far out of it: the band that holds it
    switches to the log domain (the cells before it stay in the probability
    domain), the bands above and below do not; the score is exact either way."""
    B, M, N = 2, 150, 400
    T = 1.0
    S = randn(gen, B, M, N)
    big = 4 * FLOAT_LOG2_LIMIT * T * math.log(2)  # out of range, and dominating
    r, c = {"first_band": (3, 10), "late_column": (70, 333), "last_row": (M - 1, N - 5)}[where]
    S[0, r, c] = big
    S[1, r, c] = -big
    for dtype in (torch.float32, torch.float64):
        check(S, -1.0, T, None, reduction, dtype, extend(-1.0, gaps))


@pytest.mark.parametrize("reduction", ["max", "soft"])
@GAPS
def test_mixed_batch(gen, reduction, gaps):
    """Pairs of one batch in either domain are each right."""
    B, M, N = 6, 64, 96
    S = randn(gen, B, M, N)
    S[1] *= 1e3
    S[3, 10:20, 40:50] = 500.0
    S[4] *= 1e-4
    lengths = rand_lengths(gen, B, M, N)
    check(S, -1.0, 0.7, lengths, reduction, torch.float32, extend(-1.0, gaps))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@GAPS
def test_half_types(gen, dtype, reduction, gaps):
    B, M, N = 3, 100, 140
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    check(fill_padding(S, lengths, gen), -1.0, 1.0, lengths, reduction, dtype,
          extend(-1.0, gaps))


@GAPS
def test_long_pair_many_bands(gen, gaps):
    B, M, N = 1, 1500, 1700
    S = randn(gen, B, M, N).float().double()
    for reduction in ("max", "soft"):
        check(S, -1.0, 1.0, None, reduction, torch.float32, extend(-1.0, gaps))


@GAPS
def test_large_scores_near_the_limit(gen, gaps):
    """Scores just inside the range rule, all positive: Z grows as fast as the
    rule allows on every step (the renormalisation must keep up)."""
    B, M, N = 2, 96, 200
    T = 1.0
    s = 0.98 * FLOAT_LOG2_LIMIT * T * math.log(2)
    S = torch.full((B, M, N), s, dtype=torch.float64)
    S[1] = randn(gen, M, N).abs() * s / 4 + s * 3 / 4
    for reduction in ("max", "soft"):
        out, ref = check(S, -1.0, T, None, reduction, torch.float32, extend(-1.0, gaps))
        assert torch.isfinite(out).all()


def test_affine_long_gaps_dominate(gen):
    """Affine gaps with scores so low that the best paths are long gaps: U and
    L carry the values, A and B fall far below C (each node keeps its own
    digits across band edges)."""
    B, M, N = 2, 200, 260
    S = randn(gen, B, M, N) - 3.0
    S[:, 0, 0] = 8.0
    S[:, M - 1, N - 1] = 8.0
    for reduction in ("max", "soft"):
        for dtype in (torch.float32, torch.float64):
            check(S, -3.0, 0.5, None, reduction, dtype, gap_extend=-0.05)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_value_in_the_top_binade_at_a_check(gen, dtype, training):
    """A row whose value is in the format's top binade (finite, but within a
    factor 2 of overflow) when its group of 8 steps is checked: it cannot be
    renormalised (2^-127 in float flushes to 0, which would zero the row from
    there on), so it goes to the log domain like an overflow. One score puts
    Z[1, 8] at 2^(top + 1/2); the cells to its right continue from it, and the
    soft total counts them."""
    top = 127 if dtype == torch.float32 else 1023
    T = 1.0
    B, M, N = 2, 3, 24
    S = randn(gen, B, M, N, scale=0.1)
    S[:, 0, 7] = (top + 0.5) * T * math.log(2)  # lane 0's cell at step 7, either rows per lane
    for reduction in ("max", "soft"):
        if training:
            check_training(gen, S, -1.0, T, None, reduction, dtype)
        else:
            out, ref = check(S, -1.0, T, None, reduction, dtype)
            assert torch.isfinite(out).all()


@GAPS
def test_nan_and_inf_stay_in_their_pair(gen, gaps):
    B, M, N = 4, 40, 50
    S = randn(gen, B, M, N)
    S[1, 5, 7] = float("nan")
    S[2, 30, 20] = float("inf")
    S[3, 0, 0] = -float("inf")
    for reduction in ("max", "soft"):
        out = cuda_inference(S.float(), -1.0, 1.0, None, reduction, extend(-1.0, gaps))
        ref = cpu_reference(S.float(), -1.0, 1.0, None, reduction, extend(-1.0, gaps))
        assert_close(out, ref, torch.float32, "score")
        assert math.isnan(out[1].item())
        assert torch.isfinite(out[[0, 3]]).all()


@GAPS
def test_inference_matches_training_forward(gen, gaps):
    """The inference and the training forward (affine gaps: the probability
    domain's and the log domain's) compute the same scores (to the float32
    tolerance)."""
    B, M, N = 8, 128, 128
    S = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
    for reduction in ("max", "soft"):
        with torch.no_grad():
            inference = softsw.align(S, -1.0, 1.0, gap_extend=extend(-1.0, gaps),
                                     reduction=reduction)
        training = softsw.align(S.clone().requires_grad_(True), -1.0, 1.0,
                                gap_extend=extend(-1.0, gaps), reduction=reduction)
        assert_close(inference, training, torch.float32, "score", tol=score_tol(torch.float32, M, N))


@GAPS
def test_deterministic(gen, gaps):
    B, M, N = 16, 200, 300
    S = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
    S[3, 50, 60] = 400.0  # one band in the log domain
    for reduction in ("max", "soft"):
        with torch.no_grad():
            first = softsw.align(S, -1.0, 1.0, gap_extend=extend(-1.0, gaps), reduction=reduction)
            for _ in range(3):
                again = softsw.align(S, -1.0, 1.0, gap_extend=extend(-1.0, gaps), reduction=reduction)
                assert torch.equal(again, first)


def test_more_accurate_than_the_log_domain(gen):
    """The reason for the probability domain besides speed: in float32 it is at
    least as close to float64 as the log domain (measured ~10x). The log
    domain on (nearly) the same problem: a gap tensor of -1 whose entry at the
    first cell of every 32-row band is far out of the range rule, so that every
    band continues in the log domain from its first group of steps."""
    B, M, N = 16, 256, 256
    S = randn(gen, B, M, N).float()
    gap = torch.full((B, M, N), -1.0)
    gap[:, ::32, 0] = -1e4
    ref_prob = cpu_reference(S.double(), -1.0, 1.0, None, "soft")
    ref_log = cpu_reference(S.double(), gap.double(), 1.0, None, "soft")
    with torch.no_grad():
        prob = softsw.align(S.cuda(), -1.0, 1.0, reduction="soft").cpu().double()
        log = softsw.align(S.cuda(), gap.cuda(), 1.0, reduction="soft").cpu().double()
    err_prob = ((prob - ref_prob).abs() / ref_prob.abs()).max().item()
    err_log = ((log - ref_log).abs() / ref_log.abs()).max().item()
    assert err_prob <= err_log, (err_prob, err_log)



def test_affine_more_accurate_than_the_log_domain(gen):
    """Affine gaps: the probability-domain inference is at least as close to
    float64 in float32 as the log domain, which runs the same problem when the
    gaps come as (constant) tensors."""
    B, M, N = 16, 256, 256
    S = randn(gen, B, M, N).float()
    ref = cpu_reference(S.double(), -1.0, 1.0, None, "soft", gap_extend=-0.5)
    with torch.no_grad():
        prob = softsw.align(S.cuda(), -1.0, 1.0, gap_extend=-0.5, reduction="soft")
        full = dict(device="cuda", dtype=torch.float32)
        log = softsw.align(S.cuda(), torch.full((B, M, N), -1.0, **full), 1.0,
                           gap_extend=torch.full((B, M, N), -0.5, **full), reduction="soft")
    err_prob = ((prob.cpu().double() - ref).abs() / ref.abs()).max().item()
    err_log = ((log.cpu().double() - ref).abs() / ref.abs()).max().item()
    assert err_prob <= err_log, (err_prob, err_log)

# --------------------------------------------------------------------------
# Training: the probability-domain forward keeps H for the backward
# --------------------------------------------------------------------------


def scores_with_one_far_cell(gen, where):
    """(2, 150, 300) N(0, 1) scores at T = 1 with one cell far out of the float
    range rule (pair 0: dominating, pair 1: far below), in the first band, in
    a late column of a middle band, or in the last row."""
    B, M, N = 2, 150, 300
    S = randn(gen, B, M, N)
    big = 4 * FLOAT_LOG2_LIMIT * math.log(2)
    r, c = {"first_band": (3, 10), "late_column": (70, 250), "last_row": (M - 1, N - 5)}[where]
    S[0, r, c] = big
    S[1, r, c] = -big
    return S


def check_training(gen, S, gap, T, lengths, reduction, dtype, weighted=True):
    """Score and d score / d S of the CUDA training step against the float64
    CPU kernel, on exactly the values the CUDA kernel sees; the gradient of
    the pairs' scores weighted at random (or of their sum)."""
    S = S.to(dtype)
    M, N = S.shape[-2:]
    go = randn(gen, S.shape[0], scale=0.25, shift=1.0) if weighted else torch.ones(S.shape[0])
    lens = None if lengths is None else lengths
    ref_S = leaf(S.double())
    ref = softsw.align(ref_S, gap, T, lengths=lens, reduction=reduction)
    ref_g, = grads(ref, [ref_S], go.to(ref.dtype))
    out_S = leaf(S.cuda())
    out = softsw.align(out_S, gap, T, lengths=None if lens is None else lens.cuda(),
                       reduction=reduction)
    out_g, = grads(out, [out_S], go.to(out.dtype).cuda())
    assert out_g.dtype == dtype
    assert_close(out, ref, dtype, f"score (T={T}, {reduction})", tol=score_tol(dtype, M, N))
    finite = S.double()[torch.isfinite(S.double())]
    scale = finite.abs().max().item() if finite.numel() else 1.0
    assert_close(out_g, ref_g, dtype, f"d/d scores (T={T}, {reduction})",
                 tol=grad_tol(dtype, M, N, T, scale))
    return out_g


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_training_in_range_matches_float64(gen, shape, dtype, reduction):
    B, M, N = shape
    S = randn(gen, B, M, N, scale=1.5)
    lengths = rand_lengths(gen, B, M, N)
    check_training(gen, fill_padding(S, lengths, gen), -0.8, 1.0, lengths, reduction, dtype)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_training_temperatures_and_magnitudes(gen, T, magnitude, reduction):
    B, M, N = 2, 70, 90
    S = randn(gen, B, M, N, scale=magnitude)
    for dtype in (torch.float32, torch.float64):
        g = check_training(gen, S, -0.5 * magnitude, T, None, reduction, dtype)
        assert torch.isfinite(g).all()


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("where", ["first_band", "late_column", "last_row"])
def test_training_switch_to_log_domain_mid_band(gen, where, reduction):
    """The forward's band that switches writes H from both domains; the
    gradient through it is exact."""
    check_training(gen, scores_with_one_far_cell(gen, where), -1.0, 1.0, None, reduction,
                   torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_training_half_types(gen, dtype, reduction):
    B, M, N = 3, 100, 140
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    check_training(gen, fill_padding(S, lengths, gen), -1.0, 1.0, lengths, reduction, dtype)


def test_training_long_pair_many_bands(gen):
    S = randn(gen, 1, 700, 900)
    for reduction in ("max", "soft"):
        check_training(gen, S, -1.0, 1.0, None, reduction, torch.float32)


def test_training_deterministic(gen):
    B, M, N = 6, 200, 300
    S = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
    S[3, 50, 60] = 400.0  # one band in the log domain
    for reduction in ("max", "soft"):
        def step():
            x = leaf(S)
            return grads(softsw.align(x, -1.0, 1.0, reduction=reduction), [x])[0]
        first = step()
        for _ in range(3):
            assert torch.equal(step(), first)


def test_training_argmax_is_the_max_cell(gen):
    """With reduction="max" the gradient is the alignment ending at the best
    cell: at T -> 0 it is the one-hot path, and the largest score's cell lies on
    it when that score dominates."""
    B, M, N = 2, 64, 80
    S = randn(gen, B, M, N, scale=0.1)
    S[0, 40, 50] = 30.0
    S[1, 0, 79] = 30.0
    g = check_training(gen, S, -1.0, 0.05, None, "max", torch.float32, weighted=False)
    assert g[0, 40, 50].item() == pytest.approx(1.0, abs=1e-5)
    assert g[1, 0, 79].item() == pytest.approx(1.0, abs=1e-5)


# --------------------------------------------------------------------------
# Double backward: the tangent pass runs on the probability-domain skeleton
# --------------------------------------------------------------------------


def check_hvp(gen, S, T, lengths, reduction, dtype, device="cuda", v_scale=1.0):
    """The Hessian-vector product (d/dS of <V, d score / d S>, weighted by
    random w) and <V, A> of `device` against the float64 CPU kernels on
    exactly the values the kernel sees (constant gap -1: the tangent pass
    in the probability domain, or in the log domain where the scores are out
    of its range)."""
    S = S.to(dtype)
    B, M, N = S.shape
    w = randn(gen, B, scale=0.25, shift=1.0)
    V = randn(gen, B, M, N, scale=v_scale)
    lens = None if lengths is None else lengths.to(device)
    got, _ = first_and_second(S.to(device), -1.0, T, lens, reduction, w.to(device),
                              V.to(device), None, dtype)
    ref, _ = first_and_second(S.double(), -1.0, T, lengths, reduction, w, V, None, torch.float64)
    # The CPU kernels in the same dtype on the same inputs: how far that dtype's
    # rounding alone takes a correct implementation from float64 here.
    own, _ = first_and_second(S, -1.0, T, lengths, reduction, w, V, None, dtype)
    finite = S.double()[torch.isfinite(S.double())]
    scale = finite.abs().max().item() if finite.numel() else 1.0
    names = ["d/dS", "hvp S", "<V, A>"]
    tols = [grad_tol(dtype, M, N, T, scale), hvp_tol(dtype, M, N, T, scale),
            grad_tol(dtype, M, N, T, scale)]
    for name, a, e, c, tol in zip(names, got, ref, own, tols):
        assert a.device.type == torch.device(device).type and a.dtype == dtype
        # The error model of grad_tol grows as sqrt(M + N) |S| / T; the state's
        # rounding of H grows as |H| itself (~ (M + N) |S| / T at large
        # scores), which the CPU kernels in this dtype miss by too. So the
        # device may miss by the model's tolerance or by 4x what they miss by.
        tol = max(tol, 4 * tolerance_used(c, e))
        assert_close(a, e, dtype, f"{name} (T={T}, {reduction})", tol=tol)
    return got


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("shape", [(3, 1, 1), (4, 5, 3), (3, 32, 32), (2, 33, 65), (2, 97, 130)],
                         ids=lambda s: "x".join(map(str, s)))
def test_hvp_in_range_matches_float64(gen, shape, dtype, reduction):
    B, M, N = shape
    S = randn(gen, B, M, N, scale=1.5)
    lengths = rand_lengths(gen, B, M, N)
    check_hvp(gen, fill_padding(S, lengths, gen), 1.0, lengths, reduction, dtype)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.05, 0.3, 1.0, 10.0])
@pytest.mark.parametrize("magnitude", [1.0, 6.0, 30.0])
def test_hvp_temperatures_and_magnitudes(gen, T, magnitude, reduction):
    """Both domains of the tangent pass, and switches part of the way along a
    band (magnitude 6 at T = 1: some groups of steps overflow, others not)."""
    B, M, N = 2, 70, 90
    S = randn(gen, B, M, N, scale=magnitude)
    for dtype in (torch.float32, torch.float64):
        got = check_hvp(gen, S, T, None, reduction, dtype)
        assert all(torch.isfinite(g).all() for g in got)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_hvp_large_scores_long_pair(gen, reduction):
    """Scores 6 N(0, 1) at T = 1 over 140 x 180: |H| reaches ~1e3, where float32
    stores H to ~1e-4 relative; the seeds' tangents and the weights' tangents
    must still each sum to 0 (the kernels normalise both), else the HVP misses
    by ~2e-4 of its largest entry here."""
    S = randn(gen, 2, 140, 180, scale=6.0)
    check_hvp(gen, S, 1.0, None, reduction, torch.float32)


@pytest.mark.parametrize("where", ["first_band", "late_column", "last_row"])
def test_hvp_switch_to_log_domain_mid_band(gen, where):
    """One cell far out of range: its band's tangent pass switches to the log
    domain there (Y = Z Hdot handed over as Hdot), the other bands do not."""
    S = scores_with_one_far_cell(gen, where)
    for reduction in ("max", "soft"):
        check_hvp(gen, S, 1.0, None, reduction, torch.float32)


def test_hvp_huge_direction(gen):
    """A direction so large (1e25) that Y = Z Hdot overflows where Z does not
    (Z grows up to ~2^64 in a group of steps at these scores): the tangent
    pass alone continues in the log domain, and stays finite."""
    B, M, N = 2, 70, 90
    S = randn(gen, B, M, N, scale=4.0)
    got = check_hvp(gen, S, 1.0, None, "soft", torch.float32, v_scale=1e25)
    assert all(torch.isfinite(g).all() for g in got)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_hvp_half_types(gen, dtype):
    B, M, N = 3, 100, 140
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    check_hvp(gen, fill_padding(S, lengths, gen), 1.0, lengths, "soft", dtype)


def test_hvp_long_pair_many_bands(gen):
    check_hvp(gen, randn(gen, 1, 400, 700), 1.0, None, "soft", torch.float32)


def test_hvp_deterministic(gen):
    B, M, N = 4, 200, 300
    S = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
    S[2, 50, 60] = 400.0  # one band in the log domain
    V = randn(gen, B, M, N, dtype=torch.float32, device="cuda")

    def step():
        x = leaf(S)
        g, = grads(softsw.align(x, -1.0, 1.0, reduction="soft"), [x], create_graph=True)
        return torch.autograd.grad((g * V).sum(), [x])[0]
    first = step()
    for _ in range(3):
        assert torch.equal(step(), first)


# --------------------------------------------------------------------------
# Gap tensors (linear gaps): each cell's gap held to the range rule
# --------------------------------------------------------------------------


def gap_tensor(gen, shape, center=-1.0, spread=0.3):
    return randn(gen, *shape, scale=spread, shift=center)


def check_gap_tensor(gen, S, gap, T, lengths, reduction, dtype, training):
    """Score (training: and d score / d S, d score / d gap) of the CUDA call
    with a gap tensor against the float64 CPU kernel on the same values."""
    S, gap = S.to(dtype), gap.to(dtype)
    M, N = S.shape[-2:]
    ref_S, ref_gap = leaf(S.double()), leaf(gap.double())
    out_S, out_gap = leaf(S.cuda()), leaf(gap.cuda())
    with torch.set_grad_enabled(training):
        ref = softsw.align(ref_S, ref_gap, T, lengths=lengths, reduction=reduction)
        out = softsw.align(out_S, out_gap, T, reduction=reduction,
                           lengths=None if lengths is None else lengths.cuda())
    assert_close(out, ref, dtype, f"score (T={T}, {reduction})", tol=score_tol(dtype, M, N))
    if training:
        go = randn(gen, S.shape[0], scale=0.25, shift=1.0)
        ref_g = grads(ref, [ref_S, ref_gap], go.double())
        out_g = grads(out, [out_S, out_gap], go.to(out.dtype).cuda())
        tol = grad_tol(dtype, M, N, T, max(1.0, S.double().abs().max().item()))
        assert_close(out_g[0], ref_g[0], dtype, "d/d scores", tol=tol)
        assert_close(out_g[1], ref_g[1], dtype, "d/d gap", tol=tol)
    return out


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("shape", [(4, 5, 3), (3, 32, 32), (2, 97, 130), (1, 300, 257)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gap_tensor_in_range_matches_float64(gen, shape, dtype, reduction, training):
    B, M, N = shape
    S = randn(gen, B, M, N, scale=1.5)
    lengths = rand_lengths(gen, B, M, N)
    check_gap_tensor(gen, S, gap_tensor(gen, (B, M, N)), 1.0, lengths, reduction, dtype, training)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 130), (3, 1, 130), (3, 97, 1)], ids=lambda s: "x".join(map(str, s)))
def test_gap_tensor_broadcast(gen, shape, training):
    """Gap tensors that broadcast to (B, M, N) (strides of 0 in the kernel)
    are read per cell the same way."""
    B, M, N = 3, 97, 130
    S = randn(gen, B, M, N)
    gap = gap_tensor(gen, shape)
    for reduction in ("max", "soft"):
        check_gap_tensor(gen, S, gap, 1.0, None, reduction, torch.float32, training)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 97, 130), (3, 1, 130), (1, 130)], ids=lambda s: "x".join(map(str, s)))
def test_gap_tensor_half_types(gen, dtype, shape, training):
    """2-byte gap tensors, dense or one row broadcast to every row, with
    padding: the forward and the backward stage them as the scores (2-byte
    copies whose rows start at either half of a word, a row pitch of 0 for
    the broadcast row), and the backward's gap gradient leaves through the
    same slots."""
    B, M, N = 3, 97, 130
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    for reduction in ("max", "soft"):
        check_gap_tensor(gen, fill_padding(S, lengths, gen), gap_tensor(gen, shape), 1.0, lengths,
                         reduction, dtype, training)


# A gap tensor read cell by cell (column stride 0) first, then dense ones
# (staged: more shared memory a block for the same kernels), in one fresh
# process; each call's score and gradients against the float64 CPU kernel.
LAYOUTS_IN_TURN = textwrap.dedent("""
    import torch, softsw
    gen = torch.Generator().manual_seed(5)
    B, M, N = 3, 97, 130
    for shape in [(B, M, 1), (B, M, N), (B, 1, N), (B, M, 1)]:
        S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
        gap = -1.0 + 0.3 * torch.randn(*shape, generator=gen, dtype=torch.float64)
        for device, dtype in (("cpu", torch.float64), ("cuda", torch.float32)):
            x = S.to(device, dtype).requires_grad_()
            g = gap.to(device, dtype).requires_grad_()
            out = softsw.align(x, g, 1.0, reduction="soft")
            dx, dg = torch.autograd.grad(out.sum(), [x, g])
            got = [t.detach().double().cpu() for t in (out, dx, dg)]
            if device == "cpu":
                want = got
        for name, a, b in zip(("score", "d/dS", "d/dgap"), got, want):
            err = ((a - b).abs().max() / b.abs().max()).item()
            assert err < 1e-4, (shape, name, err)
    print("OK")
""")


def test_gap_tensor_layouts_in_turn_in_one_process():
    proc = subprocess.run([sys.executable, "-c", LAYOUTS_IN_TURN], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("where", ["first_band", "late_column", "last_row"])
def test_gap_tensor_out_of_range_switches_mid_band(gen, where, training):
    """Gaps far out of the range rule (one very negative, one very positive)
    send the group of steps that meets them, and the rest of its band, to the
    log domain; the other bands stay; the results are exact either way."""
    B, M, N = 2, 150, 300
    S = randn(gen, B, M, N)
    gap = gap_tensor(gen, (B, M, N))
    r, c = {"first_band": (3, 10), "late_column": (70, 250), "last_row": (M - 1, N - 5)}[where]
    gap[0, r, c] = -60.0
    gap[1, r, c] = 30.0
    for reduction in ("max", "soft"):
        for dtype in (torch.float32, torch.float64):
            check_gap_tensor(gen, S, gap, 1.0, None, reduction, dtype, training)


@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 1e3])
def test_gap_tensor_temperatures(gen, T):
    B, M, N = 3, 70, 90
    S = randn(gen, B, M, N, scale=2.0)
    gap = gap_tensor(gen, (B, M, N), spread=1.0)
    for reduction in ("max", "soft"):
        for training in (False, True):
            out = check_gap_tensor(gen, S, gap, T, None, reduction, torch.float32, training)
            assert torch.isfinite(out).all()
