"""What this build of softsw is, and whether it can run with this torch and GPU.

    softsw.build_info()         # dict: versions, CUDA, compiled GPU architectures
    python -m softsw.info       # the same, printed, with the GPUs torch sees

Importing this module (``import softsw`` does, before anything else) loads the compiled
extension ``softsw._C`` after two cheap checks that need no GPU and never initialise CUDA:
torch is at least the stable-ABI target, and a wheel with CUDA kernels runs with a torch of
the same CUDA major version. Either failure is an ImportError that says what to install,
instead of the loader's "undefined symbol" or "libcudart.so.12: cannot open shared object".
Whether the GPU's architecture is in the wheel is checked lazily, when torch initialises
CUDA (a warning), and by ``check_device`` (an error). SOFTSW_SKIP_CUDA_CHECK=1 skips the
CUDA checks.
"""
from __future__ import annotations

import importlib
import os
import re
import warnings
from typing import Optional

import torch

try:  # written by setup.py next to _C at build time
    from .._build_info import BUILD_INFO as _BUILT
except ImportError:  # a source tree whose extension was built without it
    _BUILT = {}

__all__ = ["build_info", "check_device", "device_problem"]

_SKIP_ENV = "SOFTSW_SKIP_CUDA_CHECK"
_WHEELS_DOC = "'Building wheels' in softsw's README (docs/building-wheels.md)"


def _version() -> Optional[str]:
    if _BUILT.get("version"):
        return _BUILT["version"]
    try:
        from importlib.metadata import version
        return version("softsw")
    except Exception:
        return None


def build_info() -> dict:
    """How this softsw was built, and what it runs with.

    Keys: ``version`` (the distribution's, with its +cuXYZ tag if any),
    ``torch_version_built`` (the torch whose headers compiled ``softsw._C``),
    ``torch_version_running``, ``stable_abi_target`` (the oldest torch the binary may run
    with), ``python_limited_api`` (abi3 floor), ``cuda_kernels`` (whether CUDA kernels are
    compiled in), ``cuda_version_built`` (nvcc), ``torch_cuda_version_running``,
    ``cuda_arch_list`` (TORCH_CUDA_ARCH_LIST of the build), ``cuda_sass_archs`` and
    ``cuda_ptx_archs`` (what the binary holds: machine code per GPU architecture, and PTX
    the driver can compile for newer ones).
    """
    return {
        "version": _version(),
        "torch_version_built": _BUILT.get("torch_version"),
        "torch_version_running": torch.__version__,
        "stable_abi_target": _BUILT.get("stable_abi_target"),
        "python_limited_api": _BUILT.get("python_limited_api"),
        "cuda_kernels": bool(_BUILT.get("cuda_kernels")),
        "cuda_version_built": _BUILT.get("cuda_version"),
        "torch_cuda_version_built": _BUILT.get("torch_cuda_version"),
        "torch_cuda_version_running": torch.version.cuda,
        "cuda_arch_list": _BUILT.get("cuda_arch_list"),
        "cuda_sass_archs": list(_BUILT.get("cuda_sass_archs") or []),
        "cuda_ptx_archs": list(_BUILT.get("cuda_ptx_archs") or []),
    }


def _release(version: Optional[str]) -> tuple:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else ()


def _skip_cuda_checks() -> bool:
    return os.environ.get(_SKIP_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _torch_problem() -> Optional[str]:
    """Why this torch cannot load this build's _C, as far as versions tell; else None."""
    info = build_info()
    target = _release(info["stable_abi_target"])
    running = _release(torch.__version__)
    if target and running and running < target:
        return (f"softsw {info['version']} needs torch >= {info['stable_abi_target']} (its "
                f"stable-ABI target); this is torch {torch.__version__}")
    if not info["cuda_kernels"] or _skip_cuda_checks():
        return None
    built = _release(info["cuda_version_built"])
    if torch.version.cuda is None:
        return (f"softsw {info['version']} has CUDA {info['cuda_version_built']} kernels and "
                f"needs a CUDA {built[0]}.x build of torch; torch {torch.__version__} is a "
                f"CPU-only build. Install softsw's CPU wheel (+cpu) or a CUDA {built[0]} torch; "
                f"see {_WHEELS_DOC}. ({_SKIP_ENV}=1 skips this check.)")
    running_cuda = _release(torch.version.cuda)
    if built and running_cuda and built[0] != running_cuda[0]:
        return (f"softsw {info['version']} was built for CUDA {info['cuda_version_built']}, but "
                f"torch {torch.__version__} uses CUDA {torch.version.cuda}: the CUDA major "
                f"versions must match. Install the softsw wheel for CUDA {running_cuda[0]} "
                f"(+cu{running_cuda[0]}{running_cuda[1]} or the closest), or a torch for CUDA "
                f"{built[0]}; see {_WHEELS_DOC}. ({_SKIP_ENV}=1 skips this check.)")
    return None


def _load_extension() -> None:
    problem = _torch_problem()
    if problem:
        raise ImportError(problem)
    try:
        importlib.import_module("softsw._C")
    except (ImportError, OSError) as exc:
        info = build_info()
        raise ImportError(
            f"softsw: cannot load its compiled extension softsw._C ({exc}). This softsw "
            f"{info['version']} was built against torch {info['torch_version_built']} "
            f"(stable ABI >= {info['stable_abi_target']}, CUDA kernels: "
            f"{info['cuda_version_built'] or 'none'}); running torch "
            f"{torch.__version__} (CUDA {torch.version.cuda}). See {_WHEELS_DOC}.") from exc


def _arch(name: str) -> tuple[int, int, str]:
    """'sm_90a' -> (9, 0, 'a'); 'compute_120' -> (12, 0, '')."""
    digits, suffix = re.fullmatch(r"(?:sm|compute)_(\d+)([a-z]?)", name).groups()
    return int(digits[:-1]), int(digits[-1]), suffix


def _served(capability: tuple[int, int], sass: list, ptx: list) -> bool:
    major, minor = capability
    for name in sass:  # machine code runs on its own major, same or later minor
        m, n, suffix = _arch(name)
        if (m, n) == (major, minor) or (suffix != "a" and m == major and n <= minor):
            return True
    for name in ptx:  # PTX is compiled by the driver for any later GPU
        m, n, _ = _arch(name)
        if (m, n) <= (major, minor):
            return True
    return False


_device_problems: dict = {}


def device_problem(device=None) -> Optional[str]:
    """Why this build's CUDA kernels cannot run on ``device`` (default: the current CUDA
    device), or None when they can. Initialises CUDA; the answer is cached per device."""
    info = build_info()
    index = torch.cuda._utils._get_device_index(device, optional=True)
    if index in _device_problems:
        return _device_problems[index]
    problem = None
    if not info["cuda_kernels"]:
        problem = (f"softsw {info['version']} was built without CUDA kernels (a CPU-only "
                   f"build); see {_WHEELS_DOC}")
    elif not _skip_cuda_checks():
        capability = torch.cuda.get_device_capability(index)
        if not _served(capability, info["cuda_sass_archs"], info["cuda_ptx_archs"]):
            name = torch.cuda.get_device_name(index)
            cc = f"{capability[0]}.{capability[1]}"
            problem = (
                f"softsw {info['version']} has no CUDA kernels for {name} (compute capability "
                f"{cc}, sm_{capability[0]}{capability[1]}): it holds machine code for "
                f"{', '.join(info['cuda_sass_archs']) or 'none'} and PTX for "
                f"{', '.join(info['cuda_ptx_archs']) or 'none'}. Build from source with "
                f"TORCH_CUDA_ARCH_LIST={cc} (pip install --no-build-isolation softsw from the "
                f"sdist); see {_WHEELS_DOC}.")
    _device_problems[index] = problem
    return problem


def check_device(device=None) -> None:
    """Raise RuntimeError when this build's CUDA kernels cannot run on ``device``."""
    problem = device_problem(device)
    if problem:
        raise RuntimeError(problem)


def _warn_on_cuda_init() -> None:
    # Runs inside torch's CUDA initialisation: it must never raise.
    try:
        for index in range(torch.cuda.device_count()):
            problem = device_problem(index)
            if problem:
                warnings.warn(problem, RuntimeWarning, stacklevel=2)
    except Exception:  # noqa: BLE001  (includes warnings turned into errors)
        pass


_load_extension()
if _BUILT.get("cuda_kernels") and hasattr(torch.cuda, "_lazy_call"):
    # Once torch initialises CUDA (now, if it already has), warn about GPUs this build
    # cannot serve. Never initialises CUDA itself.
    torch.cuda._lazy_call(_warn_on_cuda_init)
