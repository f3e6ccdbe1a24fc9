"""A step-by-step model of flash_wgmma's synchronisation (kernels_ext/csrc/attention/flash_wgmma.cu),
for checking a change to it without a GPU:

    python scripts/dev/attention_protocol_model.py        (a few seconds; exit 1 on a failure)

It replays what produce_work, consume_work, turns_begin and turns_end wait for and arrive on --
mbarriers with parity waits (count, phase), the two named barriers of the consumers' turns, the
K/V ring whose slots continue across a persistent block's items, the double-buffered Q -- for
random item lists (key-tile counts 0, 1, 2, 3, 5, 17, 32; 2 and 3 stages), interleaving the
producer thread and the two consumer warpgroups in random orders. It fails on a deadlock (no
progress), on a TMA write into a buffer a consumer still reads, and on two arrivals pending on
one named barrier. It also checks that the persistent snake schedule hands out every item
exactly once. It models the code; it does not run it: keep the two in step.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

CONSUMER_WARPS = 8   # arrivals that complete an `empty` phase (4 warps x 2 warpgroups)
Step = Iterator[None]


@dataclass
class MBarrier:
    count: int
    arrived: int = 0
    completed: int = 0   # phases completed so far

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.completed = 0, self.completed + 1

    def done(self, parity: int) -> bool:
        """try_wait.parity: true once the phase of this parity has completed (a fresh barrier
        reports parity 1 as complete)."""
        return (self.completed & 1) != parity


@dataclass
class Block:
    stages: int
    q_full: list[MBarrier] = field(default_factory=lambda: [MBarrier(1), MBarrier(1)])
    q_empty: list[MBarrier] = field(default_factory=lambda: [MBarrier(CONSUMER_WARPS), MBarrier(CONSUMER_WARPS)])
    turns: list[int] = field(default_factory=lambda: [0, 0])     # pending arrivals per named barrier
    readers: dict[tuple[str, int], set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.stages
        self.k_full, self.v_full = [MBarrier(1) for _ in range(s)], [MBarrier(1) for _ in range(s)]
        self.k_empty = [MBarrier(CONSUMER_WARPS) for _ in range(s)]
        self.v_empty = [MBarrier(CONSUMER_WARPS) for _ in range(s)]

    def write(self, what: str, index: int) -> None:
        assert not self.readers.get((what, index)), f"TMA overwrites {what}[{index}] while it is read"

    def read(self, what: str, index: int, cw: int, start: bool) -> None:
        (self.readers.setdefault((what, index), set()).add if start else self.readers[(what, index)].discard)(cw)


def wait(bar: MBarrier, parity: int) -> Step:
    while not bar.done(parity):
        yield


def warps_arrive(bar: MBarrier) -> None:
    for _ in range(CONSUMER_WARPS // 2):   # one warpgroup: lane 0 of each of its 4 warps
        bar.arrive()


def producer(blk: Block, items: list[int]) -> Step:
    ring = 0
    for rnd, n in enumerate(items):
        qb = rnd & 1
        if rnd >= 2:
            yield from wait(blk.q_empty[qb], ((rnd >> 1) - 1) & 1)
        blk.write("q", qb)
        blk.q_full[qb].arrive()
        for it in range(n):
            slot = ring + it
            st, parity = slot % blk.stages, ((slot // blk.stages) & 1) ^ 1
            yield from wait(blk.k_empty[st], parity)
            blk.write("k", st)
            blk.k_full[st].arrive()
            yield from wait(blk.v_empty[st], parity)
            blk.write("v", st)
            blk.v_full[st].arrive()
        ring += n


def sync_turn(blk: Block, cw: int) -> Step:
    while blk.turns[cw] == 0:
        yield
    blk.turns[cw] -= 1


def arrive_turn(blk: Block, cw: int) -> None:
    blk.turns[1 - cw] += 1
    assert blk.turns[1 - cw] <= 1, "two arrivals pending on one named barrier"


def consumer(blk: Block, items: list[int], cw: int) -> Step:
    s = blk.stages
    if cw == 1:
        arrive_turn(blk, 1)                                   # turns_begin
    ring = 0
    for rnd, n in enumerate(items):
        qb = rnd & 1
        yield from wait(blk.q_full[qb], (rnd >> 1) & 1)
        blk.read("q", qb, cw, True)
        if n > 0:                                             # tile 0: S_0 only
            st = ring % s
            yield from sync_turn(blk, cw)
            yield from wait(blk.k_full[st], (ring // s) & 1)
            blk.read("k", st, cw, True)
            arrive_turn(blk, cw)
            yield                                             # wgmma_wait<0>
            blk.read("k", st, cw, False)
            warps_arrive(blk.k_empty[st])
        for it in range(1, n):                                # S_it and P_{it-1} V_{it-1}
            slot = ring + it
            st, prev = slot % s, (slot - 1) % s
            yield from sync_turn(blk, cw)
            yield from wait(blk.k_full[st], (slot // s) & 1)
            yield from wait(blk.v_full[prev], ((slot - 1) // s) & 1)
            blk.read("k", st, cw, True)
            blk.read("v", prev, cw, True)
            arrive_turn(blk, cw)
            yield                                             # wgmma_wait<1>
            blk.read("k", st, cw, False)
            warps_arrive(blk.k_empty[st])
            yield                                             # softmax, wgmma_wait<0>
            blk.read("v", prev, cw, False)
            warps_arrive(blk.v_empty[prev])
        blk.read("q", qb, cw, False)                          # every S retired
        warps_arrive(blk.q_empty[qb])
        if n > 0:                                             # the last P V
            last = (ring + n - 1) % s
            yield from wait(blk.v_full[last], ((ring + n - 1) // s) & 1)
            blk.read("v", last, cw, True)
            yield
            blk.read("v", last, cw, False)
            warps_arrive(blk.v_empty[last])
        ring += n
    if cw == 0:
        yield from sync_turn(blk, 0)                          # turns_end


def simulate(items: list[int], stages: int, seed: int, max_steps: int = 200_000) -> str | None:
    """None when every role finished; else what went wrong."""
    rng = random.Random(seed)
    blk = Block(stages)
    roles = {"producer": producer(blk, items), "consumer 0": consumer(blk, items, 0),
             "consumer 1": consumer(blk, items, 1)}
    try:
        for _ in range(max_steps):
            if not roles:
                return None
            name = rng.choice(sorted(roles))
            try:
                next(roles[name])
            except StopIteration:
                del roles[name]
    except AssertionError as exc:
        return str(exc)
    return f"deadlock: {', '.join(sorted(roles))} still waiting"


def snake_items(grid: int, total: int) -> list[int]:
    """Every item index persistent_item() hands out, over all blocks and rounds."""
    out = []
    for c in range(grid):
        rnd = 0
        while (idx := rnd * grid + (grid - 1 - c if rnd & 1 else c)) < total:
            out.append(idx)
            rnd += 1
    return out


def main() -> int:
    failures = []
    for trial in range(400):
        rng = random.Random(trial)
        items = [rng.choice([0, 1, 2, 3, 5, 17, 32]) for _ in range(rng.randint(1, 8))]
        for stages in (2, 3):
            problem = simulate(items, stages, seed=trial)
            if problem:
                failures.append(f"items {items}, {stages} stages: {problem}")
    for grid in (1, 2, 7, 132):
        for total in range(grid, 600, 13):
            if sorted(snake_items(grid, total)) != list(range(total)):
                failures.append(f"snake schedule: grid {grid}, {total} items not covered exactly once")
    print("\n".join(failures[:10]) if failures else "protocol model: 800 interleavings and the snake schedule ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
