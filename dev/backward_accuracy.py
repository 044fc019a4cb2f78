"""Developer check of the CUDA backward's float32 accuracy against float64, at
shapes larger than the tests': d score / d S of softsw.align on N(0, 1) scores
(times --scale), gap -1, per reduction and temperature; the largest |error|
over the largest |gradient|, per shape. To compare two builds or kernel
switches (read once a process), run it once with each, --label telling the
lines apart; each run's float64 reference is its own build's.
Usage: python dev/backward_accuracy.py [--shapes BxMxN,...] [--scale 1] [--label text]"""
import argparse

import torch

import softsw


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="8x512x512,2x2048x2048,1x4096x4096")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--label", default="backward")
    a = p.parse_args()
    for shape in a.shapes.split(","):
        B, M, N = (int(v) for v in shape.split("x"))
        gen = torch.Generator(device="cuda").manual_seed(B * M + N)
        S64 = torch.randn(B, M, N, device="cuda", dtype=torch.float64, generator=gen) * a.scale
        for reduction in ("soft", "max"):
            for T in (1.0, 0.3):
                grads = {}
                for dtype in (torch.float64, torch.float32):
                    S = S64.to(dtype).requires_grad_(True)
                    score = softsw.align(S, -1.0, T, reduction=reduction)
                    (g,) = torch.autograd.grad(score.sum(), S)
                    grads[dtype] = (g.double(), score.double())
                g64, s64 = grads[torch.float64]
                g32, s32 = grads[torch.float32]
                err = ((g32 - g64).abs().max() / g64.abs().max()).item()
                serr = ((s32 - s64).abs() / s64.abs().clamp_min(1e-30)).max().item()
                print(f"{a.label} {shape} {reduction} T={T}: score {s64.max().item():.1f}, "
                      f"score rel err {serr:.1e}, d/dS err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
