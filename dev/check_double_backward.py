"""Developer check of the CUDA double backward (Hessian-vector product).

1. Op level: torch.ops.softsw.double_backward on CUDA (float64, float32; half
   types loosely) against the CPU kernel in float64 on the same (rounded)
   inputs: grad_grad_score = <W, A>, hvp_scores and hvp_gap_open. Also invalid
   lengths (NaN for that pair only) and bitwise determinism of two CUDA runs.
2. torch.autograd.gradgradcheck on CUDA float64 through softsw.align (float
   gap and a (B, M, N) gap tensor with requires_grad, lengths, both
   reductions, T in {1, 0.5, 0}); full mode for tiny shapes, fast mode else.

One line per case with its max errors (normalised by max(1, max |reference|)),
then "ALL OK" or "FAILURES". Not the test suite.

    python dev/check_double_backward.py            # on the GPU
    python dev/check_double_backward.py --affine   # affine gaps (extend -0.25, or a tensor)
    python dev/check_double_backward.py --device cpu   # dry run of the script (CPU vs CPU)
"""
import argparse
import sys

import torch

import softsw

RED = {"max": 0, "soft": 1}
ok_all = True
AFFINE = False  # --affine: gap_extend as well (a float, or a tensor of the open gap's kind)


def report(ok, line):
    global ok_all
    ok_all &= bool(ok)
    print(f"{'ok ' if ok else 'BAD'} {line}", flush=True)


def gap_arg(gap, Wg, device, dtype):
    """(tensor or None, float value, direction or None) of one gap score."""
    if not isinstance(gap, torch.Tensor):
        return None, float(gap), None
    gap_t = gap.to(device, dtype)
    # keep broadcast strides if the caller passed an expanded view
    if gap.stride() != gap.contiguous().stride():
        base = gap[:, : (1 if gap.stride(1) == 0 else None), : (1 if gap.stride(2) == 0 else None)]
        gap_t = base.to(device, dtype).expand(gap.shape)
    return gap_t, 0.0, Wg.to(device, dtype).contiguous()


def run_ops(device, dtype, S, gap, T, lengths, red, W, Wg, gs, ext=None, We=None):
    """forward + double_backward through the raw ops on `device` in `dtype`.
    `gap` (and the affine `ext`): float, or a (B, M, N) tensor (possibly an
    expanded view)."""
    scores = S.to(device, dtype)
    gap_t, gap_v, dir_gap = gap_arg(gap, Wg, device, dtype)
    affine = ext is not None
    ext_t, ext_v, dir_ext = gap_arg(ext, We, device, dtype) if affine else (None, gap_v, None)
    L = None if lengths is None else lengths.to(device)
    score, hidden, argmax, total = torch.ops.softsw.forward(
        scores, gap_t, ext_t, gap_v, ext_v, affine, T, L, RED[red], True)
    ggs, h_s, h_o, h_e = torch.ops.softsw.double_backward(
        None if W is None else W.to(device, dtype).contiguous(), dir_gap, dir_ext,
        gs.to(device, dtype), scores, gap_t, ext_t, gap_v, ext_v, affine, T, L, RED[red],
        hidden, argmax, total)
    return (ggs, h_s, (h_o if gap_t is not None else None),
            (h_e if ext_t is not None else None))


def err(x, ref):
    """max |x - ref| / max(1, max |ref|) over non-NaN entries; inf if NaN masks differ."""
    if x is None and ref is None:
        return 0.0
    x = x.double().cpu()
    ref = ref.double().cpu()
    if not torch.equal(torch.isnan(x), torch.isnan(ref)):
        return float("inf")
    keep = ~torch.isnan(ref)
    if keep.sum() == 0:
        return 0.0
    d = (x[keep] - ref[keep]).abs().max().item()
    return d / max(1.0, ref[keep].abs().max().item())


def random_lengths(B, M, N, g):
    m = torch.randint(0, M + 1, (B,), generator=g)
    n = torch.randint(0, N + 1, (B,), generator=g)
    if B > 1:
        m[0], n[0] = M, N  # one full pair
    if B > 2:
        m[1] = max(1, M // 2)
    return torch.stack([m, n], 1)


def op_case(device, B, M, N, T, red, gap_kind, use_lengths, dtype, g, tol):
    S = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    if gap_kind == "float":
        gap = -0.6
    elif gap_kind == "full":
        gap = -0.6 + 0.3 * torch.randn(B, M, N, generator=g, dtype=torch.float64)
    else:  # (B, 1, N) broadcast, passed as an expanded (stride 0) view
        gap = (-0.6 + 0.3 * torch.randn(B, 1, N, generator=g, dtype=torch.float64)).expand(B, M, N)
    ext = None
    if AFFINE:
        if gap_kind == "float":
            ext = -0.25
        elif gap_kind == "full":
            ext = -0.25 + 0.1 * torch.randn(B, M, N, generator=g, dtype=torch.float64)
        else:
            ext = (-0.25 + 0.1 * torch.randn(B, 1, N, generator=g, dtype=torch.float64)).expand(B, M, N)
    W = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    Wg = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    We = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    gs = torch.randn(B, generator=g, dtype=torch.float64)
    L = random_lengths(B, M, N, g) if use_lengths else None
    # The reference sees the inputs rounded to `dtype`.
    rnd = lambda t: t if not isinstance(t, torch.Tensor) else t.to(dtype).double()
    Sr, gapr, extr, Wr, Wgr, Wer, gsr = rnd(S), rnd(gap), rnd(ext), rnd(W), rnd(Wg), rnd(We), rnd(gs)
    if isinstance(gap, torch.Tensor) and gap_kind == "bcast":
        gapr = rnd(gap[:, :1, :]).expand(B, M, N)
        if AFFINE:
            extr = rnd(ext[:, :1, :]).expand(B, M, N)
    ref = run_ops("cpu", torch.float64, Sr, gapr, T, L, red, Wr, Wgr, gsr, extr, Wer)
    out = run_ops(device, dtype, Sr, gapr, T, L, red, Wr, Wgr, gsr, extr, Wer)
    e = [err(o, r) for o, r in zip(out, ref)]
    ok = all(x <= tol for x in e)
    line = (f"ops {str(dtype)[6:]:8s} B={B} M={M} N={N} T={T} red={red} gap={gap_kind} "
            f"len={use_lengths}: ggs {e[0]:.2e} hvp_S {e[1]:.2e} hvp_gap {e[2]:.2e}"
            + (f" hvp_ext {e[3]:.2e}" if AFFINE else ""))
    if dtype == torch.float64 and device != "cpu":
        again = run_ops(device, dtype, Sr, gapr, T, L, red, Wr, Wgr, gsr, extr, Wer)
        same = all((a is None and b is None) or torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
                   for a, b in zip(out, again))
        ok &= same
        line += "" if same else "  NOT DETERMINISTIC"
    report(ok, line)


def invalid_lengths_case(device, g):
    B, M, N = 3, 40, 30
    S = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    gap = -0.6 + 0.3 * torch.randn(B, M, N, generator=g, dtype=torch.float64)
    W = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    Wg = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    gs = torch.randn(B, generator=g, dtype=torch.float64)
    L = torch.tensor([[M + 1, N], [20, 10], [0, 5]])
    ext = -0.2 + 0.1 * torch.randn(B, M, N, generator=g, dtype=torch.float64) if AFFINE else None
    We = torch.randn(B, M, N, generator=g, dtype=torch.float64)
    for T, red in ((1.0, "soft"), (0.0, "max")):
        ref = run_ops("cpu", torch.float64, S, gap, T, L, red, W, Wg, gs, ext, We)
        out = run_ops(device, torch.float64, S, gap, T, L, red, W, Wg, gs, ext, We)
        e = [err(o, r) for o, r in zip(out, ref)]
        nan_ok = bool(torch.isnan(out[0][0]).item()) and bool(torch.isnan(out[1][0]).all().item())
        rest_ok = not torch.isnan(out[0][1:]).any().item() and not torch.isnan(out[1][1:]).any().item()
        report(all(x <= 1e-9 for x in e) and nan_ok and rest_ok,
               f"invalid lengths T={T} red={red}: ggs {e[0]:.2e} hvp_S {e[1]:.2e} hvp_gap {e[2]:.2e} "
               f"nan(pair0)={nan_ok} finite(others)={rest_ok}")


def ggcheck_case(device, B, M, N, T, red, gap_tensor, use_lengths, g):
    shape = (M, N) if B is None else (B, M, N)
    S = torch.randn(*shape, generator=g, dtype=torch.float64).to(device).requires_grad_()
    inputs = [S]
    if gap_tensor:
        G = (-0.6 + 0.3 * torch.randn(*shape, generator=g, dtype=torch.float64)).to(device)
        inputs.append(G.requires_grad_())
    L = random_lengths(B, M, N, g).to(device) if (use_lengths and B is not None) else None

    def f(s, gap=None):
        return softsw.align(s, -0.6 if gap is None else gap, T, lengths=L, reduction=red,
                            gap_extend=(gap * 0.4 if gap is not None else -0.25) if AFFINE else None)

    numel = sum(x.numel() for x in inputs)
    fast = numel > 200
    try:
        ok = torch.autograd.gradgradcheck(f, tuple(inputs), fast_mode=fast, atol=1e-5, rtol=1e-3,
                                          raise_exception=True)
        msg = ""
    except Exception as exc:  # report and go on
        ok = False
        msg = " :: " + str(exc).strip().splitlines()[0][:300]
    report(ok, f"gradgradcheck{' (fast)' if fast else ''} shape={shape} T={T} red={red} "
               f"gap={'tensor' if gap_tensor else 'float'} len={L is not None}{msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="fewer cases")
    ap.add_argument("--affine", action="store_true", help="affine gaps")
    args = ap.parse_args()
    global AFFINE
    AFFINE = args.affine
    device = args.device
    g = torch.Generator().manual_seed(0)

    # Shapes: R = 1 (32-row bands) and R = 4 (128-row bands) per
    # wavefront.cuh's rows_per_thread (at the time of writing: R = 4 iff
    # rows > 32 and cols >= 256); several bands in both regimes.
    op_shapes = [(1, 1, 1), (2, 5, 7), (3, 31, 33), (2, 70, 40), (2, 300, 20), (4, 100, 9),
                 (2, 140, 260), (1, 300, 257), (2, 33, 300)]
    if args.quick:
        op_shapes = op_shapes[:5]
    for (B, M, N) in op_shapes:
        for T in (1.0, 0.5, 0.0):
            for red in ("max", "soft"):
                for gap_kind in ("float", "full", "bcast"):
                    lens = (False, True) if B > 1 else (False,)
                    for use_lengths in lens:
                        op_case(device, B, M, N, T, red, gap_kind, use_lengths, torch.float64, g, 1e-9)
                op_case(device, B, M, N, T, red, "full", B > 1, torch.float32, g, 5e-3)
        if device != "cpu":
            for dt, tol in ((torch.float16, 3e-2), (torch.bfloat16, 1e-1)):
                op_case(device, B, M, N, 1.0, "soft", "full", B > 1, dt, g, tol)
    invalid_lengths_case(device, g)

    gg_shapes = [(None, 1, 1), (1, 1, 1), (2, 5, 7), (3, 31, 33), (2, 70, 40), (2, 300, 20),
                 (1, 140, 260)]
    if args.quick:
        gg_shapes = gg_shapes[:4]
    for (B, M, N) in gg_shapes:
        for T in (1.0, 0.5, 0.0):
            for red in ("max", "soft"):
                for gap_tensor in (False, True):
                    for use_lengths in ((False, True) if B is not None and B > 1 else (False,)):
                        ggcheck_case(device, B, M, N, T, red, gap_tensor, use_lengths, g)

    print("ALL OK" if ok_all else "FAILURES", flush=True)
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
