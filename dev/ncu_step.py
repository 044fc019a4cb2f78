"""One inference forward and one training step (forward with state + backward)
for ncu (dev/device_run.sh stalls): python3 dev/ncu_step.py BxMxN."""
import sys
import torch
import softsw
B, M, N = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "256x512x512").split("x"))
S = torch.randn(B, M, N, device="cuda")
with torch.no_grad():
    softsw.align(S, -1.0, 1.0)
Sg = S.clone().requires_grad_(True)
s = softsw.align(Sg, -1.0, 1.0)
torch.autograd.grad(s.sum(), Sg)
torch.cuda.synchronize()
