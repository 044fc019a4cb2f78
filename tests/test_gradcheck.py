"""First and second derivatives (docs/semantics.md, "Gradients"): torch.autograd.gradcheck and
gradgradcheck in float64, the expected alignment of softsw.alignment being
differentiable, and Hessian-vector products against the reference's autograd."""
import pytest
import torch

import softsw
from conftest import (DEVICES, assert_close, fill_padding, grad_tol, hvp_tol, leaf, rand_lengths,
                      randn)
from reference import ref_align

CHECK = dict(eps=1e-6, atol=1e-7, rtol=1e-6)


def _gap_kwargs(affine):
    return dict(gap_extend=-0.15) if affine else {}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.5, 0.1, 0.0])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_gradcheck_scores(device, gen, affine, T, reduction):
    # T = 0 is piecewise linear in S; random inputs are away from its kinks
    # (ties between tied paths use the same scores, so d/dS is well defined).
    for shape in ((2, 5, 6), (1, 1, 4), (2, 3, 1)):
        S = leaf(randn(gen, *shape, device=device))
        assert torch.autograd.gradcheck(
            lambda s: softsw.align(s, -0.6, T, reduction=reduction, **_gap_kwargs(affine)),
            (S,), **CHECK)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_gradcheck_with_lengths(device, gen, affine):
    """Also perturbs the padding: numerically nothing moves there, and the
    analytical gradient must be zero there as well."""
    lengths = torch.tensor([[4, 6], [2, 3], [0, 5]])
    S = leaf(randn(gen, 3, 4, 6, device=device))
    for reduction in ("max", "soft"):
        assert torch.autograd.gradcheck(
            lambda s: softsw.align(s, -0.5, 0.8, lengths=lengths.to(device),
                                   reduction=reduction, **_gap_kwargs(affine)),
            (S,), **CHECK)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.5])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_gradgradcheck_scores(device, gen, affine, T, reduction):
    S = leaf(randn(gen, 2, 4, 5, device=device))
    assert torch.autograd.gradgradcheck(
        lambda s: softsw.align(s, -0.6, T, reduction=reduction, **_gap_kwargs(affine)),
        (S,), **CHECK)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_gradgradcheck_gap_tensors(device, gen, affine, reduction):
    S = leaf(randn(gen, 2, 4, 5, device=device))
    go = leaf(randn(gen, 2, 4, 5, device=device, scale=0.3, shift=-0.8))
    inputs = [S, go]
    if affine:
        inputs.append(leaf(randn(gen, 2, 1, 5, device=device, scale=0.1, shift=-0.2)))

    def f(s, o, e=None):
        return softsw.align(s, o, 0.7, gap_extend=e, reduction=reduction)

    assert torch.autograd.gradgradcheck(f, inputs, **CHECK)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_gradgradcheck_with_lengths(device, gen, reduction):
    lengths = torch.tensor([[3, 5], [2, 2]], device=device)
    S = leaf(randn(gen, 2, 3, 5, device=device))
    assert torch.autograd.gradgradcheck(
        lambda s: softsw.align(s, -0.5, 1.0, lengths=lengths, reduction=reduction), (S,), **CHECK)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T", [1.0, 0.5])
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_expected_alignment_is_differentiable(device, gen, affine, T, reduction):
    """softsw.alignment(...)[1] (the soft alignment) passes gradcheck, also with
    respect to tensor gap scores."""
    S = leaf(randn(gen, 2, 4, 5, device=device))
    go = leaf(randn(gen, 2, 1, 1, device=device, scale=0.2, shift=-0.7))
    inputs = [S, go]
    if affine:
        inputs.append(leaf(randn(gen, 2, 4, 1, device=device, scale=0.1, shift=-0.2)))

    def f(s, o, e=None):
        score, expected = softsw.alignment(s, o, T, gap_extend=e, reduction=reduction)
        return score, expected

    assert torch.autograd.gradcheck(f, inputs, **CHECK)


@pytest.mark.parametrize("device", DEVICES)
def test_loss_on_soft_alignment_trains(device, gen):
    """SMURF-style: a loss on the soft alignment itself back-propagates to S and
    to a learned gap score, and equals the reference's gradient."""
    S = randn(gen, 2, 12, 14, device=device)
    target = (torch.rand(2, 12, 14, generator=gen, dtype=torch.float64) < 0.1).double()
    x, g = leaf(S), leaf(torch.tensor(-0.7, dtype=torch.float64, device=device))
    _, P = softsw.alignment(x, g, 1.0)
    loss = ((P - target.to(device)) ** 2).sum()
    gx, gg = torch.autograd.grad(loss, [x, g])
    xr, gr_ = leaf(S.cpu()), leaf(torch.tensor(-0.7, dtype=torch.float64))
    ref = ref_align(xr, gr_, 1.0)
    (Pr,) = torch.autograd.grad(ref.sum(), xr, create_graph=True)
    loss_r = ((Pr - target) ** 2).sum()
    gxr, ggr = torch.autograd.grad(loss_r, [xr, gr_])
    assert_close(P, Pr, torch.float64, "soft alignment")
    assert_close(loss, loss_r, torch.float64, "loss")
    assert_close(gx, gxr, torch.float64, "d loss / d S")
    assert_close(gg, ggr, torch.float64, "d loss / d gap")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_hvp_vs_reference(device, gen, affine, T, reduction):
    """Hessian-vector products (double backward) with respect to S, tensor gap
    scores and the incoming cotangent, against the reference's autograd, on a
    padded batch (T = 0: the Hessian is zero)."""
    b, m, n = 3, 16, 19
    lengths = rand_lengths(gen, b, m, n)
    S = fill_padding(randn(gen, b, m, n), lengths, gen)
    go = randn(gen, b, m, 1, scale=0.2, shift=-0.8)
    ge = randn(gen, b, 1, n, scale=0.1, shift=-0.2) if affine else None
    w = randn(gen, b)
    V = [randn(gen, b, m, n), randn(gen, b, m, 1), randn(gen, b, 1, n)]

    def hvp(fn, dev, lens):
        ins = [leaf(S.to(dev)), leaf(go.to(dev))] + ([leaf(ge.to(dev))] if affine else [])
        ww = leaf(w.to(dev))
        out = fn(ins[0], ins[1], T, gap_extend=ins[2] if affine else None, lengths=lens,
                 reduction=reduction)
        first = torch.autograd.grad(out, ins, grad_outputs=ww, create_graph=True)
        inner = sum((f * v.to(dev)).sum() for f, v in zip(first, V))
        second = torch.autograd.grad(inner, ins + [ww], allow_unused=True)
        return first, [torch.zeros_like(x) if s is None else s for s, x in zip(second, ins + [ww])]

    k_first, k_second = hvp(softsw.align, device, lengths.to(device))
    r_first, r_second = hvp(ref_align, "cpu", lengths)
    scale = ref_align(S, go, T, gap_extend=ge, lengths=lengths, reduction=reduction).abs().max()
    gtol = grad_tol(torch.float64, m, n, T, scale.item())
    htol = hvp_tol(torch.float64, m, n, T, scale.item())
    names = ["S", "gap_open", "gap_extend"][:len(k_first)]
    for name, a, e in zip(names, k_first, r_first):
        assert_close(a, e, torch.float64, f"gradient d/d {name}", tol=gtol)
    for name, a, e in zip(names + ["grad_output"], k_second, r_second):
        assert_close(a, e, torch.float64, f"HVP d/d {name}", tol=htol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp16", "bf16"])
def test_hvp_low_precision(device, gen, dtype, T, reduction):
    """Double backward in float32 / half types (affine, a gap tensor) against
    the float64 kernel on the same rounded inputs. Tolerances: conftest.grad_tol
    for the gradients, conftest.hvp_tol for the HVP."""
    b, m, n = 3, 30, 40
    S = randn(gen, b, m, n, dtype=dtype).double()
    V = randn(gen, b, m, n, dtype=dtype).double()
    go = randn(gen, b, m, 1, dtype=dtype, scale=0.1, shift=-0.8).double()
    w = randn(gen, b, dtype=dtype).double()
    res = []
    for dt, dev in ((torch.float64, "cpu"), (dtype, device)):
        x, g0, ww = leaf(S.to(dt).to(dev)), leaf(go.to(dt).to(dev)), w.to(dt).to(dev)
        out = softsw.align(x, g0, T, gap_extend=-0.2, reduction=reduction)
        first = torch.autograd.grad(out, [x, g0], grad_outputs=ww, create_graph=True)
        second = torch.autograd.grad((first[0] * V.to(dt).to(dev)).sum(), [x, g0])
        res.append((out,) + first + second)
    scale = res[0][0].abs().max().item()
    tols = [grad_tol(dtype, m, n, T, scale)] * 2 + [hvp_tol(dtype, m, n, T, scale)] * 2
    for name, a, e, tol in zip(["d/d S", "d/d gap", "HVP d/d S", "HVP d/d gap"], res[1][1:],
                               res[0][1:], tols):
        assert a.dtype == dtype
        assert_close(a, e, dtype, name, tol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_twice_with_retain_graph(device, gen):
    """The saved state is not consumed or modified by a backward pass."""
    x = leaf(randn(gen, 2, 21, 25, device=device))
    g = leaf(torch.tensor(-0.6, dtype=torch.float64, device=device))
    out = softsw.align(x, g, 0.8, gap_extend=-0.1, reduction="soft")
    out.sum().backward(retain_graph=True)
    first = (x.grad.clone(), g.grad.clone())
    out.sum().backward()
    assert torch.equal(x.grad, 2 * first[0]) and torch.equal(g.grad, 2 * first[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_eager_autograd_matches_registered_autograd(device, gen, affine):
    """softsw.align differentiates eager calls through its own autograd.Functions
    and torch.ops.softsw.forward through the torch.library registration: the
    same kernels, so gradients and Hessian-vector products agree bit for bit,
    also for a loss on one of the first derivatives only (the eager backward
    hands the double backward None for the other, the registration zeros)."""
    B, M, N = 3, 19, 23
    S = randn(gen, B, M, N, device=device)
    go = randn(gen, B, M, 1, device=device, scale=0.1, shift=-0.7)
    ext = -0.2 if affine else None
    v = randn(gen, B, M, N, device=device)
    u = randn(gen, B, M, 1, device=device)
    lengths = rand_lengths(gen, B, M, N).to(device)

    def derivatives(score_of):
        x, g = leaf(S), leaf(go)
        out = score_of(x, g)
        gx, gg = torch.autograd.grad(out.sum(), (x, g), create_graph=True)
        hvps = [torch.autograd.grad(loss, (x, g), retain_graph=True, allow_unused=True)
                for loss in ((gx * v).sum(), (gg * u).sum(), (gx * v).sum() + (gg * u).sum())]
        return [out.detach(), gx.detach(), gg.detach()] + [h for pair in hvps for h in pair]

    eager = derivatives(lambda x, g: softsw.align(x, g, 0.7, gap_extend=ext, lengths=lengths,
                                                  reduction="soft"))

    def registered(x, g):
        return torch.ops.softsw.forward(
            x, g.expand(B, M, N), None, 0.0, 0.0 if ext is None else ext, affine, 0.7,
            lengths, 1, True)[0]  # reduction 1: "soft"; keep_hidden

    for a, b in zip(eager, derivatives(registered)):
        assert torch.equal(a, b)
