#!/usr/bin/env bash
# GPU checks of helper M's work: solbench.measure (timers, tare, bench, cross-check, profiler notice),
# solbench.integrity, solbench.nvml, telemetry, calibrate. Usage, from the repo root on the GPU machine:
#   bash scripts/dev/measure_gpu.sh          (about 3 minutes on an H200; writes under $OUT)
# $OUT gets measure_gpu_pytest.log, measure_table.json, calibrate_quick.json and calibrate.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/measure_gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
rc=0

echo "== pytest: GPU tests of measure / integrity / nvml / calibrate / doctor (no kernel build)"
timeout 360 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_measure_gpu.py \
    tests/test_calibrate.py tests/test_doctor.py -k "not test_doctor_on_a_gpu_machine" \
    > "$OUT/measure_gpu_pytest.log" 2>&1 || rc=1
tail -15 "$OUT/measure_gpu_pytest.log"

echo "== solbench calibrate --quick (stderr must not show the profiler notice)"
timeout 180 solbench calibrate --quick --out /tmp/measure_gpu_cal --json "$OUT/calibrate_quick.json" > "$OUT/calibrate.log" 2>&1 || rc=1
grep -c "Profiler clears events" "$OUT/calibrate.log" | sed 's/^/profiler notices in calibrate output: /'
tail -14 "$OUT/calibrate.log"

echo "== every timer through bench(), with triton do_bench beside it"
timeout 240 python3 scripts/dev/measure_table.py "$OUT/measure_table.json" || rc=1
echo "measure_gpu.sh rc=$rc"
exit $rc
