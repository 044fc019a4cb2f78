"""Developer timing of a Hessian-vector product step, linear and affine gaps:
forward, backward with create_graph, and the backward of <W, gradient> (the
double backward). CUDA: CUDA events, median of 20 steps. CPU (--device cpu):
the process's CPU time per step, the best of 30, and the training step's
(forward, backward) the same way, with their ratio: on a shared machine CPU
time is steadier than the wall clock; run with SOFTSW_NUM_THREADS=1 for the
time of one thread; --dtype float64 for the float64 kernels, --reps fewer
steps for the slow ones. Not the benchmark.

    python dev/time_hvp.py [--shapes 64x256x256,16x1024x1024] [--profile]
    SOFTSW_NUM_THREADS=1 python dev/time_hvp.py --device cpu --shapes 16x128x128
    SOFTSW_NUM_THREADS=1 python dev/time_hvp.py --device cpu --dtype float64 --reps 5
"""
import argparse
import time

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


def cpu_times(B, M, N, gap_extend, reps=30, dtype=torch.float32):
    """(training step, HVP step): the best CPU time of `reps` steps each."""
    torch.set_num_threads(1)  # torch's own operations of the step (the loss)
    gen = torch.Generator().manual_seed(0)
    S = torch.randn(B, M, N, generator=gen, dtype=dtype).requires_grad_(True)
    W = torch.randn(B, M, N, generator=gen, dtype=dtype)

    def train():
        S.grad = None
        softsw.align(S, -1.0, 1.0, gap_extend=gap_extend).sum().backward()

    def hvp():
        S.grad = None
        out = softsw.align(S, -1.0, 1.0, gap_extend=gap_extend)
        (g,) = torch.autograd.grad(out.sum(), [S], create_graph=True)
        (g * W).sum().backward()

    best = []
    for step in (train, hvp):
        for _ in range(3):
            step()
        times = []
        for _ in range(reps):
            t0 = time.process_time()
            step()
            times.append(time.process_time() - t0)
        best.append(min(times))
    return best


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
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                    help="CPU: the scores' dtype")
    ap.add_argument("--reps", type=int, default=30, help="CPU: steps timed, the best kept")
    args = ap.parse_args()
    for shape in args.shapes.split(","):
        B, M, N = (int(x) for x in shape.split("x"))
        for name, ext in (("linear", None), ("affine", -0.5)):
            if args.device == "cpu":
                train, hvp = cpu_times(B, M, N, ext, args.reps, getattr(torch, args.dtype))
                print(f"cpu {args.dtype} {shape:>14} {name:6s} "
                      f"training step {train * 1e3:7.3f} ms  "
                      f"HVP step {hvp * 1e3:7.3f} ms  {hvp / train:5.2f}x", flush=True)
                continue
            if args.profile:
                print(f"== {shape} {name}", flush=True)
                profile_step(B, M, N, ext)
                continue
            t, g = time_step(B, M, N, ext)
            print(f"hvp step {shape:>14} {name:6s} {t * 1e3:8.2f} ms {g:7.2f} G cells/s", flush=True)


if __name__ == "__main__":
    main()
