"""Developer probe of the CUDA inference forward: G cells/s (CUDA events, rotating
input buffers), fp32 error against the float64 CPU kernel for the probability-domain
inference and the log-domain training forward on the same inputs, and one launch
per shape for ncu (--ncu)."""
import argparse

import torch

import softsw

SHAPES = [(1024, 128, 128), (128, 900, 900), (256, 512, 512), (64, 1024, 1024),
          (8, 4096, 4096), (1, 16384, 16384), (64, 100, 100), (16, 32, 32)]


def parse(s):
    return [tuple(int(v) for v in x.split("x")) for x in s.split(",")]


def timed(f, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def bench(shapes, dtype, reduction, T):
    print(f"{'shape':>16} {'dtype':>9} {'red':>4} {'ms':>9} {'G cells/s':>10}", flush=True)
    for (B, M, N) in shapes:
        nbuf = max(1, min(8, int(2e9 // (B * M * N * 4))))
        bufs = [torch.randn(B, M, N, device="cuda").to(dtype) for _ in range(nbuf)]
        i = [0]

        def call():
            i[0] = (i[0] + 1) % nbuf
            with torch.no_grad():
                softsw.align(bufs[i[0]], -1.0, T, reduction=reduction)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        cells = B * M * N
        reps = max(5, min(200, int(2e10 // cells)))
        t = timed(call, reps)
        print(f"{B}x{M}x{N:>6} {str(dtype)[6:]:>9} {reduction:>4} {t * 1e3:9.3f} {cells / t / 1e9:10.1f}", flush=True)
        bufs.clear()


def accuracy(T):
    print("fp32 error vs float64 (max |err| / max(1, |ref|)):", flush=True)
    for (B, M, N, scale) in [(16, 256, 256, 1.0), (16, 256, 256, 3.0), (4, 1024, 1024, 1.0)]:
        S = (torch.randn(B, M, N, dtype=torch.float64) * scale).float()
        for red in ("max", "soft"):
            with torch.no_grad():
                ref = softsw.align(S.double(), -1.0, T, reduction=red)
                prob = softsw.align(S.cuda(), -1.0, T, reduction=red).cpu().double()
            log = softsw.align(S.cuda().requires_grad_(True), -1.0, T, reduction=red).detach().cpu().double()
            den = ref.abs().clamp(min=1)
            print(f"  {B}x{M}x{N} |S|~{scale} T={T} {red}: probability {((prob - ref).abs() / den).max():.2e}"
                  f"  log {((log - ref).abs() / den).max():.2e}", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=None)
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--reduction", default="max")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--ncu", action="store_true")
    p.add_argument("--accuracy", action="store_true")
    a = p.parse_args()
    shapes = parse(a.shapes) if a.shapes else SHAPES
    if a.ncu:
        for (B, M, N) in shapes:
            S = torch.randn(B, M, N, device="cuda")
            with torch.no_grad():
                softsw.align(S, -1.0, a.temperature)
        torch.cuda.synchronize()
    elif a.accuracy:
        accuracy(a.temperature)
    else:
        for d in a.dtypes.split(","):
            bench(shapes, getattr(torch, d), a.reduction, a.temperature)
