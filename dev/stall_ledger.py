"""Where a kernel's warps wait, instruction by instruction: the warp-state
samples of an ncu report (collected with `--section SourceCounters
--section WarpStateStats --import-source yes`, a -lineinfo build) summed per
CUDA source line and per SASS instruction, largest first, until they cover
--cover of all samples.

    ncu ... -o rep python3 dev/ncu_step.py 256x512x512
    ncu -i rep.ncu-rep --page source --csv --print-source cuda,sass > rep.csv
    python3 dev/stall_ledger.py rep.csv

The CSV has one row per SASS instruction (with its source line when
--print-source names cuda too) and one column per stall reason; the column
names vary between ncu versions, so they are found by pattern: "Warp Stall
Sampling (All Samples)" is the total, "stall_*" or "... Stall ..." columns
the reasons."""
import argparse
import csv
import re
import sys
from collections import defaultdict


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--cover", type=float, default=0.9)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header_at = next(i for i, r in enumerate(rows) if any("Sampl" in c for c in r))
    header, body = rows[header_at], rows[header_at + 1:]
    total_col = next(i for i, c in enumerate(header)
                     if "Sampl" in c and "All" in c and "Not" not in c)
    reason_cols = [i for i, c in enumerate(header)
                   if i != total_col and re.search(r"stall|Stall", c) and "Not" not in c]
    source_col = next((i for i, c in enumerate(header) if c.lower() == "source"), None)
    address_col = next((i for i, c in enumerate(header) if "Address" in c), None)
    line_col = next((i for i, c in enumerate(header) if c.lower() in ("line", "# line")), None)

    total = sum(number(r[total_col]) for r in body if len(r) > total_col)
    if total == 0:
        sys.exit("no warp-state samples in the report")
    per_instr, per_line = [], defaultdict(float)
    reasons_of_line = defaultdict(lambda: defaultdict(float))
    line = "?"
    for r in body:
        if len(r) <= total_col:
            continue
        text = r[source_col] if source_col is not None else ""
        if line_col is not None and r[line_col].strip():
            line = r[line_col].strip()
        samples = number(r[total_col])
        if samples == 0:
            continue
        where = r[address_col] if address_col is not None else ""
        top = sorted(((number(r[i]), header[i]) for i in reason_cols), reverse=True)[:3]
        per_instr.append((samples, where, text.strip()[:70], line, top))
        per_line[line] += samples
        for i in reason_cols:
            reasons_of_line[line][header[i]] += number(r[i])

    print(f"{int(total)} warp-state samples")
    print("== by source line")
    covered = 0.0
    for line_key, s in sorted(per_line.items(), key=lambda kv: -kv[1])[:args.top]:
        top = sorted(reasons_of_line[line_key].items(), key=lambda kv: -kv[1])[:3]
        why = ", ".join(f"{name} {v / s:.0%}" for name, v in top if v > 0)
        print(f"{s / total:6.1%}  line {line_key}  ({why})")
        covered += s
        if covered >= args.cover * total:
            break
    print("== by instruction")
    covered = 0.0
    for s, where, text, line_key, top in sorted(per_instr, key=lambda x: -x[0])[:args.top]:
        why = ", ".join(f"{name} {v / s:.0%}" for v, name in top if v > 0)
        print(f"{s / total:6.1%}  {where:>8} line {line_key:>5}  {text:<70} ({why})")
        covered += s
        if covered >= args.cover * total:
            break


if __name__ == "__main__":
    main()
