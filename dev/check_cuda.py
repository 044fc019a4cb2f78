"""The GPU checks (tests/test_gpu_checks.py, run through pytest) and rough CUDA timings.

    python dev/check_cuda.py                 # the linear-gap checks; "ALL OK" or "FAILURES" last
    python dev/check_cuda.py --bench-only    # timings only
    python dev/check_cuda.py --bench         # both
    ... --quick                              # fewer shapes
    ... --device cpu                         # dry run: the CPU kernels stand in for CUDA

`pytest tests` on a GPU machine runs every check; dev/check_affine.py and
dev/check_double_backward.py select the affine and double-backward ones.
"""
import os
import sys
from pathlib import Path

import torch

import softsw

GPU_CHECKS = Path(__file__).resolve().parent.parent / "tests" / "test_gpu_checks.py"


def run_gpu_checks(keyword: str, argv) -> int:
    """pytest on the GPU checks that `keyword` selects (pytest -k); --quick and
    --device cpu as in the module docstring. Prints "ALL OK" or "FAILURES" last."""
    import pytest

    if "--quick" in argv:
        os.environ["SOFTSW_GPU_CHECKS_QUICK"] = "1"
    if "--device" in argv:
        os.environ["SOFTSW_GPU_CHECKS_DEVICE"] = argv[argv.index("--device") + 1]
    if os.environ.get("SOFTSW_GPU_CHECKS_DEVICE", "cuda") == "cuda" and \
            not torch.cuda.is_available():
        print("no CUDA device (--device cpu runs the checks on the CPU kernels)")
        return 1
    rc = pytest.main([str(GPU_CHECKS), "-q", "-rfE", "-p", "no:cacheprovider", "-k", keyword])
    print("ALL OK" if rc == 0 else "FAILURES", flush=True)
    return int(rc)


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
    status = run_gpu_checks("linear_small or linear_lengths or linear_bands or invalid_lengths "
                            "or nan_inside", sys.argv)
    if "--bench" in sys.argv:
        bench_all()
    sys.exit(status)
