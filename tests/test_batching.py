"""Large, ragged batches: the CPU kernel groups float pairs 16 to a SIMD vector
(sorted by shape) and spreads pairs over threads; every pair must still get
exactly what it gets alone and what the reference gives. Each CPU instruction
set path (SOFTSW_CPU_ISA) and a thread count above the core count
(SOFTSW_NUM_THREADS) run in a subprocess, since both are read once per process."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import softsw
from conftest import (DEVICES, assert_close, fill_padding, grad_tol, grads, leaf, rand_lengths,
                      randn, score_tol)
from helpers import compare_with_reference, quantized


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16],
                         ids=["fp32", "fp64", "bf16"])
def test_ragged_batch_vs_reference(device, gen, dtype, T, reduction):
    """37 pairs (three SIMD groups, one partly filled), random lengths including
    empty pairs, garbage padding."""
    B, M, N = 37, 19, 23
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = quantized(gen, B, M, N, step=0.5) if T == 0 else randn(gen, B, M, N)
    S = fill_padding(S, lengths, gen).to(dtype).to(device)
    compare_with_reference(gen, S, -0.75 if T == 0 else -0.6, T, lengths=lengths.to(device),
                           reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_batch_without_lengths_vs_reference(device, gen, reduction):
    """20 full-size pairs in float32 (vectorised path), T = 1 and T = 0 (ties)."""
    compare_with_reference(gen, randn(gen, 20, 30, 34, dtype=torch.float32, device=device),
                           -0.5, 1.0, reduction=reduction)
    S = quantized(gen, 20, 30, 34, dtype=torch.float32, device=device, step=1.0)
    compare_with_reference(gen, S, -1.0, 0.0, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_big_batch_equals_pairs_alone(device, gen, dtype):
    """Enough work for several threads: each pair equals its own call, bitwise."""
    B, M, N = 40, 60, 70
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = fill_padding(randn(gen, B, M, N, dtype=dtype), lengths, gen).to(device)
    lengths = lengths.to(device)
    for T, reduction in ((0.7, "soft"), (0.0, "max")):
        x = leaf(S)
        out = softsw.align(x, -0.5, T, gap_extend=-0.1, lengths=lengths, reduction=reduction)
        (g,) = grads(out, [x])
        y = leaf(S)
        out_lin = softsw.align(y, -0.5, T, lengths=lengths, reduction=reduction)
        (g_lin,) = grads(out_lin, [y])
        for b in range(0, B, 3):
            m, n = lengths[b].tolist()
            xb, yb = leaf(S[b, :m, :n]), leaf(S[b, :m, :n])
            ob = softsw.align(xb, -0.5, T, gap_extend=-0.1, reduction=reduction)
            ob_lin = softsw.align(yb, -0.5, T, reduction=reduction)
            (gb,) = grads(ob, [xb])
            (gb_lin,) = grads(ob_lin, [yb])
            stol = score_tol(dtype, M, N)
            gtol = grad_tol(dtype, M, N, T, out_lin.abs().max().item())
            assert_close(out[b], ob, dtype, f"affine pair {b}", tol=stol)
            assert_close(g[b, :m, :n], gb, dtype, f"affine pair {b} gradient", tol=gtol)
            assert_close(out_lin[b], ob_lin, dtype, f"linear pair {b}", tol=stol)
            assert_close(g_lin[b, :m, :n], gb_lin, dtype, f"linear pair {b} gradient", tol=gtol)


ISA_SCRIPT = textwrap.dedent("""
    import sys, torch, softsw
    sys.path.insert(0, sys.argv[1])
    from conftest import assert_close, fill_padding, grad_tol, rand_lengths, score_tol
    gen = torch.Generator().manual_seed(int(sys.argv[2]))
    B, M, N = 45, 48, 57
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64).float().double()
    S = fill_padding(S, lengths, gen)
    Q = fill_padding(torch.round(torch.randn(B, M, N, generator=gen, dtype=torch.float64) * 2),
                     lengths, gen)
    # Linear and affine gaps (extend dyadic: T = 0 ties exact in every dtype).
    for T, ext in [(T, ext) for T in (1.0, 0.3, 0.0) for ext in (None, -0.25)]:
        X = Q if T == 0 else S
        for red in ("max", "soft"):
            for dt in ((torch.float32, torch.float16) if T == 1.0 else (torch.float32,)):
                xd = X.to(dt).requires_grad_(True)
                x64 = xd.detach().double().requires_grad_(True)
                a = softsw.align(x64, -0.5, T, gap_extend=ext, lengths=lengths, reduction=red)
                b = softsw.align(xd, -0.5, T, gap_extend=ext, lengths=lengths, reduction=red)
                ga, = torch.autograd.grad(a.sum(), x64)
                gb, = torch.autograd.grad(b.sum(), xd)
                what = f"{sys.argv[3]} {dt} T={T} extend={ext} {red}"
                tol = None if dt == torch.float16 else score_tol(dt, M, N)
                assert_close(b, a, dt, what + " score", tol=tol)
                tol = None if dt == torch.float16 else grad_tol(dt, M, N, T, a.abs().max().item())
                assert_close(gb, ga, dt, what + " gradient", tol=tol)
                # Each pair alone (a lone pair may take the scalar path, whose
                # exp2 / log2 differ from the vector polynomials in the last bit).
                for k in range(0, B, 5):
                    m, n = lengths[k].tolist()
                    one = softsw.align(xd.detach()[k, :m, :n], -0.5, T, gap_extend=ext,
                                       reduction=red)
                    assert_close(b[k], one, dt, f"{what} pair {k} alone",
                                 tol=None if dt == torch.float16 else score_tol(dt, M, N))
    print("OK")
""")


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["scalar", "baseline", "avx2", "avx512"])
def test_cpu_instruction_set_paths(seed, isa):
    """Float32 / float16 against the float64 kernel under each vector ISA cap
    (a cap above what the CPU has runs the best it has), 7 threads, linear and
    affine gaps."""
    here = os.path.dirname(__file__)
    env = dict(os.environ, SOFTSW_CPU_ISA=isa, SOFTSW_NUM_THREADS="7")
    proc = subprocess.run([sys.executable, "-c", ISA_SCRIPT, here, str(seed), isa],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")
