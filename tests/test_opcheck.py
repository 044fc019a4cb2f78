"""torch.library.opcheck of the registered ops with realistic arguments:
forward (keep_hidden True / False), backward and double_backward fed by a real
forward's outputs, and the user-facing align."""
import pytest
import torch

from conftest import DEVICES, rand_lengths, randn

F64 = torch.float64


def problem(gen, device, affine, T, reduction, gap_tensors, with_lengths=True):
    """The shared arguments of forward / backward / double_backward, as
    softsw.api._prepare builds them (gap tensors expanded to (B, M, N))."""
    B, M, N = 2, 5, 6
    S = randn(gen, B, M, N, device=device)
    lengths = rand_lengths(gen, B, M, N).to(device) if with_lengths else None
    go = randn(gen, B, M, 1, device=device, scale=0.2, shift=-0.8).expand(B, M, N) \
        if gap_tensors else None
    ge = randn(gen, B, 1, N, device=device, scale=0.1, shift=-0.2).expand(B, M, N) \
        if (gap_tensors and affine) else None
    open_v, ext_v = (0.0, 0.0) if gap_tensors else (-0.8, -0.2 if affine else -0.8)
    return [S, go, ge, open_v, ext_v, affine, T, lengths, {"max": 0, "soft": 1}[reduction]]


CASES = [
    pytest.param(False, 1.0, "max", False, id="linear-T1-max"),
    pytest.param(False, 0.5, "soft", True, id="linear-T0.5-soft-gaptensor"),
    pytest.param(True, 1.0, "soft", True, id="affine-T1-soft-gaptensors"),
    pytest.param(True, 0.0, "max", False, id="affine-T0-max"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine,T,reduction,gap_tensors", CASES)
def test_opcheck_forward_keep_hidden(device, gen, affine, T, reduction, gap_tensors):
    args = problem(gen, device, affine, T, reduction, gap_tensors)
    args[0] = args[0].clone().requires_grad_(True)
    if gap_tensors:
        args[1] = args[1].detach().clone().requires_grad_(True)
    torch.library.opcheck(torch.ops.softsw.forward.default, tuple(args) + (True,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine,T,reduction,gap_tensors", CASES[:2])
def test_opcheck_forward_no_hidden(device, gen, affine, T, reduction, gap_tensors):
    # keep_hidden=False is what align uses when nothing needs a gradient.
    args = problem(gen, device, affine, T, reduction, gap_tensors)
    torch.library.opcheck(torch.ops.softsw.forward.default, tuple(args) + (False,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine,T,reduction,gap_tensors", CASES)
def test_opcheck_backward(device, gen, affine, T, reduction, gap_tensors):
    args = problem(gen, device, affine, T, reduction, gap_tensors)
    score, hidden, argmax, total = torch.ops.softsw.forward(*args, True)
    grad_score = randn(gen, score.shape[0], device=device)
    bargs = [grad_score, args[0].clone().requires_grad_(True)] + args[1:] + [hidden, argmax, total]
    torch.library.opcheck(torch.ops.softsw.backward.default, tuple(bargs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine,T,reduction,gap_tensors", CASES)
def test_opcheck_double_backward(device, gen, affine, T, reduction, gap_tensors):
    args = problem(gen, device, affine, T, reduction, gap_tensors)
    S = args[0]
    score, hidden, argmax, total = torch.ops.softsw.forward(*args, True)
    grad_score = randn(gen, score.shape[0], device=device)
    dirs = [randn(gen, *S.shape, device=device),
            randn(gen, *S.shape, device=device) if args[1] is not None else None,
            randn(gen, *S.shape, device=device) if args[2] is not None else None]
    dargs = dirs + [grad_score] + args + [hidden, argmax, total]
    torch.library.opcheck(torch.ops.softsw.double_backward.default, tuple(dargs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_lengths", [False, True], ids=["no-lengths", "lengths"])
def test_opcheck_align(device, gen, with_lengths):
    S = randn(gen, 2, 5, 6, device=device).requires_grad_(True)
    lengths = rand_lengths(gen, 2, 5, 6).to(device) if with_lengths else None
    torch.library.opcheck(torch.ops.softsw.align.default, (S, -0.5, 1.0, lengths, "soft", -0.1))
    torch.library.opcheck(torch.ops.softsw.align.default, (S, -0.7, 0.0, lengths, "max", None))
