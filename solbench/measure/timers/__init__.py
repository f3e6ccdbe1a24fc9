"""The timers, one module each, and the one table that names them (the CLI's `--timer` reads it).

A timer is a function of a TimerContext that returns a Measurement; `measure` picks one by name.
"""

from __future__ import annotations

from solbench.measure.timers.base import Timer, TimerContext
from solbench.measure.timers.cupti import measure_cupti
from solbench.measure.timers.events import measure_events
from solbench.measure.timers.graph import measure_graph
from solbench.measure.timers.wall import measure_wall

# First the CUDA timers (events is the default), then the host clock every CPU run uses.
TIMERS: dict[str, Timer] = {
    "events": measure_events,
    "graph": measure_graph,
    "cupti": measure_cupti,
    "wall": measure_wall,
}


def timer_named(name: str) -> Timer:
    """The timer called `name`; ValueError naming the known ones otherwise."""
    if name not in TIMERS:
        raise ValueError(f"unknown timer '{name}' (have: {', '.join(TIMERS)})")
    return TIMERS[name]


__all__ = ["TIMERS", "Timer", "TimerContext", "timer_named"]
