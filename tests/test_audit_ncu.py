"""Reading Nsight Compute: the raw-page CSV and the ncu_report module into kernels, the metric choice,
the command line and its NVTX filter, and finding ncu (tests/fixtures/ncu/README.md)."""

import json
import os
from pathlib import Path

import pytest

from solbench import counters as cnt
from solbench import ncu
from solbench.errors import UserError

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"


def synthetic() -> list[cnt.Kernel]:
    return ncu.kernels_from_csv((FIXTURES / "raw_synthetic.csv").read_text())


def test_raw_csv_rows_become_kernels_with_their_calls_and_base_units():
    ks = synthetic()
    assert [k.call for k in ks] == [0, 1, 2, 3, 3, None]
    assert ks[0].name.startswith("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16")
    assert ks[0].get(cnt.DRAM_READ) == 536_936_448            # thousands separators dropped
    assert ks[0].get(cnt.DURATION) == 262_784                  # nanoseconds
    assert cnt.DRAM_THROUGHPUT not in ks[5].values             # 'n/a' is no value, not zero
    assert ks[2].tensor_flops == 2 * 1024**3


def test_summing_a_call_counts_fma_twice_and_weights_percentages_by_duration():
    ks = [k for k in synthetic() if k.call == 3]               # eager swiglu: two kernels
    c = cnt.summarize(ks)
    assert c.kernels == 2
    assert c.dram_read_bytes == 536_870_912 + 1_073_741_824
    assert c.dram_write_bytes == 470_000_000 + 472_000_000
    assert c.flops_simt == 2 * 268_435_456 + 536_870_912 + 268_435_456
    assert c.flops_tensor == 0
    assert c.duration_s == pytest.approx(600e-6)
    assert c.sm_throughput_pct == pytest.approx((30.0 * 240 + 22.0 * 360) / 600)
    assert c.l2_write_bytes == 2 * 16_777_216 * 32
    assert c.dram_gbps == pytest.approx(c.dram_bytes / 600e-6 / 1e9)
    assert c.kernel_names[0].endswith("MulFunctor<float>>(int, T2, T3)")   # longest first
    back = cnt.Counters.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c


def test_no_kernels_is_an_error_not_zero_counters():
    with pytest.raises(ValueError):
        cnt.summarize([])


def test_units_convert_to_bytes_and_nanoseconds():
    assert ncu.to_base(1.5, "Mbyte") == 1.5e6
    assert ncu.to_base(2, "Gbyte") == 2e9
    assert ncu.to_base(3, "usecond") == 3000
    assert ncu.to_base(4, "msecond") == 4e6
    assert ncu.to_base(7, "inst") == 7 and ncu.to_base(50, "%") == 50


def test_a_csv_that_is_not_a_raw_page_is_refused():
    with pytest.raises(ValueError, match="no header row"):
        ncu.kernels_from_csv("==PROF== nothing here\n")


class _Metric:
    def __init__(self, value, unit):
        self._v, self._u = value, unit

    def value(self):
        return self._v

    def unit(self):
        return self._u


class _Domain:
    def __init__(self, ranges):
        self.ranges = ranges

    def push_pop_ranges(self):
        return self.ranges

    def start_end_ranges(self):
        return []


class _State:
    def __init__(self, ranges):
        self.d = {0: _Domain(ranges)}

    def domains(self):
        return list(self.d)

    def domain_by_id(self, i):
        return self.d[i]


class _Action:
    def __init__(self, name, metrics, ranges):
        self._name, self.metrics, self.ranges = name, metrics, ranges

    def name(self):
        return self._name

    def metric_names(self):
        return list(self.metrics)

    def metric_by_name(self, n):
        return self.metrics[n]

    def nvtx_state(self):
        return _State(self.ranges) if self.ranges is not None else None


class _Range:
    def __init__(self, actions):
        self.actions = actions

    def num_actions(self):
        return len(self.actions)

    def action_by_idx(self, i):
        return self.actions[i]


class _Report:
    def __init__(self, ranges):
        self.ranges = ranges

    def num_ranges(self):
        return len(self.ranges)

    def range_by_idx(self, i):
        return self.ranges[i]


class FakeReportModule:
    """The parts of NVIDIA's ncu_report interface solbench uses (load_report -> ranges -> actions)."""

    def __init__(self, report):
        self.report = report

    def load_report(self, path):
        return self.report


def test_ncu_report_module_gives_the_same_kernels():
    actions = [
        _Action("softmax_kernel", {"dram__bytes_read.sum": _Metric(2.0, "Mbyte"),
                                   "gpu__time_duration.sum": _Metric(5.0, "usecond"),
                                   "device__attribute_display_name": _Metric("NVIDIA H200", ""),
                                   "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": _Metric(10, "inst")},
                ["outer", ncu.range_name(7)]),
        _Action("flush_kernel", {"dram__bytes_write.sum": _Metric(9, "byte")}, None),
    ]
    ks = ncu.kernels_from_module(FakeReportModule(_Report([_Range(actions)])), Path("r.ncu-rep"))
    assert ks[0] == cnt.Kernel("softmax_kernel", 7, {"dram__bytes_read.sum": 2e6, "gpu__time_duration.sum": 5000.0,
                                                     "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 10.0})
    assert ks[0].simt_flops == 20
    assert ks[1].call is None


def test_tensor_metrics_never_count_the_same_work_twice():
    names = ncu.parse_metric_list((FIXTURES / "query_metrics.txt").read_text())
    assert "dram__bytes_read" in names and "Metric" not in names and "Device" not in names
    chosen = cnt.tensor_metrics(names)
    # bf16: the bare source (it contains dst_fp32, which contains sparsity_off); fp16: both destinations;
    # the per-instruction (op_hmma) names are left out as the generic family exists; int8 is not FLOPs.
    assert chosen == ["sm__ops_path_tensor_src_bf16.sum", "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
                      "sm__ops_path_tensor_src_fp16_dst_fp32.sum", "sm__ops_path_tensor_src_fp8.sum",
                      "sm__ops_path_tensor_src_tf32_dst_fp32.sum"]
    only_per_op = {"sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32", "sm__ops_path_tensor_op_gmma_src_bf16_dst_fp32"}
    assert cnt.tensor_metrics(only_per_op) == sorted(f"{n}.sum" for n in only_per_op)


def test_a_full_export_holding_overlapping_tensor_metrics_counts_once():
    k = cnt.Kernel("gemm", 0, {"sm__ops_path_tensor_src_bf16.sum": 100.0,
                               "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 100.0,
                               "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum": 100.0})
    assert k.tensor_flops == 100.0


def test_metrics_asked_for_are_the_core_plus_what_the_chip_lists():
    names = ncu.parse_metric_list((FIXTURES / "query_metrics.txt").read_text())
    asked = cnt.metrics_to_collect(names)
    assert asked[:len(cnt.CORE_METRICS)] == list(cnt.CORE_METRICS)
    assert cnt.L2_WRITE_SECTORS in asked and cnt.DRAM_THROUGHPUT in asked
    assert "sm__ops_path_tensor_src_bf16.sum" in asked
    assert cnt.metrics_to_collect(None) == list(cnt.CORE_METRICS)   # unknown chip: nothing ncu could refuse


def test_profile_command_selects_the_measured_ranges_with_clocks_left_alone():
    cmd = ncu.profile_command(Path("/x/ncu"), ["a.sum", "b.sum"], Path("r.ncu-rep"), ["python", "-m", "t"])
    assert cmd[0] == "/x/ncu" and cmd[-3:] == ["python", "-m", "t"]
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--cache-control") + 1] == "all"
    assert cmd[cmd.index("--nvtx-include") + 1] == "regex:solbench_measured_[0-9]+/"
    assert "--nvtx" in cmd and cmd[cmd.index("--metrics") + 1] == "a.sum,b.sum"
    fallback = ncu.profile_command(Path("/x/ncu"), ["a.sum"], Path("r"), ["t"], nvtx_filter=False)
    assert "--nvtx-include" not in fallback and fallback[fallback.index("--profile-from-start") + 1] == "off"
    assert "--nvtx" in fallback     # kernels are still mapped to calls by their range


def test_range_names_round_trip_and_other_ranges_are_ignored():
    assert ncu.call_of(ncu.range_name(12)) == 12
    assert ncu.call_of("<default domain>:solbench_measured_3:none:none") == 3
    assert ncu.call_of("op softmax") is None and ncu.call_of("") is None


def test_a_profile_past_its_time_is_interrupted_not_left_running(tmp_path):
    import sys
    import time

    t0 = time.monotonic()
    # The child takes SIGINT as ncu does, also when this test runs in a background job (which starts
    # its processes with SIGINT ignored).
    child = ("import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "print('started', flush=True); time.sleep(60)")
    p = ncu.run_profile([sys.executable, "-c", child],
                        tmp_path / "log", timeout_s=1.0)
    assert p.returncode is None and "interrupted after 1 s" in p.log and "started" in p.log
    assert time.monotonic() - t0 < 20


def test_refused_metrics_and_empty_profiles_are_recognised():
    p = ncu.Profiled(1, "==PROF== Connected\n==ERROR== Failed to find metric sm__ops_path_tensor_src_fp8.sum\n")
    assert p.unknown_metrics(["dram__bytes_read.sum", "sm__ops_path_tensor_src_fp8.sum"]) == \
        ["sm__ops_path_tensor_src_fp8.sum"]
    assert ncu.Profiled(0, "==WARNING== No kernels were profiled.\n").profiled_nothing


def test_missing_ncu_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "SEARCH_DIRS", (str(tmp_path / "cuda"),))
    monkeypatch.setattr(ncu, "SEARCH_GLOB", str(tmp_path / "nsight" / "*" / "ncu"))
    with pytest.raises(UserError, match="not installed here.*nsight-compute.*--ncu PATH") as exc:
        ncu.find_ncu(field="--counters")
    assert exc.value.field == "--counters"
    with pytest.raises(UserError, match="--ncu names '/no/such/ncu'"):
        ncu.find_ncu("/no/such/ncu")


def test_ncu_is_found_on_path_and_by_the_environment(monkeypatch, tmp_path):
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert ncu.find_ncu() == exe
    other = tmp_path / "other"
    other.mkdir()
    (other / "ncu").write_text("#!/bin/sh\n")
    (other / "ncu").chmod(0o755)
    monkeypatch.setenv(ncu.NCU_ENV, str(other / "ncu"))
    assert ncu.find_ncu() == other / "ncu"


REAL = FIXTURES / "h200_raw.csv"


@pytest.mark.skipif(not REAL.exists(), reason="the H200 raw CSV has not been committed yet (scripts/h200/audit.sh writes it)")
def test_a_real_h200_export_parses_and_its_gemm_counts_2mnk():
    calls = {c["index"]: c for c in json.loads((FIXTURES / "h200_raw.json").read_text())["calls"]}
    kernels = ncu.kernels_from_csv(REAL.read_text())
    assert kernels and all(k.call in calls for k in kernels), "every profiled kernel lies in a measured range"
    by_call: dict[int, list[cnt.Kernel]] = {}
    for k in kernels:
        by_call.setdefault(k.call, []).append(k)
    gemm = [i for i, c in calls.items() if c["op"] == "gemm" and c["impl"] == "eager" and c["dtype"] == "bfloat16"]
    assert gemm and gemm[0] in by_call, "the export holds the cuBLAS bf16 GEMM"
    for index, ks in by_call.items():
        got = cnt.summarize(ks)
        assert got.duration_s > 0 and got.dram_bytes > 0, calls[index]
    got = cnt.summarize(by_call[gemm[0]])          # cuBLAS on tensor cores: 2*M*N*K, ncu's 'ops' are FLOPs
    assert got.flops_tensor == pytest.approx(calls[gemm[0]]["spec_flops"], rel=0.10)
