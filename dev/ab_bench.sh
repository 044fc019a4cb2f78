#!/usr/bin/env bash
# Two wheels timed against each other on one machine, in turns (device call):
#   bash dev/ab_bench.sh DIR_A DIR_B [ROUNDS]
# Each DIR holds one softsw wheel; it is installed to /tmp/site_<name of DIR>
# and `python -m softsw.bench $AB_ARGS` runs with each in turn, ROUNDS times
# (2), every row prefixed with the wheel's directory name.
set -o pipefail
AB_ARGS=${AB_ARGS:---methods softsw --no-latency --budget 0.25 --mode both --shapes 1024x128x128,256x512x512,64x1024x1024}
sites=()
for dir in "$1" "$2"; do
  site=/tmp/site_$(basename "$dir")
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$dir"/*.whl
  sites+=("$site")
done
for ((round = 0; round < ${3:-2}; round++)); do
  for site in "${sites[@]}"; do
    (cd /tmp && PYTHONPATH=$site timeout 200 python3 -m softsw.bench $AB_ARGS 2>&1) |
      sed -n '/^shape/,/^bench:/p' | grep -E 'softsw' | sed "s|^|${site#/tmp/site_} |"
  done
done
