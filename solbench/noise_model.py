"""The run-to-run noise model: how far the median of one case moves between two runs of unchanged code.

Within one run, the samples say how precisely that run's median is known; they cannot see what differs
between processes (the timer's per-process calibration, clocks, where the allocator put the buffers).
Between runs, a microsecond kernel moves by several percent while its within-run spread is tiny, so a
gate that trusts only within-run statistics fails pull requests on unchanged code.

The model: the relative standard deviation of a run's median between runs, as a function of the median t,

    spread(t) = sqrt(rel^2 + (abs_s / t)^2)

a relative part (dominant for long kernels) and an absolute part in seconds (launch path, timer tare;
dominant for microsecond kernels). `solbench noise` measures it (noise_calibrate.py: short A/A
repetitions in fresh processes, `fit_model`) and stores it beside the calibration, as
results/calibration/<fingerprint>-noise.json, keyed by the same device fingerprint. Without a
measurement the documented conservative default of the device kind (`DEFAULT_MODELS`) is used, and
every record says which (`time_s.run_to_run_source`). No torch and no device here.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from solbench.errors import UserError

if TYPE_CHECKING:  # the measure package imports this module: keep its imports to the model itself
    from solbench.hardware import DeviceInfo

SCHEMA = "solbench.noise/1"
RESOLUTION = 1e-4          # relative spreads below this are timer resolution, not noise (keeps logs finite)
MIN_KERNELS = 3            # a two-parameter fit needs more kernels than parameters
FIT_CONFIDENCE = 0.90      # the stored model is this upper confidence bound of the fitted spread


@dataclass(frozen=True)
class RunToRunModel:
    """spread(t) = sqrt(rel^2 + (abs_s / t)^2): relative SD of a run's median between runs."""

    rel: float
    abs_s: float
    source: str            # "measured:<fingerprint>", "default:<kind>" or what a caller says

    def __post_init__(self) -> None:
        if not (0 <= self.rel < 1 and math.isfinite(self.rel)):
            raise ValueError(f"run-to-run rel must be in [0, 1), got {self.rel!r}")
        if not (0 <= self.abs_s < 1 and math.isfinite(self.abs_s)):
            raise ValueError(f"run-to-run abs_s must be in [0, 1) seconds, got {self.abs_s!r}")

    def spread(self, median_s: float) -> float:
        """The model's relative spread for a case whose median is `median_s` (inf for a non-positive median)."""
        if not median_s > 0:
            return math.inf
        return math.hypot(self.rel, self.abs_s / median_s)

    @property
    def is_default(self) -> bool:
        return self.source.startswith("default")

    def describe(self) -> str:
        return f"{self.rel:.2%} + {self.abs_s * 1e6:.3g} us ({self.source})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Used where no `solbench noise` measurement exists for the device. Both are deliberately wide, so that
# an unmeasured runner gives AMBIGUOUS rather than false alarms:
# - cuda: on the H200, A/A medians of memory-bound kernels moved <= 0.8% between runs and a 3.1 us
#   GELU by 0.13 us (+4.3%); 1% + 0.15 us covers both (as a single run's spread) with room to spare.
#   Power-limited GEMMs move more (6% seen), but their clock spread enters each record's estimate.
# - cpu: a shared CPU moved a compiled softmax by 14% between two runs; `solbench noise` on a 2-core
#   cloud VM measured spreads up to ~5% (docs/CI.md); 8% + 5 us covers both.
DEFAULT_MODELS = {
    "cuda": RunToRunModel(rel=0.01, abs_s=0.15e-6, source="default:cuda"),
    "cpu": RunToRunModel(rel=0.08, abs_s=5e-6, source="default:cpu"),
}


def default_model(device_kind: str) -> RunToRunModel:
    """The conservative default of a device kind (an unknown kind gets the widest, the CPU's)."""
    return DEFAULT_MODELS.get(device_kind, DEFAULT_MODELS["cpu"])


# ---------------------------------------------------------------- fitting


@dataclass(frozen=True)
class KernelRepeats:
    """One probe kernel's median in each of several independent runs (fresh processes)."""

    name: str
    medians_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        ordered = sorted(self.medians_s)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    @property
    def dof(self) -> int:
        return len(self.medians_s) - 1

    @property
    def spread(self) -> float:
        """Sample standard deviation of the log medians: the relative spread between runs."""
        logs = [math.log(m) for m in self.medians_s]
        mean = sum(logs) / len(logs)
        return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


@dataclass(frozen=True)
class Fit:
    rel: float             # point estimates
    abs_s: float
    inflation: float       # factor to the FIT_CONFIDENCE upper bound (applied by `model`)
    dof: int               # degrees of freedom behind the fit: sum over kernels of (runs - 1)

    def model(self, source: str) -> RunToRunModel:
        """The conservative model: both terms raised to the upper confidence bound."""
        return RunToRunModel(min(self.rel * self.inflation, 0.99), min(self.abs_s * self.inflation, 0.99), source)


def fit_model(repeats: Sequence[KernelRepeats], confidence: float = FIT_CONFIDENCE) -> Fit:
    """Fit rel and abs_s to the kernels' between-run spreads.

    Each kernel's sample variance of log medians, s^2 with nu = runs - 1 degrees of freedom, is
    sigma^2 * chi2(nu) / nu for Gaussian run-to-run noise. So log(s^2) = log(sigma^2(t)) + e with
    E[e] = digamma(nu/2) - log(nu/2) and Var[e] = trigamma(nu/2) exactly: the fit is least squares on
    log variances with that bias removed and that scale, so kernels of every duration weigh alike. A
    soft-L1 loss keeps one kernel the model cannot describe from dragging the two terms. The returned
    inflation raises the point estimate to its `confidence` upper bound from the total degrees of
    freedom (chi-square), which the stored model uses: a gate must err towards AMBIGUOUS.
    """
    import numpy as np
    from scipy.optimize import least_squares
    from scipy.special import digamma, polygamma
    from scipy.stats import chi2

    usable = [k for k in repeats if len(k.medians_s) >= 2 and all(m > 0 for m in k.medians_s)]
    if len(usable) < MIN_KERNELS:
        raise ValueError(f"need at least {MIN_KERNELS} kernels measured in at least 2 runs each, got {len(usable)}")
    t_us = np.array([k.median_s for k in usable]) * 1e6
    nu = np.array([k.dof for k in usable], dtype=float)
    s = np.maximum(np.array([k.spread for k in usable]), RESOLUTION)
    y = np.log(s ** 2) - (digamma(nu / 2) - np.log(nu / 2))
    scale = np.sqrt(polygamma(1, nu / 2))

    def residuals(p: np.ndarray) -> np.ndarray:
        var = p[0] ** 2 + (p[1] / t_us) ** 2 + RESOLUTION ** 2
        return (y - np.log(var)) / scale

    order = np.argsort(t_us)
    third = max(1, len(order) // 3)
    rel0 = min(max(float(np.median(s[order[-third:]])), RESOLUTION), 0.5)
    abs0 = min(max(float(np.median(s[order[:third]] * t_us[order[:third]])), 1e-4), 1e5)
    sol = least_squares(residuals, x0=[rel0, abs0], bounds=([0.0, 0.0], [1.0, 1e6]), loss="soft_l1",
                        f_scale=1.0, x_scale=[rel0, abs0])
    total_dof = int(nu.sum())
    inflation = math.sqrt(total_dof / float(chi2.ppf(1.0 - confidence, total_dof)))
    return Fit(rel=float(sol.x[0]), abs_s=float(sol.x[1]) * 1e-6, inflation=inflation, dof=total_dof)


# ---------------------------------------------------------------- the file


@dataclass
class NoiseCalibration:
    """What `solbench noise` measured on one device, and the model fitted to it."""

    schema: str
    fingerprint: str
    device_kind: str
    device: str
    date: str
    torch: str
    runs: int
    budget_s: float
    timer: str
    model: dict[str, float]                 # rel, abs_s: the stored (conservative) model
    fit: dict[str, float]                   # rel, abs_s point estimates, inflation, dof, confidence
    kernels: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def run_to_run(self) -> RunToRunModel:
        return RunToRunModel(self.model["rel"], self.model["abs_s"], f"measured:{self.fingerprint}")


def assemble(repeats: Sequence[KernelRepeats], *, fingerprint_: str, device_kind: str, device: str,
             torch_version: str, budget_s: float, timer: str) -> NoiseCalibration:
    """Fit the repeats and build the file's record (per-kernel spreads beside the model's)."""
    fit = fit_model(repeats)
    model = fit.model(f"measured:{fingerprint_}")
    kernels = [{"name": k.name, "median_s": k.median_s, "medians_s": list(k.medians_s), "spread": k.spread,
                "model_spread": model.spread(k.median_s)} for k in repeats]
    return NoiseCalibration(
        schema=SCHEMA, fingerprint=fingerprint_, device_kind=device_kind, device=device,
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), torch=torch_version,
        runs=max((len(k.medians_s) for k in repeats), default=0), budget_s=budget_s, timer=timer,
        model={"rel": model.rel, "abs_s": model.abs_s},
        fit={"rel": fit.rel, "abs_s": fit.abs_s, "inflation": fit.inflation, "dof": fit.dof,
             "confidence": FIT_CONFIDENCE},
        kernels=kernels)


def device_fingerprint(info: DeviceInfo) -> str:
    """The key a device's noise model is stored under: the calibration's fingerprint (a CPU adds its threads)."""
    from solbench.calibration import fingerprint

    return fingerprint(info.name, info.sm_count, info.memory_bytes, info.cpu_threads if info.kind == "cpu" else None)


def default_dir() -> Path:
    """results/calibration: noise models live beside the calibrations."""
    from solbench.calibration import DEFAULT_DIR

    return DEFAULT_DIR


def noise_path(fp: str, folder: Path | None = None) -> Path:
    return Path(folder if folder is not None else default_dir()) / f"{fp}-noise.json"


def write_noise(cal: NoiseCalibration, folder: Path | None = None) -> Path:
    """Write atomically: <folder>/<fingerprint>-noise.json."""
    from solbench.jsonio import write_json_atomic

    return write_json_atomic(noise_path(cal.fingerprint, folder), cal.to_json())


def load_noise_file(path: Path) -> RunToRunModel:
    """The model stored in a noise file; every problem is a UserError naming the file and field."""
    from solbench.jsonio import read_versioned  # here: the measure package imports this module

    path = Path(path)
    data = read_versioned(path, SCHEMA, "noise model file")
    model = data.get("model")
    if not isinstance(model, dict):
        raise UserError("missing required field", file=path, field="model")
    for key, upper in (("rel", 1.0), ("abs_s", 1.0)):
        value = model.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < upper:
            raise UserError(f"expected a number in [0, {upper:g}), got {value!r}", file=path, field=f"model.{key}")
    fp = data.get("fingerprint")
    if not isinstance(fp, str) or not fp:
        raise UserError(f"expected a device fingerprint, got {fp!r}", file=path, field="fingerprint")
    return RunToRunModel(float(model["rel"]), float(model["abs_s"]), f"measured:{fp}")


def load_model(fp: str, folder: Path | None = None) -> RunToRunModel | None:
    """The measured model for a fingerprint in `folder`; None when none was measured."""
    path = noise_path(fp, folder)
    return load_noise_file(path) if path.is_file() else None


def model_for(info: DeviceInfo, folder: Path | None = None) -> RunToRunModel:
    """The device's measured model if `solbench noise` stored one in `folder`, else the default of its kind."""
    return load_model(device_fingerprint(info), folder) or default_model(info.kind)
