#!/usr/bin/env bash
# The CPU kernels under AddressSanitizer, built at -O1 (which also shows code
# that is right only when the optimiser inlines it): a CPU-only debug build of
# this checkout in a temporary copy, then the CPU kernel tests against it.
#
#   bash dev/sanitize_cpu.sh                     # the CPU kernel tests
#   bash dev/sanitize_cpu.sh tests/test_values.py -k affine    # or any pytest arguments
#
# Needs gcc's libasan (preloaded into Python, which is not built with it);
# leaks are not checked (Python and torch keep memory to the end).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python}"
LIBASAN="$(${CC:-gcc} -print-file-name=libasan.so)"
[[ -f "$LIBASAN" ]] || { echo "dev/sanitize_cpu.sh: no libasan.so from ${CC:-gcc}" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/softsw-sanitize.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -C "$WORK" -xf -
cd "$WORK"
SOFTSW_CPU_ONLY=1 SOFTSW_CPU_SANITIZE=1 "$PYTHON" setup.py build_ext --inplace > build.log 2>&1 ||
  { tail -n 40 build.log >&2; exit 1; }
if ! nm -D src/softsw/_C*.so | grep " U __asan_" > /dev/null; then
  echo "dev/sanitize_cpu.sh: the extension was built without AddressSanitizer" >&2
  exit 1
fi
if [[ $# -eq 0 ]]; then
  set -- tests/test_cpu_double_backward.py tests/test_cpu_affine_hard.py tests/test_cpu_checkpoints.py \
    tests/test_cpu_probability_domain.py tests/test_cpu_affine_backward.py tests/test_cpu_long_pair_affine.py \
    tests/test_float_mode.py tests/test_batching.py
fi
LD_PRELOAD="$LIBASAN" ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 PYTHONPATH="$WORK/src" \
  "$PYTHON" -m pytest -q -p no:cacheprovider "$@"
