"""Whether wheel B's rows of dev/ab_bench.sh beat wheel A's: exit 0 when the
mean over every (shape, mode) row of B's G cells/s over A's is above 1 +
MARGIN (default 0.02).
    python3 dev/ab_better.py ab.txt A B [MARGIN]"""
import sys
from collections import defaultdict
path, a, b = sys.argv[1:4]
margin = float(sys.argv[4]) if len(sys.argv) > 4 else 0.02
rates = defaultdict(list)
for line in open(path):
    f = line.split()
    if len(f) >= 8 and f[0] in (a, b) and f[4] == "softsw":
        rates[(f[0], f[1], f[3])].append(float(f[7]))
ratios = []
for (name, shape, mode), v in rates.items():
    if name == b and (a, shape, mode) in rates:
        va = rates[(a, shape, mode)]
        ratios.append((sum(v) / len(v)) / (sum(va) / len(va)))
        print(f"{shape} {mode}: {b}/{a} = {ratios[-1]:.3f}")
mean = sum(ratios) / len(ratios) if ratios else 0.0
print(f"mean {b}/{a} = {mean:.3f}")
sys.exit(0 if mean > 1 + margin else 1)
