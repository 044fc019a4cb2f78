"""fp32 error of the CPU kernels against float64 on fixed inputs (seeded).

Reference: softsw's own float64 CPU path, which the test suite holds to 1e-12
against tests/reference.py (the Python reference is too slow for these sizes).
Error = max |x32 - x64| / max(1, max |x64|), for the score, d/dS and d/dgap,
and the Hessian-vector product d/dS of <grad, W>. Run: PYTHONPATH=src python dev/cpu_error.py
"""
import torch

import softsw

CASES = [  # (B, M, N, T, score scale, affine, reduction)
    (16, 128, 128, 1.0, 1.0, False, "max"),
    (16, 128, 128, 1.0, 1.0, False, "soft"),
    (16, 128, 128, 0.1, 2.0, False, "max"),
    (16, 128, 128, 10.0, 4.0, False, "soft"),
    (4, 128, 128, 1e-3, 1e2, False, "max"),
    (4, 128, 128, 1e3, 1e4, False, "max"),
    (8, 64, 96, 1.0, 1.0, True, "max"),
    (8, 64, 96, 0.3, 2.0, True, "soft"),
    (1, 1024, 1024, 1.0, 1.0, False, "max"),
]


def rel(a, e):
    return ((a.double() - e).abs().max() / max(1.0, e.abs().max().item())).item()


def run(S, T, affine, reduction, hvp):
    S = S.clone().requires_grad_(True)
    go = torch.full_like(S, -1.0).requires_grad_(True)
    ge = torch.full_like(S, -0.5).requires_grad_(True) if affine else None
    out = softsw.align(S, go, T, gap_extend=ge, reduction=reduction)
    ins = [S, go] + ([ge] if affine else [])
    g = torch.autograd.grad(out.sum(), ins, create_graph=hvp)
    res = [out.detach(), g[0].detach(), g[1].detach()]
    if hvp:
        W = torch.linspace(-1, 1, S.numel(), dtype=S.dtype).reshape(S.shape)
        res.append(torch.autograd.grad((g[0] * W).sum(), S)[0].detach())
    return res


def main():
    gen = torch.Generator().manual_seed(1234)
    print(f"{'case':42s} {'score':>9s} {'dS':>9s} {'dgap':>9s} {'hvp dS':>9s}")
    for B, M, N, T, sc, affine, red in CASES:
        S64 = torch.randn(B, M, N, generator=gen, dtype=torch.float64) * sc
        S32 = S64.float()
        hvp = M * N <= 128 * 128
        e = run(S32.double(), T, affine, red, hvp)
        a = run(S32, T, affine, red, hvp)
        errs = [rel(x, y) for x, y in zip(a, e)]
        name = f"{B}x{M}x{N} T={T:g} |S|~{sc:g} {'affine' if affine else 'linear'} {red}"
        print(f"{name:42s} " + " ".join(f"{x:9.2e}" for x in errs))


if __name__ == "__main__":
    main()
