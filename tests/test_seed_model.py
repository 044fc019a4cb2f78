"""softsw.SoftSmithWaterman against a verbatim copy of the seed model, and the
registered op torch.ops.softsw.align against softsw.align."""
import pytest
import torch

import softsw
from conftest import DEVICES, assert_close, grad_tol, grads, leaf, rand_lengths, randn, score_tol


def seed_model(S: torch.Tensor, g: float, T: float) -> torch.Tensor:
    """The seed model: H = zeros(B, M+1, N+1); for i in 1..M, j in 1..N:
    H[:, i, j] = T * logsumexp(stack([0, H[:,i-1,j-1] + S[:,i-1,j-1], H[:,i-1,j] + g,
                                      H[:,i,j-1] + g]) / T)
    then H.view(B, -1).max(dim=-1).values -- kept as a list of lists of cells
    (no in-place writes into a tensor that autograd needs)."""
    B, M, N = S.shape
    zero = S.new_zeros(B)
    H = [[zero] * (N + 1) for _ in range(M + 1)]
    for i in range(1, M + 1):
        for j in range(1, N + 1):
            H[i][j] = T * torch.logsumexp(torch.stack([
                zero,
                H[i - 1][j - 1] + S[:, i - 1, j - 1],
                H[i - 1][j] + g,
                H[i][j - 1] + g,
            ]) / T, dim=0)
    Hm = torch.stack([torch.stack(row, dim=-1) for row in H], dim=1)  # (B, M+1, N+1)
    return Hm.view(B, -1).max(dim=-1).values


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("g,T", [(-1.0, 1.0), (-0.5, 0.3), (-2.0, 3.0)])
def test_module_equals_seed_model(device, gen, g, T):
    S = randn(gen, 16, 32, 32, dtype=torch.float32, device=device)
    model = softsw.SoftSmithWaterman(g, T)
    x, y = leaf(S), leaf(S)
    out = model(x)
    ref = seed_model(y, g, T)
    assert out.shape == (16,) and out.dtype == torch.float32
    w = randn(gen, 16, dtype=torch.float32, device=device)
    (gx,) = grads(out, [x], w)
    (gy,) = grads(ref, [y], w)
    # "to float32 rounding": both run in float32.
    assert_close(out, ref, torch.float32, "SoftSmithWaterman vs seed model",
                 tol=score_tol(torch.float32, 32, 32))
    assert_close(gx, gy, torch.float32, "SoftSmithWaterman vs seed model, gradient",
                 tol=grad_tol(torch.float32, 32, 32, T, ref.abs().max().item()))


@pytest.mark.parametrize("device", DEVICES)
def test_module_arguments(device, gen):
    S = randn(gen, 3, 20, 25, device=device)
    lengths = rand_lengths(gen, 3, 20, 25).to(device)
    gap = torch.nn.Parameter(torch.tensor(-0.8, dtype=torch.float64, device=device))
    model = softsw.SoftSmithWaterman(gap, 0.5, gap_extend=-0.2, reduction="soft")
    assert isinstance(model, torch.nn.Module)
    out = model(S, lengths)
    ref = softsw.align(S, gap, 0.5, gap_extend=-0.2, lengths=lengths, reduction="soft")
    assert torch.equal(out, ref)
    (gg,) = torch.autograd.grad(out.sum(), [gap])
    (gr,) = torch.autograd.grad(ref.sum(), [gap])
    assert torch.equal(gg, gr) and gg.item() != 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_op_default_arguments_equal_align(device, gen):
    S = randn(gen, 4, 23, 31, device=device)
    a = torch.ops.softsw.align(S, -1.0, 1.0)
    b = softsw.align(S)
    assert a.shape == (4,) and torch.equal(a, b)
    assert torch.equal(torch.ops.softsw.align(S), b)
    x, y = leaf(S), leaf(S)
    (gx,) = grads(torch.ops.softsw.align(x, -1.0, 1.0), [x])
    (gy,) = grads(softsw.align(y), [y])
    assert torch.equal(gx, gy)


@pytest.mark.parametrize("device", DEVICES)
def test_op_all_arguments_equal_align(device, gen):
    S = randn(gen, 3, 17, 19, dtype=torch.float32, device=device)
    lengths = rand_lengths(gen, 3, 17, 19).to(device)
    for T, red, ext in ((0.5, "soft", -0.1), (0.0, "max", None), (2.0, "max", -0.3)):
        x, y = leaf(S), leaf(S)
        a = torch.ops.softsw.align(x, -0.7, T, lengths, red, ext)
        b = softsw.align(y, -0.7, T, gap_extend=ext, lengths=lengths, reduction=red)
        assert torch.equal(a, b)
        (gx,) = grads(a, [x])
        (gy,) = grads(b, [y])
        assert torch.equal(gx, gy)
    two_d = torch.ops.softsw.align(S[0], -0.7, 1.0)
    assert two_d.dim() == 0 and torch.equal(two_d, softsw.align(S[0], -0.7, 1.0))
