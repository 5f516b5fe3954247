#!/usr/bin/env bash
# On the GPU machine (offline): the stages of a measurement session. Each stage writes one archive
# $OUT/<stage>.tgz (the device tool brings back at most 8 files) and prints a short summary last.
#   bash scripts/gpu_session.sh build                  offline build + install (once per machine)
#   bash scripts/gpu_session.sh harness                selftest --gpu (planted GPU-only bugs), the GEMM bound
#                                                      calibrated on every GEMM implementation (verify + models
#                                                      suites, worst error/bound ratio and bias statistics),
#                                                      crosscheck (harness timer vs CUPTI) on a few rows
#   bash scripts/gpu_session.sh compare                the default `python -m harness compare`, cold (empty
#                                                      compile caches) and warm: the wall time of each and
#                                                      where it went (phases, compile ahead, verify, timing)
#   bash scripts/gpu_session.sh tests                  pytest -m gpu (four processes side by side), then
#                                                      compute-sanitizer on the CUDA kernels (KL_SANITIZE=0: not)
#   bash scripts/gpu_session.sh layers L [L..]         per layer L: verify (verify suite, every role) and a
#                                                      short compare of its default and twin beside torch on
#                                                      the models suite; one archive per layer, $OUT/L.tgz
#   bash scripts/gpu_session.sh check L [L..] [-- ARGS]  python -m harness check over layers L (one archive)
#   bash scripts/gpu_session.sh awkward                verify --suite awkward (60 seeded shapes a problem that no
#                                                      planner was tuned on) of every default and twin
#   bash scripts/gpu_session.sh peak                   GEMM + GELU at 8192^3 bf16, every layer's default beside
#                                                      torch eager, torch.compile and the torch.mm ceiling (TFLOP/s)
# Extra arguments go to the stage's command. On a machine with two GPUs, run two stages at once with
# CUDA_VISIBLE_DEVICES=0 / =1.
set -uo pipefail
stage=${1:?stage: build | harness | compare | tests | layers | check | awkward | peak}
shift
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/tmp/res/$stage
mkdir -p "$OUT" "$R"
if [ -f .device/bin/env.sh ]; then
  source .device/bin/env.sh > /dev/null
elif [ -d /opt/kl/site ] && [ "$stage" != build ]; then
  # bundles were installed on this machine by an earlier call, but this call did not carry
  # .device/bin: every layer they hold would report "unavailable" (a whole call wasted)
  echo "gpu_session: .device/bin was not carried - carry it in every call (docs/gpu-session.md)" >&2
  exit 3
fi
source scripts/gpu_build.sh
t0=$(date +%s)
log() { echo "[gpu_session $stage $(( $(date +%s) - t0 ))s] $*"; }
# a `verify --format json` file: PASS / FAIL / SKIP per implementation, then the first $2 rows not PASS
verify_summary() {
  python3 - "$1" "$2" <<'EOF2'
import collections, json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no JSON:", e); sys.exit()
c = collections.Counter((r["impl"], r["status"]) for r in rows)
for impl in sorted({r["impl"] for r in rows}):
    print(f"  {impl:34s} P {c[(impl, 'PASS')]:3d} F {c[(impl, 'FAIL')]:3d} S {c[(impl, 'SKIP')]:3d}")
for r in [r for r in rows if r["status"] != "PASS"][:int(sys.argv[2])]:
    print(f"  {r['status']} {r['impl']} {r['case'] if isinstance(r['case'], str) else r['case'].get('id')}: {str(r.get('reason'))[:150]}")
EOF2
}

case $stage in
  build) ;;
  harness)
    python3 -m harness selftest --gpu --format json > "$R/selftest_gpu.json" 2> "$R/selftest_gpu.log"
    log "selftest --gpu exit $?"
    python3 - "$R/selftest_gpu.json" <<'EOF'
import json, sys
for o in json.load(open(sys.argv[1])):
    print(f"  {'ok ' if o['ok'] else 'BAD'} {o['role']:7s} {o['got']:5s} {o['bug'][:50]:50s} {o['reason'][:90]}")
EOF
    for suite in verify models; do
      python3 -m harness verify --problem gemm_epilogue --all --suite $suite --format json "$@" \
        > "$R/gemm_bound_$suite.json" 2> "$R/gemm_bound_$suite.log"
      log "GEMM bound calibration ($suite suite) exit $?"
    done
    python3 - "$R"/gemm_bound_*.json <<'EOF'
import collections, json, sys
worst = collections.defaultdict(lambda: [0.0, 0, 0, 0.0])
for f in sys.argv[1:]:
    try:
        rows = json.load(open(f))
    except Exception as e:
        print("  (no JSON in", f, e, ")"); continue
    for r in rows:
        w = worst[r["impl"]]
        w[0] = max(w[0], r.get("worst_ratio") or 0.0)
        w[1] += r["status"] == "PASS"; w[2] += r["status"] == "FAIL"
        b = r.get("bias") or {}
        if b.get("floor"):
            w[3] = max(w[3], abs(b["mean_err"]) / b["floor"])
        if r["status"] == "FAIL":
            print(f"  FAIL {r['impl']} {r['case']}: {r['reason'][:160]}")
for impl, (ratio, p, f, bias) in sorted(worst.items()):
    print(f"  {impl:34s} pass {p:3d} fail {f:3d}  worst |err|/bound {ratio:.3f}  worst |bias|/floor {bias:.3f}")
EOF
    python3 -m harness crosscheck --problem vector_add --set N=67108864 --reps 20 --out "$R/cross_add.json" > "$R/cross.txt" 2>&1
    python3 -m harness crosscheck --problem softmax --set M=4096 --set N=4096 --reps 20 --out "$R/cross_softmax.json" >> "$R/cross.txt" 2>&1
    python3 -m harness crosscheck --problem gemm_epilogue --set M=4096 --set N=4096 --set K=4096 --reps 10 --out "$R/cross_gemm.json" >> "$R/cross.txt" 2>&1
    python3 -m harness crosscheck --problem softmax --set M=64 --set N=1024 --reps 30 --out "$R/cross_small.json" >> "$R/cross.txt" 2>&1
    log "crosscheck done"; grep -v Warning "$R/cross.txt" | tail -30 ;;
  compare)
    # cold: no compile cache of any layer (Triton, torch.compile, the CuTe DSL's own file cache,
    # TileLang's, cuTile's, and the kltools folder: NVRTC cubins, exported CuTe DSL kernels, compile
    # facts, line counts); the CUDA module itself is built at install time. Then warm: the same
    # command again. Prints both wall times and where each run's time went (report --section wall).
    rm -rf ~/.triton/cache /tmp/torchinductor_* /tmp/cutlass_python_cache* ~/.cache/kernel-layers \
      ~/.tilelang/cache ~/.cache/cutile-python "$R/wall.txt" 2>/dev/null
    for run in cold warm; do
      limit=$([ $run = cold ] && echo ${KL_COLD_LIMIT:-400} || echo ${KL_WARM_LIMIT:-180})
      s=$(date +%s)
      timeout $limit python3 -m harness compare --out "$R/$run" "$@" > "$R/$run.txt" 2>&1
      rc=$?
      echo "$run $rc $(( $(date +%s) - s ))" >> "$R/wall.txt"
      log "$run: exit $rc in $(( $(date +%s) - s )) s (limit $limit s)"
    done
    grep -v "^\[" "$R/cold.txt" | grep -E "passed|FAIL" | tail -5
    while read -r run rc secs; do
      echo "== $run: $secs s wall (exit $rc)"
      python3 -m harness report "$R/$run" --section wall 2>&1 | tail -12
    done < "$R/wall.txt" ;;
  tests)
    # pytest -m gpu in four processes side by side (the compiles are CPU work: 16 cores), split by
    # the layer a test file is named after; every test file falls in exactly one group (Helion's
    # code generation beside the CUDA C++ tests, which compile little: "the rest" took longest)
    groups=("" "" "" "")
    for f in tests/test_*.py; do
      case ${f#tests/test_} in
        cute_*) g=0 ;; cuda_*|helion_*) g=1 ;; tilelang_*|cutile_*) g=2 ;; *) g=3 ;;
      esac
      groups[$g]="${groups[$g]} $f"
    done
    per_test=""; python3 -c "import pytest_timeout" 2>/dev/null && per_test="--timeout 240"
    # each group pinned to its share of the cores: the compile pools size themselves by the cores
    # they may use (harness.machine.usable_cpus), so four groups no longer start a process a core
    # each (four times the machine: docs/results/h100-2026-12-07b/README.md). Shares by weight
    # 3:3:6:4 of 16: tilelang + cutile compile the most (their TileLang fixture is the slowest
    # setup of all: docs/results/h100-2026-12-07c/README.md)
    ncpu=$(nproc); weights=(3 3 6 4); first=0
    for g in 0 1 2 3; do
      pin=""
      if command -v taskset > /dev/null && [ "$ncpu" -ge 4 ]; then
        n=$(( ncpu * weights[g] / 16 > 0 ? ncpu * weights[g] / 16 : 1 ))
        last=$(( g == 3 ? ncpu - 1 : first + n - 1 )); [ "$last" -ge "$ncpu" ] && last=$(( ncpu - 1 ))
        pin="taskset -c $first-$last"; first=$(( last + 1 < ncpu ? last + 1 : ncpu - 1 ))
      fi
      # shellcheck disable=SC2086
      timeout ${KL_TESTS_LIMIT:-540} $pin python3 -m pytest -q -ra -m gpu -p no:cacheprovider --durations=12 $per_test \
        ${groups[$g]} "$@" > "$R/pytest_gpu_$g.txt" 2>&1 &
    done
    wait
    log "pytest -m gpu done"
    for g in 0 1 2 3; do echo "group $g:${groups[$g]:0:80}..."; grep -E "passed|failed|error|FAILED|ERROR|SKIPPED|^[0-9.]+s " "$R/pytest_gpu_$g.txt" | tail -16; done
    [ "${KL_SANITIZE:-1}" = 0 ] && { tar czf "$OUT/$stage.tgz" -C /tmp/res "$stage"; exit 0; }
    for tool in memcheck racecheck synccheck; do
      timeout ${KL_SANITIZE_LIMIT:-150} compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/tune_cuda.py --sanitize \
        > "$R/sanitize_$tool.txt" 2>&1
      log "compute-sanitizer $tool exit $?"; tail -3 "$R/sanitize_$tool.txt"
    done ;;
  layers)
    for L in "$@"; do
      mkdir -p "$R/$L"
      timeout ${KL_LAYER_VERIFY_LIMIT:-150} python3 -m harness verify --layer "$L" --suite verify --all --format json \
        > "$R/$L/verify.json" 2> "$R/$L/verify.log"
      log "$L verify exit $?"
      verify_summary "$R/$L/verify.json" 12
      timeout ${KL_LAYER_COMPARE_LIMIT:-150} python3 -m harness compare --layer "$L" --suite models --no-verify-suite \
        --roles default,simple --time-cap 0.3 --out "$R/$L/models" > "$R/$L/models.txt" 2>&1
      log "$L models compare exit $?"; grep -E "headline|^\| $L:|FAIL" "$R/$L/models.txt" | head -20
      tar czf "$OUT/$L.tgz" -C "$R" "$L"
    done
    exit 0 ;;
  check)
    # python -m harness check over the layers named (every id and candidate: the models + edge suites
    # timed beside torch eager / torch.compile / the libraries, then the verify suite); extra arguments
    # after "--" go to the command, e.g.  check cutile tilelang -- --problem softmax --only candidates
    layers=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do layers+=("$1"); shift; done; [ "${1:-}" = "--" ] && shift
    name=$(IFS=-; echo "${layers[*]}")
    n=1; base=$name
    while [ -e "$R/$name" ]; do n=$((n + 1)); name=$base-$n; done   # a second check: a new folder
    timeout ${KL_CHECK_LIMIT:-540} python3 -m harness check "${layers[@]}" --out "$R/$name" "$@" \
      > "$R/$name.txt" 2> "$R/$name.err"
    log "check ${layers[*]} exit $?"; tail -60 "$R/$name.txt"; tail -5 "$R/$name.err"
    tar czf "$OUT/check-$name.tgz" -C "$R" "$name" "$name.txt" "$name.err"
    exit 0 ;;
  awkward)
    # every default and twin (--roles to widen) on the awkward suite: shapes drawn with a fixed
    # seed that no planner was tuned on; every non-PASS listed
    timeout ${KL_AWKWARD_LIMIT:-540} python3 -m harness verify --suite awkward --roles default,simple --format json \
      "$@" > "$R/awkward.json" 2> "$R/awkward.log"
    log "verify --suite awkward exit $?"
    verify_summary "$R/awkward.json" 40
    ;;
  peak)
    # one large aligned GEMM: what each layer's default gets out of the tensor cores (issue 42.3)
    timeout ${KL_PEAK_LIMIT:-240} python3 -m harness compare --problem gemm_epilogue --set M=8192 --set N=8192 \
      --set K=8192 --set act=gelu --dtype bfloat16 --no-verify-suite --no-raw --out "$R/gemm8192" "$@" \
      > "$R/gemm8192.txt" 2>&1
    log "8192^3 bf16 GELU exit $?"; grep -E "^(│|\|)|passed" "$R/gemm8192.txt" | tail -30 ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
tar czf "$OUT/$stage.tgz" -C /tmp/res "$stage"
log "archive $OUT/$stage.tgz"
