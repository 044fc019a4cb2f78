"""How far the CUDA float32 Hessian-vector product misses the float64 CPU kernels,
over many seeds, in units of the tests' error model (grad_tol, hvp_tol), next to
how far the CPU float32 kernels miss (the tests allow the larger of the model and
4x the CPU's miss): the cases of
test_probability_domain.py's HVP tests where some groups of steps overflow.
Run it twice to compare the tangent pass's domains:

    python3 dev/hvp_accuracy.py [--seeds 20]
    SOFTSW_PROBABILITY_TANGENT=0 python3 dev/hvp_accuracy.py
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from conftest import grad_tol, hvp_tol, tolerance_used  # noqa: E402
from helpers import first_and_second  # noqa: E402


def worst(got, ref, tol):
    """How many times `tol` assert_close needs for got against ref (above 1: fails)."""
    return tolerance_used(got, ref) / tol


def case(seed, magnitude, T, reduction, v_scale, M, N, B=2):
    gen = torch.Generator().manual_seed(seed)
    S = (torch.randn(B, M, N, generator=gen, dtype=torch.float64) * magnitude).float()
    w = torch.randn(B, generator=gen, dtype=torch.float64) * 0.25 + 1.0
    V = torch.randn(B, M, N, generator=gen, dtype=torch.float64) * v_scale
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run of the script
    got, _ = first_and_second(S.to(dev), -1.0, T, None, reduction, w.to(dev), V.to(dev), None,
                              torch.float32)
    ref, top = first_and_second(S.double(), -1.0, T, None, reduction, w, V, None, torch.float64)
    own, _ = first_and_second(S, -1.0, T, None, reduction, w, V, None, torch.float32)
    scale = S.double().abs().max().item()
    tols = [grad_tol(torch.float32, M, N, T, scale), hvp_tol(torch.float32, M, N, T, scale),
            grad_tol(torch.float32, M, N, T, scale)]
    return ([worst(a, e, t) for a, e, t in zip(got, ref, tols)],
            [worst(c, e, t) for c, e, t in zip(own, ref, tols)], top)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=20)
    a = p.parse_args()
    mode = os.environ.get("SOFTSW_PROBABILITY_TANGENT", "1")
    print(f"tangent pass: {'log domain' if mode == '0' else 'probability domain'}; "
          "worst error / tolerance over the seeds (d/dS, hvp S, <V, A>), and how many fail")
    for magnitude, T, reduction, v_scale, M, N in (
            (6.0, 1.0, "soft", 1.0, 70, 90), (6.0, 1.0, "max", 1.0, 70, 90),
            (6.0, 1.0, "soft", 1.0, 140, 180), (4.0, 1.0, "soft", 1e25, 70, 90),
            (1.0, 1.0, "soft", 1.0, 70, 90)):
        ratios, fails, scores, cpu = [], 0, [], []
        for seed in range(a.seeds):
            r, r_cpu, top = case(seed, magnitude, T, reduction, v_scale, M, N)
            ratios.append(r)
            cpu.append(max(r_cpu))
            scores.append(top)
            fails += any(x > max(1, 4 * y) for x, y in zip(r, r_cpu))
        cols = list(zip(*ratios))
        print(f"  {M}x{N}, |S| ~ {magnitude:g} N(0,1), T {T:g}, {reduction}, "
              f"direction x{v_scale:g}: "
              + ", ".join(f"{max(c):.2f} (median {sorted(c)[len(c) // 2]:.2f})" for c in cols)
              + f"; CPU float32 {max(cpu):.2f}; {fails}/{a.seeds} fail (above 1 and 4x the CPU's); "
              f"largest |score| {max(scores):.3g}")


if __name__ == "__main__":
    main()
