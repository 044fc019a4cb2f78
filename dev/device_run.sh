#!/usr/bin/env bash
# Developer runs on the GPU machine: bash dev/device_run.sh STAGE...
#   envab hvpacc hvpprof ncustep switches inplace ptests rows probe pncu ptrain search searchprof hvpbench sympy  stalls  build  info  check  double  double_affine  hvp  affine  host  ncu  bench  bench_r1  bench_r4  check_r1  softbench  affinebench  tests
# Logs go to $OUT (at most 8 files come back); a summary is printed last.
set -o pipefail
REPO=$PWD
export CUDA_HOME=/usr/local/cuda TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1 MAX_JOBS=16
export XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-$REPO/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
SUMMARY=$OUT/summary.txt; : > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
for stage in "$@"; do
  case $stage in
    inplace)  # use the extension built in place here (src/softsw/_C.abi3.so, carried)
      export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}
      (cd /tmp && python3 -c "import softsw, torch; print('inplace softsw', softsw.__file__, torch.__version__)") 2>&1 | tee -a "$SUMMARY" ;;
    ptests)  # the probability-domain tests, then the CUDA tests of every module
      (cd $REPO && timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -x -p no:cacheprovider tests/test_probability_domain.py) > $OUT/ptests.log 2>&1
      say "ptests: $(tail -1 $OUT/ptests.log)"; grep -E '^(FAILED|ERROR)|Error|assert' $OUT/ptests.log | head -20 ;;
    probe)  # probability-domain inference: G cells/s and fp32 accuracy
      (cd /tmp && timeout 200 python3 $REPO/dev/probe_inference.py --dtypes ${PROBE_DTYPES:-float32,bfloat16} ${PROBE_ARGS:-}) 2>&1 | tee -a "$SUMMARY"
      (cd /tmp && timeout 100 python3 $REPO/dev/probe_inference.py --accuracy) 2>&1 | tee -a "$SUMMARY" ;;
    pncu)  # ncu of the probability-domain forward
      (cd /tmp && timeout 200 ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters -k regex:probability \
        python3 $REPO/dev/probe_inference.py --ncu --shapes ${NCU_SHAPES:-1024x128x128,64x1024x1024}) > $OUT/pncu.txt 2>&1
      grep -E "probability_forward|Duration|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|Registers Per|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Bank|Shared|Stall|L1/TEX Hit" $OUT/pncu.txt \
        | sed 's/  \+/ /g' | head -60 | tee -a "$SUMMARY" ;;
    ptrain)  # a training step pass by pass (inference, forward with state, backward, step)
      (cd /tmp && timeout 200 python3 $REPO/dev/probe_training.py ${PTRAIN_ARGS:-}) 2>&1 | tee -a "$SUMMARY"
      (cd /tmp && timeout 200 python3 $REPO/dev/probe_training.py --affine --shapes 1024x128x128,256x512x512,8x4096x4096) 2>&1 | tee -a "$SUMMARY" ;;
    search)  # softsw.search against the batched kernel (2,000 x 2,000 proteins, hard and soft)
      (cd /tmp && timeout ${SEARCH_TIMEOUT:-300} python3 $REPO/benchmarks/search_bench.py --device cuda \
        --json $OUT/search.json ${SEARCH_ARGS:-}) > $OUT/search.txt 2>&1
      say "search: exit $?"; tail -30 $OUT/search.txt | tee -a "$SUMMARY" ;;
    searchprof)  # where softsw.search's time goes: score build, kernel, top-k, idle; variants
      (cd /tmp && timeout ${SEARCHPROF_TIMEOUT:-500} python3 $REPO/dev/search_profile.py --device cuda \
        --gather ${SEARCHPROF_ARGS:-}) > $OUT/searchprof.txt 2>&1
      say "searchprof: exit $?"; tail -40 $OUT/searchprof.txt | tee -a "$SUMMARY" ;;
    hvpbench)  # HVP step next to the training step, linear and affine
      for kind in "" "--affine"; do
        (cd /tmp && timeout 200 python3 -m softsw.bench --mode hvp --methods softsw --no-latency \
          --shapes ${HVP_SHAPES:-64x256x256,16x1024x1024,256x512x512} $kind) 2>&1 | tail -14 | tee -a "$SUMMARY"
      done ;;
    sympy)  # why torch's sympy utilities fail under pytest here
      (cd /tmp && python3 -c "import sympy, torch; print('sympy', sympy.__version__, sympy.__file__); import sympy.printing; print('ok')") 2>&1 | tee -a "$SUMMARY"
      (cd $REPO && timeout 200 python3 -m pytest -x -q -p no:cacheprovider -k "compile" --tb=long tests/test_compile.py) > $OUT/sympy.log 2>&1
      say "sympy: $(tail -1 $OUT/sympy.log)"; grep -n -B30 "has no attribute 'printing'" $OUT/sympy.log | head -80 | tee -a "$SUMMARY" ;;
    build)
      if python3 -c "import softsw" 2>/dev/null && [ -n "$PREBUILT" ]; then say "build: prebuilt"; continue; fi
      ( time python3 -m pip install --no-build-isolation --no-deps --no-index . ) > $OUT/build.log 2>&1 \
        && say "build: ok" || { say "build: FAILED"; tail -30 $OUT/build.log; exit 1; } ;;
    check)
      (cd /tmp && timeout 120 python3 $REPO/dev/check_cuda.py) > $OUT/check.log 2>&1
      say "check: $(tail -1 $OUT/check.log)"
      grep -E '^(FAILED|ERROR)' $OUT/check.log | head -5 ;;
    double)
      (cd /tmp && timeout 100 python3 $REPO/dev/check_double_backward.py --quick) > $OUT/double.log 2>&1
      say "double: $(tail -1 $OUT/double.log)"; grep -iE 'BAD|FAIL|Error' $OUT/double.log | head -5 ;;
    hvpprof)  # kernel times of one HVP step, linear and affine
      (cd /tmp && timeout 200 python3 $REPO/dev/time_hvp.py --profile \
        --shapes ${HVP_SHAPES:-64x256x256,16x1024x1024,256x512x512}) 2>&1 | tee -a "$SUMMARY" ;;
    hvp)  # time a Hessian-vector product step, linear and affine
      (cd /tmp && timeout 90 python3 $REPO/dev/time_hvp.py) 2>&1 | tee -a "$SUMMARY" ;;
    double_affine)
      (cd /tmp && timeout ${DOUBLE_TIMEOUT:-150} python3 $REPO/dev/check_double_backward.py --affine ${DOUBLE_ARGS:---quick}) > $OUT/double_affine.log 2>&1
      say "double_affine: $(tail -1 $OUT/double_affine.log)"; grep -iE 'BAD|FAIL|Error' $OUT/double_affine.log | head -8 ;;
    affine)
      (cd /tmp && timeout 100 python3 $REPO/dev/check_affine.py --quick) > $OUT/affine.log 2>&1
      say "affine: $(tail -1 $OUT/affine.log)"; grep -iE 'BAD|FAIL|Error' $OUT/affine.log | head -5 ;;
    info)
      (cd /tmp && python3 -m softsw.info) 2>&1 | tee -a "$SUMMARY" ;;
    host)
      (cd /tmp && python3 $REPO/dev/profile_cuda.py --host) 2>&1 | tee -a "$SUMMARY" ;;
    ncu)
      (cd /tmp && timeout 100 ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section LaunchStats -k regex:wavefront python3 $REPO/dev/profile_cuda.py) > $OUT/ncu.txt 2>&1
      grep -E "wavefront|Duration|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|Registers Per|Compute \(SM\) Throughput|Memory Throughput" $OUT/ncu.txt \
        | sed 's/  \+/ /g' | head -60 | tee -a "$SUMMARY" ;;
    bench)
      (cd /tmp && timeout 90 python3 $REPO/dev/check_cuda.py --bench-only) 2>&1 | tee -a "$SUMMARY" ;;
    bench_r1|bench_r4)  # the same with rows per lane forced (SOFTSW_ROWS_PER_LANE)
      (cd /tmp && SOFTSW_ROWS_PER_LANE=${stage#bench_r} timeout 90 python3 $REPO/dev/check_cuda.py \
        --bench-only) 2>&1 | sed "s/^/R=${stage#bench_r} /" | tee -a "$SUMMARY" ;;
    check_r1)  # CUDA against the CPU with one row per lane on every shape
      (cd /tmp && SOFTSW_ROWS_PER_LANE=1 timeout 120 python3 $REPO/dev/check_cuda.py) > $OUT/check_r1.log 2>&1
      say "check_r1: $(grep -c '^ok' $OUT/check_r1.log) ok, $(grep -c '^BAD' $OUT/check_r1.log) bad; $(tail -1 $OUT/check_r1.log)" ;;
    softbench)  # the package benchmark with its baselines; the JSON feeds benchmarks/plot.py
      (cd /tmp && timeout ${BENCH_TIMEOUT:-240} python3 -m softsw.bench ${BENCH_ARGS:---quick} \
        --benchmarks-dir $REPO/benchmarks --json $OUT/bench.json) > $OUT/bench.txt 2>&1
      say "softbench: exit $?"; tail -60 $OUT/bench.txt | tee -a "$SUMMARY" ;;
    envab)  # one wheel timed with the setting $ENVAB (e.g. SOFTSW_STATE_ROWS=2) and without, in
            # turns ($ENVAB_ROUNDS rounds); then a training step pass by pass with each
      AB="--methods softsw --no-latency --budget ${ENVAB_BUDGET:-0.25} --mode both --shapes ${ENVAB_SHAPES:-1024x128x128,128x900x900,256x512x512,64x1024x1024,8x4096x4096}"
      for ((round = 0; round < ${ENVAB_ROUNDS:-2}; round++)); do
        for env in "$ENVAB" ""; do
          (cd /tmp && env $env timeout 200 python3 -m softsw.bench $AB) 2>&1 | sed -n '/^shape/,/^bench:/p' \
            | grep -E 'softsw' | sed "s/^/${env:-default} /" | tee -a "$SUMMARY"
        done
      done
      for env in "$ENVAB" ""; do
        (cd /tmp && env $env timeout 200 python3 $REPO/dev/probe_training.py --reduction ${ENVAB_REDUCTION:-soft} \
          --shapes ${ENVAB_PTRAIN_SHAPES:-1024x128x128,256x512x512,8x4096x4096}) 2>&1 | sed "s/^/${env:-default} /" | tee -a "$SUMMARY"
      done ;;
    rows)  # the probability-domain inference forward with one and two rows per lane
      for rows in 1 2; do
        (cd /tmp && SOFTSW_PROBABILITY_ROWS=$rows timeout 200 python3 -m softsw.bench --methods softsw \
          --mode inference --no-latency --budget 0.3 \
          --shapes ${ROWS_SHAPES:-1024x128x128,128x900x900,256x512x512,64x1024x1024,8x4096x4096,1x16384x16384} \
          ${ROWS_ARGS:-}) 2>&1 | tail -9 | sed "s/^/rows=$rows /" | tee -a "$SUMMARY"
      done ;;
    affinebench)  # affine next to linear, softsw only, same shapes and run
      for kind in "" "--affine"; do
        (cd /tmp && timeout 150 python3 -m softsw.bench --methods softsw --no-latency \
          --shapes ${AFFINE_SHAPES:-1024x128x128,256x512x512,64x1024x1024} $kind) 2>&1 \
          | tail -12 | tee -a "$SUMMARY"
      done ;;
    hvpacc)  # the float32 HVP's error in units of the tests' tolerance, both tangent domains
      for v in 1 0; do
        (cd /tmp && SOFTSW_PROBABILITY_TANGENT=$v timeout 200 python3 $REPO/dev/hvp_accuracy.py \
          --seeds ${HVPACC_SEEDS:-20}) 2>&1 | tee -a "$SUMMARY"
      done ;;
    switches)  # each probability-domain choice against its log-domain switch, one wheel, one run
      SW="--methods softsw --no-latency --budget ${SWITCH_BUDGET:-0.3} --shapes ${SWITCH_SHAPES:-1024x128x128,256x512x512,64x1024x1024}"
      for env in "" SOFTSW_PROBABILITY_TANGENT=0; do
        (cd /tmp && env $env timeout 200 python3 -m softsw.bench $SW --mode hvp --reduction soft \
          --shapes ${HVP_SHAPES:-64x256x256,16x1024x1024,256x512x512}) 2>&1 | sed -n "/^shape/,/^bench:/p" | grep -v "^---" | sed "s/^/hvp ${env:-default} /" | tee -a "$SUMMARY"
      done
      for env in "" SOFTSW_PROBABILITY_AFFINE=0; do
        (cd /tmp && env $env timeout 200 python3 -m softsw.bench $SW --mode inference --affine) 2>&1 \
          | sed -n "/^shape/,/^bench:/p" | grep -v "^---" | sed "s/^/affine ${env:-default} /" | tee -a "$SUMMARY"
      done
      for gt in "" --gap-tensor "--gap-tensor SOFTSW_STAGED_GAP=0"; do
        (cd /tmp && env ${gt#--gap-tensor} timeout 200 python3 -m softsw.bench $SW --mode both ${gt%% *}) 2>&1 \
          | sed -n "/^shape/,/^bench:/p" | grep -v "^---" | sed "s/^/both ${gt:-constant} /" | tee -a "$SUMMARY"
      done ;;
    ncustep)  # ncu of an inference forward and a training step (dev/ncu_step.py) at each shape
      for shape in ${NCU_STEP_SHAPES:-256x512x512 8x4096x4096}; do
        (cd /tmp && timeout 200 ncu --clock-control none --section SpeedOfLight --section Occupancy \
          --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
          -k regex:"probability|reverse|wavefront" python3 $REPO/dev/ncu_step.py $shape) > $OUT/ncustep_$shape.txt 2>&1
        say "ncustep $shape:"
        grep -E "Context 1|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp Per|Registers Per|Compute \(SM\) Throughput|No Eligible|Stall Long" \
          $OUT/ncustep_$shape.txt | sed -E -e 's/^ +(void )?([A-Za-z_:]+)<(.{0,70}).*\) \(/ \2<\3...> (/' -e 's/  +/ /g' | head -45 | tee -a "$SUMMARY"
      done ;;
    stalls)  # warp-state samples per source line and SASS instruction (dev/stall_ledger.py)
      for k in ${STALL_KERNELS:-probability_forward reverse_staged}; do
        (cd /tmp && timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats \
          --import-source yes -k regex:$k -c 1 -f -o $OUT/stalls_$k \
          python3 $REPO/dev/ncu_step.py ${STALL_SHAPE:-256x512x512}) > $OUT/stalls_$k.log 2>&1
        ncu -i $OUT/stalls_$k.ncu-rep --page source --csv --print-source cuda,sass > /tmp/stalls_$k.csv 2>&1
        python3 $REPO/dev/stall_ledger.py /tmp/stalls_$k.csv > $OUT/stalls_$k.txt 2>&1
        gzip -c /tmp/stalls_$k.csv > $OUT/stalls_$k.csv.gz
        say "stalls $k:"; head -30 $OUT/stalls_$k.txt | tee -a "$SUMMARY"
        rm -f $OUT/stalls_$k.ncu-rep
      done ;;
    tests)
      (cd /tmp && timeout ${TEST_TIMEOUT:-420} python3 -m pytest -q -rfE -n 16 -p no:cacheprovider --timeout=${TEST_CASE_TIMEOUT:-300} -m "${TEST_MARK:-not slow}" ${TEST_K:+-k "$TEST_K"} ${TEST_PATHS:-$REPO/tests}) > $OUT/pytest.log 2>&1
      say "tests: $(tail -1 $OUT/pytest.log)"; grep -E '^(FAILED|ERROR)' $OUT/pytest.log | head -20 ;;
  esac
done
echo "===== summary"; cat "$SUMMARY"
