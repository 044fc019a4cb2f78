"""The eager host path: plain calls of align skip the ops' registered (Python)
autograd kernel where no graph is recorded, and call each kernel once per pass.

Skipping it must change nothing a caller sees: the same kernels on the same
inputs (so the same bits as the registered autograd gives), dispatch modes still
see every op, and a backward with create_graph still records the double
backward.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import softsw
from conftest import DEVICES, randn


class OpLog(TorchDispatchMode):
    """Records the softsw ops dispatched (name, keep_hidden for forward)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "softsw":
            self.calls.append(func._opname)
        return func(*args, **(kwargs or {}))


def registered_autograd_step(S, gap_open, temperature, reduction):
    """Score and gradient through torch.ops.softsw.forward's registered autograd."""
    S = S.detach().requires_grad_(True)
    code = {"max": 0, "soft": 1}[reduction]
    score = torch.ops.softsw.forward(S, None, None, gap_open, gap_open, False, temperature,
                                     None, code, True)[0]
    (grad,) = torch.autograd.grad(score.sum(), S)
    return score.detach(), grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_eager_step_equals_registered_autograd(device, gen, reduction, temperature):
    S = randn(gen, 4, 7, 9, device=device)
    ref_score, ref_grad = registered_autograd_step(S, -0.7, temperature, reduction)

    with torch.no_grad():
        score = softsw.align(S, -0.7, temperature, reduction=reduction)
    assert not score.requires_grad
    assert torch.equal(score, ref_score)

    Sg = S.clone().requires_grad_(True)
    score = softsw.align(Sg, -0.7, temperature, reduction=reduction)
    (grad,) = torch.autograd.grad(score.sum(), Sg)
    assert torch.equal(score.detach(), ref_score)
    assert torch.equal(grad, ref_grad)


@pytest.mark.parametrize("device", DEVICES)
def test_one_op_call_per_pass_and_modes_see_them(device, gen):
    S = randn(gen, 3, 5, 6, device=device)
    with OpLog() as log, torch.no_grad():
        softsw.align(S, -1.0, 1.0)
    assert log.calls == ["forward"]

    Sg = S.clone().requires_grad_(True)
    with OpLog() as log:
        score = softsw.align(Sg, -1.0, 1.0)
        torch.autograd.grad(score.sum(), Sg)
    assert log.calls == ["forward", "backward"]


class AtenLog(TorchDispatchMode):
    """Records the name of every op dispatched."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(func._opname)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_training_step_copies_nothing(device, gen):
    """The backward of sum(score) hands the op one value expanded: it is read in
    place, not copied (a copy is a kernel launch on every training step)."""
    Sg = randn(gen, 3, 5, 6, device=device).requires_grad_(True)
    score = softsw.align(Sg, -1.0, 1.0)
    with AtenLog() as log:
        torch.autograd.grad(score.sum(), Sg)
    assert "backward" in log.calls
    assert not {"clone", "copy_", "contiguous"} & set(log.calls), log.calls


@pytest.mark.parametrize("device", DEVICES)
def test_create_graph_still_records_the_double_backward(device, gen):
    S = randn(gen, 2, 6, 5, device=device, dtype=torch.float64).requires_grad_(True)
    w = randn(gen, 2, 6, 5, device=device, dtype=torch.float64)
    (P,) = torch.autograd.grad(softsw.align(S, -0.5, 0.9).sum(), S, create_graph=True)
    assert P.requires_grad
    with OpLog() as log:
        (hvp,) = torch.autograd.grad((P * w).sum(), S)
    assert log.calls == ["double_backward"]
    # The same Hessian-vector product through the finite difference of the gradient.
    eps = 1e-6
    up = torch.autograd.grad(softsw.align(S + eps * w, -0.5, 0.9).sum(), S)[0]
    down = torch.autograd.grad(softsw.align(S - eps * w, -0.5, 0.9).sum(), S)[0]
    torch.testing.assert_close(hvp, (up - down) / (2 * eps), rtol=1e-5, atol=1e-6)


def grad_score_layouts(gen, B, device, dtype):
    """One grad_score in three layouts: contiguous, every other element of a
    longer tensor (stride 2), and one value expanded (stride 0, as the
    backward of a sum hands it)."""
    g = 0.5 + torch.rand(B, generator=gen, dtype=torch.float64).to(device, dtype)
    spaced = torch.zeros(2 * B, device=device, dtype=dtype)
    spaced[::2] = g
    one = g[:1].expand(B)
    return [(g, g), (spaced[::2], g), (one, one.contiguous())]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_grad_score_read_through_its_stride(device, gen, affine, temperature):
    """softsw::backward and softsw::double_backward read grad_score in place
    (no copy on a training step): any stride gives the contiguous result."""
    B, M, N = 5, 9, 7
    dtype = torch.float64
    S = randn(gen, B, M, N, device=device, dtype=dtype)
    go = randn(gen, B, M, N, device=device, dtype=dtype) - 1.0  # a gap tensor: its gradient too
    W = randn(gen, B, M, N, device=device, dtype=dtype)
    extend = -0.3 if affine else -1.0
    problem = (S, go, None, -1.0, extend, affine, temperature, None, 1)
    _, hidden, argmax, total = torch.ops.softsw.forward(*problem, True)
    for strided, dense in grad_score_layouts(gen, B, device, dtype):
        assert strided.stride(0) != 1 or strided.data_ptr() == dense.data_ptr()
        got = torch.ops.softsw.backward(strided, *problem, hidden, argmax, total)
        want = torch.ops.softsw.backward(dense, *problem, hidden, argmax, total)
        for x, y in zip(got, want):
            assert torch.equal(x, y)
        got = torch.ops.softsw.double_backward(W, None, None, strided, *problem, hidden, argmax,
                                               total)
        want = torch.ops.softsw.double_backward(W, None, None, dense, *problem, hidden, argmax,
                                                total)
        for x, y in zip(got, want):
            assert torch.equal(x, y)
    # And the values are the ones the contiguous layout always gave: the
    # gradient of sum(g * score), against autograd's own (dense) route.
    g = grad_score_layouts(gen, B, device, dtype)[0][0]
    Sg = S.clone().requires_grad_(True)
    score = softsw.align(Sg, go, temperature, gap_extend=extend if affine else None,
                         reduction="soft")
    (want,) = torch.autograd.grad((score * g).sum(), Sg)
    got = torch.ops.softsw.backward(g, Sg.detach(), go, None, -1.0, extend, affine, temperature,
                                    None, 1, hidden, argmax, total)[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [(0, -1), (0, 6), (1, 8)], ids=["negative", "above_M", "above_N"])
def test_lengths_checked_in_every_vmapped_slice(device, gen, bad):
    # Out-of-range lengths in one slice of a vmapped batch (the check runs on
    # the functorch wrapper) raise like an eager call's.
    S = randn(gen, 3, 2, 5, 7, device=device)
    L = torch.tensor([[5, 7], [3, 4]], device=device).repeat(3, 1, 1)

    def f(s, lengths):
        return softsw.align(s, -1.0, 1.0, lengths=lengths)

    ok = torch.func.vmap(f)(S, L)
    assert torch.equal(ok[1], f(S[1], L[1]))
    column, value = bad
    L[1, 1, column] = value
    with pytest.raises(ValueError, match="lengths"):
        torch.func.vmap(f)(S, L)
    with pytest.raises(ValueError, match="lengths"):
        f(S[1], L[1])


@pytest.mark.parametrize("device", DEVICES)
def test_alignment_without_grad_equals_with_grad(device, gen):
    # Under no_grad alignment skips the registered autograd; the same kernels run.
    S = randn(gen, 3, 6, 8, device=device)
    with OpLog() as log, torch.no_grad():
        score, expected = softsw.alignment(S, -0.6, 0.9, reduction="soft")
    assert log.calls == ["forward", "backward"]
    assert not (score.requires_grad or expected.requires_grad)
    Sg = S.clone().requires_grad_(True)
    score_g, expected_g = softsw.alignment(Sg, -0.6, 0.9, reduction="soft")
    assert expected_g.requires_grad
    assert torch.equal(score, score_g.detach())
    assert torch.equal(expected, expected_g.detach())


class FunctionLog(torch.overrides.TorchFunctionMode):
    """Records the softsw ops seen at the __torch_function__ level."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if str(func).startswith("softsw."):
            self.calls.append(str(func).split(".")[1])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_function_modes_see_the_eager_forward(device, gen):
    # (The backward runs inside the autograd engine, where function modes do
    # not reach: only the forward is seen, with or without the fast path.)
    S = randn(gen, 2, 4, 5, device=device)
    with FunctionLog() as log, torch.no_grad():
        softsw.align(S, -1.0, 1.0)
    assert log.calls == ["forward"]
    Sg = S.clone().requires_grad_(True)
    with FunctionLog() as log:
        torch.autograd.grad(softsw.align(Sg, -1.0, 1.0).sum(), Sg)
    assert log.calls == ["forward"]
