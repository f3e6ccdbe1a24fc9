"""Lane-level Python models of the round-2 GEMM index maps, checked against numpy on a CPU.

    python scripts/dev/gemm_index_models.py        (a few seconds; exit 1 on a mismatch)

Written while no GPU was available, to check the parts of three new kernels that are easiest to
get wrong, by following their C++ line by line (same names, same arithmetic):
  - gemm_decode_mma (kernels_ext/csrc/gemm/gemm_decode_mma.cu): per-lane 16-byte pieces, the
    k-permutation shared by the mma.sync A and B fragments (PTX m16n8k16 layouts), the W and x
    register rings with their zero-filled tails, the K-split reduction, the library's CTA shapes and an interleaved one;
  - sgemm_fp32 Loader32 (sgemm_fp32.cu): every [k][row] slot of a stage written once with the
    right element or zero, on the unpredicated interior path and the predicated one, with 256
    threads (bk16, bk32) and 128 (r8x16);
  - hgemm_mma bk64 InteriorCopies (hgemm_mma.cu): the same 16-byte chunks at the same swizzled
    offsets as the general loader.
The models say nothing about timing, and a model can share a misreading of the PTX with the
kernel; the GPU tests (tests/gpu/test_gemm.py) are the real check.
"""

from __future__ import annotations

import sys

import numpy as np

# ------------------------------------------------------------------------- gemm_decode_mma

DM_CHUNK, DM_XDEPTH = 32, 2
# DecodeShape<kWarps, kRowWarps, kGroups, kDepth, kInterleave>: the library's two (Rows32, Rows16)
# and one interleaved layout the probe times.
DM_SHAPES = ((8, 2, 2, 4, False), (8, 1, 2, 4, False), (16, 4, 2, 8, True))


def mma_m16n8k16(acc: list[list[float]], a_frag: dict, b_frag: dict) -> None:
    """acc[lane][0..3] += A @ B with A (16x16), B (16x8) gathered from the lanes' fragments
    exactly as PTX lays them out (pairs of elements per b32 register)."""
    a = np.zeros((16, 16))
    b = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        fa, fb = a_frag[lane], b_frag[lane]
        a[g, 2 * t:2 * t + 2], a[g + 8, 2 * t:2 * t + 2] = fa[0], fa[1]
        a[g, 2 * t + 8:2 * t + 10], a[g + 8, 2 * t + 8:2 * t + 10] = fa[2], fa[3]
        b[2 * t:2 * t + 2, g], b[2 * t + 8:2 * t + 10, g] = fb[0], fb[1]
    d = a @ b
    for lane in range(32):
        g, t = lane // 4, lane % 4
        acc[lane][0] += d[g, 2 * t]
        acc[lane][1] += d[g, 2 * t + 1]
        acc[lane][2] += d[g + 8, 2 * t]
        acc[lane][3] += d[g + 8, 2 * t + 1]


def decode_mma(a_mat: np.ndarray, w_mat: np.ndarray, shape: tuple[int, int, int, int, bool]) -> np.ndarray:
    warps, row_warps, groups, depth, interleave = shape
    m, k = a_mat.shape
    n = w_mat.shape[0]
    assert k % 8 == 0 and m <= 16
    ksplit = warps // row_warps
    rows = row_warps * groups * 8
    stride = ksplit if interleave else 1
    af, wf = a_mat.reshape(-1), w_mat.reshape(-1)
    chunks = (k + DM_CHUNK - 1) // DM_CHUNK
    per_split = (chunks + ksplit - 1) // ksplit
    c = np.full((m, n), np.nan)

    def piece(flat: np.ndarray, off: int, ok: bool) -> list[np.ndarray]:
        if not ok:
            return [np.zeros(2)] * 4
        v = flat[off:off + 8]
        assert len(v) == 8, "a valid piece must lie inside the tensor"
        return [v[0:2], v[2:4], v[4:6], v[6:8]]

    for block in range((n + rows - 1) // rows):
        red = np.zeros((ksplit, 16, rows))
        for warp in range(warps):
            rw, q = warp % row_warps, warp // row_warps
            row0 = block * rows + rw * groups * 8
            base = q if interleave else min(q * per_split, chunks)
            c_end = chunks if interleave else min(base + per_split, chunks)
            n_chunks = (chunks - q + ksplit - 1) // ksplit if interleave else c_end - base
            wp, xp, xlive, lim = {}, {}, {}, {}
            for lane in range(32):
                g, t = lane // 4, lane % 4
                kofs = 8 * t
                for r in range(groups):
                    wp[lane, r] = min(row0 + 8 * r + g, n - 1) * k + base * DM_CHUNK + kofs
                for h in range(2):
                    token = 8 * h + g
                    xlive[lane, h] = token < m
                    xp[lane, h] = (token if xlive[lane, h] else 0) * k + base * DM_CHUNK + kofs
                lim[lane] = min(c_end * DM_CHUNK, k) - base * DM_CHUNK - kofs

            def load_w(lane: int, i: int, j: int) -> list:
                ok = i * stride * DM_CHUNK < lim[lane]
                return [piece(wf, wp[lane, r] + j * stride * DM_CHUNK, ok) for r in range(groups)]

            def load_x(lane: int, i: int, j: int) -> list:
                ok = i * stride * DM_CHUNK < lim[lane]
                return [piece(af, xp[lane, h] + j * stride * DM_CHUNK, ok and xlive[lane, h]) for h in range(2)]

            acc = [[[0.0] * 4 for _ in range(32)] for _ in range(groups)]
            wq = {(lane, u): load_w(lane, u, u) for lane in range(32) for u in range(depth)}
            xq = {(lane, u): load_x(lane, u, u) for lane in range(32) for u in range(DM_XDEPTH)}
            for i0 in range(0, n_chunks, depth):
                for u in range(depth):
                    for s in range(2):
                        a_frag = {}
                        for lane in range(32):
                            xg, xg8 = xq[lane, u % DM_XDEPTH]
                            a_frag[lane] = [xg[2 * s], xg8[2 * s], xg[2 * s + 1], xg8[2 * s + 1]]
                        for r in range(groups):
                            b_frag = {lane: [wq[lane, u][r][2 * s], wq[lane, u][r][2 * s + 1]]
                                      for lane in range(32)}
                            mma_m16n8k16(acc[r], a_frag, b_frag)
                    for lane in range(32):
                        wq[lane, u] = load_w(lane, i0 + u + depth, u + depth)
                        xq[lane, u % DM_XDEPTH] = load_x(lane, i0 + u + DM_XDEPTH, u + DM_XDEPTH)
                for lane in range(32):
                    for r in range(groups):
                        wp[lane, r] += depth * stride * DM_CHUNK
                    xp[lane, 0] += depth * stride * DM_CHUNK
                    xp[lane, 1] += depth * stride * DM_CHUNK
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for r in range(groups):
                    rl = rw * groups * 8 + 8 * r + 2 * t
                    red[q, g, rl], red[q, g, rl + 1] = acc[r][lane][0], acc[r][lane][1]
                    red[q, g + 8, rl], red[q, g + 8, rl + 1] = acc[r][lane][2], acc[r][lane][3]
        for e in range(16 * rows):
            token, rl = e // rows, e % rows
            col = block * rows + rl
            if token < m and col < n:
                c[token, col] = sum(red[s, token, rl] for s in range(ksplit))
    return c


def check_decode_mma() -> None:
    rng = np.random.default_rng(0)
    for m, n, k in ((1, 64, 32), (16, 64, 8), (5, 40, 16), (16, 130, 264), (3, 200, 1032),
                    (16, 64, 2056), (7, 1, 96)):
        a, w = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        for shape in DM_SHAPES:
            err = np.abs(decode_mma(a, w, shape) - a @ w.T).max()
            assert err < 1e-9, f"gemm_decode_mma model {shape} {m}x{n}x{k}: error {err}"


# ------------------------------------------------------------------------- sgemm Loader32

SG_PITCH = 132


def sgemm_stage(bk: int, a_mat: np.ndarray, w_mat: np.ndarray, m0: int, n0: int, kt: int,
                threads: int = 256) -> None:
    m, k = a_mat.shape
    n = w_mat.shape[0]
    af, wf = a_mat.reshape(-1), w_mat.reshape(-1)
    stage = np.full(2 * bk * SG_PITCH, np.nan)
    written = np.zeros(2 * bk * SG_PITCH, dtype=int)

    def cp(dst: int, flat: np.ndarray, src: int, valid: bool) -> None:
        written[dst] += 1
        if valid:
            assert 0 <= src < flat.size
        stage[dst] = flat[src] if valid else 0.0

    interior = m0 + 128 <= m and n0 + 128 <= n
    copies, step = 128 * 16 // threads, threads // 16      # CopyPattern<kThreads>
    for tid in range(threads):
        kk = tid % 8 + 8 * ((tid // 32) % 2)
        row0 = (tid // 8) % 4 + 4 * (tid // 64)
        rows_a = [m0 + row0 + step * i < m for i in range(copies)]
        rows_w = [n0 + row0 + step * i < n for i in range(copies)]
        pa0 = min(m0 + row0, m - 1) * k + kk
        pw0 = min(n0 + row0, n - 1) * k + kk
        sa = kk * SG_PITCH + row0
        sw = bk * SG_PITCH + sa
        half = 16 * SG_PITCH
        if bk == 32 and interior and (kt + 1) * bk <= k:
            pa, pw = pa0 + kt * bk, pw0 + kt * bk
            for i in range(copies):
                cp(sa + step * i, af, pa, True)
                cp(sa + step * i + half, af, pa + 16, True)
                cp(sw + step * i, wf, pw, True)
                cp(sw + step * i + half, wf, pw + 16, True)
                pa, pw = pa + step * k, pw + step * k
            continue
        for h in range(bk // 16):
            in_k = kt * bk + 16 * h + kk < k
            koff = kt * bk + 16 * h if in_k else 0
            pa, pw = pa0 + koff, pw0 + koff
            for i in range(copies):
                va, vw = in_k and rows_a[i], in_k and rows_w[i]
                cp(sa + h * half + step * i, af, pa if va else 0, va)
                cp(sw + h * half + step * i, wf, pw if vw else 0, vw)
                pa, pw = pa + step * k, pw + step * k
    for op, x, r0, rows in ((0, a_mat, m0, m), (1, w_mat, n0, n)):
        for kr in range(bk):
            for row in range(128):
                slot = op * bk * SG_PITCH + kr * SG_PITCH + row
                gk, gr = kt * bk + kr, r0 + row
                want = x[gr, gk] if gr < rows and gk < k else 0.0
                assert written[slot] == 1, f"sgemm bk{bk}: slot {(op, kr, row)} written {written[slot]}x"
                assert stage[slot] == want, f"sgemm bk{bk}: slot {(op, kr, row)} = {stage[slot]}, want {want}"


def check_sgemm_loaders() -> None:
    rng = np.random.default_rng(1)
    for m, n, k in ((256, 256, 64), (300, 1000, 100), (129, 257, 4104), (128, 128, 32), (5, 7, 3)):
        a, w = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        # bk16 and bk32 with 256 threads (Micro8x8), bk32 with 128 (r8x16's Micro8x16)
        for bk, threads in ((16, 256), (32, 256), (32, 128)):
            last = (k + bk - 1) // bk - 1
            for m0 in {0, ((m - 1) // 128) * 128}:
                for n0 in {0, ((n - 1) // 128) * 128}:
                    for kt in {0, last}:
                        sgemm_stage(bk, a, w, m0, n0, kt, threads)


def sgemm_micro_rows_cols(micro: str, tid: int) -> tuple[list[int], list[int]]:
    """The block-tile rows and columns of thread tid's register tile (Micro8x8 / Micro8x16)."""
    if micro == "8x8":
        ty, tx = tid // 16, tid % 16
        row = [4 * ty + 64 * g for g in range(2)]
        col = [4 * tx + 64 * g for g in range(2)]
    else:
        warp, lane = tid // 32, tid % 32
        r0, c0 = 64 * (warp // 2) + 4 * (lane % 8), 64 * (warp % 2) + 4 * (lane // 8)
        row = [r0 + 32 * g for g in range(2)]
        col = [c0 + 16 * g for g in range(4)]
    return [r + i for r in row for i in range(4)], [c + j for c in col for j in range(4)]


def check_sgemm_micro_tiles() -> None:
    """Every element of the 128 x 128 block tile belongs to exactly one thread's register tile, and
    the distinct float4 of each warp-wide shared load are consecutive, so it takes the fewest
    wavefronts (128 bytes each): no bank conflicts."""
    for micro, threads in (("8x8", 256), ("8x16", 128)):
        owner = np.zeros((128, 128), dtype=int)
        for tid in range(threads):
            rows, cols = sgemm_micro_rows_cols(micro, tid)
            owner[np.ix_(rows, cols)] += 1
        assert (owner == 1).all(), f"sgemm Micro{micro}: tile covered {owner.min()}..{owner.max()} times"
        for warp in range(threads // 32):
            tiles = [sgemm_micro_rows_cols(micro, 32 * warp + lane) for lane in range(32)]
            for part in (0, 1):   # A loads (rows), then W loads (columns)
                for g in range(len(tiles[0][part]) // 4):
                    starts = {t[part][4 * g] for t in tiles}
                    span = 4 * (max(starts) - min(starts) + 4)
                    assert span == 16 * len(starts), f"sgemm Micro{micro} warp {warp}: float4 loads with gaps"


# ------------------------------------------------------------------------- hgemm_mma bk64

def swizzle(off: int, width: int) -> int:
    bits = {128: 3, 64: 2}[width]
    return off ^ (((off >> 7) & ((1 << bits) - 1)) << 4)


def check_mma_interior_copies() -> None:
    bk, threads, bm, bn = 64, 256, 128, 256
    row_bytes, chunks = 2 * bk, 2 * bk // 16
    offset = lambda row, q: swizzle(row * row_bytes + q * 16, row_bytes)   # noqa: E731
    a_bytes, b_bytes = bm * row_bytes, bn * row_bytes
    m0, n0, kt = 256, 512, 3
    general, interior = {}, {}
    for tid in range(threads):
        for i in range(a_bytes // 16 // threads):
            c = tid + i * threads
            general[offset(c // chunks, c % chunks)] = ("A", m0 + c // chunks, kt * bk + 8 * (c % chunks))
        for i in range(b_bytes // 16 // threads):
            c = tid + i * threads
            general[a_bytes + offset(c // chunks, c % chunks)] = ("W", n0 + c // chunks, kt * bk + 8 * (c % chunks))
        row, q = tid // chunks, tid % chunks
        step = threads // chunks
        for i in range(a_bytes // 16 // threads):
            key = offset(row, q) + i * step * row_bytes
            assert key not in interior
            interior[key] = ("A", m0 + row + i * step, kt * bk + 8 * q)
        for i in range(b_bytes // 16 // threads):
            key = a_bytes + offset(row, q) + i * step * row_bytes
            assert key not in interior
            interior[key] = ("W", n0 + row + i * step, kt * bk + 8 * q)
    assert len(general) == (a_bytes + b_bytes) // 16
    assert general == interior, "hgemm_mma bk64: interior copies differ from the general loader's"


def main() -> int:
    checks = (check_decode_mma, check_sgemm_loaders, check_sgemm_micro_tiles, check_mma_interior_copies)
    for check in checks:
        check()
        print(f"ok  {check.__name__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
