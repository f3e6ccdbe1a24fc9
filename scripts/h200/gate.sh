#!/usr/bin/env bash
# Issue 12 on the H200: a regression gate with zero false alarms (docs/CI.md).
#   1. solbench noise: this H200's run-to-run noise model (5 fresh processes), stored where runs find it
#   2. RUNS runs of unchanged code: --ops softmax,rmsnorm,layernorm,add,gelu,silu,swiglu,row_sum plus the
#      honest gate_copy (scripts/slowed/honest), eager + candidate only (no torch.compile, no kernel
#      build): 44 records a run; after the first, one run of the same ops with the planted slowdown
#      (scripts/slowed/planted: gate_copy's candidate copies 7.1% more bytes on 60-500 us cases)
#   3. solbench compare --aa of the unchanged runs (every pair of runs), and each unchanged run against
#      the planted one: every gate_copy candidate SLOWER, every other pair (unchanged code) SAME or
#      AMBIGUOUS, the gate_copy eager baseline SAME
#   4. scripts/h200/gate_summary.py checks it all (>= 200 A/A pairs, 0 SLOWER, 0 FASTER) and prints a
#      short table; exit 1 on a miss
# Usage (GPU machine, repo root): bash scripts/h200/gate.sh      (~5 minutes; a run is started only when
# it can finish by GATE_LIMIT_S=340 s). Knobs: GATE_RUNS (4), GATE_BUDGET (0.25 s), GATE_ISOLATE=1 (a
# worker process per op; default: the ops in the run's own process, every run still a fresh one),
# GATE_OPS, GATE_INSTALL=0 (a dry run elsewhere: GATE_OPS=add,gate_copy GATE_RUNS=3 GATE_BUDGET=0.05).
# Outputs in $OUT: noise.json, compare_aa.json, compare_planted.json (unchanged run 1 vs planted),
# gate_summary.json, gate.log, gate.tgz (everything: every run, every compare, logs).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
RUNS=${GATE_RUNS:-4}
BUDGET=${GATE_BUDGET:-0.25}
LIMIT=${GATE_LIMIT_S:-340}
ISOLATE=$([ "${GATE_ISOLATE:-0}" = 1 ] && echo "" || echo "--no-isolate")
OPS=${GATE_OPS:-softmax,rmsnorm,layernorm,add,gelu,silu,swiglu,row_sum,gate_copy}
W=$OUT/gate; mkdir -p "$W" results/calibration
LOG=$OUT/gate.log
SECONDS=0
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }

if [ "${GATE_INSTALL:-1}" = 1 ]; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . > "$W/install.log" 2>&1 || tail -3 "$W/install.log"
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$W/env.txt" 2>&1

say "noise model: solbench noise --runs 5 --budget $BUDGET"
timeout 150 solbench noise --runs 5 --budget "$BUDGET" --json "$W/noise.json" > "$W/noise.txt" 2>&1
say "noise rc=$?: $(grep -E '^model:' "$W/noise.txt" | cut -c1-160)"

RUN_FLAGS=(--ops "$OPS" --impls eager,candidate --budget "$BUDGET" $ISOLATE)
run_one() {  # run_one NAME SPECS_DIR: one fresh `solbench run`, its duration in $LAST
  local t0=$SECONDS
  timeout 150 solbench run "${RUN_FLAGS[@]}" --specs "$2" --json "$W/$1.json" > "$W/$1.log" 2>&1
  local rc=$?
  LAST=$((SECONDS - t0))
  say "$1 rc=$rc in ${LAST} s: $(grep -E '^[0-9]+ ok' "$W/$1.log" | head -1)"
}
AA=()
LAST=0
for i in $(seq 1 "$RUNS"); do
  if [ "$i" -gt 2 ] && [ $((SECONDS + LAST + 20)) -gt "$LIMIT" ]; then
    say "time: stopping after $((i - 1)) unchanged runs (the next would end after ${LIMIT} s)"; break
  fi
  run_one "aa_$i" scripts/slowed/honest
  [ -f "$W/aa_$i.json" ] && AA+=("$W/aa_$i.json")
  if [ "$i" = 1 ]; then run_one planted scripts/slowed/planted; fi
done

solbench compare --aa "${AA[@]}" --json "$W/compare_aa.json" --markdown "$W/compare_aa.md" > "$W/compare_aa.txt" 2>&1
say "compare --aa rc=$? (1 = a false alarm)"
for i in "${!AA[@]}"; do
  n=$((i + 1))
  solbench compare "${AA[$i]}" "$W/planted.json" --json "$W/compare_planted_$n.json" \
      --markdown "$W/compare_planted_$n.md" > "$W/compare_planted_$n.txt" 2>&1
  say "compare aa_$n vs planted rc=$? (1 = SLOWER found, expected)"
done

python3 scripts/h200/gate_summary.py "$W" "$W/gate_summary.json" 2>&1 | tee "$W/summary.txt"
status=${PIPESTATUS[0]}
cp "$W/noise.json" "$OUT/noise.json" 2>/dev/null
cp "$W/compare_aa.json" "$OUT/compare_aa.json" 2>/dev/null
cp "$W/compare_planted_1.json" "$OUT/compare_planted.json" 2>/dev/null
cp "$W/gate_summary.json" "$OUT/gate_summary.json" 2>/dev/null
tar -czf "$OUT/gate.tgz" -C "$OUT" gate && rm -rf "$W"
say "done (summary rc=$status)"
exit "$status"
