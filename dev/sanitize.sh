#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over dev/sanitize_cases.py (small CUDA
# cases of every probability-domain inference variant, a training step and an HVP).
# Run on a machine with a GPU, with softsw importable: bash dev/sanitize.sh
set -o pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
status=0
for tool in memcheck racecheck; do
  out=$(compute-sanitizer --tool "$tool" --error-exitcode 9 python3 "$HERE/sanitize_cases.py" 2>&1)
  rc=$?
  echo "$out" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|err |ok|Error" | tail -12
  echo "compute-sanitizer $tool: exit $rc"
  [[ $rc -eq 0 ]] || status=1
done
exit $status
