#!/usr/bin/env bash
# Builds the CPU kernels (csrc/kernels/cpu) and the CUDA kernels
# (csrc/kernels/*.cu, under the warp emulation of emulation.h) into one
# program, and runs check.cpp's comparison of the two:
#   bash dev/emulate/run.sh [--quick] [--seed N]
# EMULATE_SANITIZE=1 builds with AddressSanitizer: a kernel's read or write
# outside the buffers it was given stops the run with a report.
# Objects go to $EMULATE_BUILD (build/emulate, or build/emulate-asan), each
# rebuilt when its source or any kernel header is newer; EMULATE_JOBS
# compilers at a time (2). EMULATE_ONLY=text runs only the cases whose
# description contains it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CXX=${CXX:-g++}
FLAGS=(-std=c++20 -O1 -fno-strict-aliasing -Wno-psabi -Icsrc -Icsrc/kernels)
OUT=${EMULATE_BUILD:-build/emulate}
if [[ ${EMULATE_SANITIZE:-0} == 1 ]]; then
  FLAGS+=(-fsanitize=address -fno-omit-frame-pointer)
  OUT=${EMULATE_BUILD:-build/emulate-asan}
fi
mkdir -p "$OUT"
EMULATED=(-DSOFTSW_WITH_CUDA -DSOFTSW_WARP_EMULATION -Idev/emulate/include -Idev/emulate -x c++)

stale() {  # object source: whether the object needs building
  [[ ! -f $2 || $1 -nt $2 ]] ||
    [[ -n $(find csrc/kernels dev/emulate \( -name '*.h' -o -name '*.cuh' \) -newer "$2" | head -1) ]]
}
running=()
for src in csrc/kernels/cpu/*.cpp csrc/kernels/*.cu dev/emulate/*.cpp; do
  name=$(basename "${src%.*}")
  if [[ $src == csrc/kernels/cpu/* ]]; then obj=$OUT/cpu_$name.o; extra=(); else obj=$OUT/emu_$name.o; extra=("${EMULATED[@]}"); fi
  stale "$src" "$obj" || continue
  echo "compile $src" >&2
  $CXX "${FLAGS[@]}" "${extra[@]}" -c "$src" -o "$obj" &
  running+=($!)
  if (( ${#running[@]} >= ${EMULATE_JOBS:-2} )); then wait "${running[0]}"; running=("${running[@]:1}"); fi
done
for pid in "${running[@]}"; do wait "$pid"; done
$CXX "${FLAGS[@]}" "$OUT"/cpu_*.o "$OUT"/emu_*.o -o "$OUT/check"
exec "$OUT/check" "$@"
