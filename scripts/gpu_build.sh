# Sourced by the GPU-machine scripts: build and install the project offline once per machine
# (the CUDA module is the marker: a fresh machine has no kl_cuda yet). KL_SKIP_BUILD=1 skips it (a
# check of the Python-only layers then runs from the checkout, the CUDA rows saying "not built").
if [ -z "${KL_SKIP_BUILD:-}" ] && ! python3 -c "import kl_cuda" 2>/dev/null; then
  _t0=$(date +%s)
  python3 -m pip install -q --no-build-isolation --no-deps --no-index -e . > /tmp/build.log 2>&1 \
    || { echo "[gpu_build] build failed:"; tail -30 /tmp/build.log; }
  echo "[gpu_build] build: $(( $(date +%s) - _t0 )) s"
fi
