#!/usr/bin/env bash
# Issue 17 on the H200: solbench serve with the kernel ops (scripts/h200/serve_check.py says what it checks).
# Needs the carried wheels in .whl/ (fastapi, starlette, pydantic, pydantic-core, uvicorn, limits and what
# they need that the machine lacks; README "Starting the service" lists them): run with carry [".whl"].
# Usage (GPU machine, repo root): bash scripts/h200/serve.sh     (~3 minutes; ~1 more if the kernel
# library is not built yet). Outputs in $OUT: serve.json (everything), serve_server.log, remote_run.log,
# remote_softmax.json, build.log; exit 1 when a check fails.
# Knobs (environment): SERVE_SPEED_ONLY=1 (warm-up and speed step only), SERVE_WORKERS=N, SERVE_IN_FLIGHT=N,
# SERVE_FRONTENDS=N (solbench serve --frontends N, for the full check too: the leak, oversize and fault
# steps read every front end's /readyz and /metrics), and
# SERVE_AB_FRONTENDS="1 2 4": the speed step once per front-end count, one fresh server each, into
# $OUT/frontends<N>/ (about 1 minute each), e.g. the A/B of issue 17:
#   SERVE_SPEED_ONLY=1 SERVE_AB_FRONTENDS="1 2 4" bash scripts/h200/serve.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ls .whl/*.whl > /dev/null 2>&1 || { echo "no .whl/: carry the wheels (see the header)"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing the carried wheels failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "import fastapi, uvicorn, limits, safetensors, httpx, prometheus_client; print('fastapi', fastapi.__version__, 'uvicorn', uvicorn.__version__)" \
    || exit 1
{ nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$OUT/env.txt"
( time solbench build ) > "$OUT/build.log" 2>&1 || { echo "kernel build failed"; tail -20 "$OUT/build.log"; exit 1; }
if [ -n "${SERVE_AB_FRONTENDS:-}" ]; then
    [ "${SERVE_SPEED_ONLY:-}" = 1 ] || { echo "SERVE_AB_FRONTENDS needs SERVE_SPEED_ONLY=1"; exit 1; }
    rc=0
    for n in $SERVE_AB_FRONTENDS; do
        mkdir -p "$OUT/frontends$n"
        echo "== --frontends $n"
        SERVE_FRONTENDS=$n timeout 300 python3 scripts/h200/serve_check.py "$OUT/frontends$n" || rc=1
    done
    exit $rc
fi
timeout 420 python3 scripts/h200/serve_check.py "$OUT"
