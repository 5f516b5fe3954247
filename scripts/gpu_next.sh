#!/usr/bin/env bash
# On the GPU machine: each named layer's default beside its `_next` candidates (the default with the
# layer's pending planner switches on), softmax and GEMM, through `python -m harness check`
# (verify suite, then the models + edge suites timed beside torch eager / torch.compile / the
# libraries). One archive $OUT/check-<layers>.tgz. KL_CHECK_LIMIT bounds the check (seconds).
#   bash scripts/gpu_next.sh triton gluon helion
set -uo pipefail
ids=()
for l in "$@"; do ids+=(--impl "$l:softmax_next" --impl "$l:gemm_epilogue_next"); done
exec bash scripts/gpu_session.sh check "$@" -- "${ids[@]}" --time-cap 0.2 --min-samples 10
