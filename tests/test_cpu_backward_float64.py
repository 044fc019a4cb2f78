"""CPU float64 backward on SIMD lanes, linear gaps.

At T > 0 the float64 linear-gap backward runs on the reverse rows of
csrc/kernels/cpu/reverse_simd.h as float32 does, with double lanes (16 pairs
to a group; a lone long pair on column blocks; a lone short pair as a group of
one), reading the log-domain H that the float64 forward keeps, whichever
domain that forward ran a pair in (the probability domain inside the double
range rule of csrc/kernels/probability.h, the scalar log domain outside it).
Empty and invalid pairs, and T = 0, stay on the scalar passes; so does the
affine backward. These tests hold the gradients (scores and gap tensors)
against the float64 reference (tests/reference.py) at the float64 tolerance:
batches of 1, 15, 16, 17 and 37 pairs (full groups and remainders), lengths
shorter than the tensor with garbage padding, temperatures 1e-3 .. 1e3, |S|
up to 1e4 (pairs whose forward ran in either domain, in one batch), "max" and
"soft"; and they show that the SIMD backward is what ran (its gradient differs
from the scalar passes' in the last bits, on the same forward state).
"""
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import softsw
from conftest import fill_padding, leaf, rand_lengths, randn
from helpers import compare_with_reference

# ProbabilityRange<double>::kMaxLog2Weight (csrc/kernels/probability.h).
DOUBLE_LOG2_LIMIT = 100.0
F64 = torch.float64


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [1, 15, 16, 17, 37])
def test_batches_with_padding(two_cpu_threads, gen, B, reduction):
    """Full groups, remainders and a lone pair; lengths shorter than the
    tensor, garbage (NaN, inf, 1e30) in the padding; gradients with respect to
    the scores, exactly zero in the padding (compare_with_reference)."""
    M, N = 21, 26
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    compare_with_reference(gen, S, -0.8, 1.0, lengths=lengths, reduction=reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_temperatures_and_magnitudes(two_cpu_threads, gen, T, magnitude, reduction):
    """Small T or large |S| puts a pair's forward in the log domain, the rest
    in the probability domain; the backward reads either's H."""
    B, M, N = 18, 15, 19
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=magnitude), lengths, gen)
    compare_with_reference(gen, S, -0.5 * magnitude, T, lengths=lengths, reduction=reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_forward_domains_mixed_in_one_group(two_cpu_threads, gen, reduction):
    """One group of 17 pairs: some far out of the double range rule (a single
    dominating cell, scores scaled by 1e3), the rest inside."""
    B, M, N = 17, 18, 27
    T = 0.7
    S = randn(gen, B, M, N)
    big = 4 * DOUBLE_LOG2_LIMIT * T * math.log(2)
    S[1, 3, 10] = big
    S[5, 17, 26] = -big
    S[7] *= 1e3
    S[9, 5:10, 10:20] = 40.0
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    compare_with_reference(gen, S, -1.0, T, lengths=lengths, reduction=reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [1, 17])
def test_gap_tensors(two_cpu_threads, gen, B, reduction):
    """Per-cell gap scores: gradients with respect to the scores and to the
    gap tensor; one pair's gaps out of the forward's range."""
    M, N = 16, 22
    T = 0.5
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N), lengths, gen)
    go = -torch.rand(B, M, N, generator=gen, dtype=F64) * 2
    go[B // 2, 3, 5] = -2 * DOUBLE_LOG2_LIMIT * T * math.log(2)
    compare_with_reference(gen, S, go, T, lengths=lengths, reduction=reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_lone_pairs(gen, T, reduction):
    """A lone pair: short (a group of one) and long (its columns in blocks on
    the lanes, the messages handed from block to block), constant gaps of
    either sign and a gap tensor."""
    for M, N in ((30, 63), (30, 200), (9, 700)):
        S = randn(gen, 1, M, N, scale=1.5)
        for gap in (-1.0, 0.5 * T, -torch.rand(1, M, N, generator=gen, dtype=F64) - 0.5):
            compare_with_reference(gen, S, gap, T, reduction=reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_pair_alone_equals_pair_in_group(two_cpu_threads, gen, reduction):
    """Each pair alone (a group of one) gets the gradient bits, with respect
    to the scores and the gap tensor, that it gets in a padded batch of 17
    (groups of masked rows)."""
    B, M, N = 17, 23, 40  # (N < 64: no column blocks for the lone pair)
    T = 0.8
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=2.0), lengths, gen)
    G = -torch.rand(B, M, N, generator=gen, dtype=F64) - 0.2
    x, g = leaf(S), leaf(G)
    out = softsw.align(x, g, T, lengths=lengths, reduction=reduction)
    gx, gg = torch.autograd.grad(out.sum(), [x, g])
    for b in range(B):
        m, n = lengths[b].tolist()
        xb, gb = leaf(S[b, :m, :n]), leaf(G[b, :m, :n])
        one = softsw.align(xb, gb, T, reduction=reduction)
        dx, dg = torch.autograd.grad(one, [xb, gb])
        assert torch.equal(one.detach(), out[b].detach()), f"pair {b}: score alone != in group"
        assert torch.equal(dx, gx[b, :m, :n]), f"pair {b}: d/d scores alone != in group"
        assert torch.equal(dg, gg[b, :m, :n]), f"pair {b}: d/d gap alone != in group"


def test_gradcheck(gen):
    """torch.autograd.gradcheck through the SIMD backward: a padded batch of
    17 (a group and a lone pair on two threads), both reductions, a constant
    gap and a gap tensor."""
    B, M, N = 17, 4, 5
    lengths = rand_lengths(gen, B, M, N)
    S = randn(gen, B, M, N)
    G = -torch.rand(B, M, N, generator=gen, dtype=F64) - 0.2
    for reduction in ("max", "soft"):
        def f(x, g, reduction=reduction):
            return softsw.align(x, g, 0.9, lengths=lengths, reduction=reduction)
        assert torch.autograd.gradcheck(f, (leaf(S), leaf(G)), eps=1e-6, atol=1e-7)


# Scores and gradients of a batch whose pairs' forward runs in the scalar log
# domain under any instruction set cap (|S| / T far outside the double range
# rule: the state has the same bits with the SIMD passes on or off), but for
# pairs 5..8, inside the rule (the probability-domain forward); each against
# the reference.
ISA_SCRIPT = textwrap.dedent("""
    import sys, torch, softsw
    sys.path.insert(0, sys.argv[1])
    from conftest import assert_close, fill_padding, grad_tol, rand_lengths, score_tol
    from reference import ref_align
    gen = torch.Generator().manual_seed(int(sys.argv[2]))
    B, M, N = 37, 20, 23
    T = 0.05
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = fill_padding(torch.randn(B, M, N, generator=gen, dtype=torch.float64) * 60, lengths, gen)
    S[5:9] /= 100
    G = -torch.rand(B, M, N, generator=gen, dtype=torch.float64) * 2
    scores, grads = [], []
    for gap in (-2.0, G):
        for red in ("max", "soft"):
            x = S.clone().requires_grad_(True)
            r = S.clone().requires_grad_(True)
            a = softsw.align(x, gap, T, lengths=lengths, reduction=red)
            e = ref_align(r, gap, T, lengths=lengths, reduction=red)
            ga, = torch.autograd.grad(a.sum(), x)
            ge, = torch.autograd.grad(e.sum(), r)
            what = f"{sys.argv[3]} gap tensor={gap is G} {red}"
            assert_close(a, e, torch.float64, what + " score", tol=score_tol(torch.float64, M, N))
            tol = grad_tol(torch.float64, M, N, T, e.abs().max().item())
            assert_close(ga, ge, torch.float64, what + " gradient", tol=tol)
            scores.append(a.detach())
            grads.append(ga)
    torch.save({"scores": torch.stack(scores), "grads": torch.stack(grads)}, sys.argv[4])
    print("OK")
""")
IN_RANGE = range(5, 9)


def run_isa(isa, seed, path):
    here = os.path.dirname(__file__)
    env = dict(os.environ, SOFTSW_CPU_ISA=isa, SOFTSW_NUM_THREADS="3")
    proc = subprocess.run([sys.executable, "-c", ISA_SCRIPT, here, str(seed), isa, str(path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")
    return torch.load(path)


def check_against_scalar(isa, seed, tmp_path):
    """Under `isa`, and under the scalar passes, scores and gradients match
    the reference (in the script); where the forward ran in the log domain
    (the same state bits either way), the gradients differ from the scalar
    passes' in the last bits somewhere: the SIMD backward ran."""
    out = run_isa(isa, seed, tmp_path / f"{isa}.pt")
    log = run_isa("scalar", seed, tmp_path / "scalar.pt")
    log_domain = [b for b in range(37) if b not in IN_RANGE]
    same_state = torch.nan_to_num(out["scores"][:, log_domain])
    assert torch.equal(same_state, torch.nan_to_num(log["scores"][:, log_domain])), \
        "the log-domain forward gave other bits: the gradients below would not isolate the backward"
    grads = torch.nan_to_num(out["grads"][:, log_domain])
    assert not torch.equal(grads, torch.nan_to_num(log["grads"][:, log_domain])), \
        "the same bits as the scalar backward: the SIMD backward did not run"


def test_simd_backward_ran(seed, tmp_path):
    """The best instruction set the CPU has against SOFTSW_CPU_ISA=scalar."""
    check_against_scalar("avx512", seed, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_instruction_set_paths(seed, tmp_path, isa):
    """Under each narrower vector ISA cap (2 doubles to a vector on the
    baseline), 3 threads: the same checks."""
    check_against_scalar(isa, seed, tmp_path)
