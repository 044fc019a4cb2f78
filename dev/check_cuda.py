"""Developer smoke check of the CUDA kernels against a float64 anti-diagonal
reference (autograd for gradients), plus rough timings. Not the test suite."""
import sys

import torch

import softsw


def reference(S, g, T, lengths=None, reduction="max"):
    """Float64 anti-diagonal soft/hard SW, linear gaps, per pair loop over lengths."""
    out = []
    for b in range(S.shape[0]):
        m, n = (S.shape[1], S.shape[2]) if lengths is None else (int(lengths[b, 0]), int(lengths[b, 1]))
        if m == 0 or n == 0:
            out.append(S.new_zeros(()))
            continue
        s = S[b, :m, :n]
        H = [[None] * (n + 1) for _ in range(m + 1)]
        zero = s.new_zeros(())
        for i in range(m + 1):
            H[i][0] = zero
        for j in range(n + 1):
            H[0][j] = zero
        cells = []
        for i in range(1, m + 1):
            for j in range(1, n + 1):
                v = torch.stack([zero, H[i - 1][j - 1] + s[i - 1, j - 1], H[i - 1][j] + g, H[i][j - 1] + g])
                H[i][j] = v.max() if T == 0 else T * torch.logsumexp(v / T, 0)
                cells.append(H[i][j])
        c = torch.stack(cells)
        if reduction == "max" or T == 0:
            out.append(torch.maximum(c.max(), zero))
        else:
            out.append(T * torch.logsumexp(c / T, 0))
    return torch.stack(out)


def check(B, M, N, T, g, reduction, lengths=False, dtype=torch.float32):
    S = torch.randn(B, M, N, dtype=torch.float64)
    L = None
    if lengths:
        L = torch.stack([torch.randint(0, M + 1, (B,)), torch.randint(0, N + 1, (B,))], 1)
    Sr = S.clone().requires_grad_()
    ref = reference(Sr, g, T, L, reduction)
    ref.sum().backward()
    Sc = S.to("cuda", dtype).requires_grad_()
    out = softsw.align(Sc, g, T, lengths=None if L is None else L.cuda(), reduction=reduction)
    out.sum().backward()
    e_out = (out.double().cpu() - ref.detach()).abs().max().item() / max(1.0, ref.abs().max().item())
    e_grad = (Sc.grad.double().cpu() - Sr.grad).abs().max().item()
    ok = e_out < (1e-10 if dtype == torch.float64 else 2e-4) and e_grad < (1e-9 if dtype == torch.float64 else 2e-3)
    print(f"{'ok ' if ok else 'BAD'} B={B} M={M} N={N} T={T} g={g} red={reduction} len={lengths} {dtype}: "
          f"out err {e_out:.2e} grad err {e_grad:.2e}", flush=True)
    return ok


def bench(B, M, N, train, reps=20):
    S = torch.randn(B, M, N, device="cuda")
    if train:
        S.requires_grad_()
    def step():
        out = softsw.align(S, -1.0, 1.0)
        if train:
            out.sum().backward()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    times = []
    for _ in range(reps):
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    t = times[len(times) // 2]
    print(f"{'train' if train else 'infer'} {B}x{M}x{N}: {t*1e6:9.1f} us  {B*M*N/t/1e9:8.1f} GCUPS", flush=True)


def bench_all():
    for shape in [(16, 32, 32), (1024, 128, 128), (256, 512, 512), (64, 1024, 1024), (8, 4096, 4096), (1, 16384, 16384)]:
        for train in (False, True):
            try:
                bench(*shape, train, reps=5 if shape[1] >= 4096 else 20)
            except Exception as e:  # keep going
                print(shape, train, "ERROR", e)


if __name__ == "__main__":
    if "--bench-only" in sys.argv:
        bench_all()
        sys.exit(0)
    torch.manual_seed(0)
    ok = True
    for (B, M, N) in [(2, 1, 1), (2, 1, 9), (2, 9, 1), (3, 31, 33), (2, 100, 7), (2, 64, 64), (1, 130, 70), (1, 300, 45)]:
        for T in (1.0, 0.0):
            for red in ("max", "soft"):
                ok &= check(B, M, N, T, -0.3 if T else -2.0, red, dtype=torch.float64)
    ok &= check(4, 140, 40, 1.0, -1.0, "max", lengths=True, dtype=torch.float64)
    ok &= check(4, 140, 40, 1.0, -1.0, "soft", lengths=True, dtype=torch.float64)
    ok &= check(3, 40, 50, 0.5, -1.0, "max", dtype=torch.float32)
    ok &= check(3, 200, 50, 5.0, -1.0, "soft", dtype=torch.float32)
    # Larger shapes (the bulk path: R = 4, aligned rows) against the CPU kernel in float64.
    for (B, M, N, lengths) in [(2, 300, 260, False), (1, 520, 300, False), (2, 257, 263, False),
                               (3, 400, 300, True), (1, 129, 1024, False)]:
        for T in (1.0, 0.0):
            for red in ("max", "soft"):
                S = torch.randn(B, M, N, dtype=torch.float64)
                L = None
                if lengths:
                    L = torch.stack([torch.randint(M // 2, M + 1, (B,)), torch.randint(N // 2, N + 1, (B,))], 1)
                ref_s, ref_a = softsw.alignment(S, -0.7, T, lengths=L, reduction=red)
                for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 2e-3)):
                    out_s, out_a = softsw.alignment(S.to("cuda", dtype), -0.7, T,
                                                    lengths=None if L is None else L.cuda(), reduction=red)
                    e1 = (out_s.double().cpu() - ref_s).abs().max().item() / max(1.0, ref_s.abs().max().item())
                    e2 = (out_a.double().cpu() - ref_a).abs().max().item()
                    good = e1 < tol and e2 < (tol if T else 1e-9 if dtype == torch.float64 else 1.0)
                    ok &= good
                    print(f"{'ok ' if good else 'BAD'} vs CPU B={B} M={M} N={N} T={T} red={red} len={lengths} {dtype}: "
                          f"score err {e1:.2e} alignment err {e2:.2e}", flush=True)
    print("ALL OK" if ok else "FAILURES", flush=True)
    if "--bench" in sys.argv:
        bench_all()
