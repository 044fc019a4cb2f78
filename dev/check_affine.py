"""The affine-gap GPU checks of tests/test_gpu_checks.py (values, gradients of every
broadcast kind of gap tensor, lengths, the inference forward, ties in hard mode,
gap_extend == gap_open against linear gaps), through pytest.

    python dev/check_affine.py [--quick] [--device cpu]

Prints "ALL OK" or "FAILURES" last. `pytest tests` on a GPU machine runs them too.
"""
import sys

from check_cuda import run_gpu_checks

if __name__ == "__main__":
    sys.exit(run_gpu_checks("affine_vs_cpu or affine_with_equal or affine_hard_mode", sys.argv))
