"""The double-backward GPU checks of tests/test_gpu_checks.py (the ops' Hessian-vector
product against the CPU kernel, determinism, gradgradcheck on the device), through pytest.

    python dev/check_double_backward.py [--affine] [--quick] [--device cpu]

--affine: the affine-gap cases only (else the linear ones). Prints "ALL OK" or
"FAILURES" last. `pytest tests` on a GPU machine runs them too.
"""
import sys

from check_cuda import run_gpu_checks

if __name__ == "__main__":
    kind = "affine" if "--affine" in sys.argv else "linear"
    sys.exit(run_gpu_checks(f"(double_backward_ops or gradgradcheck_on_device) and {kind}",
                            sys.argv))
