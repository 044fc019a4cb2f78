"""torch.func transforms (grad, vmap, jacrev, jvp, jacfwd, hessian, functional_call)
over softsw.align and softsw.alignment, against eager autograd and per-slice loops.

grad and jacrev run the kernels eager autograd runs, on the same inputs: their
results equal eager's bit for bit. vmap folds the vmapped dimensions into the
batch, one kernel call for all slices; each pair is computed alone either way,
so it too is compared exactly.
"""
from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, jacrev, vmap

import softsw
from conftest import DEVICES, assert_close, leaf, rand_lengths, randn

AFFINE = [pytest.param(None, id="linear"), pytest.param(-0.2, id="affine")]
TEMPERATURES = [pytest.param(0.7, id="T0.7"), pytest.param(0.0, id="T0")]


def problem(gen, device, B=3, M=9, N=11):
    S = randn(gen, B, M, N, device=device)
    gap = randn(gen, B, 1, 1, device=device, scale=0.1, shift=-0.8)
    lengths = rand_lengths(gen, B, M, N).to(device)
    return S, gap, lengths


def assert_equal(a, b, what=""):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    assert torch.equal(a, b), f"{what}: max |diff| {(a - b).abs().max().item():g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_grad_equals_eager(device, gen, extend, temperature, reduction):
    S, gap, lengths = problem(gen, device)
    w = randn(gen, S.shape[0], device=device)

    def loss(s, g):
        return (w * softsw.align(s, g, temperature, gap_extend=extend, lengths=lengths,
                                 reduction=reduction)).sum()

    func_s, func_g = grad(loss, argnums=(0, 1))(S, gap)
    x, g = leaf(S), leaf(gap)
    eager_s, eager_g = torch.autograd.grad(loss(x, g), (x, g))
    assert_equal(func_s, eager_s, "d/d scores")
    assert_equal(func_g, eager_g, "d/d gap_open")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
def test_second_derivative_equals_eager(device, gen, extend):
    """grad of (grad . v): the Hessian-vector product, against create_graph."""
    S, gap, lengths = problem(gen, device)
    v = randn(gen, *S.shape, device=device)

    def loss(s, g):
        return softsw.align(s, g, 0.6, gap_extend=extend, lengths=lengths,
                            reduction="soft").sum()

    def directional(s, g):
        return (grad(loss)(s, g) * v).sum()

    func_s, func_g = grad(directional, argnums=(0, 1))(S, gap)
    x, g = leaf(S), leaf(gap)
    gx = torch.autograd.grad(loss(x, g), x, create_graph=True)[0]
    eager_s, eager_g = torch.autograd.grad((gx * v).sum(), (x, g))
    assert_equal(func_s, eager_s, "HVP d/d scores")
    assert_equal(func_g, eager_g, "HVP d/d gap_open")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
def test_jacrev_and_hessian(device, gen, extend):
    """jacrev (a vmap over cotangents) and jacrev of jacrev (a vmap over the
    double backward): each row against its own eager backward / HVP."""
    B, M, N = 2, 4, 5
    S, gap, _ = problem(gen, device, B, M, N)

    def score(s):
        return softsw.align(s, gap, 0.5, gap_extend=extend)

    jac = jacrev(score)(S)  # (B, B, M, N)
    hess = jacrev(jacrev(lambda s: score(s).sum()))(S)  # (B, M, N, B, M, N)
    x = leaf(S)
    out = score(x)
    for b in range(B):
        row = torch.autograd.grad(out[b], x, retain_graph=True)[0]
        assert_equal(jac[b], row, f"jacobian row {b}")
    gx = torch.autograd.grad(out.sum(), x, create_graph=True)[0]
    for index in [(0, 0, 0), (0, 2, 3), (1, 3, 4), (1, 1, 2)]:
        row = torch.autograd.grad(gx[index], x, retain_graph=True)[0]
        assert_equal(hess[index], row, f"hessian row {index}")
    # Symmetric up to rounding: H v and H^T v sum the same terms in other orders.
    square = hess.reshape(B * M * N, -1)
    assert_close(square, square.T, torch.float64, "symmetry")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
def test_vmap_over_leading_dims(device, gen, extend):
    """Two extra leading dimensions of scores, per-slice gap tensors and
    lengths; nested vmap against a loop over the slices."""
    V, W, B, M, N = 2, 3, 2, 7, 8
    S = randn(gen, V, W, B, M, N, device=device)
    gap = randn(gen, V, W, B, device=device, scale=0.1, shift=-0.8)
    lengths = torch.stack([rand_lengths(gen, B, M, N, full_first=False)
                           for _ in range(V * W)]).view(V, W, B, 2).to(device)

    def score(s, g, n):
        return softsw.align(s, g, 0.8, gap_extend=extend, lengths=n, reduction="soft")

    batched = vmap(vmap(score))(S, gap, lengths)
    looped = torch.stack([torch.stack([score(S[v, w], gap[v, w], lengths[v, w])
                                       for w in range(W)]) for v in range(V)])
    assert_equal(batched, looped, "scores")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
def test_per_sample_gradients(device, gen, extend):
    """vmap(grad(...)): per-slice gradients with a shared gap parameter."""
    V, B, M, N = 3, 2, 6, 7
    S = randn(gen, V, B, M, N, device=device)
    gap = randn(gen, 1, device=device, scale=0.1, shift=-0.8)

    def loss(g, s):
        return softsw.align(s, g.expand(s.shape[0]), 0.5, gap_extend=extend).sum()

    batched = vmap(grad(loss, argnums=(0, 1)), in_dims=(None, 0))(gap, S)
    for v in range(V):
        g, x = leaf(gap), leaf(S[v])
        eager = torch.autograd.grad(loss(g, x), (g, x))
        assert_equal(batched[0][v], eager[0], f"slice {v}: d/d gap_open")
        assert_equal(batched[1][v], eager[1], f"slice {v}: d/d scores")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
def test_alignment_under_transforms(device, gen, extend):
    """alignment(): vmap against a loop; grad of a loss on the soft alignment
    (through the double backward) against eager create_graph."""
    V, B, M, N = 2, 2, 6, 7
    S = randn(gen, V, B, M, N, device=device)
    target = randn(gen, B, M, N, device=device).abs()

    def soft(s):
        return softsw.alignment(s, -0.9, 0.6, gap_extend=extend)

    score, expected = vmap(soft)(S)
    for v in range(V):
        sv, ev = soft(S[v])
        assert_equal(score[v], sv, f"slice {v}: score")
        assert_equal(expected[v], ev, f"slice {v}: alignment")

    def loss(s):
        return (soft(s)[1] * target).sum()

    func = grad(loss)(S[0])
    x = leaf(S[0])
    eager = torch.autograd.grad(loss(x), x)[0]
    assert_equal(func, eager, "d loss(alignment) / d scores")


@pytest.mark.parametrize("device", DEVICES)
def test_functional_call_module(device, gen):
    """functional_call over a module holding a learned gap parameter and a
    linear layer that makes the scores from embeddings."""
    B, M, N, D = 2, 5, 6, 4

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.project = torch.nn.Linear(D, D, dtype=torch.float64)
            self.sw = softsw.SoftSmithWaterman(
                torch.nn.Parameter(torch.tensor(-0.7, dtype=torch.float64)), 0.5,
                gap_extend=torch.nn.Parameter(torch.tensor(-0.1, dtype=torch.float64)))

        def forward(self, x, y):
            return self.sw(self.project(x) @ y.transpose(-1, -2))

    torch.manual_seed(0)
    model = Model().to(device)
    x = randn(gen, B, M, D, device=device)
    y = randn(gen, B, N, D, device=device)
    params = {k: v.detach() for k, v in model.named_parameters()}
    assert set(params) == {"project.weight", "project.bias", "sw.gap_open", "sw.gap_extend"}

    func = grad(lambda p: functional_call(model, p, (x, y)).sum())(params)
    model(x, y).sum().backward()
    for name, p in model.named_parameters():
        assert_equal(func[name], p.grad, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extend", AFFINE)
def test_forward_mode(device, gen, extend):
    """jvp (torch.func and forward_ad.dual_level) against the gradient dotted
    with the tangents; jacfwd, hessian and jacfwd of the alignment against
    their reverse-mode counterparts."""
    from torch.autograd import forward_ad
    from torch.func import hessian, jacfwd, jvp
    B, M, N = 2, 4, 5
    S, gap, lengths = problem(gen, device, B, M, N)
    v = randn(gen, B, M, N, device=device)
    w = randn(gen, B, 1, 1, device=device)

    def score(s, g):
        return softsw.align(s, g, 0.6, gap_extend=extend, lengths=lengths)

    x, g = leaf(S), leaf(gap)
    gx, gg = torch.autograd.grad(score(x, g).sum(), (x, g))
    want = (gx * v).sum((1, 2)) + (gg * w).sum((1, 2))
    value, tangent = jvp(score, (S, gap), (v, w))
    assert_equal(value, score(S, gap), "jvp value")
    assert_close(tangent, want, torch.float64, "jvp tangent")
    with forward_ad.dual_level():
        out = score(forward_ad.make_dual(S, v), forward_ad.make_dual(gap, w))
        assert_close(forward_ad.unpack_dual(out).tangent, want, torch.float64, "dual_level")

    def total(s):
        return score(s, gap).sum()

    assert_close(jacfwd(lambda s: score(s, gap))(S), jacrev(lambda s: score(s, gap))(S),
                 torch.float64, "jacfwd")
    assert_close(hessian(total)(S), jacrev(jacrev(total))(S), torch.float64, "hessian")

    def soft_alignment(s):
        return softsw.alignment(s, gap, 0.6, gap_extend=extend, lengths=lengths)[1]

    assert_close(jacfwd(soft_alignment)(S), jacrev(soft_alignment)(S), torch.float64,
                 "jacfwd of the alignment")
