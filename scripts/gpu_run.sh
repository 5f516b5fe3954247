#!/usr/bin/env bash
# On the GPU machine: build the project offline, then run `python -m harness compare` with the given
# arguments, keeping the results (JSON/CSV/MD/PNG) in one archive under $OUT.
# Usage: bash scripts/gpu_run.sh NAME [compare arguments...]
set -uo pipefail
name=$1; shift
export PYTHONUNBUFFERED=1
[ -f .device/bin/env.sh ] && source .device/bin/env.sh
source scripts/gpu_build.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/res/$name
python3 -m harness compare --out /tmp/res/$name "$@" 2>&1 | tee /tmp/res/$name/console.txt
rc=${PIPESTATUS[0]}
tar czf "$OUT/$name.tgz" -C /tmp/res "$name"
echo "[gpu_run] compare exit status $rc; archive $name.tgz"
