"""CUDA-only checks (skipped without CUDA): sizes beyond 1000 against the
float64 CPU kernel (the Python reference is too slow there), CUDA-graph capture
with replay on new data, and the current stream / device being honoured. The
value and gradient checks against the reference run on CUDA through the
`device` parametrisation of the other modules."""
import pytest
import torch

import softsw
from conftest import (HAS_CUDA, assert_close, grad_tol, grads, hvp_tol, leaf, rand_lengths, randn,
                      score_tol)
from helpers import quantized

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")]


def run(S, go, T, ext, lengths, reduction):
    x = leaf(S)
    g = leaf(go) if isinstance(go, torch.Tensor) else go
    out = softsw.align(x, g, T, gap_extend=ext, lengths=lengths, reduction=reduction)
    ins = [x] + ([g] if isinstance(g, torch.Tensor) else [])
    w = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype, device=out.device)
    return out, grads(out, ins, w)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_large_float32_cuda_vs_float64_cpu_kernel(gen, affine, T, reduction):
    B, M, N = 2, 1100, 1300
    S = quantized(gen, B, M, N) if T == 0 else randn(gen, B, M, N)
    S = S.float().double()  # the float32 values, exactly
    go = randn(gen, B, M, 1, scale=0.1, shift=-0.75)
    go = (torch.round(go * 8) / 8) if T == 0 else go.float().double()
    ext = (-0.25 if T == 0 else -0.2) if affine else None
    lengths = torch.tensor([[M, N], [M - 77, N - 301]])
    ref, ref_g = run(S, go, T, ext, lengths, reduction)
    out, out_g = run(S.float().cuda(), go.float().cuda(), T, ext, lengths.cuda(), reduction)
    assert_close(out, ref, torch.float32, "score", tol=score_tol(torch.float32, M, N))
    gtol = grad_tol(torch.float32, M, N, T, ref.abs().max().item())
    assert_close(out_g[0], ref_g[0], torch.float32, "d/d scores", tol=gtol)
    assert_close(out_g[1], ref_g[1], torch.float32, "d/d gap_open", tol=gtol)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_large_float64_cuda_vs_cpu_kernel(gen, affine, reduction):
    B, M, N = 3, 1024, 1500
    S = randn(gen, B, M, N)
    lengths = rand_lengths(gen, B, M, N)
    ext = -0.3 if affine else None
    ref, ref_g = run(S, -1.0, 0.7, ext, lengths, reduction)
    out, out_g = run(S.cuda(), -1.0, 0.7, ext, lengths.cuda(), reduction)
    assert_close(out, ref, torch.float64, "score", tol=score_tol(torch.float64, M, N))
    gtol = grad_tol(torch.float64, M, N, 0.7, ref.abs().max().item())
    assert_close(out_g[0], ref_g[0], torch.float64, "d/d scores", tol=gtol)


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_cuda_graph_capture_and_replay(gen, affine):
    """Forward + backward captured in a CUDA graph (no host sync, caching
    allocator, current stream), replayed on new data: equals eager."""
    B, M, N = 4, 70, 90
    ext = -0.2 if affine else None
    static_S = randn(gen, B, M, N, dtype=torch.float32, device="cuda").requires_grad_(True)
    static_len = rand_lengths(gen, B, M, N).cuda()
    static_g = randn(gen, B, 1, 1, dtype=torch.float32, device="cuda", shift=-0.8)
    static_g.requires_grad_(True)

    def step():
        out = softsw.align(static_S, static_g, 0.8, gap_extend=ext, lengths=static_len,
                           reduction="soft")
        gs, gg = torch.autograd.grad(out.sum(), [static_S, static_g])
        return out, gs, gg

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_gs, static_gg = step()

    for _ in range(3):
        S = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
        lengths = rand_lengths(gen, B, M, N).cuda()
        g = randn(gen, B, 1, 1, dtype=torch.float32, device="cuda", shift=-0.8)
        with torch.no_grad():
            static_S.copy_(S)
            static_len.copy_(lengths)
            static_g.copy_(g)
        graph.replay()
        torch.cuda.synchronize()
        x, gl = leaf(S), leaf(g)
        out = softsw.align(x, gl, 0.8, gap_extend=ext, lengths=lengths, reduction="soft")
        gs, gg = torch.autograd.grad(out.sum(), [x, gl])
        torch.testing.assert_close(static_out, out, rtol=0, atol=0)
        torch.testing.assert_close(static_gs, gs, rtol=0, atol=0)
        torch.testing.assert_close(static_gg, gg, rtol=0, atol=0)


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_cuda_graph_double_backward(gen, affine):
    """A Hessian-vector product (backward through the gradient) captured in a
    CUDA graph and replayed on new data equals eager, bit for bit: the double
    backward runs on the GPU with no host sync, for affine gaps too."""
    B, M, N = 3, 45, 70
    ext = -0.3 if affine else None
    static_S = randn(gen, B, M, N, dtype=torch.float32, device="cuda").requires_grad_(True)
    static_g = randn(gen, B, 1, 1, dtype=torch.float32, device="cuda", shift=-0.8)
    static_g.requires_grad_(True)
    static_W = randn(gen, B, M, N, dtype=torch.float32, device="cuda")

    def step(S, g, W):
        out = softsw.align(S, g, 0.7, gap_extend=ext, reduction="soft")
        gs, = torch.autograd.grad(out.sum(), [S], create_graph=True)
        return torch.autograd.grad((gs * W).sum(), [S, g])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(static_S, static_g, static_W)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_hs, static_hg = step(static_S, static_g, static_W)

    for _ in range(2):
        S = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
        g = randn(gen, B, 1, 1, dtype=torch.float32, device="cuda", shift=-0.8)
        W = randn(gen, B, M, N, dtype=torch.float32, device="cuda")
        with torch.no_grad():
            static_S.copy_(S)
            static_g.copy_(g)
            static_W.copy_(W)
        graph.replay()
        torch.cuda.synchronize()
        hs, hg = step(leaf(S), leaf(g), W)
        assert bool(hs.abs().max() > 0) and bool(hg.abs().max() > 0)
        torch.testing.assert_close(static_hs, hs, rtol=0, atol=0)
        torch.testing.assert_close(static_hg, hg, rtol=0, atol=0)


def test_runs_on_the_current_stream(gen):
    """Work issued on a side stream is ordered on that stream: results are
    correct when read after the side stream only."""
    S = randn(gen, 8, 300, 400, dtype=torch.float32)
    expect = softsw.align(S, -0.5, 1.0)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = S.to("cuda", non_blocking=True)
        out = softsw.align(x, -0.5, 1.0)
        _, P = softsw.alignment(x, -0.5, 1.0)
        host = out.to("cpu", non_blocking=False)
    side.synchronize()
    assert_close(host, expect, torch.float32, "side-stream score", tol=score_tol(torch.float32, 300, 400))
    assert P.shape == x.shape


@pytest.mark.skipif(HAS_CUDA and torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device(gen):
    S = randn(gen, 2, 50, 60)
    x = leaf(S.to("cuda:1"))
    out = softsw.align(x, -0.5, 1.0)
    assert out.device == x.device
    (g,) = grads(out, [x])
    y = leaf(S)
    ref = softsw.align(y, -0.5, 1.0)
    (gr,) = grads(ref, [y])
    assert_close(out, ref, torch.float64, "cuda:1 score")
    assert_close(g, gr, torch.float64, "cuda:1 gradient")


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1.0, 0.0])
@pytest.mark.parametrize("gap_extend", [None, -0.25])
def test_inference_forward_matches_training_forward(gen, T, reduction, gap_extend):
    """A forward that keeps no state (inference) may split the work
    differently from one that feeds a backward, and at T > 0 runs in the
    probability domain (other arithmetic, closer to float64): the scores agree
    to rounding, and exactly at T = 0 (max-plus either way)."""
    for (B, M, N) in [(2, 300, 260), (1, 129, 1024), (3, 40, 300)]:
        S = quantized(gen, B, M, N, dtype=torch.float32, device="cuda") if T == 0 \
            else randn(gen, B, M, N, dtype=torch.float32, device="cuda")
        with torch.no_grad():
            inference = softsw.align(S, -0.7, T, reduction=reduction, gap_extend=gap_extend)
        training = softsw.align(S.clone().requires_grad_(True), -0.7, T, reduction=reduction,
                                gap_extend=gap_extend)
        if T == 0:
            assert torch.equal(inference, training.detach())
        else:
            assert_close(inference, training, torch.float32, "score",
                         tol=score_tol(torch.float32, M, N))


def _step_and_hvp(S, T, ext, lengths, reduction, V):
    """Score, its gradient to the scores and the Hessian-vector product
    d <d score / d S, V> / d S (gap -1: a constant, the kernels' fast paths),
    on S's device and dtype."""
    x = leaf(S)
    out = softsw.align(x, -1.0, T, gap_extend=ext, lengths=lengths, reduction=reduction)
    w = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype, device=out.device)
    gs, = torch.autograd.grad((out * w).sum(), [x], create_graph=True)
    hs, = torch.autograd.grad((gs * V).sum(), [x])
    return [out, gs, hs]


# The CPU's float32 passes (the probability domain in SIMD groups of 16 pairs
# and a half group, a lone long pair on column blocks; the log domain for
# pairs outside the range rule) and the CUDA kernels each stay within the
# float32 tolerance of the float64 CPU kernel on the same inputs, hence within
# twice it of each other.
CPU_PATH_CASES = {
    # 37 pairs: two groups of 16 and a half group; T 1: the probability domain
    "groups": (37, 90, 110, 1.0),
    # |S| / T ~ 30 kernel units: outside the range rule, the log domain
    "groups-out-of-range": (37, 90, 110, 0.05),
    # one pair, long enough for column blocks
    "lone-long-pair": (1, 300, 700, 1.0),
}


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("case", list(CPU_PATH_CASES), ids=str)
def test_cpu_and_cuda_float32_kernels_agree(gen, case, affine, reduction):
    B, M, N, T = CPU_PATH_CASES[case]
    S = randn(gen, B, M, N).float().double()
    V = randn(gen, B, M, N).float().double()
    ext = -0.5 if affine else None
    lengths = rand_lengths(gen, B, M, N) if B > 1 else None
    ref = _step_and_hvp(S, T, ext, lengths, reduction, V)
    cpu = _step_and_hvp(S.float(), T, ext, lengths, reduction, V.float())
    on_device = lengths.cuda() if lengths is not None else None
    cuda = _step_and_hvp(S.float().cuda(), T, ext, on_device, reduction, V.float().cuda())
    big = ref[0].abs().max().item()
    tols = [score_tol(torch.float32, M, N), grad_tol(torch.float32, M, N, T, big),
            hvp_tol(torch.float32, M, N, T, big)]
    for name, r, c, d, tol in zip(["score", "d/d scores", "hvp"], ref, cpu, cuda, tols):
        assert_close(c, r, torch.float32, f"{name} (cpu)", tol=tol)
        assert_close(d, r, torch.float32, f"{name} (cuda)", tol=tol)
        assert_close(d, c, torch.float32, f"{name} (cuda vs cpu)", tol=2 * tol)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
@pytest.mark.parametrize("case", list(CPU_PATH_CASES), ids=str)
def test_cpu_and_cuda_float64_kernels_agree(gen, case, affine, reduction):
    """The CPU's float64 passes (the probability domain on SIMD lanes of
    doubles, groups and column blocks; the log domain out of the range rule)
    and the CUDA float64 kernels are two independent implementations: score,
    gradient and Hessian-vector product agree to the float64 tolerance."""
    B, M, N, T = CPU_PATH_CASES[case]
    S = randn(gen, B, M, N)
    V = randn(gen, B, M, N)
    ext = -0.5 if affine else None
    lengths = rand_lengths(gen, B, M, N) if B > 1 else None
    cpu = _step_and_hvp(S, T, ext, lengths, reduction, V)
    on_device = lengths.cuda() if lengths is not None else None
    cuda = _step_and_hvp(S.cuda(), T, ext, on_device, reduction, V.cuda())
    big = cpu[0].abs().max().item()
    tols = [score_tol(torch.float64, M, N), grad_tol(torch.float64, M, N, T, big),
            hvp_tol(torch.float64, M, N, T, big)]
    for name, c, d, tol in zip(["score", "d/d scores", "hvp"], cpu, cuda, tols):
        assert_close(d, c, torch.float64, f"{name} (cuda vs cpu)", tol=tol)
