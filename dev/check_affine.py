"""Developer check of the affine-gap CUDA kernels (csrc/kernels/affine.cu) against the
CPU kernel: values and gradients (scores, gap_open, gap_extend as floats or tensors of
every broadcast shape), lengths, both reductions, soft and hard. Not the test suite.

    python dev/check_affine.py            # everything (~2.4k cases; ~4 min on 2 CPU cores as a CPU dry run)
    python dev/check_affine.py --quick    # a subset

Comparisons, per case:
  * CUDA float64 vs CPU float64: relative 1e-9 (T > 0), bit-exact (T = 0);
  * CUDA float32 vs CPU float64 (T > 0: relative 1e-4 values, 2e-3 gradients), and CUDA
    float32 vs CPU float32 bit-exact (T = 0);
  * with lengths: gradients exactly 0 in the padding (which holds NaN in some cases);
then: gap_extend == gap_open (the extend passed as a tensor, so the affine kernels run)
equals the linear result; hard mode on quantized inputs (ties) equals the CPU hard mode
exactly, every dtype; invalid lengths give NaN for that pair only (ops called directly).
Prints one line per case and "ALL OK" or "FAILURES" at the end.
"""
import math
import sys

import torch

import softsw

# --device cpu: a dry run of this script itself (CPU against CPU), where no GPU is at hand.
DEV = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
QUICK = "--quick" in sys.argv
FAILED = []

# (open kind, extend kind): each broadcast shape appears once on each side.
GAP_KINDS = [("float", "float"), ("()", "BMN"), ("B", "B1N"), ("BM1", "B"), ("B1N", "()"),
             ("BMN", "BM1")]


def gap_shape(kind, B, M, N):
    return {"()": (), "B": (B,), "BM1": (B, M, 1), "B1N": (B, 1, N), "BMN": (B, M, N)}[kind]


def make_gap(kind, center, B, M, N, gen):
    if kind == "float":
        return center
    shape = gap_shape(kind, B, M, N)
    return center + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)


def rand_lengths(B, M, N, gen):
    m = torch.randint(0, M + 1, (B,), generator=gen)
    n = torch.randint(0, N + 1, (B,), generator=gen)
    m[0], n[0] = M, N  # one full pair
    if B > 2:
        m[1] = 0  # one empty pair
    return torch.stack([m, n], 1)


def padding_mask(lengths, M, N):
    i = torch.arange(M).view(1, M, 1)
    j = torch.arange(N).view(1, 1, N)
    return (i >= lengths[:, 0].view(-1, 1, 1)) | (j >= lengths[:, 1].view(-1, 1, 1))


def run(S, go, ge, T, lengths, reduction, w, device, dtype):
    """Score and gradients (scores, then every tensor gap) on `device` in `dtype`."""
    leaves = [S.detach().to(device, dtype).requires_grad_()]
    gaps = []
    for g in (go, ge):
        if isinstance(g, torch.Tensor):
            t = g.detach().to(device, dtype).requires_grad_()
            leaves.append(t)
            gaps.append(t)
        else:
            gaps.append(g)
    out = softsw.align(leaves[0], gaps[0], T, gap_extend=gaps[1],
                       lengths=None if lengths is None else lengths.to(device),
                       reduction=reduction)
    (out * w.to(device, dtype)).sum().backward()
    return out.detach().double().cpu(), [x.grad.double().cpu() for x in leaves]


def run_inference(S, go, ge, T, lengths, reduction, device, dtype):
    """The score of a forward that keeps no state (its own work split on CUDA)."""
    def to(g):
        return g.to(device, dtype) if isinstance(g, torch.Tensor) else g
    with torch.no_grad():
        out = softsw.align(S.to(device, dtype), to(go), T, gap_extend=to(ge),
                           lengths=None if lengths is None else lengths.to(device),
                           reduction=reduction)
    return out.double().cpu()


def rel_err(x, ref):
    """Max |x - ref| / max(1, max |ref|), NaN-aware (NaN must match NaN)."""
    nan_x, nan_r = torch.isnan(x), torch.isnan(ref)
    if not torch.equal(nan_x, nan_r):
        return math.inf
    ok = ~nan_r
    if not bool(ok.any()):
        return 0.0
    d = (x[ok] - ref[ok]).abs().max().item()
    return d / max(1.0, ref[ok].abs().max().item())


def exact(x, ref):
    return torch.equal(torch.isnan(x), torch.isnan(ref)) and bool(
        (x[~torch.isnan(x)] == ref[~torch.isnan(ref)]).all())


def summed_equal(x, ref, kind, rtol):
    """Exact for a gradient the kernel writes cell by cell; within a few
    roundings of a sum (relative `rtol`) for a gap broadcast over cells."""
    if kind == "BMN":
        return exact(x, ref)
    return rel_err(x, ref) < rtol


def report(ok, desc, detail):
    print(f"{'ok ' if ok else 'BAD'} {desc}: {detail}", flush=True)
    if not ok:
        FAILED.append(desc)
    return ok


def check_case(B, M, N, T, reduction, gaps, kinds, use_lengths, nan_pad, seed):
    gen = torch.Generator().manual_seed(seed)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    go = make_gap(kinds[0], gaps[0], B, M, N, gen)
    ge = make_gap(kinds[1], gaps[1], B, M, N, gen)
    lengths = rand_lengths(B, M, N, gen) if use_lengths else None
    if lengths is not None and nan_pad:
        mask = padding_mask(lengths, M, N)
        S = S.masked_fill(mask, math.nan)
        if isinstance(go, torch.Tensor) and go.shape == (B, M, N):
            go = go.masked_fill(mask, math.nan)
        if isinstance(ge, torch.Tensor) and ge.shape == (B, M, N):
            ge = ge.masked_fill(mask, math.nan)
    w = 0.5 + torch.rand(B, generator=gen, dtype=torch.float64)
    desc = (f"{B}x{M}x{N} T={T} {reduction} gaps={gaps} kinds={kinds[0]}/{kinds[1]}"
            f" lengths={use_lengths}{' nanpad' if nan_pad else ''}")
    ref_v, ref_g = run(S, go, ge, T, lengths, reduction, w, "cpu", torch.float64)
    v64, g64 = run(S, go, ge, T, lengths, reduction, w, DEV, torch.float64)
    v32, g32 = run(S, go, ge, T, lengths, reduction, w, DEV, torch.float32)
    if T == 0:
        c32_v, c32_g = run(S, go, ge, T, lengths, reduction, w, "cpu", torch.float32)
        grad_kinds = ["BMN"] + [k for k in kinds if k != "float"]  # scores, tensor gaps
        # A gap tensor broadcast over cells gets its gradient as autograd's sum
        # of w_b over the path's gap cells: torch sums in a different order on
        # CPU and CUDA, so those sums agree to rounding, not bit for bit.
        ok64 = exact(v64, ref_v) and all(summed_equal(a, b, k, 1e-14)
                                         for a, b, k in zip(g64, ref_g, grad_kinds))
        ok32 = exact(v32, c32_v) and all(summed_equal(a, b, k, 1e-5)
                                         for a, b, k in zip(g32, c32_g, grad_kinds))
        e64 = max([rel_err(v64, ref_v)] + [rel_err(a, b) for a, b in zip(g64, ref_g)])
        e32 = max([rel_err(v32, c32_v)] + [rel_err(a, b) for a, b in zip(g32, c32_g)])
        detail = f"f64 exact={ok64} ({e64:.1e}), f32 vs cpu f32 exact={ok32} ({e32:.1e})"
    else:
        e64v = rel_err(v64, ref_v)
        e64g = max(rel_err(a, b) for a, b in zip(g64, ref_g))
        e32v = rel_err(v32, ref_v)
        e32g = max(rel_err(a, b) for a, b in zip(g32, ref_g))
        ok64 = e64v < 1e-9 and e64g < 1e-9
        ok32 = e32v < 1e-4 and e32g < 2e-3
        detail = f"f64 value {e64v:.1e} grad {e64g:.1e}; f32 value {e32v:.1e} grad {e32g:.1e}"
    # Inference runs one row per lane: the same max exactly, the soft total to rounding.
    i64 = run_inference(S, go, ge, T, lengths, reduction, DEV, torch.float64)
    i32 = run_inference(S, go, ge, T, lengths, reduction, DEV, torch.float32)
    if reduction == "max" or T == 0:
        ok_inf = exact(i64, v64) and exact(i32, v32)
    else:
        ok_inf = rel_err(i64, v64) < 1e-12 and rel_err(i32, v32) < 1e-5
    detail += f"; inference same={ok_inf}"
    ok_pad = True
    if lengths is not None:
        mask = padding_mask(lengths, M, N)
        for grads in (g64, g32):
            for g in grads:
                if g.shape == (B, M, N):
                    ok_pad &= bool((g[mask] == 0).all())
        detail += f"; padding zero={ok_pad}"
    return report(ok64 and ok32 and ok_pad and ok_inf, desc, detail)


def check_linear_equivalence(B, M, N, T, reduction, g, use_lengths, seed):
    """gap_extend == gap_open (extend as a tensor: the affine kernels) is the linear result."""
    gen = torch.Generator().manual_seed(seed)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    lengths = rand_lengths(B, M, N, gen).to(DEV) if use_lengths else None
    desc = f"linear-equivalence {B}x{M}x{N} T={T} {reduction} g={g} lengths={use_lengths}"
    ok = True
    details = []
    for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 1e-4)):
        # Tensor gap shared by open and extend: its gradient sums both, = the linear one.
        go_a = torch.full((B,), g, dtype=dtype, device=DEV, requires_grad=True)
        Sa = S.detach().to(DEV, dtype).clone().requires_grad_()
        out_a = softsw.align(Sa, go_a, T, gap_extend=go_a, lengths=lengths, reduction=reduction)
        out_a.sum().backward()
        go_l = torch.full((B,), g, dtype=dtype, device=DEV, requires_grad=True)
        Sl = S.detach().to(DEV, dtype).clone().requires_grad_()
        out_l = softsw.align(Sl, go_l, T, lengths=lengths, reduction=reduction)
        out_l.sum().backward()
        # Float open, extend a 0-d tensor with the same value.
        Sb = S.detach().to(DEV, dtype).clone().requires_grad_()
        out_b = softsw.align(Sb, g, T, gap_extend=torch.tensor(g, dtype=dtype, device=DEV),
                             lengths=lengths, reduction=reduction)
        out_b.sum().backward()
        pairs = [(out_a, out_l), (Sa.grad, Sl.grad), (go_a.grad, go_l.grad), (out_b, out_l),
                 (Sb.grad, Sl.grad)]
        if T == 0 and dtype == torch.float64:
            # Hard: values are bit-identical (max(A, U) + g == max(A + g, U + g)); random
            # inputs have no ties, so the tracebacks agree too.
            this = all(exact(x.detach().double().cpu(), y.detach().double().cpu())
                       for x, y in pairs)
            details.append(f"{dtype} exact={this}")
        else:
            err = max(rel_err(x.detach().double().cpu(), y.detach().double().cpu())
                      for x, y in pairs)
            this = err < (tol if T > 0 else 1e-6)
            details.append(f"{dtype} {err:.1e}")
        ok &= this
    return report(ok, desc, ", ".join(details))


def check_hard_exact(B, M, N, reduction, dtype, kinds, use_lengths, seed):
    """Quantized inputs (many ties): CUDA hard mode == CPU hard mode, bit for bit."""
    gen = torch.Generator().manual_seed(seed)
    S = torch.round(torch.randn(B, M, N, generator=gen, dtype=torch.float64) * 8) / 4
    go = make_gap(kinds[0], -1.25, B, M, N, gen)
    ge = make_gap(kinds[1], -0.375, B, M, N, gen)
    go = torch.round(go * 8) / 8 if isinstance(go, torch.Tensor) else go
    ge = torch.round(ge * 8) / 8 if isinstance(ge, torch.Tensor) else ge
    lengths = rand_lengths(B, M, N, gen) if use_lengths else None
    w = torch.ones(B, dtype=torch.float64)
    cv, cg = run(S, go, ge, 0.0, lengths, reduction, w, "cpu", dtype)
    gv, gg = run(S, go, ge, 0.0, lengths, reduction, w, DEV, dtype)
    ok = exact(gv, cv) and all(exact(a, b) for a, b in zip(gg, cg))
    nonzero = int((cg[0] != 0).sum())
    desc = (f"hard-exact {B}x{M}x{N} {reduction} {dtype} kinds={kinds[0]}/{kinds[1]}"
            f" lengths={use_lengths}")
    return report(ok, desc, f"exact={ok} (path cells {nonzero})")


def check_dtype(B, M, N, T, reduction, dtype, seed):
    """Half types (accumulate in float32) against the CPU kernel in the same dtype."""
    gen = torch.Generator().manual_seed(seed)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    go = make_gap("BM1", -1.0, B, M, N, gen)
    ge = make_gap("()", -0.3, B, M, N, gen)
    lengths = rand_lengths(B, M, N, gen)
    w = torch.ones(B, dtype=torch.float64)
    cv, cg = run(S, go, ge, T, lengths, reduction, w, "cpu", dtype)
    gv, gg = run(S, go, ge, T, lengths, reduction, w, DEV, dtype)
    if T == 0:
        ok = exact(gv, cv) and all(exact(a, b) for a, b in zip(gg, cg))
        detail = f"exact={ok}"
    else:
        ev = rel_err(gv, cv)
        eg = max(rel_err(a, b) for a, b in zip(gg, cg))
        ok = ev < 2e-2 and eg < 5e-2
        detail = f"value {ev:.1e} grad {eg:.1e}"
    return report(ok, f"dtype {dtype} {B}x{M}x{N} T={T} {reduction}", detail)


def check_invalid_lengths(T, reduction):
    """Out-of-range lengths (only reachable past the Python checks): NaN for that pair only."""
    B, M, N = 3, 40, 30
    gen = torch.Generator().manual_seed(7)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([[M, N], [M + 1, 5], [20, 17]])
    go = torch.full((B, M, N), -1.0, dtype=torch.float64)
    ge = torch.full((B, M, N), -0.3, dtype=torch.float64)
    red = {"max": 0, "soft": 1}[reduction]
    res = {}
    for dev in ("cpu", DEV):
        args = (S.to(dev), go.to(dev), ge.to(dev), -1.0, -0.3, True, T, lengths.to(dev), red)
        score, hidden, argmax, total = torch.ops.softsw.forward(*args, True)
        grads = torch.ops.softsw.backward(torch.ones(B, dtype=torch.float64, device=dev), *args,
                                          hidden, argmax, total)
        res[dev] = [score.cpu()] + [g.cpu() for g in grads]
    ok = all(bool(torch.isnan(x[1]).all()) for x in res[DEV])
    ok &= all(rel_err(a, b) < 1e-9 for a, b in zip(res[DEV], res["cpu"]))
    return report(ok, f"invalid-lengths T={T} {reduction}", f"NaN pair only, matches CPU={ok}")


def check_nan_inside(T, reduction, dtype):
    """A NaN score inside pair 0 (pair 1 clean): same NaN pattern and values as the CPU."""
    B, M, N = 2, 140, 37
    gen = torch.Generator().manual_seed(11)
    S = torch.randn(B, M, N, generator=gen, dtype=torch.float64)
    S[0, 70, 20] = math.nan
    go = make_gap("B1N", -1.0, B, M, N, gen)
    ge = make_gap("BM1", -0.3, B, M, N, gen)
    w = torch.ones(B, dtype=torch.float64)
    cv, cg = run(S, go, ge, T, None, reduction, w, "cpu", dtype)
    gv, gg = run(S, go, ge, T, None, reduction, w, DEV, dtype)
    tol = 0.0 if T == 0 else (1e-9 if dtype == torch.float64 else 2e-3)
    errs = [rel_err(gv, cv)] + [rel_err(a, b) for a, b in zip(gg, cg)]
    ok = max(errs) <= tol and bool(torch.isnan(gv[0])) and not bool(torch.isnan(gv[1]))
    return report(ok, f"nan-inside T={T} {reduction} {dtype}", f"max err {max(errs):.1e}")


def main():
    if DEV == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    shapes = [(2, 1, 1), (2, 1, 9), (2, 9, 1), (3, 31, 33), (2, 100, 7), (2, 300, 20),
              (2, 64, 64)]
    if not QUICK:
        shapes += [(2, 129, 5), (1, 33, 40), (2, 257, 40)]  # a last band of 1 row; 2 rows
    temps = (1.0, 0.3, 0.0)
    gap_sets = [(-3.0, -1.0), (-1.0, -1.0), (-0.5, -2.0)]
    seed = 0
    for (B, M, N) in shapes:
        for T in temps:
            for reduction in ("max", "soft"):
                for gaps in gap_sets:
                    kinds_list = GAP_KINDS if not QUICK else GAP_KINDS[seed % 6:seed % 6 + 1]
                    for kinds in kinds_list:
                        for use_lengths in (False, True):
                            seed += 1
                            check_case(B, M, N, T, reduction, gaps, kinds, use_lengths,
                                       nan_pad=use_lengths and seed % 2 == 0, seed=seed)
    # -inf open (no gaps at all) and a large open/extend spread.
    for T in temps:
        for reduction in ("max", "soft"):
            seed += 1
            check_case(2, 70, 50, T, reduction, (-math.inf, -1.0), ("float", "float"), True,
                       False, seed)
            seed += 1
            check_case(2, 70, 50, T, reduction, (-4.0, -0.1), ("BMN", "BMN"), True, True, seed)
    for (B, M, N) in [(2, 1, 9), (3, 31, 33), (2, 300, 20), (2, 64, 64)]:
        for T in temps:
            for reduction in ("max", "soft"):
                for g in (-1.0, -0.4):
                    for use_lengths in (False, True):
                        seed += 1
                        check_linear_equivalence(B, M, N, T, reduction, g, use_lengths, seed)
    for (B, M, N) in [(2, 9, 1), (3, 31, 33), (2, 300, 20), (2, 64, 64), (2, 200, 150)]:
        for reduction in ("max", "soft"):
            for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
                for kinds in (("float", "float"), ("BM1", "BMN")):
                    seed += 1
                    check_hard_exact(B, M, N, reduction, dtype, kinds, seed % 2 == 0, seed)
    for dtype in (torch.float16, torch.bfloat16):
        for T in (1.0, 0.0):
            for reduction in ("max", "soft"):
                seed += 1
                check_dtype(2, 150, 40, T, reduction, dtype, seed)
    for T in (1.0, 0.0):
        for reduction in ("max", "soft"):
            check_invalid_lengths(T, reduction)
            for dtype in (torch.float64, torch.float32):
                check_nan_inside(T, reduction, dtype)
    if FAILED:
        print(f"{len(FAILED)} failing cases:")
        for d in FAILED[:60]:
            print("  ", d)
        print("FAILURES")
        return 1
    print("ALL OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
