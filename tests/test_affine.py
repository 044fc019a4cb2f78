"""Affine gaps: the three-state recurrence (docs/semantics.md) and tensor gap
scores broadcast to (B, M, N), values and gradients against the
float64 reference, gradcheck per broadcast shape."""
import pytest
import torch

import softsw
from conftest import (DEVICES, assert_close, fill_padding, grad_tol, grads, leaf, rand_lengths,
                      randn, score_tol)
from helpers import compare_with_reference, quantized

B, M, N = 2, 21, 18
GAP_SHAPES = {
    "scalar": (),
    "B": (B,),
    "B11": (B, 1, 1),
    "BM1": (B, M, 1),
    "B1N": (B, 1, N),
    "BMN": (B, M, N),
}


def gap_tensor(gen, shape, center, device, dtype=torch.float64, spread=0.3):
    return randn(gen, *shape, dtype=dtype, device=device, scale=spread, shift=center)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("gshape", list(GAP_SHAPES), ids=list(GAP_SHAPES))
def test_gap_tensor_shapes_vs_reference(device, gen, gshape, affine, T, reduction):
    shape = GAP_SHAPES[gshape]
    S = randn(gen, B, M, N, device=device)
    go = gap_tensor(gen, shape, -1.0, device)
    ge = gap_tensor(gen, shape, -0.3, device, spread=0.1) if affine else None
    _, g = compare_with_reference(gen, S, go, T, gap_extend=ge, reduction=reduction)
    assert g[1].shape == go.shape
    if affine:
        assert g[2].shape == ge.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [0.1, 1.0, 5.0, 0.0])
@pytest.mark.parametrize("gaps", [(-1.0, -0.2), (-2.0, -0.3), (-0.3, -2.0)], ids=str)
def test_affine_float_gaps_vs_reference(device, gen, gaps, T, reduction):
    S = randn(gen, 2, 31, 33, device=device)
    compare_with_reference(gen, S, gaps[0], T, gap_extend=gaps[1], reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (7, 1), (40, 6)], ids=str)
def test_affine_thin_shapes_vs_reference(device, gen, shape):
    S = randn(gen, 2, *shape, device=device)
    for T, reduction in ((1.0, "max"), (0.5, "soft"), (0.0, "max")):
        compare_with_reference(gen, S, -0.8, T, gap_extend=-0.1, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_affine_64x64_vs_reference(device, gen, reduction):
    S = randn(gen, 1, 64, 64, device=device)
    compare_with_reference(gen, S, -1.0, 0.7, gap_extend=-0.25, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.0])
def test_affine_float32_vs_reference(device, gen, T, reduction):
    if T == 0:
        # Scores and gaps on a dyadic grid: every hard-mode sum is exact in float32, so ties
        # (frequent) and near-ties resolve as in the float64 reference. (Random float gaps
        # made a near-tie round the other way in float32 for some seeds: another optimal
        # path, a gradient 1 apart.)
        S, gaps = quantized(gen, 2, 33, 29, dtype=torch.float32, device=device), (-1.25, -0.375)
        go = quantized(gen, 2, 33, 1, dtype=torch.float32, device=device, scale=0.3) + gaps[0]
    else:
        S, gaps = randn(gen, 2, 33, 29, dtype=torch.float32, device=device), (-1.0, -0.3)
        go = gap_tensor(gen, (2, 33, 1), gaps[0], device, dtype=torch.float32)
    compare_with_reference(gen, S, go, T, gap_extend=gaps[1], reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_affine_padded_batch(device, gen, T, reduction):
    """Padding of scores AND of (B, M, N) gap tensors holds garbage; it must not matter."""
    b, m, n = 3, 19, 23
    lengths = rand_lengths(gen, b, m, n)
    S = fill_padding(randn(gen, b, m, n), lengths, gen).to(device)
    go = fill_padding(gap_tensor(gen, (b, m, n), -1.0, "cpu"), lengths, gen).to(device)
    ge = fill_padding(gap_tensor(gen, (b, m, n), -0.3, "cpu", spread=0.1), lengths, gen)
    _, g = compare_with_reference(gen, S, go, T, gap_extend=ge.to(device),
                                  lengths=lengths.to(device), reduction=reduction)
    from conftest import padding_mask
    mask = padding_mask(lengths, m, n).to(device)
    assert bool((g[1][mask] == 0).all()) and bool((g[2][mask] == 0).all()), \
        "gap gradients are not exactly zero in the padding"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("gshape", list(GAP_SHAPES), ids=list(GAP_SHAPES))
def test_gradcheck_gap_shapes(device, gen, gshape, affine):
    b, m, n = 2, 4, 5
    shape = {"scalar": (), "B": (b,), "B11": (b, 1, 1), "BM1": (b, m, 1), "B1N": (b, 1, n),
             "BMN": (b, m, n)}[gshape]
    S = leaf(randn(gen, b, m, n, device=device))
    go = leaf(gap_tensor(gen, shape, -0.7, device))
    inputs = [S, go]
    if affine:
        inputs.append(leaf(gap_tensor(gen, shape, -0.2, device, spread=0.1)))
    for T, reduction in ((1.0, "soft"), (0.6, "max")):
        def f(s, o, e=None):
            return softsw.align(s, o, T, gap_extend=e, reduction=reduction)
        assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_equal_float_gaps_are_linear(device, gen):
    """gap_extend == gap_open (floats) is the linear recurrence, bit for bit."""
    S = randn(gen, 3, 35, 28, device=device)
    for T in (1.0, 0.0):
        for reduction in ("max", "soft"):
            x, y = leaf(S), leaf(S)
            a = softsw.align(x, -0.7, T, reduction=reduction)
            b = softsw.align(y, -0.7, T, gap_extend=-0.7, reduction=reduction)
            (ga,) = grads(a, [x])
            (gb,) = grads(b, [y])
            assert torch.equal(a, b) and torch.equal(ga, gb)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_equal_tensor_gaps_match_linear(device, gen, T, reduction):
    """Equal open/extend *tensors* force the three-state recurrence; it must
    collapse to the linear one: same score and d/dS, and the linear
    d/dg splits into d/d open + d/d extend."""
    b, m, n = 3, 37, 30
    S = randn(gen, b, m, n, device=device)
    g = gap_tensor(gen, (b, m, n), -0.8, device)
    x, gl = leaf(S), leaf(g)
    lin = softsw.align(x, gl, T, reduction=reduction)
    ga, gg = grads(lin, [x, gl])
    y, go, ge = leaf(S), leaf(g), leaf(g)
    aff = softsw.align(y, go, T, gap_extend=ge, reduction=reduction)
    ha, ho, he = grads(aff, [y, go, ge])
    stol = score_tol(torch.float64, m, n)
    gtol = grad_tol(torch.float64, m, n, T, lin.abs().max().item())
    assert_close(aff, lin, torch.float64, "affine(open == extend) score", tol=stol)
    assert_close(ha, ga, torch.float64, "affine(open == extend) d/dS", tol=gtol)
    assert_close(ho + he, gg, torch.float64, "affine(open == extend) d/d open + d/d extend",
                 tol=gtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_one_gap_per_pair(device, gen, affine):
    """A (B,) gap tensor gives pair b the gap score gap[b]."""
    S = randn(gen, 4, 26, 33, device=device)
    go = gap_tensor(gen, (4,), -1.0, device)
    ge = gap_tensor(gen, (4,), -0.2, device, spread=0.1) if affine else None
    out = softsw.align(S, go, 0.8, gap_extend=ge)
    for b in range(4):
        alone = softsw.align(S[b], go[b].item(), 0.8,
                             gap_extend=None if ge is None else ge[b].item())
        assert_close(out[b], alone, torch.float64, f"pair {b}")


@pytest.mark.parametrize("device", DEVICES)
def test_gap_gradient_is_summed_over_broadcast_dims(device, gen):
    """d/d gap for a broadcast shape is the sum of the full (B, M, N) gradient."""
    b, m, n = 2, 24, 19
    S = randn(gen, b, m, n, device=device)
    for affine in (False, True):
        full_o = leaf(torch.full((b, m, n), -0.9, dtype=torch.float64, device=device))
        full_e = leaf(torch.full((b, m, n), -0.25, dtype=torch.float64, device=device))
        out = softsw.align(S, full_o, 1.0, gap_extend=full_e if affine else None)
        gf = grads(out, [full_o, full_e])
        for shape, dims in (((b, m, 1), (2,)), ((b, 1, n), (1,)), ((b, 1, 1), (1, 2)),
                            ((), (0, 1, 2)), ((b,), (1, 2))):
            o = leaf(torch.full(shape, -0.9, dtype=torch.float64, device=device))
            e = leaf(torch.full(shape, -0.25, dtype=torch.float64, device=device))
            out2 = softsw.align(S, o, 1.0, gap_extend=e if affine else None)
            go, ge = grads(out2, [o, e])
            assert_close(out2, out, torch.float64, f"score, gaps of shape {shape}")
            assert_close(go, gf[0].sum(dims).reshape(shape), torch.float64, f"d/d open {shape}")
            if affine:
                assert_close(ge, gf[1].sum(dims).reshape(shape), torch.float64,
                             f"d/d extend {shape}")
            else:
                assert ge is None


@pytest.mark.parametrize("device", DEVICES)
def test_gap_tensors_without_requires_grad(device, gen):
    """Only some inputs require grad: the others get none, the rest is unchanged."""
    S = randn(gen, 2, 9, 8, device=device)
    lengths = torch.tensor([[9, 8], [4, 5]], device=device)
    go, ge = torch.tensor(-0.5, dtype=torch.float64), torch.tensor(-0.1, dtype=torch.float64)
    x, o, e = leaf(S), leaf(go.to(device)), leaf(ge.to(device))
    full = grads(softsw.align(x, o, 1.0, gap_extend=e, lengths=lengths), [x, o, e])
    for wanted in ([0], [2], [0, 1], [1, 2]):
        args = [S.clone(), go.to(device), ge.to(device)]
        for k in wanted:
            args[k] = leaf(args[k])
        out = softsw.align(args[0], args[1], 1.0, gap_extend=args[2], lengths=lengths)
        got = grads(out, [args[k] for k in wanted])
        for k, g in zip(wanted, got):
            assert torch.equal(g, full[k]), f"input {k} with requires_grad set on {wanted}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.0])
def test_float_open_tensor_extend(device, gen, T):
    S = randn(gen, 2, 17, 22, device=device)
    ge = gap_tensor(gen, (2, 1, 22), -0.3, device, spread=0.1)
    compare_with_reference(gen, S, -1.1, T, gap_extend=ge, reduction="soft")


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_gap_tensors(device, gen):
    """Gap tensors read through their strides: a transposed (B, M, N) view and a
    strided slice give the contiguous result."""
    b, m, n = 2, 15, 18
    S = randn(gen, b, m, n, device=device)
    go = gap_tensor(gen, (b, n, m), -0.9, device).transpose(1, 2)
    ge = gap_tensor(gen, (b, 2 * m, n), -0.2, device, spread=0.1)[:, ::2]
    assert not go.is_contiguous() and not ge.is_contiguous()
    for T in (1.0, 0.0):
        o1, e1 = leaf(go), leaf(ge)
        a = softsw.align(S, o1, T, gap_extend=e1)
        ga = grads(a, [o1, e1])
        o2, e2 = leaf(go.contiguous()), leaf(ge.contiguous())
        c = softsw.align(S, o2, T, gap_extend=e2)
        gc = grads(c, [o2, e2])
        assert torch.equal(a, c) and torch.equal(ga[0], gc[0]) and torch.equal(ga[1], gc[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32],
                         ids=["fp16", "bf16", "fp32"])
def test_gap_tensors_low_precision(device, gen, dtype):
    """Gap tensors in the dtype of the scores (half types: converted like the
    scores), affine, values and gradients against the reference."""
    S = randn(gen, 3, 20, 24, dtype=dtype, device=device)
    go = gap_tensor(gen, (3, 20, 1), -0.9, device, dtype=dtype)
    ge = gap_tensor(gen, (3, 1, 24), -0.2, device, dtype=dtype, spread=0.1)
    compare_with_reference(gen, S, go, 1.0, gap_extend=ge, reduction="soft")
    compare_with_reference(gen, S, go, 1.0, reduction="max")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_affine_hard_ties_documented_order(device, gen, reduction):
    """Integer scores and gaps tie many affine paths exactly; the T = 0
    traceback breaks ties as the kernels document it (csrc/kernels/cpu/setup.h):
    C: start, match, gap down, gap right; C' of a gap down: start, match, gap
    right (of a gap right: start, match, gap down); U and L: open before extend
    -- the reference's order, so gradients match bit for bit (and every backend
    returns the same traceback). Equal float gaps run the one-state recurrence
    (as documented) and so follow the linear order on H (start, match, gap
    down, gap right): another optimal path where the two orders differ."""
    S = quantized(gen, 3, 27, 25, device=device, step=1.0, scale=2.5)
    for gaps in ((-2.0, -1.0), (-1.0, -2.0)):
        compare_with_reference(gen, S, gaps[0], 0.0, gap_extend=gaps[1], reduction=reduction)
    s_equal, p_equal = softsw.alignment(S, -1.0, 0.0, gap_extend=-1.0, reduction=reduction)
    s_linear, p_linear = softsw.alignment(S, -1.0, 0.0, reduction=reduction)
    assert torch.equal(s_equal, s_linear) and torch.equal(p_equal, p_linear)
    compare_with_reference(gen, S, -1.0, 0.0, reduction=reduction)
    go = torch.round(gap_tensor(gen, (3, 27, 1), -2.0, device, spread=1.0))
    compare_with_reference(gen, S, go, 0.0, gap_extend=-1.0, reduction=reduction)
