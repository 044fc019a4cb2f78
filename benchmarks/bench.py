"""The softsw benchmark: ``python benchmarks/bench.py [options]``.

A thin wrapper around ``python -m softsw.bench`` (src/softsw/bench.py), which has
the options (``--help``), the method and the output; this file only points it
at the baselines in this folder (jax_baseline.py, naive_cuda.py).
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    os.environ.setdefault("SOFTSW_BENCHMARKS_DIR", str(HERE))
    try:
        from softsw.bench import main
    except ImportError:  # running from a checkout without installing softsw
        sys.path.insert(0, str(HERE.parent / "src"))
        from softsw.bench import main
    sys.exit(main())
