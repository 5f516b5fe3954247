#!/usr/bin/env bash
# On the GPU machine: one stage of a measurement session per call (each call <= 10 minutes; the
# machine stays warm ~30 s between calls, so the stages are issued back to back). Results land in
# $OUT (at most a few files per call: one archive per stage plus its log).
#   bash scripts/gpu_session.sh mem     verify the softmax/vector-add rows changed since the last
#                                       run (verify suite), then compare vector_add + softmax
#   bash scripts/gpu_session.sh gemm    verify the new GEMM rows (verify suite), then compare GEMM
#   bash scripts/gpu_session.sh checks  pytest -m gpu, compute-sanitizer (memcheck, racecheck,
#                                       synccheck; memcheck of the split path alone) and the CuTe
#                                       GEMM verify suite, side by side
#                                       (correctness only: nothing is timed in this stage)
#   bash scripts/gpu_session.sh tune    scripts/tune_triton_softmax_split.py + tune_triton_gemm.py
# Environment: KL_MEM_VERIFY / KL_GEMM_VERIFY override the --impl lists verified first.
set -uo pipefail
stage=${1:?stage: mem | gemm | checks | tune}
shift
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/res
[ -f .device/bin/env.sh ] && source .device/bin/env.sh
source scripts/gpu_build.sh

impl_args() { for i in $1; do printf -- '--impl %s ' "$i"; done; }

verify_first() {  # $1: name, $2: ids
  local t0=$(date +%s)
  # shellcheck disable=SC2046
  python3 -m harness verify $(impl_args "$2") --suite verify --format json > "/tmp/res/verify_$1.json" 2> "/tmp/res/verify_$1.log"
  echo "[gpu_session] verify $1: exit $? in $(( $(date +%s) - t0 )) s"
  python3 - "/tmp/res/verify_$1.json" <<'EOF'
import collections, json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("  (no JSON:", e, ")"); sys.exit()
n = collections.Counter((r["impl"], r["status"]) for r in rows)
for (impl, st), k in sorted(n.items()):
    print(f"  {impl:28s} {st:5s} {k}")
for r in rows:
    if r["status"] == "FAIL":
        print("  FAIL", r["impl"], r["case"], (r.get("reason") or "")[:300])
EOF
}

case $stage in
  mem)
    verify_first mem "${KL_MEM_VERIFY:-cuda:softmax cupy:softmax cuda:softmax_split cupy:softmax_split cute:softmax cute:softmax_split}"
    bash scripts/gpu_run.sh mem --problem vector_add,softmax --suite bench --no-verify-suite \
      --time-cap ${KL_TIME_CAP:-0.4} --min-samples 10 --plot "$@" > /tmp/res/mem_console.txt 2>&1
    tail -60 /tmp/res/mem_console.txt
    cp /tmp/res/verify_mem.json "$OUT/" 2>/dev/null
    ;;
  gemm)
    verify_first gemm "${KL_GEMM_VERIFY:-triton:gemm_tma cute:gemm}"
    bash scripts/gpu_run.sh gemm --problem gemm_epilogue --suite bench --no-verify-suite \
      --time-cap ${KL_TIME_CAP:-0.7} --min-samples 10 --plot "$@" > /tmp/res/gemm_console.txt 2>&1
    tail -45 /tmp/res/gemm_console.txt
    cp /tmp/res/verify_gemm.json "$OUT/" 2>/dev/null
    ;;
  checks)
    t0=$(date +%s)
    ( python3 -m pytest -q -m gpu -p no:cacheprovider > /tmp/res/pytest_gpu.txt 2>&1; echo "exit $?" >> /tmp/res/pytest_gpu.txt ) &
    ( for tool in memcheck racecheck synccheck; do
        timeout "${KL_SANITIZER_TIMEOUT:-170}" compute-sanitizer --tool $tool --error-exitcode 1 \
          python3 scripts/tune_cuda.py --sanitize > /tmp/res/sanitizer_$tool.txt 2>&1
        echo "exit $?" >> /tmp/res/sanitizer_$tool.txt
      done
      # the split path on its own (its blocks wait for each other: a 2^30-poll spin budget)
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 \
        python3 scripts/tune_cuda.py --sanitize-split > /tmp/res/sanitizer_memcheck_split.txt 2>&1
      echo "exit $?" >> /tmp/res/sanitizer_memcheck_split.txt ) &
    ids=${KL_CUTE_VERIFY-cute:gemm_ws cute:gemm_pp}
    if [ -n "$ids" ]; then verify_first cute_gemm "$ids"; else echo "[]" > /tmp/res/verify_cute_gemm.json; : > /tmp/res/verify_cute_gemm.log; fi
    wait
    echo "[gpu_session] checks: $(( $(date +%s) - t0 )) s"
    tail -15 /tmp/res/pytest_gpu.txt
    for tool in memcheck racecheck synccheck memcheck_split; do
      echo "== $tool"; grep -E "SUMMARY|sanitize:|sanitize-split:|^exit" /tmp/res/sanitizer_$tool.txt | tail -4
    done
    tar czf "$OUT/checks.tgz" -C /tmp/res pytest_gpu.txt sanitizer_memcheck.txt sanitizer_racecheck.txt \
      sanitizer_synccheck.txt sanitizer_memcheck_split.txt verify_cute_gemm.json verify_cute_gemm.log
    ;;
  tune)
    # the Triton variants' own sweeps (configs the compare run does not pin), one after the other
    timeout 260 python3 scripts/tune_triton_softmax_split.py --out "$OUT" --budget 150 2>&1 | tail -25
    timeout 280 python3 scripts/tune_triton_gemm.py --out "$OUT/tune_triton_gemm.json" 2>&1 | tail -25
    ;;
  *) echo "stage: mem | gemm | checks | tune, got '$stage'"; exit 2 ;;
esac
