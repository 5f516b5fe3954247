#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer (memcheck, racecheck, synccheck) over every cuda:* row
# (scripts/tune_cuda.py --sanitize cases), plus memcheck over the split softmax
# (--sanitize-split), as parallel processes - one per tool and group of rows - so that the whole
# set fits one device call; optionally `pytest -m gpu` beside them (no timing in those tests).
#   bash scripts/gpu_sanitize.sh [LIMIT_S] [--with-pytest]
# Logs in $R (default /tmp/res/sanitize): san_<tool>_<group>.txt, exit codes in exits.txt.
set -uo pipefail
limit=${1:-450}
R=${R:-/tmp/res/sanitize}
mkdir -p "$R"
: > "$R/exits.txt"
declare -A groups=(
  [gemm_a]="cuda:gemm_epilogue,cuda:gemm_epilogue_pingpong,cuda:gemm_epilogue_simple"
  [gemm_b]="cuda:gemm_epilogue_splitk,cuda:gemm_epilogue_tiled,cuda:gemm_epilogue_ws"
  [rows]="cuda:softmax,cuda:softmax_block,cuda:softmax_smem,cuda:softmax_online,cuda:softmax_rows,cuda:softmax_simple,cuda:softmax_warp,cuda:vector_add,cuda:vector_add_simple"
)
run() {  # name, command...
  local name=$1; shift
  ( timeout "$limit" "$@" > "$R/$name.txt" 2>&1; echo "$name exit $?" >> "$R/exits.txt" ) &
}
for tool in memcheck racecheck synccheck; do
  for g in "${!groups[@]}"; do
    run "san_${tool}_$g" compute-sanitizer --tool "$tool" --error-exitcode 1 python3 scripts/tune_cuda.py --sanitize --only "${groups[$g]}"
  done
done
run san_memcheck_split compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/tune_cuda.py --sanitize-split
if [ "${2:-}" = "--with-pytest" ]; then
  run pytest_m_gpu python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 200
fi
wait
sort "$R/exits.txt"
for f in "$R"/san_*.txt; do
  echo "== $(basename "$f"): $(grep -E 'sanitize(-split)?: ' "$f" | tail -1) | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)"
done
[ -f "$R/pytest_m_gpu.txt" ] && tail -3 "$R/pytest_m_gpu.txt"
exit 0
