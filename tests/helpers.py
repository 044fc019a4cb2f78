"""Comparison of softsw against the float64 reference (values and gradients)."""
from __future__ import annotations

import os
import subprocess
import sys

import torch

import softsw
from conftest import (assert_close, grad_tol, grads, leaf, padding_mask, rand_lengths, randn,
                      score_tol)
from reference import ref_align

# ProbabilityRange<double>::kMaxLog2Weight (csrc/kernels/probability.h): the
# float64 range rule's limit, in log2 units of score / T.
DOUBLE_LOG2_LIMIT = 100.0


def _as_leaf(x, ref: bool):
    if not isinstance(x, torch.Tensor):
        return x
    y = x.detach()
    if ref:
        y = y.to(device="cpu", dtype=torch.float64)
    return y.clone().requires_grad_(True)


def compare_with_reference(gen, S, gap_open=-1.0, temperature=1.0, *, gap_extend=None,
                           lengths=None, reduction="max", check_grad=True):
    """Runs softsw.align on S (any dtype / device) and the float64 reference on
    the same values; checks the score and the gradients with respect to S and to
    every tensor gap argument (for a random per-pair cotangent). Returns the
    kernel's (score, [grad_S, grad_gap_open?, grad_gap_extend?]).
    Tolerances: conftest.score_tol / grad_tol."""
    dtype = S.dtype
    M, N = S.shape[-2], S.shape[-1]
    k = [_as_leaf(x, False) for x in (S, gap_open, gap_extend)]
    r = [_as_leaf(x, True) for x in (S, gap_open, gap_extend)]
    out = softsw.align(k[0], k[1], temperature, gap_extend=k[2], lengths=lengths,
                       reduction=reduction)
    ref = ref_align(r[0], r[1], temperature, gap_extend=r[2],
                    lengths=None if lengths is None else lengths.cpu(), reduction=reduction)
    assert out.dtype == dtype, f"score dtype {out.dtype} != scores dtype {dtype}"
    assert out.device == S.device
    assert out.shape == ref.shape, f"score shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert_close(out, ref, dtype, "score", tol=score_tol(dtype, M, N))
    finite = ref.detach()[torch.isfinite(ref.detach())]
    scale = finite.abs().max().item() if finite.numel() else 0.0
    gtol = grad_tol(dtype, M, N, float(temperature), scale)
    if not check_grad:
        return out, None
    w = randn(gen, *ref.shape, dtype=dtype)  # cotangent per pair, rounded to dtype
    k_t = [x for x in k if isinstance(x, torch.Tensor)]
    r_t = [x for x in r if isinstance(x, torch.Tensor)]
    kg = grads(out, k_t, w.to(S.device))
    rg = grads(ref, r_t, w.to(torch.float64))
    names = ["d/d scores", "d/d gap_open", "d/d gap_extend"]
    names = [n for n, x in zip(names, k) if isinstance(x, torch.Tensor)]
    for name, a, e, x in zip(names, kg, rg, k_t):
        assert a is not None, f"{name}: no gradient"
        assert a.dtype == x.dtype and a.shape == x.shape, f"{name}: {a.dtype} {tuple(a.shape)}"
        if e is None:  # the reference did not use it at all
            e = torch.zeros_like(a, dtype=torch.float64, device="cpu")
        assert_close(a, e, dtype, name, tol=gtol)
    if lengths is not None:
        mask = padding_mask(lengths, S.shape[1], S.shape[2]).to(S.device)
        g = kg[0]
        assert bool((g[mask] == 0).all()), "gradient is not exactly zero in the padding"
    return out, list(kg)


def first_and_second(S, gap, T, lengths, reduction, w, V, U, dtype, extend=None,
                     align=softsw.align):
    """First derivatives of sum_b w_b score_b, then the gradient of
    <V, dS> + <U, dgap> (+ <-U, dextend>) + <w_dot, w> with respect to S, the
    gap scores and w. `extend`: None for linear gaps. `align`: softsw.align,
    or the float64 reference (reference.ref_align)."""
    x = leaf(S.to(dtype))
    g = leaf(gap.to(dtype)) if isinstance(gap, torch.Tensor) else gap
    e = leaf(extend.to(dtype)) if isinstance(extend, torch.Tensor) else extend
    wt = leaf(w.to(dtype))
    out = align(x, g, T, gap_extend=e, lengths=lengths, reduction=reduction)
    ins = [x] + [t for t in (g, e) if isinstance(t, torch.Tensor)]
    first = torch.autograd.grad(out, ins, grad_outputs=wt, create_graph=True)
    loss = (first[0] * V.to(dtype)).sum()
    for k, f in enumerate(first[1:]):
        loss = loss + (f * U.to(dtype)).sum() * (1 - 2 * k)
    second = torch.autograd.grad(loss, ins + [wt])
    return list(first) + list(second), out.detach().abs().max().item()


def quantized(gen, *shape, dtype=torch.float64, device="cpu", step=0.125, scale=2.0):
    """Random scores on a dyadic grid (multiples of `step`): every sum the
    hard-mode (T = 0) recurrence forms is exact in float32 and float64 alike,
    so ties are exact, frequent, and resolved the same way by every dtype."""
    x = torch.randn(*shape, generator=gen, dtype=torch.float64) * scale
    return (torch.round(x / step) * step).to(dtype).to(device)


def scores_near_a_limit(gen, B, M, N, s):
    """(B, M, N) float64 scores at a range rule's limit `s` (caller units):
    pair 0 all s, pairs 1..7 between 3 s / 4 and s and above (Z grows about as
    fast as the rule allows on every step), the rest in [-s, s], a third of
    them within 1 % of -s or s.

    The rest are continuous: clamped to exactly -s or s, they made paths of
    equal scores, so two cells tied for the maximum up to rounding, and the
    max reduction's gradient (the first maximal cell's) depended on the last
    bit of each implementation's sum."""
    S = torch.full((B, M, N), s, dtype=torch.float64)
    S[1:8] = randn(gen, 7, M, N).abs() * s / 4 + s * 3 / 4
    spread = 1 - 0.01 * torch.rand(B - 8, M, N, generator=gen, dtype=torch.float64)
    S[8:] = randn(gen, B - 8, M, N).clamp(-1, 1) * spread * s
    return S


def scores_across_a_range_rule(gen, B, M, N, big, block=40.0):
    """(B, M, N) float64 standard normal scores with pairs pushed out of a
    range rule: pair 1 with one cell `big` (dominating), pair 5 with its last
    cell -`big` (far below), pair 7 scaled by 1e3, pair 9 with a block of
    `block` (rows 5..9 of an (M, N) of at least 10 x 20)."""
    S = randn(gen, B, M, N)
    S[1, 3, 10] = big
    S[5, M - 1, N - 1] = -big
    S[7] *= 1e3
    S[9, 5:10, 10:20] = block
    return S


def gap_tensor(gen, B, M, N, low, high):
    """Per-cell float64 gap scores, uniform in [-high, -low]."""
    return -(torch.rand(B, M, N, generator=gen, dtype=torch.float64) * (high - low) + low)


def small_padded_problem(gen, affine):
    """The gradcheck problem of the CPU float64 SIMD passes: a padded batch of
    17 (a group of 16 and one more) of 4 x 5 pairs with gap tensors. Returns
    the leaves (scores, gap_open[, gap_extend]) and, per reduction, the
    function of them that gradcheck / gradgradcheck differentiate."""
    B, M, N = 17, 4, 5
    lengths = rand_lengths(gen, B, M, N)
    S = randn(gen, B, M, N)
    gaps = [gap_tensor(gen, B, M, N, 0.2, 1.2)] + ([gap_tensor(gen, B, M, N, 0.1, 0.5)] if affine
                                                   else [])

    def align_of(reduction):
        def f(x, *g):
            return softsw.align(x, g[0], 0.9, gap_extend=g[1] if affine else None,
                                lengths=lengths, reduction=reduction)
        return f
    return (leaf(S), *[leaf(g) for g in gaps]), align_of


def outputs_under_isa(isa, path, script, payload):
    """What `script` saves (to its argv[2]) from `payload` (loaded from its
    argv[1]) in a process under SOFTSW_CPU_ISA=isa, 3 threads: the same op on
    the same inputs under each instruction set."""
    payload_file, out_file = path / "payload.pt", path / f"{isa}.pt"
    torch.save(payload, payload_file)
    env = dict(os.environ, SOFTSW_CPU_ISA=isa, SOFTSW_NUM_THREADS="3")
    proc = subprocess.run([sys.executable, "-c", script, str(payload_file), str(out_file)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, \
        f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith("OK")
    return torch.load(out_file)


def assert_simd_ran(isa, cases, simd, scalar, name):
    """`simd`, `scalar`: per case, {output name: tensor} of the same op on the
    same inputs under `isa` and under SOFTSW_CPU_ISA=scalar. Both match each
    case's float64 reference ("want": {output name: tensor}, "tol"), and
    output `name` differs between them in the last bits: the SIMD passes ran."""
    for c, a, b in zip(cases, simd, scalar):
        for out, want in c["want"].items():
            assert_close(a[out], want, torch.float64, f"{isa} {out} {c['what']}", tol=c["tol"])
            assert_close(b[out], want, torch.float64, f"scalar {out} {c['what']}", tol=c["tol"])
        assert not torch.equal(a[name], b[name]), \
            f"{c['what']}: {name}: the scalar passes' bits: the SIMD passes did not run"
