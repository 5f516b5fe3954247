#!/usr/bin/env bash
# On the GPU machine: build the project offline, then run `python -m harness compare` with the given
# arguments, keeping the results (JSON/CSV/MD/PNG) in one archive under $OUT.
# Usage: bash scripts/gpu_run.sh NAME [compare arguments...]
set -uo pipefail
name=$1; shift
export PYTHONUNBUFFERED=1
[ -f .device/bin/env.sh ] && source .device/bin/env.sh
if ! python3 -c "import kl_cuda" 2>/dev/null; then
  t0=$(date +%s)
  python3 -m pip install -q --no-build-isolation --no-deps --no-index -e . > /tmp/build.log 2>&1 \
    || { echo "[gpu_run] build failed:"; tail -30 /tmp/build.log; }
  echo "[gpu_run] build: $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/res/$name
python3 -m harness compare --out /tmp/res/$name "$@" 2>&1 | tee /tmp/res/$name/console.txt
rc=${PIPESTATUS[0]}
tar czf "$OUT/$name.tgz" -C /tmp/res "$name"
echo "[gpu_run] compare exit status $rc; archive $name.tgz"
