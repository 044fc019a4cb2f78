"""Build softsw._C: the stable-ABI (abi3) extension with the CPU and CUDA kernels.

What gets built
  * CUDA kernels (every csrc/kernels/*.cu, -DUSE_CUDA -DSOFTSW_WITH_CUDA) when a CUDA
    toolkit is found (CUDA_HOME or CUDA_PATH, else /usr/local/cuda, else the nvcc on PATH),
    the torch we build against is a CUDA build, and there are GPU architectures to compile
    for, in this order:
      1. TORCH_CUDA_ARCH_LIST, when set ("native": the GPUs of this machine);
      2. SOFTSW_RELEASE_ARCHS=1 or SOFTSW_REQUIRE_CUDA=1: the release wheels' list,
         RELEASE_ARCH_LISTS below for the toolkit found (sm_80 and up, PTX for the newest);
      3. the GPUs this machine has (torch.cuda), each compiled once.
    With none of them (no GPU visible, nothing asked for) the build is CPU-only: the CUDA
    kernels cost many CPU-minutes per architecture (about 2 for forward.cu alone on a
    2-core machine), which nobody should pay for a machine that cannot run them.
  * Otherwise a CPU-only extension. SOFTSW_CPU_ONLY=1 forces it.

How it builds
  ninja compiles the units in parallel (MAX_JOBS, default: every core), nvcc compiles the
  architectures of a unit in parallel (--threads), and one line per finished unit is
  printed, also to the terminal when pip hides the build's output. Objects are kept in
  build/objects-<variant>/ of the source tree, so a second install (an editable install
  after a regular one, the test extras after the demo) recompiles only what changed.

Environment
  SOFTSW_CPU_ONLY=1        build without the CUDA kernels.
  SOFTSW_REQUIRE_CUDA=1    fail instead of falling back to a CPU-only build (CI, wheels);
                           without TORCH_CUDA_ARCH_LIST it compiles the release list.
  SOFTSW_RELEASE_ARCHS=1   compile the release wheels' architectures (when
                           TORCH_CUDA_ARCH_LIST is unset), GPU or not.
  TORCH_CUDA_ARCH_LIST     e.g. "9.0" or "8.0;9.0+PTX", or "native".
  SOFTSW_LOCAL_VERSION     a PEP 440 local tag ("cu126", "cpu", or "auto" for the one
                           this build implies) appended as 0.1.0+cu126. PyPI refuses
                           local versions: release builds for PyPI leave it unset.
  SOFTSW_PTXAS_VERBOSE=1   print register/shared-memory use of every kernel.
  SOFTSW_CPU_SANITIZE=1    CPU-only debug build of the CPU kernels: -O1 -g with
                           AddressSanitizer (dev/sanitize_cpu.sh runs the tests under it;
                           -O1 also shows code that is right only when inlined).
  MAX_JOBS                 parallel compile jobs (ninja; default: every core).

The base version lives in one place, `__version__` in src/softsw/__init__.py. The
build writes softsw/_build_info.py (never committed) next to _C: what `softsw.build_info()`
and `python -m softsw.info` report.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def find_cuda_home() -> str | None:
    """CUDA_HOME (or CUDA_PATH) as given; else /usr/local/cuda; else the toolkit of the
    nvcc on PATH. A candidate must hold bin/nvcc and include/cuda_runtime_api.h (an nvcc
    wrapper script in /usr/local/bin does not make /usr/local a toolkit)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    candidates = [Path("/usr/local/cuda")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates += [Path(nvcc).parent.parent, Path(nvcc).resolve().parent.parent]
    for home in candidates:
        if (home / "bin" / "nvcc").exists() and (home / "include" / "cuda_runtime_api.h").exists():
            return str(home)
    return None


# torch.utils.cpp_extension reads CUDA_HOME once, at import.
if find_cuda_home() and not os.environ.get("CUDA_HOME"):
    os.environ["CUDA_HOME"] = find_cuda_home()

import torch  # noqa: E402
from setuptools import find_namespace_packages, setup  # noqa: E402
from torch.utils.cpp_extension import (  # noqa: E402
    CUDA_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)

ROOT = Path(__file__).parent.resolve()
PACKAGE = "softsw"

# torch >= 2.10: the oldest LibTorch whose stable ABI this binary may call.
STABLE_ABI_TARGET = (2, 10)
TORCH_TARGET_VERSION = f"0x{STABLE_ABI_TARGET[0]:02x}{STABLE_ABI_TARGET[1]:02x}000000000000"
# CPython >= 3.10 (abi3); must agree with the bdist_wheel tag below.
PY_LIMITED_API = "0x030A0000"
PY_LIMITED_TAG = "cp310"

# The release wheels' TORCH_CUDA_ARCH_LIST, by toolkit (major, minor): sm_80 and up, each major
# family once (sm_80 SASS also runs on 8.6/8.9 cards, sm_86 is kept for its own tuning),
# and PTX for the newest so that later GPUs can JIT it. Keep in step with the matrix of
# .github/workflows/wheels.yml and docs/building-wheels.md.
RELEASE_ARCH_LISTS = [
    ((13, 0), "8.0;8.6;9.0;10.0;11.0;12.0+PTX"),
    ((12, 8), "8.0;8.6;9.0;10.0;12.0+PTX"),
    ((11, 8), "8.0;8.6;9.0+PTX"),
]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def base_version() -> str:
    text = (ROOT / "src" / PACKAGE / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not match:
        raise RuntimeError("setup.py: no __version__ = \"...\" in src/softsw/__init__.py")
    return match.group(1)


def nvcc_version() -> tuple[int, int] | None:
    if CUDA_HOME is None:
        return None
    nvcc = Path(CUDA_HOME) / "bin" / "nvcc"
    if not nvcc.exists():
        return None
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release (\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def visible_gpu_archs() -> tuple[str, str]:
    """("9.0;8.6", "NVIDIA H200 (9.0), ...") for the GPUs torch sees here; ("", "") if none."""
    if not torch.cuda.is_available():
        return "", ""
    names, archs = [], []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        names.append(f"{torch.cuda.get_device_name(index)} ({major}.{minor})")
        if f"{major}.{minor}" not in archs:
            archs.append(f"{major}.{minor}")
    return ";".join(archs), ", ".join(names)


def release_arch_list(toolkit: tuple[int, int]) -> str:
    for minimum, archs in RELEASE_ARCH_LISTS:
        if toolkit >= minimum:
            return archs
    raise SystemExit(f"setup.py: CUDA {toolkit} is older than 11.8; set TORCH_CUDA_ARCH_LIST")


def requested_arch_list(toolkit: tuple[int, int]) -> tuple[str, str]:
    """(TORCH_CUDA_ARCH_LIST to compile, or "" for none; where it comes from)."""
    given = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if given and given != "native":
        return given, "TORCH_CUDA_ARCH_LIST"
    if given == "native":
        archs, gpus = visible_gpu_archs()
        if not archs:
            raise SystemExit("setup.py: TORCH_CUDA_ARCH_LIST=native but torch sees no GPU here; "
                             "name the architectures, e.g. TORCH_CUDA_ARCH_LIST=9.0")
        return archs, f"TORCH_CUDA_ARCH_LIST=native: {gpus}"
    for flag in ("SOFTSW_RELEASE_ARCHS", "SOFTSW_REQUIRE_CUDA"):
        if env_flag(flag):
            return release_arch_list(toolkit), f"{flag}=1: the release wheels' architectures"
    archs, gpus = visible_gpu_archs()
    return archs, f"the GPUs of this machine: {gpus}"


def decide_cuda() -> tuple[bool, tuple[int, int] | None, str, str]:
    """(build CUDA kernels?, toolkit version, TORCH_CUDA_ARCH_LIST, why)."""
    if env_flag("SOFTSW_CPU_ONLY"):
        return False, None, "", "SOFTSW_CPU_ONLY=1"
    toolkit = nvcc_version()
    if toolkit is None:
        why = ("no CUDA toolkit found (set CUDA_HOME, put nvcc on PATH or install to "
               "/usr/local/cuda)" if CUDA_HOME is None else f"no nvcc in CUDA_HOME={CUDA_HOME}")
        return False, None, "", why
    if torch.version.cuda is None:
        return False, toolkit, "", f"torch {torch.__version__} is not a CUDA build"
    archs, source = requested_arch_list(toolkit)
    if not archs:
        return False, toolkit, "", (
            "no GPU visible and no GPU architecture asked for; to compile the CUDA kernels "
            "set TORCH_CUDA_ARCH_LIST (e.g. 9.0) or SOFTSW_RELEASE_ARCHS=1")
    return True, toolkit, archs, (f"CUDA toolkit {toolkit[0]}.{toolkit[1]} at {CUDA_HOME}; "
                                  f"architectures {archs} from {source}")


WITH_CUDA, CUDA_TOOLKIT, ARCH_LIST, CUDA_REASON = decide_cuda()
if not WITH_CUDA and env_flag("SOFTSW_REQUIRE_CUDA"):
    raise SystemExit(f"setup.py: SOFTSW_REQUIRE_CUDA=1 but the CUDA kernels cannot be built: "
                     f"{CUDA_REASON}")
if WITH_CUDA:
    # torch.utils.cpp_extension reads the architectures from the environment.
    os.environ["TORCH_CUDA_ARCH_LIST"] = ARCH_LIST
print(f"softsw setup: {'CUDA + CPU' if WITH_CUDA else 'CPU-only'} build ({CUDA_REASON})")


def compiled_archs() -> tuple[list[str], list[str]]:
    """(SASS targets like "sm_90", PTX targets like "compute_120"), as torch will pass them
    to nvcc for the current TORCH_CUDA_ARCH_LIST."""
    from torch.utils.cpp_extension import _get_cuda_arch_flags  # private but long-lived

    sass, ptx = set(), set()
    for flag in _get_cuda_arch_flags():
        match = re.search(r"code=(sm|compute)_(\d+[a-z]?)", flag)
        if match:
            (sass if match.group(1) == "sm" else ptx).add(f"{match.group(1)}_{match.group(2)}")

    def key(name: str):
        digits = re.match(r"\D+_(\d+)", name).group(1)
        return int(digits), name

    return sorted(sass, key=key), sorted(ptx, key=key)


def local_version_label() -> str:
    label = os.environ.get("SOFTSW_LOCAL_VERSION", "").strip().lower()
    if label == "auto":
        label = f"cu{CUDA_TOOLKIT[0]}{CUDA_TOOLKIT[1]}" if WITH_CUDA else "cpu"
    if label.startswith("cu") and not WITH_CUDA:
        raise SystemExit(f"setup.py: SOFTSW_LOCAL_VERSION={label} names a CUDA build, but this "
                         f"build is CPU-only ({CUDA_REASON})")
    if label and not re.fullmatch(r"[a-z0-9]+(?:[._][a-z0-9]+)*", label):
        raise SystemExit(f"setup.py: SOFTSW_LOCAL_VERSION={label!r} is not a PEP 440 local label")
    return label


def package_version() -> str:
    label = local_version_label()
    return f"{base_version()}+{label}" if label else base_version()


VERSION = package_version()


def extension():
    cpu_dir = ROOT / "csrc" / "kernels" / "cpu"
    sources = ["csrc/bindings.cpp"] + sorted(p.relative_to(ROOT).as_posix()
                                             for p in cpu_dir.glob("*.cpp"))
    defines = [
        f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}",
        f"-DPy_LIMITED_API={PY_LIMITED_API}",
    ]
    # torch >= 2.13 headers need C++20.
    cxx = ["-O3", "-std=c++20", "-fvisibility=hidden"] + defines
    link = []
    if env_flag("SOFTSW_CPU_SANITIZE"):
        if WITH_CUDA:
            raise RuntimeError("setup.py: SOFTSW_CPU_SANITIZE=1 needs SOFTSW_CPU_ONLY=1")
        cxx = ["-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"] + cxx[1:]
        link = ["-fsanitize=address"]
    if not WITH_CUDA:
        return CppExtension(
            f"{PACKAGE}._C",
            sources,
            extra_compile_args={"cxx": cxx},
            extra_link_args=link,
            py_limited_api=True,
        )
    cuda_sources = sorted(p.relative_to(ROOT).as_posix()
                          for p in (ROOT / "csrc" / "kernels").glob("*.cu"))
    cuda_defines = ["-DSOFTSW_WITH_CUDA", "-DUSE_CUDA"]
    nvcc = [
        "-O3",
        "-std=c++20",
        "--expt-relaxed-constexpr",
        "-lineinfo",
    ] + defines + cuda_defines
    if env_flag("SOFTSW_PTXAS_VERBOSE"):
        nvcc.append("-Xptxas=-v")
    # nvcc compiles one architecture after another unless told to run them in parallel.
    sass, ptx = compiled_archs()
    nvcc.append(f"--threads={max(1, min(len(sass) + len(ptx), os.cpu_count() or 1))}")
    return CUDAExtension(
        f"{PACKAGE}._C",
        sources + cuda_sources,
        extra_compile_args={"cxx": cxx + cuda_defines, "nvcc": nvcc},
        py_limited_api=True,
    )


def build_info() -> dict:
    info = {
        "version": VERSION,
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "stable_abi_target": f"{STABLE_ABI_TARGET[0]}.{STABLE_ABI_TARGET[1]}",
        "python_limited_api": PY_LIMITED_TAG,
        "cuda_kernels": WITH_CUDA,
        "cuda_version": f"{CUDA_TOOLKIT[0]}.{CUDA_TOOLKIT[1]}" if WITH_CUDA else None,
        "cuda_arch_list": ARCH_LIST if WITH_CUDA else None,
        "cuda_sass_archs": [],
        "cuda_ptx_archs": [],
    }
    if WITH_CUDA:
        info["cuda_sass_archs"], info["cuda_ptx_archs"] = compiled_archs()
    return info


BUILD_INFO_TEMPLATE = '''\
# Generated by setup.py when softsw._C was built; do not edit, do not commit.
# softsw.build_info() and `python -m softsw.info` report it.
BUILD_INFO = {info!r}
'''


_TTY_LINES = 0


def report_progress(line: str) -> None:
    """Print a build progress line; when stdout is not a terminal (pip captures it and
    shows only "still running..." unless -v), also to the terminal pip runs in, if any.
    There pip's spinner has left a character before the cursor: rub it out ("\\b \\b"),
    and start the first line below pip's "Building ... " line."""
    global _TTY_LINES
    print(line, flush=True)
    if sys.stdout.isatty():
        return
    try:
        with open("/dev/tty", "w") as tty:
            tty.write("\b \b" + ("" if _TTY_LINES else "\n") + line + "\n")
        _TTY_LINES += 1
    except OSError:  # no terminal (CI, build services): the captured stdout has it
        pass


NINJA_STATUS_MARK = "softsw-unit "


def run_ninja_with_progress(build_directory: str, verbose: bool, error_prefix: str) -> None:
    """torch.utils.cpp_extension._run_ninja_build, reporting one line per compiled unit
    instead of passing the whole ninja -v stream (every full compile command) on."""
    jobs = os.environ.get("MAX_JOBS", "")
    jobs_flag = ["-j", jobs] if jobs.isdigit() else []
    env = dict(os.environ, NINJA_STATUS=f"{NINJA_STATUS_MARK}[%f/%t %es] ")
    planned = subprocess.run(["ninja", "-n"] + jobs_flag, cwd=build_directory, env=env,
                             capture_output=True, text=True)
    units = [compiled_unit(line) for line in planned.stdout.splitlines()
             if line.startswith(NINJA_STATUS_MARK)]
    if not units:
        report_progress(f"softsw build: every unit is up to date in {build_directory}")
    else:
        report_progress(f"softsw build: compiling {len(units)} unit{'s' * (len(units) > 1)} "
                        f"with {jobs or os.cpu_count()} parallel jobs: {', '.join(units)}")
    output = []
    sys.stdout.flush()
    with subprocess.Popen(["ninja", "-v"] + jobs_flag, cwd=build_directory, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as ninja:
        for line in ninja.stdout:
            output.append(line)
            match = re.match(re.escape(NINJA_STATUS_MARK) + r"\[(\d+)/(\d+) ([\d.]+)s\] (.*)", line)
            if match:
                done, total, seconds, command = match.groups()
                report_progress(f"softsw build: [{done}/{total}] {compiled_unit(command)} "
                                f"done, {float(seconds):.0f} s since the start")
            elif not line.startswith("ninja: no work to do"):
                sys.stdout.write(line)  # compiler warnings and errors, as they come
    if ninja.returncode != 0:
        raise RuntimeError(f"{error_prefix}: {''.join(output)}")


def compiled_unit(line: str) -> str:
    """The source file that a ninja status line or compile command compiles."""
    match = re.search(r" -c (\S+) -o ", line)
    if not match:
        return line.strip()[:80]
    source = Path(match.group(1))
    try:
        return source.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return source.as_posix()


def install_ninja_progress() -> None:
    """Route torch's ninja run through run_ninja_with_progress, if torch still has the
    private function it calls (name and arguments); otherwise leave torch's own."""
    import inspect

    from torch.utils import cpp_extension

    original = getattr(cpp_extension, "_run_ninja_build", None)
    if original is None:
        return
    if list(inspect.signature(original).parameters) == ["build_directory", "verbose",
                                                        "error_prefix"]:
        cpp_extension._run_ninja_build = run_ninja_with_progress


class BuildExt(BuildExtension):
    """torch's BuildExtension, plus
    * objects in a persistent build/objects-<variant>/ of the source tree (editable installs
      would otherwise compile in a fresh temporary folder every time), so that ninja
      recompiles only what changed;
    * one progress line per compiled unit (run_ninja_with_progress);
    * softsw/_build_info.py written beside _C: into the build tree (wheels) and, for
      in-place and editable builds, into src/softsw."""

    def finalize_options(self):
        super().finalize_options()
        variant = "cuda-" + re.sub(r"[^0-9A-Za-z.+]+", "_", ARCH_LIST) if WITH_CUDA else "cpu"
        if env_flag("SOFTSW_CPU_SANITIZE"):
            variant += "-sanitize"
        self.build_temp = str(ROOT / "build" / f"objects-{variant}")

    def run(self):
        install_ninja_progress()
        super().run()
        text = BUILD_INFO_TEMPLATE.format(info=build_info())
        targets = [Path(self.build_lib) / PACKAGE / "_build_info.py"]
        if self.inplace or getattr(self, "editable_mode", False):
            targets.append(ROOT / "src" / PACKAGE / "_build_info.py")
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"softsw setup: wrote {target}")


setup(
    version=VERSION,
    # Namespace discovery so that data folders (softsw/data) are packages too.
    packages=find_namespace_packages("src", include=[PACKAGE, f"{PACKAGE}.*"]),
    package_dir={"": "src"},
    package_data={PACKAGE: ["py.typed"], f"{PACKAGE}.data": ["*"]},
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": PY_LIMITED_TAG}},
)
