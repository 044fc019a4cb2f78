"""CPU float64 forward in the probability domain.

A float64 problem at T > 0 runs its forward (inference, and the training
forward with its state) pair by pair in the probability domain on SIMD lanes,
16 pairs to a group, as float32 does, with the double range rule of
csrc/kernels/probability.h (|S| / (T ln 2) and |gap| / (T ln 2) at most
DOUBLE_LOG2_LIMIT); a pair outside it (or with inf / NaN) runs on the scalar
log-domain path, in the same batch. The training forward keeps the log-domain
state (H, or the C, U, L planes) that the scalar float64 backward reads.
These tests hold scores and gradients against the float64 reference
(tests/reference.py) at the float64 tolerance, on inputs chosen to land in
either domain and on the switch: temperatures 1e-3 .. 1e3, |S| up to 1e4,
scores and gaps at the limit, lengths shorter than the tensor with garbage
padding, batches of 1, 15, 16, 17 and 37 pairs; a pair gives the same bits
alone as inside a group; and under each instruction set cap (SOFTSW_CPU_ISA).
"""
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import softsw
from conftest import assert_close, fill_padding, leaf, rand_lengths, randn, score_tol
from helpers import (DOUBLE_LOG2_LIMIT, compare_with_reference, scores_across_a_range_rule,
                     scores_near_a_limit)
from reference import ref_align

F64 = torch.float64


def check_inference(S, gap, T, lengths, reduction, gap_extend=None):
    """The no-grad forward (inference rows) against the reference."""
    with torch.no_grad():
        out = softsw.align(S, gap, T, gap_extend=gap_extend, lengths=lengths,
                           reduction=reduction)
        ref = ref_align(S, gap, T, gap_extend=gap_extend, lengths=lengths, reduction=reduction)
    M, N = S.shape[-2:]
    assert out.dtype == F64
    assert_close(out, ref, F64, f"inference score (T={T}, {reduction})", tol=score_tol(F64, M, N))
    return out


def check_both(gen, S, gap, T, lengths, reduction, gap_extend=None):
    """Inference, and the training forward and backward (scores and gradients)."""
    out = check_inference(S, gap, T, lengths, reduction, gap_extend)
    train, _ = compare_with_reference(gen, S, gap, T, gap_extend=gap_extend, lengths=lengths,
                                      reduction=reduction)
    return out, train


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [1, 15, 16, 17, 37])
def test_batches_with_padding(gen, B, reduction, affine):
    """Groups full, partly full and of one pair (narrow rows), lengths shorter
    than the tensor, garbage (NaN, inf, 1e30) in the padding."""
    M, N = 21, 26
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    out, _ = check_both(gen, S, -0.8, 1.0, lengths, reduction, -0.3 if affine else None)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_temperatures_and_magnitudes(gen, T, magnitude, reduction, affine):
    """Small T or large |S| goes to the log domain, the rest stays; mixed
    within a batch where the magnitude puts some pairs on either side."""
    B, M, N = 18, 15, 19
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=magnitude), lengths, gen)
    out, _ = check_both(gen, S, -0.5 * magnitude, T, lengths, reduction,
                        -0.2 * magnitude if affine else None)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("side", ["inside", "outside"])
def test_scores_and_gaps_at_the_limit(gen, side, reduction, affine):
    """Scores just inside (or just outside) the double range rule: Z grows as
    fast as the rule allows on every step (H in the thousands of kernel units:
    the start term and the gap nodes far below a row's exponent flush to
    zero); gaps at the limit, negative and positive."""
    B, M, N = 17, 24, 30
    T = 1.0
    factor = 0.98 if side == "inside" else 1.02
    s = factor * DOUBLE_LOG2_LIMIT * T * math.log(2)
    S = scores_near_a_limit(gen, B, M, N, s)
    gaps = ((-s, -s), (-s, s), (s, -1.0)) if affine else ((-s, None), (-1.0, None), (s / 2, None))
    for gap, extend in gaps:
        out, _ = check_both(gen, S, gap, T, None, reduction, extend)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_mixed_batch_switches_per_pair(gen, reduction, affine):
    """One group: a pair with a single cell out of range (dominating, or far
    below), a pair scaled far out of range, a NaN score and an inf score in
    their pairs, the rest in range; each pair right whichever domain it runs in."""
    B, M, N = 20, 18, 27
    T = 0.7
    S = scores_across_a_range_rule(gen, B, M, N, 4 * DOUBLE_LOG2_LIMIT * T * math.log(2))
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    ext = -0.25 if affine else None
    check_both(gen, S, -1.0, T, lengths, reduction, ext)
    bad = S.clone()
    bad[2, 0, 0] = float("nan")
    bad[3, 1, 1] = float("inf")
    with torch.no_grad():
        out = softsw.align(bad, -1.0, T, gap_extend=ext, lengths=lengths, reduction=reduction)
        ref = softsw.align(S, -1.0, T, gap_extend=ext, lengths=lengths, reduction=reduction)
    assert math.isnan(out[2].item())
    keep = [b for b in range(B) if b not in (2, 3)]
    assert torch.equal(out[keep], ref[keep])


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_tensor_gaps(gen, reduction, affine):
    """Per-cell gap scores in range, and out of it for one pair."""
    B, M, N = 17, 16, 22
    T = 0.5
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N), lengths, gen)
    go = -torch.rand(B, M, N, generator=gen, dtype=F64) * 2
    go[4, 3, 5] = -2 * DOUBLE_LOG2_LIMIT * T * math.log(2)  # pair 4 in the log domain
    ge = -torch.rand(B, M, N, generator=gen, dtype=F64) * 0.5 if affine else None
    check_both(gen, S, go, T, lengths, reduction, ge)


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_pair_alone_equals_pair_in_group(gen, reduction, affine):
    """Each pair alone (its own call: a group of one, the narrow rows, no
    masking) gives the bits it gets inside a padded batch of 17 (a full group
    of masked rows and a lone pair): scores, inference and training, and the
    gradient."""
    B, M, N = 17, 23, 40  # (N < 64: no column blocks for the lone pair)
    T = 0.8
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=2.0), lengths, gen)
    ext = -0.3 if affine else None
    with torch.no_grad():
        inf = softsw.align(S, -0.6, T, gap_extend=ext, lengths=lengths, reduction=reduction)
    x = leaf(S)
    out = softsw.align(x, -0.6, T, gap_extend=ext, lengths=lengths, reduction=reduction)
    (g,) = torch.autograd.grad(out.sum(), x)
    for b in range(B):
        m, n = lengths[b].tolist()
        xb = leaf(S[b, :m, :n])
        with torch.no_grad():
            one_inf = softsw.align(xb, -0.6, T, gap_extend=ext, reduction=reduction)
        one = softsw.align(xb, -0.6, T, gap_extend=ext, reduction=reduction)
        (gb,) = torch.autograd.grad(one, xb)
        assert torch.equal(one_inf, inf[b]), f"pair {b}: inference alone != in group"
        assert torch.equal(one.detach(), out[b].detach()), f"pair {b}: training alone != in group"
        assert torch.equal(gb, g[b, :m, :n]), f"pair {b}: gradient alone != in group"


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_lone_long_pair(gen, T, reduction):
    """A lone long pair (linear gaps, constant gap) runs its columns in blocks
    on the lanes: inference and training against the reference."""
    for B, M, N in ((1, 30, 200), (1, 9, 700)):
        S = randn(gen, B, M, N, scale=1.5)
        for gap in (-1.0, 0.5 * T):
            check_both(gen, S, gap, T, None, reduction)


def test_gradcheck(gen):
    """torch.autograd.gradcheck through the probability-domain forward (and
    the scalar backward from its state), linear and affine, both reductions,
    a padded batch of 17."""
    B, M, N = 17, 4, 5
    lengths = rand_lengths(gen, B, M, N)
    S = randn(gen, B, M, N)
    for ext in (None, -0.4):
        for reduction in ("max", "soft"):
            def f(x, ext=ext, reduction=reduction):
                return softsw.align(x, -0.7, 0.9, gap_extend=ext, lengths=lengths,
                                    reduction=reduction)
            assert torch.autograd.gradcheck(f, (leaf(S),), eps=1e-6, atol=1e-7)


ISA_SCRIPT = textwrap.dedent("""
    import sys, torch, softsw
    sys.path.insert(0, sys.argv[1])
    from conftest import assert_close, fill_padding, grad_tol, rand_lengths, score_tol
    from reference import ref_align
    gen = torch.Generator().manual_seed(int(sys.argv[2]))
    B, M, N = 37, 20, 23
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = fill_padding(torch.randn(B, M, N, generator=gen, dtype=torch.float64) * 1.5, lengths, gen)
    S[4, 2, 3] = 1e4  # one pair in the log domain
    results = []
    for ext in (None, -0.25):
        for red in ("max", "soft"):
            x = S.clone().requires_grad_(True)
            r = S.clone().requires_grad_(True)
            with torch.no_grad():
                inf = softsw.align(S, -0.6, 0.9, gap_extend=ext, lengths=lengths, reduction=red)
            a = softsw.align(x, -0.6, 0.9, gap_extend=ext, lengths=lengths, reduction=red)
            e = ref_align(r, -0.6, 0.9, gap_extend=ext, lengths=lengths, reduction=red)
            ga, = torch.autograd.grad(a.sum(), x)
            ge, = torch.autograd.grad(e.sum(), r)
            what = f"{sys.argv[3]} extend={ext} {red}"
            assert_close(inf, e, torch.float64, what + " inference", tol=score_tol(torch.float64, M, N))
            assert_close(a, e, torch.float64, what + " score", tol=score_tol(torch.float64, M, N))
            tol = grad_tol(torch.float64, M, N, 0.9, e.abs().max().item())
            assert_close(ga, ge, torch.float64, what + " gradient", tol=tol)
            for k in range(0, B, 4):  # alone: the same bits (inference, training)
                m, n = lengths[k].tolist()
                xk = S[k, :m, :n].clone().requires_grad_(True)
                with torch.no_grad():
                    one = softsw.align(xk, -0.6, 0.9, gap_extend=ext, reduction=red)
                assert torch.equal(one, inf[k]), f"{what} pair {k} alone, inference"
                one = softsw.align(xk, -0.6, 0.9, gap_extend=ext, reduction=red)
                assert torch.equal(one, a[k]), f"{what} pair {k} alone, training"
            results.append(a.detach())
    torch.save(torch.stack(results), sys.argv[4])
    print("OK")
""")


def run_isa(isa, seed, path):
    here = os.path.dirname(__file__)
    env = dict(os.environ, SOFTSW_CPU_ISA=isa, SOFTSW_NUM_THREADS="3")
    proc = subprocess.run([sys.executable, "-c", ISA_SCRIPT, here, str(seed), isa, str(path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")
    return torch.load(path)


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["scalar", "baseline", "avx2", "avx512"])
def test_instruction_set_paths(seed, tmp_path, isa):
    """Under each vector ISA cap (a cap above what the CPU has runs the best it
    has), 3 threads: scores (inference, training) and gradients against the
    reference, linear and affine gaps, a pair alone equal to its batch's bits.
    And the probability domain is what ran: its scores differ from the scalar
    (log-domain) path's in the last bits somewhere, within the tolerance."""
    out = run_isa(isa, seed, tmp_path / f"{isa}.pt")
    if isa != "scalar":
        log = run_isa("scalar", seed, tmp_path / "scalar.pt")
        assert_close(out, log, F64, "vs the scalar path", tol=score_tol(F64, 20, 23))
        assert not torch.equal(torch.nan_to_num(out), torch.nan_to_num(log)), \
            "the same bits as the scalar log-domain path: the probability domain did not run"
