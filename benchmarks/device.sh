#!/usr/bin/env bash
# The one script to run on the GPU machine (H200): build, resource usage, tests,
# benchmark, plot. Run from the repository root, with `.whl` carried (Biopython):
#
#   bash benchmarks/device.sh                    # every stage: build ptxas test bench plot
#   bash benchmarks/device.sh build test         # some stages, in this order
#   STAGES="build bench plot" BENCH_ARGS="--quick" bash benchmarks/device.sh
#
# Stages
#   build   python3 -m pip install --no-build-isolation --no-deps --no-index . with
#           TORCH_CUDA_ARCH_LIST=9.0 and ptxas -v (log: $OUT/build.log); the naive
#           CUDA baseline is compiled at the same time, in the background.
#   ptxas   registers / shared memory / stack / spills of every kernel, from the build
#           log (or a separate nvcc -Xptxas -v pass): $OUT/ptxas.txt
#   test    python3 -m pytest -q tests, tee'd to $OUT/pytest.log (TEST_ARGS appended)
#   bench   python3 -m softsw.bench --json $OUT/bench.json (BENCH_ARGS appended),
#           tee'd to $OUT/bench.txt; its table is printed last
#   plot    $OUT/plot.png from $OUT/bench.json
# test and bench build first if softsw cannot be imported (a fresh machine).
#
# Environment: OUT (default ./out), BENCH_ARGS, TEST_ARGS, TOTAL_BUDGET_S (default 560:
# the bench's --time-limit is what is left of it minus a margin), TEST_TIMEOUT_S
# (default 240), BUILD_TIMEOUT_S (default 420).
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-560}
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-240}
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-420}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # JAX next to PyTorch on one GPU
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

STAGES_ARG="$*"
STAGES=${STAGES_ARG:-${STAGES:-build ptxas test bench plot}}
STATUS=0
log() { echo "[device.sh $(date +%H:%M:%S) +${SECONDS}s] $*"; }

# Biopython (the tests compare with it) travels as a wheel in .whl/.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} \
    || log "WARNING: could not install the wheels in .whl/"
else
  log "WARNING: no .whl/ folder (carry it): Biopython tests will skip or fail"
fi

log "stages: $STAGES; OUT=$OUT"
# (At most 8 files come back from $OUT: build.log naive_build.log ptxas.txt pytest.log
# bench.txt bench.json plot.png; so this goes to stdout only.)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv 2>&1
python3 - <<'EOF' 2>&1
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
EOF

stage_build() {
  log "build: pip install . (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS)"
  # The naive baseline's extension compiles meanwhile (cached in TORCH_EXTENSIONS_DIR).
  ( timeout "$BUILD_TIMEOUT_S" python3 benchmarks/naive_cuda.py --build \
      > "$OUT/naive_build.log" 2>&1 || echo "naive_cuda build failed (rc=$?)" >> "$OUT/naive_build.log" ) &
  local naive_pid=$!
  SOFTSW_PTXAS_VERBOSE=1 SOFTSW_REQUIRE_CUDA=1 timeout "$BUILD_TIMEOUT_S" \
    python3 -m pip install -v --force-reinstall --no-build-isolation --no-deps --no-index . > "$OUT/build.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    log "build FAILED (rc=$rc); the end of $OUT/build.log:"
    grep -n -E "error|Error" "$OUT/build.log" | head -40
    tail -40 "$OUT/build.log"
    STATUS=1
  else
    log "build ok"
    (cd /tmp && python3 -m softsw.info 2>&1 | head -30) || true
  fi
  wait $naive_pid
  log "naive baseline: $(tail -1 "$OUT/naive_build.log")"
  return $rc
}

stage_ptxas() {
  log "ptxas: resource usage per kernel"
  local src="$OUT/build.log"
  if ! grep -q "ptxas info" "$src" 2>/dev/null; then
    log "no ptxas lines in the build log: compiling the kernels again with -Xptxas -v"
    src=/tmp/ptxas_raw.log
    : > "$src"
    TI=$(python3 -c "import torch.utils.cpp_extension as c; print(' '.join('-I'+p for p in c.include_paths(device_type='cuda')))" 2>/dev/null \
      || python3 -c "import torch.utils.cpp_extension as c; print(' '.join('-I'+p for p in c.include_paths(cuda=True)))")
    for f in csrc/kernels/*.cu; do
      nvcc -O3 -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -Xptxas -v \
        -DSOFTSW_WITH_CUDA -DUSE_CUDA -DTORCH_TARGET_VERSION=0x020a000000000000 \
        -Icsrc -Icsrc/kernels $TI -c "$f" -o /dev/null >> "$src" 2>&1 &
    done
    wait
  fi
  python3 - "$src" "$OUT/ptxas.txt" <<'EOF'
import re, subprocess, sys
text = open(sys.argv[1], errors="replace").read()
rows, current, props = [], None, {}
for line in text.splitlines():
    m = re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line)
    if m:
        current = (m.group(1), m.group(2)); props = {"stack": "?", "spill": "?"}
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and current:
        props["stack"], props["spill"] = m.group(1), f"{m.group(2)}/{m.group(3)}"
        continue
    m = re.search(r"Used (\d+) registers(.*)", line)
    if m and current:
        smem = re.search(r"(\d+) bytes smem", m.group(2))
        rows.append((current[0], current[1], m.group(1), smem.group(1) if smem else "0",
                     props.get("stack", "?"), props.get("spill", "?")))
        current = None
names = [r[0] for r in rows]
demangled = names
for tool in ("cu++filt", "c++filt"):
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.count("\n") >= len(names) - 1:
            demangled = out.stdout.splitlines(); break
    except Exception:
        pass
seen, lines = set(), []
header = f"{'regs':>4} {'smem B':>7} {'stack':>5} {'spill st/ld':>11} {'arch':6} kernel"
for r, d in zip(rows, demangled):
    key = (d, r[1])
    if key in seen: continue
    seen.add(key)
    flag = "  <-- SPILLS" if r[5] not in ("0/0", "?") else ""
    lines.append((d, f"{r[2]:>4} {r[3]:>7} {r[4]:>5} {r[5]:>11} {r[1]:6} {d[:160]}{flag}"))
with open(sys.argv[2], "w") as f:
    f.write(header + "\n" + "\n".join(l for _, l in lines) + f"\n{len(lines)} kernels\n")
# On stdout: the float32 kernels (what the benchmark runs) and any that spill.
shown = [l for d, l in lines if "<float, float" in d or "SPILLS" in l]
print(header)
print("\n".join(shown[:40]))
print(f"{len(lines)} kernels ({len(shown)} shown: float32 ones and spills); all in {sys.argv[2]}")
EOF
}

ensure_built() {
  if ! (cd /tmp && python3 -c "import softsw, softsw._C" >/dev/null 2>&1); then
    log "softsw is not importable here: building first"
    stage_build || return 1
  fi
}

stage_test() {
  ensure_built || { STATUS=1; return 1; }
  log "test: pytest -q tests (timeout ${TEST_TIMEOUT_S}s)"
  timeout -s INT -k 20 "$TEST_TIMEOUT_S" python3 -m pytest -q -p no:cacheprovider \
    --durations=15 tests $TEST_ARGS 2>&1 | tee "$OUT/pytest.log"
  local rc=$?
  [ $rc -ne 0 ] && { log "tests FAILED or timed out (rc=$rc)"; STATUS=1; }
  return $rc
}

stage_bench() {
  ensure_built || { STATUS=1; return 1; }
  local left=$(( TOTAL_BUDGET_S - SECONDS - 45 ))
  [ $left -lt 30 ] && left=30
  local limit=$(( left * 7 / 10 ))
  log "bench: python3 -m softsw.bench (baselines stop after ${limit}s, hard stop ${left}s) $BENCH_ARGS"
  # SIGINT at the hard stop: the bench prints its table and writes the JSON.
  timeout -s INT -k 30 "$left" python3 -m softsw.bench --json "$OUT/bench.json" \
    --time-limit "$limit" $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt"
  local rc=$?
  [ $rc -ne 0 ] && { log "bench exited with rc=$rc"; STATUS=1; }
  return $rc
}

stage_plot() {
  if [ ! -s "$OUT/bench.json" ]; then log "plot: no $OUT/bench.json"; return 1; fi
  python3 benchmarks/plot.py "$OUT/bench.json" -o "$OUT/plot.png" || STATUS=1
}

for stage in $STAGES; do
  case "$stage" in
    build) stage_build ;;
    ptxas) stage_ptxas ;;
    test) stage_test ;;
    bench) stage_bench ;;
    plot) stage_plot ;;
    *) log "unknown stage '$stage' (build ptxas test bench plot)"; STATUS=2 ;;
  esac
done

# Short summary last (the device tool returns the tail of the output).
log "done in ${SECONDS}s, status $STATUS; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
if [ -s "$OUT/pytest.log" ]; then echo "pytest: $(tail -1 "$OUT/pytest.log")"; fi
if [ -s "$OUT/ptxas.txt" ] && grep -q SPILLS "$OUT/ptxas.txt"; then
  echo "ptxas: kernels with spills:"; grep SPILLS "$OUT/ptxas.txt" | head -10
fi
if [ -s "$OUT/bench.txt" ]; then
  # The bench's table again, so that it is the last thing printed.
  sed -n '/^=\{100\}$/,$p' "$OUT/bench.txt" | tail -80
fi
exit $STATUS
