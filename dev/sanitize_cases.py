"""Small CUDA cases for compute-sanitizer (dev/sanitize.sh): every variant of
the probability-domain forward, inference and training (dtypes, reductions,
lengths, a band that switches to the log domain, padding rows), the staged
backward behind the training forward, and an HVP."""
import torch

import softsw


def main():
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for reduction in ("max", "soft"):
            S = torch.randn(3, 70, 45, generator=g, dtype=torch.float64)
            S[1, 40, 20] = 300.0  # out of range: that band switches to the log domain
            lengths = torch.tensor([[70, 45], [66, 33], [5, 44]])
            with torch.no_grad():
                out = softsw.align(S.to(dtype).cuda(), -1.0, 1.0, lengths=lengths.cuda(),
                                   reduction=reduction)
            ref = softsw.align(S.to(dtype).double(), -1.0, 1.0, lengths=lengths,
                               reduction=reduction)
            err = ((out.double().cpu() - ref).abs() / ref.abs().clamp(min=1)).max().item()
            print(f"inference {dtype} {reduction}: err {err:.2e}", flush=True)
            x = S.to(dtype).cuda().requires_grad_(True)
            score = softsw.align(x, -1.0, 1.0, lengths=lengths.cuda(), reduction=reduction)
            (grad,) = torch.autograd.grad(score.sum(), x)
            xr = S.to(dtype).double().requires_grad_(True)
            ref = softsw.align(xr, -1.0, 1.0, lengths=lengths, reduction=reduction)
            (ref_grad,) = torch.autograd.grad(ref.sum(), xr)
            gerr = (grad.double().cpu() - ref_grad).abs().max().item()
            print(f"training {dtype} {reduction}: grad err {gerr:.2e}", flush=True)
    S = torch.randn(2, 40, 50, device="cuda", requires_grad=True)
    score = softsw.align(S, -1.0, 0.8, reduction="soft")
    (grad,) = torch.autograd.grad(score.sum(), S, create_graph=True)
    (hvp,) = torch.autograd.grad((grad * torch.randn_like(grad)).sum(), S)
    torch.cuda.synchronize()
    print("training step and HVP: ok", flush=True)


if __name__ == "__main__":
    main()
