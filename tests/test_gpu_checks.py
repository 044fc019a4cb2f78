"""GPU checks: the CUDA kernels on the shapes, gap kinds and corner cases that exercise
their work split (one or four rows per lane, several bands, a last band of one row),
against the float64 reference of tests/reference.py where it is fast enough, and against
the float64 CPU kernel (which the rest of the suite checks against that reference) where
it is not. Marked `cuda`; skipped without a GPU.

    pytest tests/test_gpu_checks.py                     # on a GPU machine
    SOFTSW_GPU_CHECKS_DEVICE=cpu pytest tests/test_gpu_checks.py -m cuda
                                                        # dry run of the checks themselves:
                                                        # the CPU kernels stand in for CUDA
    SOFTSW_GPU_CHECKS_QUICK=1 ...                       # fewer shapes

Tolerances are conftest's (score_tol, grad_tol, hvp_tol). Where both sides compute the
hard (T = 0) recurrence in the same dtype, the results must be equal bit for bit: it is
a chain of additions and maxima, done in the same order on every backend.
"""
import math
import os

import pytest
import torch

import softsw
from conftest import (HAS_CUDA, TOL, assert_close, grad_tol, hvp_tol, padding_mask,
                      rand_lengths, randn, score_tol)
from helpers import compare_with_reference, quantized
from test_gradcheck import CHECK

DEVICE = os.environ.get("SOFTSW_GPU_CHECKS_DEVICE", "cuda")
QUICK = os.environ.get("SOFTSW_GPU_CHECKS_QUICK", "") == "1"

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(DEVICE == "cuda" and not HAS_CUDA,
                       reason="CUDA is not available on this machine"),
]

REDUCTIONS = ["max", "soft"]
HALF = [torch.float16, torch.bfloat16]


def shapes(full, quick_count):
    return full[:quick_count] if QUICK else full


def on_device(x, dtype):
    return x.to(DEVICE, dtype) if isinstance(x, torch.Tensor) else x


def rounded(x, dtype):
    """x as `dtype` would hold it, in float64 (the reference sees the rounded inputs)."""
    return x.to(dtype).double() if isinstance(x, torch.Tensor) else x


def exact(actual, expected) -> bool:
    """Equal, NaN included, after moving to the CPU."""
    a, e = actual.detach().cpu(), expected.detach().cpu()
    return a.shape == e.shape and torch.equal(torch.isnan(a), torch.isnan(e)) and \
        torch.equal(a[~torch.isnan(a)], e[~torch.isnan(e)])


class Cases:
    """Runs many sub-cases in one test and fails with the list of those that failed."""

    def __init__(self):
        self.failed = []

    def check(self, description, fn):
        try:
            fn()
        except AssertionError as err:
            self.failed.append(f"{description}: {str(err).splitlines()[0][:300]}")

    def done(self):
        assert not self.failed, f"{len(self.failed)} failing cases:\n" + "\n".join(self.failed)


# ---------------------------------------------------------------------------
# Linear gaps: small shapes against the reference, bands against the CPU kernel.
# ---------------------------------------------------------------------------

SMALL_SHAPES = [(2, 1, 1), (2, 1, 9), (2, 9, 1), (3, 31, 33), (2, 100, 7), (2, 64, 64),
                (1, 130, 70), (1, 300, 45)]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("shape", shapes(SMALL_SHAPES, 4), ids=str)
def test_linear_small_shapes_vs_reference(gen, shape, T, reduction):
    S = randn(gen, *shape, device=DEVICE)
    compare_with_reference(gen, S, -0.3 if T else -2.0, T, reduction=reduction)


@pytest.mark.parametrize("case", [
    (4, 140, 40, 1.0, "max", torch.float64, True),
    (4, 140, 40, 1.0, "soft", torch.float64, True),
    (3, 40, 50, 0.5, "max", torch.float32, False),
    (3, 200, 50, 5.0, "soft", torch.float32, False),
], ids=str)
def test_linear_lengths_and_float32_vs_reference(gen, case):
    B, M, N, T, reduction, dtype, use_lengths = case
    lengths = rand_lengths(gen, B, M, N, allow_empty=True).to(DEVICE) if use_lengths else None
    S = randn(gen, B, M, N, dtype=dtype, device=DEVICE)
    compare_with_reference(gen, S, -1.0, T, lengths=lengths, reduction=reduction)


def close(actual, expected, dtype, tol) -> bool:
    try:
        assert_close(actual, expected, dtype, tol=tol)
    except AssertionError:
        return False
    return True


def assert_grad_close(actual, reference, same_dtype, dtype, what, tol, reduction):
    """A gradient against the float64 `reference`. Under "max" it is the gradient of one best
    cell, and two cells within rounding of each other may swap in float32 (seen:
    SOFTSW_TEST_SEED=3757319228, test_affine_vs_cpu_kernel (2, 64, 64), T 1, gaps (-1, -1),
    kinds ()/BMN: the CPU kernel in float32 differs from float64 by 0.89 there). So in float32
    and 16 a miss passes only where the CPU kernel in the same dtype (`same_dtype()`, computed
    then) misses the reference too, and the device matches that one."""
    if reduction != "max" or dtype == torch.float64 or close(actual, reference, dtype, tol):
        assert_close(actual, reference, dtype, what, tol=tol)
        return
    same = same_dtype()
    assert not close(same, reference, dtype, tol), \
        f"{dtype}: {what} differs from float64 where the CPU kernel's does not"
    assert_close(actual, same, dtype, f"{what} (a near tie)", tol=tol)


BAND_SHAPES = [(2, 300, 260, False), (1, 520, 300, False), (2, 257, 263, False),
               (3, 400, 300, True), (1, 129, 1024, False)]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("shape", shapes(BAND_SHAPES, 2), ids=str)
def test_linear_bands_vs_cpu_kernel(gen, shape, T, reduction):
    """Score and expected alignment on shapes of several bands, both rows-per-lane
    regimes. T > 0: against the float64 CPU kernel on the same rounded inputs;
    T = 0: equal to the CPU kernel in the same dtype."""
    B, M, N, use_lengths = shape
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N) if use_lengths else None
    cases = Cases()
    for dtype in (torch.float64, torch.float32):
        Sd = rounded(S, dtype)
        out_s, out_a = softsw.alignment(Sd.to(DEVICE, dtype), -0.7, T, reduction=reduction,
                                        lengths=None if lengths is None else lengths.to(DEVICE))

        def check(dtype=dtype, Sd=Sd, out_s=out_s, out_a=out_a):
            if T == 0:
                ref_s, ref_a = softsw.alignment(Sd.to(dtype), -0.7, T, reduction=reduction,
                                                lengths=lengths)
                assert exact(out_s, ref_s), "hard score differs from the CPU kernel"
                assert exact(out_a, ref_a), "traceback differs from the CPU kernel"
                return
            ref_s, ref_a = softsw.alignment(Sd, -0.7, T, reduction=reduction, lengths=lengths)
            assert_close(out_s, ref_s, dtype, "score", tol=score_tol(dtype, M, N))
            assert_grad_close(out_a, ref_a,
                              lambda: softsw.alignment(Sd.to(dtype), -0.7, T, reduction=reduction,
                                                       lengths=lengths)[1],
                              dtype, "expected alignment",
                              grad_tol(dtype, M, N, T, ref_s.abs().max().item()), reduction)

        cases.check(f"{dtype}", check)
    cases.done()


# ---------------------------------------------------------------------------
# Affine gaps against the CPU kernel: every broadcast kind of gap tensor.
# ---------------------------------------------------------------------------

# (open kind, extend kind): each broadcast shape appears once on each side.
GAP_KINDS = [("float", "float"), ("()", "BMN"), ("B", "B1N"), ("BM1", "B"), ("B1N", "()"),
             ("BMN", "BM1")]
AFFINE_SHAPES = [(2, 1, 1), (2, 1, 9), (2, 9, 1), (3, 31, 33), (2, 100, 7), (2, 300, 20),
                 (2, 64, 64), (2, 129, 5), (1, 33, 40), (2, 257, 40)]
GAP_SETS = [(-3.0, -1.0), (-1.0, -1.0), (-0.5, -2.0), (-math.inf, -1.0), (-4.0, -0.1)]


def make_gap(gen, kind, center, B, M, N):
    if kind == "float":
        return center
    shape = {"()": (), "B": (B,), "BM1": (B, M, 1), "B1N": (B, 1, N), "BMN": (B, M, N)}[kind]
    return center + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)


def run(S, go, ge, T, lengths, reduction, w, device, dtype):
    """Score and the gradients of sum(w * score) for scores and every tensor gap."""
    leaves = [S.detach().to(device, dtype).requires_grad_()]
    gaps = []
    for g in (go, ge):
        if isinstance(g, torch.Tensor):
            leaves.append(g.detach().to(device, dtype).requires_grad_())
            gaps.append(leaves[-1])
        else:
            gaps.append(g)
    out = softsw.align(leaves[0], gaps[0], T, gap_extend=gaps[1], reduction=reduction,
                       lengths=None if lengths is None else lengths.to(device))
    (out * w.to(device, dtype)).sum().backward()
    return out.detach(), [x.grad for x in leaves]


def run_inference(S, go, ge, T, lengths, reduction, dtype):
    """The score of a forward that keeps no state (its own work split on CUDA)."""
    with torch.no_grad():
        return softsw.align(S.to(DEVICE, dtype), on_device(go, dtype), T,
                            gap_extend=on_device(ge, dtype), reduction=reduction,
                            lengths=None if lengths is None else lengths.to(DEVICE))


def affine_case(gen, B, M, N, T, reduction, gaps, kinds, use_lengths, nan_padding):
    S = randn(gen, B, M, N)
    go = make_gap(gen, kinds[0], gaps[0], B, M, N)
    ge = make_gap(gen, kinds[1], gaps[1], B, M, N)
    lengths = rand_lengths(gen, B, M, N, allow_empty=True) if use_lengths else None
    if lengths is not None and nan_padding:  # what lies beyond the lengths never matters
        mask = padding_mask(lengths, M, N)
        S = S.masked_fill(mask, math.nan)
        go, ge = (g.masked_fill(mask, math.nan) if isinstance(g, torch.Tensor) and g.dim() == 3
                  and g.shape == (B, M, N) else g for g in (go, ge))
    w = 0.5 + torch.rand(B, generator=gen, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        S_d, go_d, ge_d = (rounded(x, dtype) for x in (S, go, ge))
        out, grads = run(S_d, go_d, ge_d, T, lengths, reduction, w, DEVICE, dtype)
        # T = 0: the CPU kernel in the same dtype, exactly (gap tensors broadcast over
        # cells get their gradient as autograd's sum over cells, to rounding);
        # T > 0: the float64 CPU kernel on the rounded inputs.
        ref_dtype = dtype if T == 0 else torch.float64
        ref, ref_grads = run(S_d, go_d, ge_d, T, lengths, reduction, w, "cpu", ref_dtype)
        if T == 0:
            assert exact(out, ref), f"{dtype}: hard score differs from the CPU kernel"
            assert exact(grads[0], ref_grads[0]), f"{dtype}: traceback differs"
            for g, r in zip(grads[1:], ref_grads[1:]):
                assert_close(g, r, dtype, "gap gradient (summed over cells)")
        else:
            scale = ref[torch.isfinite(ref)].abs().max().item() if bool(
                torch.isfinite(ref).any()) else 0.0
            assert_close(out, ref, dtype, "score", tol=score_tol(dtype, M, N))
            tol = grad_tol(dtype, M, N, T, scale)
            for k, (name, g, r) in enumerate(zip(["d/d scores", "d/d gap_open", "d/d gap_extend"],
                                                 grads, ref_grads)):
                assert_grad_close(g, r, lambda k=k: run(S_d, go_d, ge_d, T, lengths, reduction, w,
                                                        "cpu", dtype)[1][k],
                                  dtype, name, tol, reduction)
        inference = run_inference(S_d, go_d, ge_d, T, lengths, reduction, dtype)
        # At T > 0 an inference forward may run in the probability domain (other
        # arithmetic, closer to float64): equal to rounding; max-plus exactly.
        if T == 0:
            assert exact(inference, out), f"{dtype}: inference forward differs"
        else:
            assert_close(inference, out, dtype, "inference score", tol=score_tol(dtype, M, N))
        if lengths is not None:
            mask = padding_mask(lengths, M, N).to(DEVICE)
            assert bool((grads[0][mask] == 0).all()), f"{dtype}: gradient in the padding"


@pytest.mark.parametrize("gaps", GAP_SETS, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("shape", shapes(AFFINE_SHAPES, 7), ids=str)
def test_affine_vs_cpu_kernel(gen, shape, T, reduction, gaps):
    """Values, gradients (scores and every tensor gap), the inference forward and zero
    gradients in the padding (which holds NaN in every other case), for every broadcast
    kind of gap_open and gap_extend, with and without lengths."""
    B, M, N = shape
    cases = Cases()
    kinds_list = GAP_KINDS[:2] if QUICK else GAP_KINDS
    for k, kinds in enumerate(kinds_list):
        for use_lengths in (False, True):
            cases.check(f"kinds={kinds[0]}/{kinds[1]} lengths={use_lengths}",
                        lambda: affine_case(gen, B, M, N, T, reduction, gaps, kinds,
                                            use_lengths, nan_padding=use_lengths and k % 2 == 0))
    cases.done()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("shape", shapes([(2, 1, 9), (3, 31, 33), (2, 300, 20), (2, 64, 64)], 2),
                         ids=str)
def test_affine_with_equal_gaps_is_linear(gen, shape, T, reduction):
    """gap_extend == gap_open, passed as tensors so that the affine kernels run, gives
    the linear result: scores, d/d scores, and d/d gap (the sum of the open and extend
    gradients of a shared tensor)."""
    B, M, N = shape
    S = randn(gen, B, M, N)
    cases = Cases()
    for g in (-1.0, -0.4):
        for use_lengths in (False, True):
            lengths = rand_lengths(gen, B, M, N).to(DEVICE) if use_lengths else None
            for dtype in (torch.float64, torch.float32):
                def check(g=g, lengths=lengths, dtype=dtype):
                    shared = torch.full((B,), g, dtype=dtype, device=DEVICE, requires_grad=True)
                    Sa = S.to(DEVICE, dtype).detach().clone().requires_grad_()
                    out_a = softsw.align(Sa, shared, T, gap_extend=shared, lengths=lengths,
                                         reduction=reduction)
                    out_a.sum().backward()
                    linear = torch.full((B,), g, dtype=dtype, device=DEVICE, requires_grad=True)
                    Sl = S.to(DEVICE, dtype).detach().clone().requires_grad_()
                    out_l = softsw.align(Sl, linear, T, lengths=lengths, reduction=reduction)
                    out_l.sum().backward()
                    scale = out_l.abs().max().item()
                    assert_close(out_a, out_l, dtype, "score", tol=score_tol(dtype, M, N))
                    gtol = grad_tol(dtype, M, N, T, scale)
                    assert_close(Sa.grad, Sl.grad, dtype, "d/d scores", tol=gtol)
                    assert_close(shared.grad, linear.grad, dtype, "d/d gap", tol=gtol)

                cases.check(f"g={g} lengths={use_lengths} {dtype}", check)
    cases.done()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32] + HALF, ids=str)
@pytest.mark.parametrize("shape", shapes([(2, 9, 1), (3, 31, 33), (2, 300, 20), (2, 64, 64),
                                          (2, 200, 150)], 3), ids=str)
def test_affine_hard_mode_with_ties_equals_cpu_kernel(gen, shape, dtype):
    """Quantized inputs (many exact ties): the hard score and traceback equal the CPU
    kernel's in the same dtype, bit for bit, so every backend breaks ties alike."""
    B, M, N = shape
    cases = Cases()
    for reduction in REDUCTIONS:
        for kinds in (("float", "float"), ("BM1", "BMN")):
            for use_lengths in (False, True):
                def check(reduction=reduction, kinds=kinds, use_lengths=use_lengths):
                    S = quantized(gen, B, M, N, step=0.25, scale=2.0)
                    go, ge = (make_gap(gen, kind, center, B, M, N) for kind, center
                              in zip(kinds, (-1.25, -0.375)))
                    go, ge = (torch.round(g * 8) / 8 if isinstance(g, torch.Tensor) else g
                              for g in (go, ge))
                    lengths = rand_lengths(gen, B, M, N) if use_lengths else None
                    w = torch.ones(B, dtype=torch.float64)
                    out, grads = run(S, go, ge, 0.0, lengths, reduction, w, DEVICE, dtype)
                    ref, ref_grads = run(S, go, ge, 0.0, lengths, reduction, w, "cpu", dtype)
                    assert exact(out, ref), "hard score"
                    assert all(exact(a, b) for a, b in zip(grads, ref_grads)), "gradients"

                cases.check(f"{reduction} kinds={kinds} lengths={use_lengths}", check)
    cases.done()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_invalid_lengths_give_nan_for_that_pair_only(affine, T, reduction):
    """Out-of-range lengths reach the kernels only past the Python checks (tracing,
    CUDA graphs): that pair's outputs are NaN, the others are the CPU kernel's."""
    B, M, N = 3, 40, 30
    gen = torch.Generator().manual_seed(7)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([[M, N], [M + 1, 5], [20, 17]])
    go = torch.full((B, M, N), -1.0, dtype=torch.float64)
    ge = torch.full((B, M, N), -0.3, dtype=torch.float64) if affine else None
    results = {}
    for device in ("cpu", DEVICE):
        args = (S.to(device), go.to(device), None if ge is None else ge.to(device), -1.0, -0.3,
                affine, T, lengths.to(device), {"max": 0, "soft": 1}[reduction])
        score, hidden, argmax, total = torch.ops.softsw.forward(*args, True)
        grads = torch.ops.softsw.backward(torch.ones(B, dtype=torch.float64, device=device),
                                          *args, hidden, argmax, total)
        results[device] = [score] + [g for g in grads if g.numel()]
    for k, (out, ref) in enumerate(zip(results[DEVICE], results["cpu"])):
        assert bool(torch.isnan(out[1]).all()), f"output {k}: pair 1 is not NaN"
        assert not bool(torch.isnan(out[0]).any() or torch.isnan(out[2]).any()), \
            f"output {k}: NaN outside pair 1"
        assert_close(out, ref, torch.float64, f"output {k}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("T", [1.0, 0.0])
def test_nan_inside_one_pair_matches_cpu_kernel(gen, T, reduction, dtype):
    B, M, N = 2, 140, 37
    S = randn(gen, B, M, N, dtype=dtype).double()
    S[0, 70, 20] = math.nan
    go = rounded(make_gap(gen, "B1N", -1.0, B, M, N), dtype)
    ge = rounded(make_gap(gen, "BM1", -0.3, B, M, N), dtype)
    w = torch.ones(B, dtype=torch.float64)
    out, grads = run(S, go, ge, T, None, reduction, w, DEVICE, dtype)
    ref, ref_grads = run(S, go, ge, T, None, reduction, w, "cpu",
                         dtype if T == 0 else torch.float64)
    assert bool(torch.isnan(out[0])) and not bool(torch.isnan(out[1]))
    scale = ref[1].abs().item()
    assert_close(out, ref, dtype, "score", tol=0.0 if T == 0 else score_tol(dtype, M, N))
    for g, r in zip(grads, ref_grads):
        assert_close(g, r, dtype, "gradient", tol=TOL[dtype] if T == 0
                     else grad_tol(dtype, M, N, T, scale))


# ---------------------------------------------------------------------------
# Double backward (the Hessian-vector product) through the raw ops.
# ---------------------------------------------------------------------------

DOUBLE_SHAPES = [(1, 1, 1), (2, 5, 7), (3, 31, 33), (2, 70, 40), (2, 300, 20), (4, 100, 9),
                 (2, 140, 260), (1, 300, 257), (2, 33, 300)]


def gap_for_ops(gap, direction, device, dtype):
    """(tensor or None, float value, direction or None) of one gap argument of the ops; a
    broadcast gap is passed as an expanded (stride 0) view, as autograd passes it."""
    if not isinstance(gap, torch.Tensor):
        return None, float(gap), None
    if gap.stride() != gap.contiguous().stride():
        base = gap[:, : (1 if gap.stride(1) == 0 else None), : (1 if gap.stride(2) == 0 else None)]
        tensor = base.to(device, dtype).expand(gap.shape)
    else:
        tensor = gap.to(device, dtype)
    return tensor, 0.0, direction.to(device, dtype).contiguous()


def double_backward_ops(device, dtype, S, go, ge, T, lengths, reduction, W, Wo, We, gs):
    """forward + double_backward through the raw ops: (grad_grad_score, hvp for scores,
    for gap_open, for gap_extend; None for a float gap)."""
    scores = S.to(device, dtype)
    go_t, go_v, dir_go = gap_for_ops(go, Wo, device, dtype)
    affine = ge is not None
    ge_t, ge_v, dir_ge = gap_for_ops(ge, We, device, dtype) if affine else (None, go_v, None)
    L = None if lengths is None else lengths.to(device)
    red = {"max": 0, "soft": 1}[reduction]
    score, hidden, argmax, total = torch.ops.softsw.forward(
        scores, go_t, ge_t, go_v, ge_v, affine, T, L, red, True)
    ggs, h_s, h_o, h_e = torch.ops.softsw.double_backward(
        W.to(device, dtype).contiguous(), dir_go, dir_ge, gs.to(device, dtype), scores, go_t,
        ge_t, go_v, ge_v, affine, T, L, red, hidden, argmax, total)
    return (ggs, h_s, h_o if go_t is not None else None, h_e if ge_t is not None else None)


def double_backward_case(gen, B, M, N, T, reduction, gap_kind, use_lengths, dtype, affine,
                         deterministic):
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    if gap_kind == "float":
        go, ge = -0.6, -0.25
    elif gap_kind == "full":
        go = -0.6 + 0.3 * torch.randn(B, M, N, generator=gen, dtype=torch.float64)
        ge = -0.25 + 0.1 * torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    else:  # "bcast": (B, 1, N), as an expanded view
        go = (-0.6 + 0.3 * torch.randn(B, 1, N, generator=gen, dtype=torch.float64)).expand(B, M, N)
        ge = (-0.25 + 0.1 * torch.randn(B, 1, N, generator=gen, dtype=torch.float64)).expand(B, M, N)
    ge = ge if affine else None
    W, Wo, We = (torch.randn(B, M, N, generator=gen, dtype=torch.float64) for _ in range(3))
    gs = torch.randn(B, generator=gen, dtype=torch.float64)
    lengths = rand_lengths(gen, B, M, N, allow_empty=True) if use_lengths else None

    def rnd(x):  # the reference sees the inputs rounded to dtype; views stay views
        if isinstance(x, torch.Tensor) and x.stride() != x.contiguous().stride():
            return x[:, :1, :].to(dtype).double().expand(x.shape)
        return rounded(x, dtype)

    inputs = [rnd(x) for x in (S, go, ge)] + [rnd(x) for x in (W, Wo, We, gs)]
    args = (inputs[0], inputs[1], inputs[2], T, lengths, reduction, *inputs[3:])
    ref = double_backward_ops("cpu", torch.float64, *args)
    out = double_backward_ops(DEVICE, dtype, *args)
    score = softsw.align(inputs[0], inputs[1], T, gap_extend=inputs[2], lengths=lengths,
                         reduction=reduction)
    scale = score.abs().max().item()
    htol = hvp_tol(dtype, M, N, T, scale)
    # grad_grad_score = <W, expected alignment> per pair: each cell's error is within
    # grad_tol, weighted by |W| there.
    ggs_tol = grad_tol(dtype, M, N, T, scale) * inputs[3].abs().sum().item()
    ggs_ref, ggs = ref[0].double(), out[0].double().cpu()
    assert bool(((ggs - ggs_ref).abs() <= ggs_tol + TOL[dtype]).all()), \
        f"grad_grad_score {ggs.tolist()} vs {ggs_ref.tolist()} (tol {ggs_tol:.2e})"
    for name, o, r in zip(["hvp scores", "hvp gap_open", "hvp gap_extend"], out[1:], ref[1:]):
        assert (o is None) == (r is None), name
        if o is not None:
            assert_close(o, r, dtype, name, tol=htol)
    if deterministic:
        again = double_backward_ops(DEVICE, dtype, *args)
        assert all((a is None and b is None) or exact(a, b) for a, b in zip(out, again)), \
            "two runs differ"


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("shape", shapes(DOUBLE_SHAPES, 5), ids=str)
def test_double_backward_ops_vs_cpu_kernel(gen, shape, affine):
    """The Hessian-vector product of the ops (scores, float gaps, full and broadcast gap
    tensors, lengths, both reductions, T in {1, 0.5, 0}) against the float64 CPU kernel
    on the same rounded inputs; float64 twice, bit for bit."""
    B, M, N = shape
    cases = Cases()
    for T in (1.0, 0.5, 0.0):
        for reduction in REDUCTIONS:
            for gap_kind in ("float", "full", "bcast"):
                for use_lengths in ((False, True) if B > 1 else (False,)):
                    cases.check(f"T={T} {reduction} gap={gap_kind} lengths={use_lengths} f64",
                                lambda: double_backward_case(
                                    gen, B, M, N, T, reduction, gap_kind, use_lengths,
                                    torch.float64, affine, deterministic=DEVICE != "cpu"))
            low = [torch.float32] + (HALF if T > 0 and reduction == "soft" else [])
            for dtype in low:
                cases.check(f"T={T} {reduction} gap=full {dtype}",
                            lambda: double_backward_case(gen, B, M, N, T, reduction, "full",
                                                         B > 1, dtype, affine, False))
    cases.done()


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("shape", shapes([(None, 1, 1), (1, 1, 1), (2, 5, 7), (3, 31, 33),
                                          (2, 70, 40), (2, 300, 20), (1, 140, 260)], 4), ids=str)
def test_gradgradcheck_on_device(gen, shape, affine):
    """torch.autograd.gradgradcheck in float64 through softsw.align: a float gap or a
    (B, M, N) gap tensor, lengths, both reductions, T in {1, 0.5, 0}; fast mode (random
    projections) above 200 input elements."""
    B, M, N = shape
    size = (M, N) if B is None else (B, M, N)
    cases = Cases()
    for T in (1.0, 0.5, 0.0):
        for reduction in REDUCTIONS:
            for gap_tensor in (False, True):
                for use_lengths in ((False, True) if B is not None and B > 1 else (False,)):
                    S = randn(gen, *size, device=DEVICE).detach().clone().requires_grad_()
                    inputs = [S]
                    if gap_tensor:
                        inputs.append(randn(gen, *size, device=DEVICE, scale=0.3, shift=-0.6)
                                      .requires_grad_())
                    lengths = rand_lengths(gen, B, M, N).to(DEVICE) if use_lengths else None

                    def f(s, gap=None, T=T, reduction=reduction, lengths=lengths):
                        extend = (-0.25 if gap is None else gap * 0.4) if affine else None
                        return softsw.align(s, -0.6 if gap is None else gap, T, lengths=lengths,
                                            reduction=reduction, gap_extend=extend)

                    fast = sum(x.numel() for x in inputs) > 200

                    def check(f=f, inputs=tuple(inputs), fast=fast):
                        try:
                            torch.autograd.gradgradcheck(f, inputs, fast_mode=fast, **CHECK)
                        except RuntimeError as err:  # gradgradcheck's way of failing
                            raise AssertionError(str(err)) from err

                    cases.check(f"T={T} {reduction} gap_tensor={gap_tensor} "
                                f"lengths={use_lengths} fast={fast}", check)
    cases.done()
