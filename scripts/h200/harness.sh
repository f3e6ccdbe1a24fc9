#!/usr/bin/env bash
# The restructured harness on the H200 (issues 10 and 18), in one device call (~7 minutes):
#   1. BEFORE: the harness as it landed before the restructure (commit c6f8992, unpacked in .old/ by
#      `git archive c6f8992 solbench specs kernels_ext pyproject.toml README.md | tar -x -C .old`),
#      run from its own tree BEFORE the new one is installed:
#          solbench run --ops softmax,gemm --impls cuda
#   2. the new harness: pip install -e ., solbench build (the whole kernel library)
#   3. AFTER: the same command; then the same with --gpus all (issue 18: one pinned worker per GPU)
#   4. solbench compare BEFORE AFTER (issue 10: no SLOWER) and AFTER AFTER-GPUS (issue 18: every
#      record in both, no SLOWER, none newly failing)
#   5. the GPU tests of the measure package, the trap suite and the row/map kernels (the op table)
# Usage (GPU machine, repo root): bash scripts/h200/harness.sh -> $OUT/harness.tgz, $OUT/*.json
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
W=/tmp/harness; mkdir -p "$W" "$OUT"
SECONDS=0
say() { echo "[$SECONDS s] $*" | tee -a "$W/harness.log"; }
RUN=(--ops softmax,gemm --impls cuda --budget 0.5)
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$W/env.txt" 2>&1

say "before: the landed harness from .old/"
( cd .old && PYTHONPATH=$PWD SOLBENCH_KERNELS_CACHE=/tmp/kcache_old timeout 200 python3 -m solbench run "${RUN[@]}" \
    --json "$W/before.json" --out /tmp/runs_old > "$W/before.txt" 2>&1 ); say "before rc=$?"

python3 -m pip install -q --no-deps --no-build-isolation -e . > "$W/install.txt" 2>&1 || tail -3 "$W/install.txt"
export SOLBENCH_KERNELS_CACHE=$PWD/.kcache        # ignored: a warm follow-up call reuses the build
( time timeout 240 solbench build ) > "$W/build.txt" 2>&1; say "build rc=$? $(grep real "$W/build.txt")"

timeout 150 solbench run "${RUN[@]}" --json "$W/after.json" --out /tmp/runs > "$W/after.txt" 2>&1; say "after rc=$?"
timeout 150 solbench run "${RUN[@]}" --gpus all --json "$W/after_gpus.json" --out /tmp/runs > "$W/after_gpus.txt" 2>&1
say "after --gpus all rc=$?"

solbench compare "$W/before.json" "$W/after.json" --fail-on slower --json "$W/compare_before_after.json" \
  --markdown "$W/compare_before_after.md" > "$W/compare_before_after.txt" 2>&1; say "compare before->after rc=$?"
solbench compare "$W/after.json" "$W/after_gpus.json" --fail-on slower,missing,failed --json "$W/compare_gpus.json" \
  --markdown "$W/compare_gpus.md" > "$W/compare_gpus.txt" 2>&1; say "compare plain->--gpus rc=$?"

timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_measure_gpu.py tests/gpu/test_traps_gpu.py \
  --junitxml "$W/gpu_tests_harness.xml" > "$W/gpu_tests.txt" 2>&1; say "gpu tests (measure, traps) rc=$? $(tail -1 "$W/gpu_tests.txt")"
timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels.py \
  --junitxml "$W/gpu_tests_kernels.xml" > "$W/gpu_tests_kernels.txt" 2>&1
say "gpu tests (row/map kernels, op table) rc=$? $(tail -1 "$W/gpu_tests_kernels.txt")"

python3 - "$W" <<'EOF' | tee -a "$W/harness.log"
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
for name in ("compare_before_after", "compare_gpus"):
    try:
        c = json.loads((w / f"{name}.json").read_text())
        print(f"{name}: {c['counts']} missing {len(c.get('missing', []))} failed {len(c.get('failed', []))} "
              f"added {len(c.get('added', []))} exit {c.get('exit_code')}")
    except Exception as exc:  # noqa: BLE001 - report and go on
        print(f"{name}: unreadable ({exc})")
for name in ("before", "after", "after_gpus"):
    try:
        recs = json.loads((w / f"{name}.json").read_text())["records"]
        st = {}
        for r in recs:
            st[r["status"]] = st.get(r["status"], 0) + 1
        print(f"{name}: {len(recs)} records {st}")
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: unreadable ({exc})")
EOF
cp "$W"/before.json "$W"/after.json "$W"/after_gpus.json "$W"/compare_before_after.json "$W"/compare_gpus.json "$OUT/"
tar -czf "$OUT/harness.tgz" -C /tmp harness
say "done"
tail -4 "$W/compare_before_after.txt"; tail -4 "$W/compare_gpus.txt"
