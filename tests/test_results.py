import json

import pytest

from solbench import results
from solbench.errors import UserError


def rec(impl, median, kind="impl", status="ok", **kw):
    return results.Record(op="add", case="M=1", params={"M": 1}, dtype="float32", impl=impl, kind=kind,
                          status=status, time_s={"median": median} if median else None, **kw)


def test_speedup_against_first_or_named_baseline():
    records = [rec("eager", 2.0, "baseline"), rec("compiled", 1.0, "baseline"), rec("cuda", 0.5)]
    results.fill_speedups(records)
    assert [r.speedup for r in records] == [1.0, 2.0, 4.0]
    assert {r.reference_baseline for r in records} == {"eager"}
    results.fill_speedups(records, baseline="compiled")
    assert [r.speedup for r in records] == [0.5, 1.0, 2.0]


def test_no_speedup_for_failed_records_or_failed_baseline():
    records = [rec("eager", None, "baseline", status="failed"), rec("cuda", 0.5)]
    results.fill_speedups(records)
    assert records[1].speedup is None


def test_round_trip_and_schema(tmp_path):
    r = rec("cuda", 0.5, max_abs_err=float("inf"))
    run = results.Run(env={"device": "NVIDIA H200"}, peaks={"name": "x"}, config={}, records=[r])
    path = results.write_run(run, tmp_path / "sub" / "run.json")
    data = json.loads(path.read_text())   # strict JSON: inf was written as null
    assert data["schema"] == results.RESULTS_SCHEMA
    assert data["records"][0]["max_abs_err"] is None
    assert data["records"][0]["is_baseline"] is False
    assert "nvidia-h200" in data["run_id"]
    assert results.load_records(path)[0].impl == "cuda"
    assert not list(tmp_path.glob("sub/.run.json.*")), "temporary file left behind"


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        results.load_run(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="bad.json: not a readable JSON"):
        results.load_run(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"schema": "other/9"}))
    with pytest.raises(UserError, match="field 'schema'"):
        results.load_run(wrong)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"schema": results.RESULTS_SCHEMA, "env": {}, "peaks": {},
                                   "records": [{"op": "a", "case": "c", "dtype": "d", "impl": "i", "status": "won"}]}))
    with pytest.raises(UserError, match=r"records\[0\].status"):
        results.load_run(partial)


def test_csv_is_flat(tmp_path):
    import pandas as pd

    path = results.write_csv([rec("cuda", 0.5)], tmp_path / "r.csv")
    frame = pd.read_csv(path)
    assert frame.loc[0, "time_median"] == 0.5 and frame.loc[0, "param_M"] == 1
