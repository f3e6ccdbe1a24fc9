#!/usr/bin/env bash
# The op-table refactor (task K0) on the GPU machine, from the repo root:
#   bash scripts/dev/optable_gpu.sh
# Installs the project, builds the whole kernel library from the op table (fresh cache, all
# cores), runs the kernel GPU tests (vs float64 references, opcheck, the compiled checks vs
# the wrapper's, the AOT .so in a fresh process) and times the Python wrapper's checks.
# Budget: about 3 minutes of tests plus the build (the build is capped at 7 minutes).
# Writes $OUT/optable_gpu.json, build.log, pytest.log, junit.xml, solbench_ops.cpp;
# prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/optable_gpu}
mkdir -p "$OUT"
export SOLBENCH_KERNELS_CACHE=${SOLBENCH_KERNELS_CACHE:-/tmp/solbench-kernels-optable}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
PY=${PY:-python}

if ! $PY -m pip install --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1; then
  echo "pip install failed:"; tail -20 "$OUT/install.log"; exit 1
fi
$PY -m kernels_ext.codegen >"$OUT/solbench_ops.cpp"

start=$(date +%s)
timeout 420 $PY -c "import kernels_ext; print(kernels_ext.build(verbose=True))" >"$OUT/build.log" 2>&1
build_rc=$?
build_s=$(( $(date +%s) - start ))
if [ "$build_rc" -ne 0 ]; then
  echo "library build failed (rc $build_rc, ${build_s} s); first errors:"
  grep -iE "error|undefined" "$OUT/build.log" | head -30
fi

test_rc=125
if [ "$build_rc" -eq 0 ]; then
  timeout 480 $PY -m pytest -m gpu tests/gpu/test_kernels.py -q -rfE -p no:cacheprovider \
    --junitxml="$OUT/junit.xml" >"$OUT/pytest.log" 2>&1
  test_rc=$?
fi

# Wrapper overhead: the table's Python checks per call, against calling the op directly.
overhead_json=$($PY - <<'PYEOF' 2>>"$OUT/pytest.log" || echo '{}'
import json, time, torch, kernels_ext
kernels_ext.ensure_loaded()
x = torch.randn(64, 64, device="cuda"); w = torch.randn(64, device="cuda")
def per_call_us(fn, n=20000):
    for _ in range(200): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e6
ops = torch.ops.solbench_kernels
res = {
  "add_wrapper_us": per_call_us(lambda: kernels_ext.add(x, x)),
  "add_op_us": per_call_us(lambda: ops.add(x, x)),
  "layernorm_wrapper_us": per_call_us(lambda: kernels_ext.layernorm(x, w, w)),
  "layernorm_op_us": per_call_us(lambda: ops.layernorm(x, w, w, 1e-5)),
  "torch_add_us": per_call_us(lambda: torch.add(x, x)),
}
print(json.dumps({k: round(v, 2) for k, v in res.items()}))
PYEOF
)

$PY - "$OUT" "$build_rc" "$build_s" "$test_rc" "$overhead_json" <<'PYEOF'
import json, re, sys, xml.etree.ElementTree as ET
from collections import defaultdict
out, build_rc, build_s, test_rc, overhead = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
groups = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
failures = []
try:
    root = ET.parse(f"{out}/junit.xml").getroot()
    for case in root.iter("testcase"):
        group = re.sub(r"\[.*\]$", "", case.get("name", "?"))
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            groups[group]["failed"] += 1
            failures.append(f"{case.get('name')}: {(bad.get('message') or '').splitlines()[0][:160] if bad.get('message') else ''}")
        elif case.find("skipped") is not None:
            groups[group]["skipped"] += 1
        else:
            groups[group]["passed"] += 1
except (OSError, ET.ParseError) as err:
    failures.append(f"no junit report: {err}")
try:
    overhead = json.loads(overhead or "{}")
except json.JSONDecodeError:
    overhead = {}
summary = {"build_rc": build_rc, "build_seconds": build_s, "pytest_rc": test_rc,
           "groups": groups, "failures": failures, "overhead_us": overhead}
with open(f"{out}/optable_gpu.json", "w") as f:
    json.dump(summary, f, indent=2)
print(f"\n{'test':<58} {'pass':>5} {'fail':>5} {'skip':>5}")
for g, c in sorted(groups.items()):
    print(f"{g:<58} {c['passed']:>5} {c['failed']:>5} {c['skipped']:>5}")
for line in failures[:15]:
    print("FAIL", line)
tot = {k: sum(c[k] for c in groups.values()) for k in ("passed", "failed", "skipped")}
print(f"build rc {build_rc} in {build_s} s; tests: {tot['passed']} passed, {tot['failed']} failed, "
      f"{tot['skipped']} skipped (pytest rc {test_rc})")
if overhead:
    print("per call (us): " + ", ".join(f"{k} {v}" for k, v in overhead.items()))
PYEOF
[ "$build_rc" -eq 0 ] && [ "$test_rc" -eq 0 ]
