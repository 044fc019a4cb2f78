"""Developer probe of a CUDA training step, pass by pass: the inference forward,
the forward that keeps its state, the backward alone, and the whole step
(forward + autograd.grad), in ms and G cells/s (CUDA events, medians).
Usage: python dev/probe_training.py [--shapes BxMxN,...] [--affine] [--reduction soft]"""
import argparse

import torch

import softsw
from probe_inference import timed  # dev/ is on the path when run as a script

SHAPES = "16x32x32,1024x128x128,128x900x900,256x512x512,64x1024x1024,8x4096x4096,1x16384x16384"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--affine", action="store_true")
    p.add_argument("--reduction", default="max")
    p.add_argument("--temperature", type=float, default=1.0)
    a = p.parse_args()
    red = 1 if a.reduction == "soft" else 0
    ext = -0.5 if a.affine else 0.0
    print(f"{'shape':>16} {'inference':>18} {'fwd+state':>18} {'backward':>18} {'step':>18}"
          "   (ms / G cells/s)", flush=True)
    for shape in a.shapes.split(","):
        B, M, N = (int(v) for v in shape.split("x"))
        cells = B * M * N
        S = torch.randn(B, M, N, device="cuda")
        args = (S, None, None, -1.0, ext, a.affine, a.temperature, None, red)
        g = torch.ones(B, device="cuda")
        reps = max(5, min(200, int(2e10 // cells)))
        _, hidden, argmax, total = torch.ops.softsw.forward(*args, True)
        Sg = S.clone().requires_grad_(True)

        def step():
            s = softsw.align(Sg, -1.0, a.temperature, reduction=a.reduction,
                             gap_extend=ext if a.affine else None)
            torch.autograd.grad(s.sum(), Sg)

        runs = [lambda: torch.ops.softsw.forward(*args, False),
                lambda: torch.ops.softsw.forward(*args, True),
                lambda: torch.ops.softsw.backward(g, *args, hidden, argmax, total),
                step]
        row = []
        for f in runs:
            for _ in range(2):
                f()
            torch.cuda.synchronize()
            t = timed(f, reps)
            row.append(f"{t * 1e3:9.3f} {cells / t / 1e9:7.1f}")
        print(f"{shape:>16} " + " ".join(f"{r:>18}" for r in row), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
