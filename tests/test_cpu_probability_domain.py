"""CPU inference forward in the probability domain.

A problem at T > 0 with a float accumulator (float32, float16, bfloat16),
linear or affine gaps, constant or per-cell, runs, pair by pair, in the
probability domain: Z = 2^H kept as a mantissa with power-of-two exponents,
16 pairs to a SIMD group. A pair whose scores or gaps are outside the range
rule of csrc/kernels/probability.h (|S| / (T ln 2) or |gap| / (T ln 2) above
FLOAT_LOG2_LIMIT, inf, NaN) runs in the log domain instead, in the same batch.
These tests hold both against the float64 reference (tests/reference.py; the
float64 CPU kernel, itself checked against it, for the long pairs) on inputs
chosen to land in either domain and on the switch: temperatures 1e-3 .. 1e3,
|S| up to 1e4, scores and gaps at the limit, batches mixing both domains,
padding with garbage.
"""
import math

import pytest
import torch

import softsw
from conftest import assert_close, fill_padding, rand_lengths, randn, score_tol
from helpers import scores_near_a_limit
from reference import ref_align

# ProbabilityRange<float>::kMaxLog2Weight (csrc/kernels/probability.h).
FLOAT_LOG2_LIMIT = 12.0


def inference(S, gap, T, lengths, reduction, dtype=torch.float32, gap_extend=None):
    with torch.no_grad():
        return softsw.align(S.to(dtype), gap, T, gap_extend=gap_extend, lengths=lengths,
                            reduction=reduction)


def reference(S, gap, T, lengths, reduction, dtype=torch.float32, gap_extend=None):
    """float64 reference on exactly the (rounded) values the kernel sees."""
    x = S.to(dtype).double()
    g = gap.to(dtype).double() if isinstance(gap, torch.Tensor) else gap
    with torch.no_grad():
        return ref_align(x, g, T, gap_extend=gap_extend, lengths=lengths, reduction=reduction)


def check(S, gap, T, lengths, reduction, dtype=torch.float32, gap_extend=None):
    out = inference(S, gap, T, lengths, reduction, dtype, gap_extend)
    ref = reference(S, gap, T, lengths, reduction, dtype, gap_extend)
    M, N = S.shape[-2:]
    assert out.dtype == dtype
    tol = score_tol(dtype, M, N) if dtype == torch.float32 else None
    assert_close(out, ref, dtype, f"score (T={T}, {reduction})", tol=tol)
    return out, ref


SHAPES = [(3, 1, 1), (4, 5, 3), (2, 31, 33), (17, 20, 9), (40, 12, 19)]


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_in_range_matches_reference(gen, shape, reduction):
    B, M, N = shape
    S = randn(gen, B, M, N, scale=1.5)
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)  # garbage (NaN, inf, 1e30) outside the pairs
    check(S, -0.8, 1.0, lengths, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 0.3, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_temperatures_and_magnitudes(gen, T, magnitude, reduction):
    """Small T or large |S| goes to the log domain, the rest stays."""
    B, M, N = 18, 24, 30
    S = randn(gen, B, M, N, scale=magnitude)
    out, _ = check(S, -0.5 * magnitude, T, None, reduction)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_mixed_batch_switches_per_pair(gen, reduction):
    """One batch, one SIMD group: pairs with a single cell out of range (and
    dominating, or far below), a pair scaled far out of range, pairs in range
    next to them; each pair is right whichever domain it runs in."""
    B, M, N = 20, 30, 41
    T = 0.7
    S = randn(gen, B, M, N)
    big = 4 * FLOAT_LOG2_LIMIT * T * math.log(2)
    S[1, 3, 10] = big
    S[5, 29, 40] = -big
    S[7] *= 1e3
    S[9, 10:20, 20:30] = 500.0
    S[11] *= 1e-4
    lengths = rand_lengths(gen, B, M, N)
    check(fill_padding(S, lengths, gen), -1.0, T, lengths, reduction)
    for b in (1, 5, 7, 9, 11, 12):  # each pair alone gives the same score
        m, n = lengths[b].tolist()
        one = inference(S[b, :m, :n], -1.0, T, None, reduction)
        ref = reference(S[b, :m, :n], -1.0, T, None, reduction)
        assert_close(one, ref, torch.float32, f"pair {b} alone", tol=score_tol(torch.float32, M, N))


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("side", ["inside", "outside"])
def test_scores_and_gap_at_the_limit(gen, side, reduction):
    """Scores all just inside (or just outside) the range rule: Z grows as fast
    as the rule allows on every step; a positive gap at the limit as well."""
    B, M, N = 17, 40, 64
    T = 1.0
    factor = 0.98 if side == "inside" else 1.02
    s = factor * FLOAT_LOG2_LIMIT * T * math.log(2)
    S = scores_near_a_limit(gen, B, M, N, s)
    for gap in (-s, -1.0, s / 2):
        out, _ = check(S, gap, T, None, reduction)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_tensor_gaps(gen, reduction):
    """Per-cell gap scores, in range for most pairs, out of it for one."""
    B, M, N = 18, 21, 27
    T = 0.5
    S = randn(gen, B, M, N)
    gap = -torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 2
    gap[4, 7, 9] = -50.0  # |gap| / (T ln 2) > FLOAT_LOG2_LIMIT: pair 4 in the log domain
    lengths = rand_lengths(gen, B, M, N)
    check(S, gap, T, lengths, reduction)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_half_types(gen, dtype, reduction):
    B, M, N = 18, 25, 33
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    check(fill_padding(S, lengths, gen), -1.0, 1.0, lengths, reduction, dtype)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_long_pairs(gen, reduction):
    """One long pair (a group with a single busy lane) and a batch of long
    pairs, against the float64 kernel."""
    for B, M, N in ((1, 1500, 1700), (17, 300, 257)):
        S = randn(gen, B, M, N).float()
        out = inference(S, -1.0, 1.0, None, reduction)
        with torch.no_grad():
            ref = softsw.align(S.double(), -1.0, 1.0, reduction=reduction)
        assert_close(out, ref, torch.float32, "score", tol=score_tol(torch.float32, M, N))


def test_nan_and_inf_stay_in_their_pair(gen):
    B, M, N = 18, 20, 25
    S = randn(gen, B, M, N)
    S[1, 5, 7] = float("nan")
    S[2, 10, 20] = float("inf")
    S[3, 0, 0] = -float("inf")
    for reduction in ("max", "soft"):
        out = inference(S, -1.0, 1.0, None, reduction)
        with torch.no_grad():
            ref = softsw.align(S.double(), -1.0, 1.0, reduction=reduction)
        assert_close(out, ref, torch.float32, "score")
        assert math.isnan(out[1].item())
        assert torch.isfinite(out[[0, 3] + list(range(4, B))]).all()


def test_inference_matches_training_forward(gen):
    """The probability-domain inference and the log-domain training forward
    compute the same scores (to the float32 tolerance)."""
    B, M, N = 20, 64, 80
    S = randn(gen, B, M, N, dtype=torch.float32)
    for reduction in ("max", "soft"):
        prob = inference(S, -1.0, 1.0, None, reduction)
        log = softsw.align(S.clone().requires_grad_(True), -1.0, 1.0, reduction=reduction)
        assert_close(prob, log, torch.float32, "score", tol=score_tol(torch.float32, M, N))


def test_deterministic(gen):
    B, M, N = 33, 50, 70
    S = randn(gen, B, M, N, dtype=torch.float32)
    S[3, 20, 30] = 400.0  # pair 3 in the log domain
    for reduction in ("max", "soft"):
        first = inference(S, -1.0, 1.0, None, reduction)
        for _ in range(2):
            assert torch.equal(inference(S, -1.0, 1.0, None, reduction), first)


def test_more_accurate_than_the_log_domain(gen):
    """In float32 the probability domain is at least as close to float64 as the
    log-domain (training) forward: also a check that inference takes it."""
    B, M, N = 16, 128, 128
    S = randn(gen, B, M, N).float()
    with torch.no_grad():
        ref = softsw.align(S.double(), -1.0, 1.0, reduction="soft")
    prob = inference(S, -1.0, 1.0, None, "soft").double()
    log = softsw.align(S.clone().requires_grad_(True), -1.0, 1.0, reduction="soft").detach().double()
    err_prob = ((prob - ref).abs() / ref.abs()).max().item()
    err_log = ((log - ref).abs() / ref.abs()).max().item()
    assert err_prob <= err_log, (err_prob, err_log)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("magnitude", [1.0, 30.0])
def test_affine_temperatures_and_magnitudes(gen, T, magnitude, reduction):
    """Affine gaps (open, extend): the five-node cell in the probability
    domain, or the log domain when the scores or gaps are out of range."""
    B, M, N = 18, 23, 31
    S = randn(gen, B, M, N, scale=magnitude)
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    for extend in (-0.3, -2.0, 1.5):
        out, _ = check(S, -1.0 * magnitude, T, lengths, reduction,
                       gap_extend=extend * magnitude)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("side", ["inside", "outside"])
def test_affine_gaps_at_the_limit(gen, side, reduction):
    """Scores and both gap scores at the range limit (just inside, or just
    outside: the whole batch in the log domain)."""
    B, M, N = 17, 30, 40
    T = 1.0
    factor = 0.98 if side == "inside" else 1.02
    s = factor * FLOAT_LOG2_LIMIT * T * math.log(2)
    S = randn(gen, B, M, N).clamp(-1, 1) * s
    S[:4] = s
    for open_, extend in ((-s, -s), (-s, s), (s, -1.0), (s / 3, s / 2)):
        out, _ = check(S, open_, T, None, reduction, gap_extend=extend)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_affine_mixed_batch_and_tensor_gaps(gen, reduction):
    """Pairs out of range next to pairs in range; per-cell affine gaps give
    the same scores as the reference."""
    B, M, N = 20, 26, 34
    T = 0.5
    S = randn(gen, B, M, N)
    S[2, 4, 5] = 100.0
    S[6] *= 1e3
    lengths = rand_lengths(gen, B, M, N)
    check(fill_padding(S, lengths, gen), -1.0, T, lengths, reduction, gap_extend=-0.25)
    go = -torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.5
    ge = -torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.5
    out = inference(S, go, T, lengths, reduction, gap_extend=ge.float())
    with torch.no_grad():
        ref = ref_align(S.float().double(), go.float().double(), T, gap_extend=ge.float().double(),
                        lengths=lengths, reduction=reduction)
    assert_close(out, ref, torch.float32, "score", tol=score_tol(torch.float32, M, N))


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.05, 0.5, 3.0])
def test_affine_gap_tensors(gen, T, reduction):
    """Per-cell open and extend scores in the probability domain, inference
    and training (scores and gradients against the reference): a pair with an
    open score beyond the range limit, one with an extend score just beyond
    it and one at the limit run beside the others, a NaN gap keeps to its pair; a gap tensor
    whose rows are not contiguous (a transposed copy's view) gives the bits of
    its contiguous twin."""
    from helpers import compare_with_reference
    B, M, N = 19, 22, 27
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N).float().double(), lengths, gen)
    go = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.3).float().double()
    ge = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 0.6).float().double()
    limit = FLOAT_LOG2_LIMIT * T * math.log(2)
    go[3, 0, 0] = -1.5 * limit
    ge[5, 0, 0] = -1.02 * limit
    go[7, :, :] = -0.98 * limit
    out, _ = compare_with_reference(gen, S.float(), go.float(), T, gap_extend=ge.float(),
                                    lengths=lengths, reduction=reduction)
    assert torch.isfinite(out).all()
    nan_gap = go.clone()
    nan_gap[9, 0, 0] = float("nan")
    out = inference(S, nan_gap.float(), T, lengths, reduction, gap_extend=ge.float())
    assert torch.isnan(out[9]) and torch.isfinite(out[torch.arange(B) != 9]).all()
    strided = go.float().transpose(1, 2).contiguous().transpose(1, 2)
    assert strided.stride(-1) != 1
    a = inference(S, strided, T, lengths, reduction, gap_extend=ge.float())
    b = inference(S, go.float(), T, lengths, reduction, gap_extend=ge.float())
    assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.3, 1.0])
def test_lone_long_pair_backward(gen, T, reduction):
    """The backward of a pair alone in its group, its region's columns in
    blocks on the lanes (the messages handed from block to block): inside a
    padded batch (lengths), with a per-cell gap tensor, against the float64
    kernel (gradients with respect to the scores and the gaps)."""
    from conftest import grad_tol, leaf
    B, M, N = 1, 230, 700
    lengths = torch.tensor([[201, 655]])
    S = fill_padding(randn(gen, B, M, N, scale=1.5).float().double(), lengths, gen)
    gap = (-torch.rand(B, M, N, generator=gen, dtype=torch.float64) - 0.5).float().double()
    res = []
    for dt in (torch.float64, torch.float32):
        x, g = leaf(S.to(dt)), leaf(gap.to(dt))
        out = softsw.align(x, g, T, lengths=lengths, reduction=reduction)
        res.append((out.detach(), *torch.autograd.grad(out.sum(), [x, g])))
    tol = grad_tol(torch.float32, M, N, T, res[0][0].abs().max().item())
    assert_close(res[1][0], res[0][0], torch.float32, "score", tol=score_tol(torch.float32, M, N))
    assert_close(res[1][1], res[0][1], torch.float32, "d/d scores", tol=tol)
    assert_close(res[1][2], res[0][2], torch.float32, "d/d gap", tol=tol)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("shape", [(1, 50, 64), (1, 70, 65), (1, 300, 1000), (2, 129, 257), (1, 5, 4000)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("T", [0.2, 1.0, 30.0])
def test_lone_long_pair_on_column_blocks(gen, shape, T, reduction):
    """A pair alone in its group runs with its columns cut into blocks, one per
    lane, in a wavefront (block sizes that do not divide the width included),
    for inference and for training (its H and, for "max", the argmax the
    backward starts from); against the float64 kernel, with the scores near
    the range limit too."""
    from conftest import grad_tol, leaf
    B, M, N = shape
    S = randn(gen, B, M, N, scale=min(2.0, 0.9 * FLOAT_LOG2_LIMIT * T * math.log(2) / 4)).float()
    for gap in (-1.0, 0.5 * T):
        out = inference(S, gap, T, None, reduction)
        with torch.no_grad():
            ref = softsw.align(S.double(), gap, T, reduction=reduction)
        assert_close(out, ref, torch.float32, f"score gap {gap}", tol=score_tol(torch.float32, M, N))
        x, x64 = leaf(S), leaf(S.double())
        out = softsw.align(x, gap, T, reduction=reduction)
        ref = softsw.align(x64, gap, T, reduction=reduction)
        assert_close(out, ref, torch.float32, f"training score gap {gap}",
                     tol=score_tol(torch.float32, M, N))
        (g,) = torch.autograd.grad(out.sum(), x)
        (g64,) = torch.autograd.grad(ref.sum(), x64)
        assert_close(g, g64, torch.float32, f"gradient gap {gap}",
                     tol=grad_tol(torch.float32, M, N, T, ref.abs().max().item()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_training_forward_gives_inference_bits(gen, reduction, affine, dtype):
    """The score of a forward that keeps state (a training step) has the bits of
    inference's: groups of pairs and a lone long pair on column blocks. ("max"
    with state also finds its argmax from every cell's H; the score still comes
    from the largest Z, as at inference.)"""
    ext = -0.2 if affine else None
    for B, M, N, scale in ((37, 9, 11, 1.0), (37, 30, 41, 2.0), (1, 40, 700, 1.0)):
        for _ in range(5):
            S = randn(gen, B, M, N, scale=scale).to(dtype)
            lengths = rand_lengths(gen, B, M, N) if B > 1 else None
            with torch.no_grad():
                inference = softsw.align(S, -0.7, 0.6, gap_extend=ext, lengths=lengths,
                                         reduction=reduction)
            training = softsw.align(S.clone().requires_grad_(), -0.7, 0.6, gap_extend=ext,
                                    lengths=lengths, reduction=reduction)
            assert torch.equal(inference, training.detach()), (B, M, N)
