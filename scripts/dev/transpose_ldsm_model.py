"""Lane-level Python model of the ldsm transpose (kernels_ext/csrc/transpose/transpose_ldsm.cu),
checked against numpy on a CPU.

    python scripts/dev/transpose_ldsm_model.py     (under a second; exit 1 on a mismatch)

It follows the kernel's index arithmetic line by line (same names): the loads of each warp and
lane, the 16-byte units with their XOR swizzle, the ldmatrix.x4.trans row addresses and what the
PTX ISA says each lane receives, and the stores. It checks, for every block shape and for full
and edge blocks, one matrix and a batch walked as one (the kernel's kFlat), that y equals x transposed, that every element of y is written once, and that
no shared store or ldmatrix phase has a bank conflict. The GPU tests are the real check.
"""

from __future__ import annotations

import sys

import numpy as np

SUB, WARPS = 32, 4
PER_THREAD = SUB * SUB // (32 * WARPS)
SHAPES = ((1, 1), (1, 2), (2, 1), (2, 2))


def unit_slot(w: int, lane: int) -> int:
    """Index of 16-byte unit (w, lane) in a sub-tile's 128 (the kernel's units[s][w][lane ^ 2w])."""
    return w * 32 + (lane ^ (2 * w))


def ldmatrix_x4_trans(rows: list[np.ndarray]) -> list[list[tuple[int, int]]]:
    """PTX ldmatrix.m8n8.x4.trans.b16: rows[i] is the 8-element row lane i addresses (row i % 8 of
    matrix i // 8). Lane t gets, in register j, (M_j[2 (t % 4)][t // 4], M_j[2 (t % 4) + 1][t // 4])
    as (low, high) halves."""
    out = []
    for t in range(32):
        regs = []
        for j in range(4):
            m = [rows[8 * j + r] for r in range(8)]
            regs.append((int(m[2 * (t % 4)][t // 4]), int(m[2 * (t % 4) + 1][t // 4])))
        out.append(regs)
    return out


def conflict_free(slots: list[int]) -> bool:
    """8 lanes of a 16-byte access (one phase) touch 8 distinct 16-byte bank groups."""
    return len({s % 8 for s in slots}) == len(slots)


def run_block(x: np.ndarray, y: np.ndarray, written: np.ndarray, r0: int, c0: int,
              row_subs: int, col_subs: int, y_rows: int = 0) -> list[str]:
    """y and written are flat; y_rows > 0 is the kernel's kFlat walk of a batch of matrices of
    y_rows rows each (x holds all their rows), 0 one matrix."""
    rows, cols = x.shape
    flat = y_rows > 0
    y_rows = y_rows or rows
    errors: list[str] = []
    subs = row_subs * col_subs
    units = np.full((subs, WARPS * 32, 8), -1, dtype=np.int64)
    for w in range(WARPS):
        store_slots: dict[int, list[int]] = {}
        for lane in range(32):
            for s in range(subs):
                c = c0 + (s % col_subs) * SUB + lane
                r = r0 + (s // col_subs) * SUB + w
                v = [int(x[r + 4 * i, c]) if r + 4 * i < rows and c < cols else 0 for i in range(PER_THREAD)]
                units[s, unit_slot(w, lane)] = v
                store_slots.setdefault(lane // 8, []).append(unit_slot(w, lane))
        if not all(conflict_free(sl[i::subs]) for sl in store_slots.values() for i in range(subs)):
            errors.append(f"shared store conflict in warp {w}")
    for w in range(WARPS):
        for s in range(subs):
            addr_rows, slots = [], []
            for lane in range(32):
                rho, j_of_lane = lane & 7, lane >> 3
                src_w = rho >> 1
                src_l = (8 * w + 2 * j_of_lane + (rho & 1)) ^ (2 * src_w)
                slots.append(src_w * 32 + src_l)
                addr_rows.append(units[s, src_w * 32 + src_l])
            if not all(conflict_free(slots[8 * j:8 * j + 8]) for j in range(4)):
                errors.append(f"ldmatrix conflict in warp {w}")
            got = ldmatrix_x4_trans(addr_rows)
            for lane in range(32):
                yr0 = c0 + (s % col_subs) * SUB + 8 * w
                e = r0 + (s // col_subs) * SUB + lane
                at = yr0 * y_rows + e
                if flat:
                    at += (e // y_rows) * (y_rows * cols - y_rows)
                for k in range(8):
                    out = got[lane][k >> 1][k & 1]
                    if yr0 + k < cols and e < rows:
                        y[at + k * y_rows] = out
                        written[at + k * y_rows] += 1
    return errors


def check(rows: int, cols: int, row_subs: int, col_subs: int, batch: int = 0) -> list[str]:
    """One rows x cols matrix, or (batch > 0) a batch of them walked as one matrix (kFlat)."""
    matrices = max(batch, 1)
    x = np.arange(1, matrices * rows * cols + 1, dtype=np.int64).reshape(matrices * rows, cols)
    y = np.zeros(matrices * rows * cols, dtype=np.int64)
    written = np.zeros_like(y)
    errors: list[str] = []
    for r0 in range(0, matrices * rows, SUB * row_subs):
        for c0 in range(0, cols, SUB * col_subs):
            errors += run_block(x, y, written, r0, c0, row_subs, col_subs, rows if batch else 0)
    want = x.reshape(matrices, rows, cols).transpose(0, 2, 1).reshape(-1)
    what = f"{batch} x " * bool(batch) + f"{rows}x{cols} {row_subs}x{col_subs}"
    if not np.array_equal(y, want):
        errors.append(f"{what}: y != x.T at {int((y != want).sum())} elements")
    if not (written == 1).all():
        errors.append(f"{what}: elements written != once")
    return errors


def main() -> int:
    errors: list[str] = []
    for row_subs, col_subs in SHAPES:
        for rows, cols in ((32, 32), (64, 64), (65, 33), (1, 7), (129, 100), (31, 97)):
            errors += check(rows, cols, row_subs, col_subs)
        for batch, rows, cols in ((3, 129, 100), (7, 33, 40), (2, 64, 32), (5, 1, 9)):
            errors += check(rows, cols, row_subs, col_subs, batch)
    for e in dict.fromkeys(errors):
        print("FAIL", e)
    print("ldsm transpose model:", "ok" if not errors else f"{len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
