"""The CPU passes' floating-point mode (csrc/kernels/cpu/float_mode.h): the soft
passes (T > 0) flush subnormal numbers to zero on their own threads only, and
hard mode keeps the caller's mode, so a subnormal score still counts."""
import torch

import softsw

TINY = 1e-40  # subnormal in float32 (the smallest normal is ~1.18e-38)


def subnormals_survive() -> bool:
    x = torch.tensor([TINY], dtype=torch.float32)
    return (x * 1.0).item() != 0.0


def test_caller_mode_restored_after_soft_passes():
    torch.set_flush_denormal(False)
    assert subnormals_survive()
    S = torch.randn(5, 17, 23, requires_grad=True)
    out = softsw.align(S, -1.0, 1.0)
    (g,) = torch.autograd.grad(out.sum(), S, create_graph=True)
    torch.autograd.grad((g * g).sum(), S)
    softsw.align(S.detach(), -1.0, 0.7, gap_extend=-0.3)
    assert subnormals_survive(), "a softsw call left subnormals flushed on the calling thread"


def test_hard_mode_counts_subnormal_scores():
    """T = 0: max-plus on the caller's scores in the caller's mode."""
    torch.set_flush_denormal(False)
    n = 40
    for dtype in (torch.float32, torch.float64):
        tiny = TINY if dtype == torch.float32 else 1e-310
        S = torch.full((3, n, n), tiny, dtype=dtype, requires_grad=True)
        out = softsw.align(S, -1.0, 0.0)
        expected = torch.tensor(tiny, dtype=dtype)
        for _ in range(n - 1):
            expected = expected + torch.tensor(tiny, dtype=dtype)
        assert expected.item() > 0.0
        torch.testing.assert_close(out.detach(), expected.expand(3), rtol=0, atol=0)
        (g,) = torch.autograd.grad(out.sum(), S)
        assert torch.equal(g.diagonal(dim1=1, dim2=2), torch.ones(3, n, dtype=dtype))
