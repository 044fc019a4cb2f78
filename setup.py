"""Build softsw._C: the stable-ABI (abi3) extension with the CPU and CUDA kernels.

The CUDA kernels are compiled whenever a CUDA toolkit is found (CUDA_HOME or
/usr/local/cuda), whether or not this machine has a GPU; SOFTSW_CPU_ONLY=1
forces a CPU-only build.
"""
import os
from pathlib import Path

from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).parent
# torch >= 2.10: the oldest LibTorch whose stable ABI this binary may call.
TORCH_TARGET_VERSION = "0x020a000000000000"
# CPython >= 3.10 (abi3).
PY_LIMITED_API = "0x030A0000"


def want_cuda():
    if os.environ.get("SOFTSW_CPU_ONLY", "0") == "1":
        return False
    return CUDA_HOME is not None


def extension():
    with_cuda = want_cuda()
    sources = ["csrc/bindings.cpp", "csrc/kernels/cpu.cpp"]
    defines = [
        f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}",
        f"-DPy_LIMITED_API={PY_LIMITED_API}",
    ]
    cxx = ["-O3", "-std=c++20", "-fvisibility=hidden"] + defines
    if not with_cuda:
        return CppExtension(
            "softsw._C",
            sources,
            extra_compile_args={"cxx": cxx},
            py_limited_api=True,
        )
    sources += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "kernels").glob("*.cu"))
    cuda_defines = ["-DSOFTSW_WITH_CUDA", "-DUSE_CUDA"]
    nvcc = [
        "-O3",
        "-std=c++20",
        "--expt-relaxed-constexpr",
        "-lineinfo",
        "-Xptxas=-v" if os.environ.get("SOFTSW_PTXAS_VERBOSE") == "1" else "",
    ] + defines + cuda_defines
    return CUDAExtension(
        "softsw._C",
        sources,
        extra_compile_args={"cxx": cxx + cuda_defines, "nvcc": [a for a in nvcc if a]},
        py_limited_api=True,
    )


setup(
    packages=find_packages("src"),
    package_dir={"": "src"},
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
