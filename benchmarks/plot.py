"""Plot G cells/s against sequence length from the JSON of ``python -m softsw.bench``.

    python benchmarks/plot.py bench.json -o plot.png [--device cuda]

One panel per mode (inference, training); one line per method (softsw and each
baseline), the x axis the sequence length M (the benchmark's shapes are square;
each point is labelled with its batch size), both axes logarithmic. Dashed
lines: the floors of docs/benchmarks.md (GPU); dotted: softsw's performance
targets (docs/benchmarks.md).
Failed and skipped rows are left out.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

STYLE = {"softsw": ("C0", "o"), "antidiag": ("C1", "s"), "jax": ("C2", "^"),
         "naive": ("C3", "D")}

# H200 floors (docs/benchmarks.md), G cells/s.
FLOORS = {
    "inference": [(1045.0, "floor: SFU 1045 (4 MUFU ops/cell), HBM 1075 (4 B/cell)")],
    "training": [(215.0, "HBM floor (20 B/cell fwd+bwd)")],
}
# softsw's performance targets: (from length, to length, G cells/s).
TARGETS = {"inference": [(128, 1024, 500.0), (4096, 16384, 300.0)],
           "training": [(128, 1024, 150.0), (4096, 16384, 80.0)]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", help="output of python -m softsw.bench --json")
    p.add_argument("-o", "--output", default="plot.png")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    args = p.parse_args(argv)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.json) as f:
        data = json.load(f)
    rows = [r for r in data.get("rows", []) if r.get("status") == "ok" and r.get("gcells")]
    devices = {r["device"] for r in rows}
    device = args.device or ("cuda" if "cuda" in devices else "cpu")
    rows = [r for r in rows if r["device"] == device
            and r["mode"] in ("inference", "training")]
    modes = [m for m in ("inference", "training") if any(r["mode"] == m for r in rows)]
    if not modes:
        print(f"plot: no successful {device} rows in {args.json}", file=sys.stderr)
        modes = ["inference"]

    meta = data.get("meta", {})
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.8), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        series = defaultdict(list)
        for r in rows:
            if r["mode"] == mode:
                series[r["method"]].append((r["rows"], r["gcells"], r["batch"]))
        for method, pts in sorted(series.items(), key=lambda kv: kv[0] != "softsw"):
            pts.sort()
            color, marker = STYLE.get(method, ("C7", "x"))
            xs = [x for x, _, _ in pts]
            ys = [y for _, y, _ in pts]
            ax.plot(xs, ys, marker=marker, color=color, label=method,
                    linewidth=2.2 if method == "softsw" else 1.2)
            if method == "softsw":
                for x, y, b in pts:
                    ax.annotate(f"B={b}", (x, y), textcoords="offset points", xytext=(4, 5),
                                fontsize=7, color=color)
        if device == "cuda":
            for value, label in FLOORS.get(mode, []):
                ax.axhline(value, color="k", linestyle="--", linewidth=0.8, alpha=0.6)
                ax.text(0.02, value * 1.06, label, fontsize=7, alpha=0.7,
                        transform=ax.get_yaxis_transform())
            for lo, hi, value in TARGETS.get(mode, []):
                ax.hlines(value, lo / 1.3, hi * 1.3, colors="C0", linestyles=":", linewidth=1.5)
            ax.plot([], [], "C0:", label="softsw target")
        ax.set_xscale("log", base=2)
        xs_all = [r["rows"] for r in rows] or [16, 16384]
        ax.set_xlim(min(xs_all) / 1.6, max(xs_all) * 2.2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length M = N")
        ax.set_ylabel("G cells/s  (B*M*N / time)")
        ax.set_title(f"{mode} ({'forward' if mode == 'inference' else 'forward + backward'}), "
                     f"{device}")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="lower right")
    title = (f"softsw {meta.get('commit', '')}  {meta.get('gpu', meta.get('cpu', ''))}  "
             f"{meta.get('dtype', '')}, gap {meta.get('gap_open', '')}"
             + (f"/{meta['gap_extend']}" if meta.get("gap_extend") is not None else "")
             + f", T={meta.get('temperature', '')}  {meta.get('date', '')}")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
