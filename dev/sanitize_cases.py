"""Small CUDA cases for compute-sanitizer (dev/sanitize.sh): every variant of
the probability-domain forward, inference and training (dtypes, reductions,
lengths, a band that switches to the log domain, padding rows; linear gaps,
a gap tensor, affine gaps at inference), the staged backward behind the
training forward, and an HVP."""
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
            with torch.no_grad():  # affine gaps (the inference forward's variant)
                out = softsw.align(S.to(dtype).cuda(), -1.0, 1.0, gap_extend=-0.5,
                                   lengths=lengths.cuda(), reduction=reduction)
            ref = softsw.align(S.to(dtype).double(), -1.0, 1.0, gap_extend=-0.5,
                               lengths=lengths, reduction=reduction)
            err = ((out.double().cpu() - ref).abs() / ref.abs().clamp(min=1)).max().item()
            print(f"affine inference {dtype} {reduction}: err {err:.2e}", flush=True)
            gap = torch.full((3, 70, 45), -1.0, dtype=dtype)  # a gap tensor, one entry out of range
            gap[2, 3, 10] = -60.0
            x = S.to(dtype).cuda().requires_grad_(True)
            score = softsw.align(x, gap.cuda(), 1.0, lengths=lengths.cuda(), reduction=reduction)
            (grad,) = torch.autograd.grad(score.sum(), x)
            xr = S.to(dtype).double().requires_grad_(True)
            ref = softsw.align(xr, gap.double(), 1.0, lengths=lengths, reduction=reduction)
            (ref_grad,) = torch.autograd.grad(ref.sum(), xr)
            gerr = (grad.double().cpu() - ref_grad).abs().max().item()
            print(f"gap tensor training {dtype} {reduction}: grad err {gerr:.2e}", flush=True)
    # HVPs (the staged reverse pass with TangentAdjointRow): both reductions,
    # a gap tensor (its second derivatives too), 2-byte scores, T = 0.
    for dtype, reduction, gap_tensor, temperature in (
            (torch.float32, "soft", False, 0.8), (torch.float32, "max", True, 1.0),
            (torch.bfloat16, "soft", True, 1.0), (torch.float64, "max", False, 1.0),
            (torch.float32, "max", False, 0.0)):
        S = torch.randn(2, 40, 50, device="cuda", dtype=dtype, requires_grad=True)
        gap = (torch.full((2, 40, 50), -1.0, device="cuda", dtype=dtype, requires_grad=True)
               if gap_tensor else -1.0)
        inputs = [S, gap] if gap_tensor else [S]
        score = softsw.align(S, gap, temperature, reduction=reduction)
        grads = torch.autograd.grad(score.sum(), inputs, create_graph=True)
        loss = sum((g * torch.randn_like(g)).sum() for g in grads)
        if loss.requires_grad:
            torch.autograd.grad(loss, inputs)
        torch.cuda.synchronize()
        print(f"HVP {dtype} {reduction} gap tensor {gap_tensor} T {temperature}: ok", flush=True)


if __name__ == "__main__":
    main()
