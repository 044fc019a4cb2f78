"""CPU affine gaps in hard mode (T = 0) on SIMD lanes.

With a float accumulator (float32, float16, bfloat16) the T = 0 affine forward
runs 16 pairs to a SIMD group (forward_simd.h: recurrence.h's AffineCell on
vector lanes); float64 runs the scalar loop. Max-plus on dyadic scores is exact
in every dtype, so the two must agree to the bit: scores, argmax ties (the
first maximal cell in row-major order), the state the backward reads (its
traceback), NaN kept to its own pair, garbage in the padding ignored, per-cell
gap scores, every group size."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import softsw
from conftest import fill_padding, leaf, rand_lengths
from helpers import quantized


def hard_affine(S, open_, extend, lengths, reduction="max"):
    x = leaf(S)
    o = leaf(open_) if isinstance(open_, torch.Tensor) else open_
    e = leaf(extend) if isinstance(extend, torch.Tensor) else extend
    out = softsw.align(x, o, 0.0, gap_extend=e, lengths=lengths, reduction=reduction)
    ins = [t for t in (x, o, e) if isinstance(t, torch.Tensor)]
    grads = torch.autograd.grad(out.sum(), ins)
    return [out.detach()] + [g.detach() for g in grads]


def batch(gen, B, M, N, dtype, allow_empty=True):
    lengths = rand_lengths(gen, B, M, N, allow_empty=allow_empty)
    S = fill_padding(quantized(gen, B, M, N, step=0.25), lengths, gen)
    return S, lengths


def assert_same(a, b, what):
    for k, (x, y) in enumerate(zip(a, b)):
        x, y = x.double(), y.double()
        same = (x == y) | (torch.isnan(x) & torch.isnan(y))
        assert bool(same.all()), f"{what}: output {k} differs at {torch.nonzero(~same)[:5].tolist()}"


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("B", [2, 7, 16, 23, 40])
def test_groups_equal_float64(gen, B, reduction):
    """float32 (SIMD groups) against float64 (scalar) bit for bit: scores and
    the gradients (the traceback of the argmax's first optimal path)."""
    M, N = 21, 26
    S, lengths = batch(gen, B, M, N, torch.float32)
    for open_, extend in ((-2.0, -0.5), (-0.75, -1.25), (-11.0, -1.0)):
        a = hard_affine(S.float(), open_, extend, lengths, reduction)
        e = hard_affine(S, open_, extend, lengths, reduction)
        assert_same(a, e, f"B={B} gaps {open_}/{extend}")


def test_nan_stays_in_its_pair(gen):
    B, M, N = 20, 15, 17
    S, lengths = batch(gen, B, M, N, torch.float32, allow_empty=False)
    m, n = lengths[4].tolist()
    S[4, m // 2, n // 2] = float("nan")
    a = hard_affine(S.float(), -1.0, -0.25, lengths)
    e = hard_affine(S, -1.0, -0.25, lengths)
    assert torch.isnan(a[0][4])
    assert not torch.isnan(a[0][torch.arange(B) != 4]).any()
    assert_same(a, e, "NaN pair")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_gap_tensors_and_half_types(gen, dtype):
    """Per-cell open and extend scores (dyadic: exact in every dtype), half
    scores accumulated in float32."""
    B, M, N = 18, 13, 19
    S, lengths = batch(gen, B, M, N, dtype)
    go = -(torch.randint(1, 9, (B, M, N), generator=gen).double() / 4)
    ge = -(torch.randint(0, 5, (B, M, N), generator=gen).double() / 4)
    for x in (torch.float32, dtype):
        a = hard_affine(S.to(x), go.to(x), ge.to(x), lengths)
        e = hard_affine(S, go, ge, lengths)
        assert_same(a, e, f"{x} gap tensors")


ISA_SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import test_cpu_affine_hard as t
    gen = torch.Generator().manual_seed(int(sys.argv[2]))
    S, lengths = t.batch(gen, 37, 33, 29, torch.float32)
    for red in ("max", "soft"):
        a = t.hard_affine(S.float(), -1.5, -0.5, lengths, red)
        e = t.hard_affine(S, -1.5, -0.5, lengths, red)
        t.assert_same(a, e, red)
    print("OK")
""")


@pytest.mark.parametrize("isa", ["scalar", "baseline", "avx2"])
def test_instruction_set_paths(seed, isa):
    here = os.path.dirname(__file__)
    env = dict(os.environ, SOFTSW_CPU_ISA=isa, SOFTSW_NUM_THREADS="3")
    proc = subprocess.run([sys.executable, "-c", ISA_SCRIPT, here, str(seed)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")
