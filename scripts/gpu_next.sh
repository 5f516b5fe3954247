#!/usr/bin/env bash
# On the GPU machine: each named layer's default beside its `_next` candidates (the default with the
# layer's pending planner switches on), softmax and GEMM, through `python -m harness check`
# (the models + edge suites timed beside torch eager / torch.compile / the libraries, then the verify
# suite). Only the ids the registry has are named (a layer whose switches are all on has no
# `_next`); KL_NEXT_PROBLEMS="softmax" (or "gemm_epilogue") checks one problem. One archive $OUT/check-<layers>.tgz. KL_CHECK_LIMIT bounds the check (seconds).
#   bash scripts/gpu_next.sh triton gluon helion [-- more check arguments]
set -uo pipefail
[ -f .device/bin/env.sh ] && source .device/bin/env.sh > /dev/null
layers=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do layers+=("$1"); shift; done; [ "${1:-}" = "--" ] && shift
mapfile -t ids < <(python3 - "${layers[@]}" <<'PY'
import os, sys
from harness import registry
registry.load_backends()
have = {i.id for i in registry.all_impls() + registry.candidates()}
for layer in sys.argv[1:]:
    for p in os.environ.get("KL_NEXT_PROBLEMS", "softmax gemm_epilogue").split():
        for iid in (f"{layer}:{p}", f"{layer}:{p}_next"):
            if iid in have:
                print("--impl"); print(iid)
PY
)
[ ${#ids[@]} -gt 0 ] || { echo "gpu_next: none of ${layers[*]} has a softmax or GEMM id here"; exit 2; }
# a row silent for KL_ROW_TIMEOUT s (default 120) is a hang: FAIL it and go on (the harness waits 600 s)
exec bash scripts/gpu_session.sh check "${layers[@]}" -- "${ids[@]}" --time-cap 0.2 --min-samples 10 \
    --timeout "${KL_ROW_TIMEOUT:-120}" "$@"
