"""Developer profiling helper: host overhead per call and one kernel launch per shape (for ncu)."""
import sys
import time

import torch

import softsw


def host_overhead():
    S = torch.randn(16, 32, 32, device="cuda")
    args = (S, None, None, -1.0, -1.0, False, 1.0, None, 0, False)
    for name, f in [("softsw.align", lambda: softsw.align(S)),
                    ("torch.ops.softsw.align", lambda: torch.ops.softsw.align(S, -1.0, 1.0)),
                    ("torch.ops.softsw.forward", lambda: torch.ops.softsw.forward(*args)),
                    ("torch.empty", lambda: torch.empty(16, device="cuda"))]:
        for _ in range(200):
            f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(2000):
            f()
        torch.cuda.synchronize()
        print(f"host+gpu per call {name}: {(time.perf_counter() - t) / 2000 * 1e6:.1f} us", flush=True)


def one_each():
    for (B, M, N) in [(16, 32, 32), (1024, 128, 128), (256, 512, 512)]:
        S = torch.randn(B, M, N, device="cuda", requires_grad=True)
        softsw.align(S).sum().backward()
    torch.cuda.synchronize()


def profile_step():
    """Where the time of one eager 16x32x32 training step goes (host and GPU)."""
    from torch.profiler import ProfilerActivity, profile
    S = torch.randn(16, 32, 32, device="cuda", requires_grad=True)

    def step():
        softsw.align(S).sum().backward()
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25), flush=True)


if __name__ == "__main__":
    if "--host" in sys.argv:
        host_overhead()
        profile_step()
    else:
        one_each()
