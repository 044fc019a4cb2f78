"""torch.compile(fullgraph=True, dynamic=True): forward and backward of
softsw.align and torch.ops.softsw.align equal eager, with no graph break
(fullgraph makes a break an error). Few tests: compiling is slow on 2 cores."""
import pytest
import torch

import softsw
from conftest import DEVICES, grads, leaf, rand_lengths, randn

pytestmark = pytest.mark.slow


def eager_and_compiled(fn, backend, inputs_list, tol=0.0):
    """tol = 0: bitwise (aot_eager runs the same kernels on the same inputs)."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=backend)
    for inputs in inputs_list:
        e_in = [leaf(x) if x.is_floating_point() else x for x in inputs]
        c_in = [leaf(x) if x.is_floating_point() else x for x in inputs]
        e_out = fn(*e_in)
        c_out = compiled(*c_in)
        assert c_out.shape == e_out.shape and c_out.dtype == e_out.dtype
        torch.testing.assert_close(c_out, e_out, rtol=tol, atol=tol)
        wanted = [k for k, x in enumerate(e_in) if x.requires_grad]
        w = torch.randn(e_out.shape, dtype=e_out.dtype).to(e_out.device)
        ge = grads(e_out, [e_in[k] for k in wanted], w)
        gc = grads(c_out, [c_in[k] for k in wanted], w)
        for k, a, b in zip(wanted, gc, ge):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"gradient of input {k}")


def shapes(gen, device, dtype=torch.float64):
    """Two problems of different shapes (dynamic=True must serve both)."""
    out = []
    for B, M, N in ((3, 17, 23), (2, 30, 11)):
        S = randn(gen, B, M, N, dtype=dtype, device=device)
        lengths = rand_lengths(gen, B, M, N).to(device)
        g = randn(gen, B, M, 1, dtype=dtype, device=device, scale=0.2, shift=-0.8)
        out.append((S, lengths, g))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_compile_align_aot_eager(device, gen, affine):
    def fn(S, lengths, g):
        a = softsw.align(S, g, 0.7, gap_extend=-0.2 if affine else None, lengths=lengths,
                         reduction="soft")
        b = softsw.align(S, -0.5, 0.0, lengths=lengths)
        return a + 2 * b
    eager_and_compiled(fn, "aot_eager", shapes(gen, device))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_op_aot_eager(device, gen):
    def fn(S, lengths, g):
        return torch.ops.softsw.align(S, -0.6, 1.0, lengths, "max", -0.1) * g.sum()
    eager_and_compiled(fn, "aot_eager", shapes(gen, device))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_default_backend(device, gen):
    """The default backend (inductor), once: a small model around the op."""
    def fn(S, lengths, g):
        x = torch.tanh(S) * 2.0
        return softsw.align(x, g, 1.0, lengths=lengths).sum() + \
            torch.ops.softsw.align(x, -0.5, 0.5).sum()
    # Inductor may compute tanh with a different (vectorised) implementation
    # than eager: float32 tolerance, 1e-5.
    eager_and_compiled(fn, "inductor", shapes(gen, device, dtype=torch.float32), tol=1e-5)
