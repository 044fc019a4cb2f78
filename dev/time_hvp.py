"""Developer timing of a Hessian-vector product step on CUDA, linear and affine
gaps: forward, backward with create_graph, and the backward of <W, gradient>
(the double backward), CUDA events, median of 20 steps. Not the benchmark.

    python dev/time_hvp.py [--shapes 64x256x256,16x1024x1024] [--profile]
"""
import argparse

import torch

import softsw


def time_step(B, M, N, gap_extend):
    S = torch.randn(B, M, N, device="cuda").requires_grad_(True)
    W = torch.randn(B, M, N, device="cuda")

    def step():
        out = softsw.align(S, -1.0, 1.0, gap_extend=gap_extend, reduction="soft")
        (g,) = torch.autograd.grad(out.sum(), [S], create_graph=True)
        (h,) = torch.autograd.grad((g * W).sum(), [S])
        return h

    for _ in range(3):
        step()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    t = sorted(times)[len(times) // 2]
    return t, B * M * N / t / 1e9


def profile_step(B, M, N, gap_extend):
    """The CUDA kernels of one step and their times (torch.profiler)."""
    S = torch.randn(B, M, N, device="cuda").requires_grad_(True)
    W = torch.randn(B, M, N, device="cuda")

    def step():
        out = softsw.align(S, -1.0, 1.0, gap_extend=gap_extend, reduction="soft")
        (g,) = torch.autograd.grad(out.sum(), [S], create_graph=True)
        torch.autograd.grad((g * W).sum(), [S])

    step()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="64x256x256,16x1024x1024")
    ap.add_argument("--profile", action="store_true", help="kernel times of one step")
    args = ap.parse_args()
    for shape in args.shapes.split(","):
        B, M, N = (int(x) for x in shape.split("x"))
        for name, ext in (("linear", None), ("affine", -0.5)):
            if args.profile:
                print(f"== {shape} {name}", flush=True)
                profile_step(B, M, N, ext)
                continue
            t, g = time_step(B, M, N, ext)
            print(f"hvp step {shape:>14} {name:6s} {t * 1e3:8.2f} ms {g:7.2f} G cells/s", flush=True)


if __name__ == "__main__":
    main()
