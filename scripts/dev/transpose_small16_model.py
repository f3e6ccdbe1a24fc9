"""Lane-level Python model of smem_w16, the small 16-bit transpose tile
(transpose_small16_kernel in kernels_ext/csrc/transpose/transpose.cu), checked against numpy.

    python scripts/dev/transpose_small16_model.py     (under a second; exit 1 on a mismatch)

It follows the kernel's index arithmetic (same names): each thread's two word loads from pairs of
rows of x, their byte permutes into words of y, the stores into the word[32][PITCH] tile, and the
word stores to y. It checks that y equals x transposed, that every element of y is written once,
and that no shared store or load instruction of a warp hits a bank twice. The GPU tests
(tests/gpu/test_families.py, test_transpose_small_tile_is_exact) are the real check.
"""

from __future__ import annotations

import sys

import numpy as np

TILE, THREADS = 32, 128
WORDS = TILE // 2
PITCH = WORDS + 1   # words per row of the shared tile


def banks_distinct(word_offsets: list[int]) -> bool:
    """One warp instruction's 32-bit shared accesses touch 32 different banks."""
    return len({o % 32 for o in word_offsets}) == len(word_offsets)


def run_block(x: np.ndarray, y: np.ndarray, written: np.ndarray, by: int, bx: int, pitch: int) -> list[str]:
    """One block (blockIdx.y = by, blockIdx.x = bx) of one matrix; words are (low, high) pairs."""
    errors: list[str] = []
    row0, col0 = by * TILE, bx * TILE
    tile: dict[int, tuple[int, int]] = {}
    stores: dict[tuple[int, int, int], list[int]] = {}   # (warp, i, which row) -> word offsets
    for t in range(THREADS):
        l, g = t & 15, t >> 4
        for i in range(2):
            p = g + 8 * i
            r = row0 + 2 * p
            a = (x[r, col0 + 2 * l], x[r, col0 + 2 * l + 1])           # x[r][c], x[r][c+1]
            b = (x[r + 1, col0 + 2 * l], x[r + 1, col0 + 2 * l + 1])   # x[r+1][c], x[r+1][c+1]
            w0, w1 = (a[0], b[0]), (a[1], b[1])                         # __byte_perm 0x5410, 0x7632
            for which, (row, word) in enumerate(((2 * l, w0), (2 * l + 1, w1))):
                tile[row * pitch + p] = word
                stores.setdefault((t >> 5, i, which), []).append(row * pitch + p)
    errors += [f"shared store {k} of block ({by}, {bx}): bank conflict" for k, v in stores.items()
               if not banks_distinct(v)]
    loads: dict[tuple[int, int], list[int]] = {}
    for t in range(THREADS):
        l, h, warp = t & 15, (t >> 4) & 1, t >> 5
        for j in range(4):
            c = 16 * h + warp + 4 * j
            lo, hi = tile[c * pitch + l]
            loads.setdefault((warp, j), []).append(c * pitch + l)
            for e, v in ((row0 + 2 * l, lo), (row0 + 2 * l + 1, hi)):
                y[col0 + c, e] = v
                written[col0 + c, e] += 1
    errors += [f"shared load {k} of block ({by}, {bx}): bank conflict" for k, v in loads.items()
               if not banks_distinct(v)]
    return errors


def check(rows: int, cols: int, pitch: int = PITCH) -> list[str]:
    """The whole grid over an x of rows x cols (both multiples of 32, as the launcher requires)."""
    assert rows % TILE == 0 and cols % TILE == 0
    x = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
    y = np.full((cols, rows), -1, dtype=np.int64)
    written = np.zeros((cols, rows), dtype=np.int64)
    errors: list[str] = []
    for by in range(rows // TILE):
        for bx in range(cols // TILE):
            errors += run_block(x, y, written, by, bx, pitch)
    if not np.array_equal(y, x.T):
        errors.append(f"{rows} x {cols}: y is not x transposed")
    if not (written == 1).all():
        errors.append(f"{rows} x {cols}: elements of y written other than once")
    return errors


def main() -> int:
    errors: list[str] = []
    for rows, cols in ((32, 32), (64, 96), (96, 64), (128, 128)):
        errors += check(rows, cols)
    for e in errors[:20]:
        print(e)
    print(f"{len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
