"""Lane-level Python models of the round-2 GEMM index maps, checked against numpy on a CPU.

    python scripts/dev/gemm_index_models.py        (a few seconds; exit 1 on a mismatch)

Written while no GPU was available, to check the parts of three new kernels that are easiest to
get wrong, by following their C++ line by line (same names, same arithmetic):
  - gemm_decode_mma (kernels_ext/csrc/gemm/gemm_decode_mma.cu): per-lane 16-byte pieces, the
    k-permutation shared by the mma.sync A and B fragments (PTX m16n8k16 layouts), the W and x
    register rings with their zero-filled tails, the K-split reduction, the shuffles that hand a lane
    its row when W is loaded 8 or 16 lanes to a row, the library's CTA shapes and three more;
  - sgemm_fp32 Loader16 / Loader32 (sgemm_fp32.cu), on both block shapes (128 x 128 of 256
    threads, 64 x 128 of 128): every [k][row] slot of a stage written once with the right element
    or zero, on the unpredicated interior path and the predicated one;
  - hgemm_mma bk64 InteriorCopies (hgemm_mma.cu): the same 16-byte chunks at the same swizzled
    offsets as the general loader; bk64_pipe's copy slices, fragment addresses and the order of
    its copies, waits, barriers and ldmatrix reads (no stage read while it is refilled).
The models say nothing about timing, and a model can share a misreading of the PTX with the
kernel; the GPU tests (tests/gpu/test_gemm.py) are the real check.
"""

from __future__ import annotations

import sys

import numpy as np

# ------------------------------------------------------------------------- gemm_decode_mma

DM_SUBCHUNK, DM_XDEPTH = 32, 2
# DecodeShape<kWarps, kRowWarps, kGroups, kDepth, kInterleave, kLoad, kRowLanes> (kLoad changes no
# index): the library's two (Rows32; Rows16, 8 lanes to a row) and layouts the probe times.
DM_SHAPES = ((8, 2, 2, 4, False, 4), (8, 1, 2, 2, False, 8), (16, 4, 2, 8, True, 4), (8, 2, 2, 2, True, 8),
             (8, 2, 1, 2, False, 16))


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


def gather_row(v: list, q: int, lane_values: dict, row_lanes: int, lane: int) -> list:
    """gather_row<R>: row g's piece of sub-chunk q for `lane`, from load g / P of lane R (g % P) + 4 q + t
    (v: this lane's loads, unused but for R = 4; lane_values[src]: the source lane's loads)."""
    if row_lanes == 4:
        return v[0]
    p_rows = 32 // row_lanes
    g, t = lane // 4, lane % 4
    src = row_lanes * (g % p_rows) + 4 * q + t
    return lane_values[src][g // p_rows]


def decode_mma(a_mat: np.ndarray, w_mat: np.ndarray, shape: tuple[int, int, int, int, bool, int],
               ctas: int = 0) -> np.ndarray:
    """The kernel over a grid of `ctas` CTAs (0: one per row tile), CTA b taking rows
    [b n / ctas, (b + 1) n / ctas) as decode_row_begin deals them."""
    warps, row_warps, groups, depth, interleave, row_lanes = shape
    m, k = a_mat.shape
    n = w_mat.shape[0]
    assert k % 8 == 0 and m <= 16
    ksplit = warps // row_warps
    rows = row_warps * groups * 8
    stride = ksplit if interleave else 1
    subs = row_lanes // 4
    chunk = DM_SUBCHUNK * subs
    af, wf = a_mat.reshape(-1), w_mat.reshape(-1)
    chunks = (k + chunk - 1) // chunk
    per_split = (chunks + ksplit - 1) // ksplit
    ctas = ctas or (n + rows - 1) // rows
    c = np.full((m, n), np.nan)

    def piece(flat: np.ndarray, off: int, ok: bool) -> list[np.ndarray]:
        if not ok:
            return [np.zeros(2)] * 4
        v = flat[off:off + 8]
        assert len(v) == 8, "a valid piece must lie inside the tensor"
        return [v[0:2], v[2:4], v[4:6], v[6:8]]

    for block in range(ctas):
        cta_row = block * n // ctas
        cta_rows = (block + 1) * n // ctas - cta_row
        assert 1 <= cta_rows <= rows, f"CTA {block} of {ctas} would take {cta_rows} rows"
        red = np.zeros((ksplit, 16, rows))
        for warp in range(warps):
            rw, q = warp % row_warps, warp // row_warps
            slot0 = rw * groups * 8
            base = q if interleave else min(q * per_split, chunks)
            c_end = chunks if interleave else min(base + per_split, chunks)
            n_chunks = (chunks - q + ksplit - 1) // ksplit if interleave else c_end - base
            lim = min(c_end * chunk, k) - base * chunk
            wp, xp, xlive, wofs, xofs = {}, {}, {}, {}, {}
            for lane in range(32):
                g, t = lane // 4, lane % 4
                wofs[lane], xofs[lane] = 8 * (lane % row_lanes), 8 * t
                for r in range(groups):
                    for i in range(subs):
                        slot = slot0 + 8 * r + (32 // row_lanes) * i + lane // row_lanes
                        row = cta_row + min(slot, cta_rows - 1)   # past the CTA's rows: its last again
                        wp[lane, r, i] = row * k + base * chunk + wofs[lane]
                for h in range(2):
                    token = 8 * h + g
                    xlive[lane, h] = token < m
                    xp[lane, h] = (token if xlive[lane, h] else 0) * k + base * chunk + xofs[lane]

            def load_w(lane: int, i: int, j: int) -> list:
                ok = i * stride * chunk + wofs[lane] < lim
                return [[piece(wf, wp[lane, r, l] + j * stride * chunk, ok) for l in range(subs)]
                        for r in range(groups)]

            def load_x(lane: int, i: int, j: int) -> list:
                return [[piece(af, xp[lane, h] + j * stride * chunk + DM_SUBCHUNK * sc,
                               i * stride * chunk + DM_SUBCHUNK * sc + xofs[lane] < lim and xlive[lane, h])
                         for h in range(2)] for sc in range(subs)]

            acc = [[[0.0] * 4 for _ in range(32)] for _ in range(groups)]
            wq = {(lane, u): load_w(lane, u, u) for lane in range(32) for u in range(depth)}
            xq = {(lane, u): load_x(lane, u, u) for lane in range(32) for u in range(DM_XDEPTH)}
            for i0 in range(0, n_chunks, depth):
                for u in range(depth):
                    for sc in range(subs):
                        for r in range(groups):
                            loads = {lane: wq[lane, u][r] for lane in range(32)}
                            wv = {lane: gather_row(loads[lane], sc, loads, row_lanes, lane) for lane in range(32)}
                            for s in range(2):
                                a_frag = {}
                                for lane in range(32):
                                    xg, xg8 = xq[lane, u % DM_XDEPTH][sc]
                                    a_frag[lane] = [xg[2 * s], xg8[2 * s], xg[2 * s + 1], xg8[2 * s + 1]]
                                b_frag = {lane: [wv[lane][2 * s], wv[lane][2 * s + 1]] for lane in range(32)}
                                mma_m16n8k16(acc[r], a_frag, b_frag)
                    for lane in range(32):
                        wq[lane, u] = load_w(lane, i0 + u + depth, u + depth)
                        xq[lane, u % DM_XDEPTH] = load_x(lane, i0 + u + DM_XDEPTH, u + DM_XDEPTH)
                for lane in range(32):
                    for r in range(groups):
                        for i in range(subs):
                            wp[lane, r, i] += depth * stride * chunk
                    xp[lane, 0] += depth * stride * chunk
                    xp[lane, 1] += depth * stride * chunk
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for r in range(groups):
                    rl = rw * groups * 8 + 8 * r + 2 * t
                    red[q, g, rl], red[q, g, rl + 1] = acc[r][lane][0], acc[r][lane][1]
                    red[q, g + 8, rl], red[q, g + 8, rl + 1] = acc[r][lane][2], acc[r][lane][3]
        for e in range(16 * rows):
            token, rl = e // rows, e % rows
            if token < m and rl < cta_rows:
                assert np.isnan(c[token, cta_row + rl]), "two CTAs wrote one output"
                c[token, cta_row + rl] = sum(red[s, token, rl] for s in range(ksplit))
    return c


def check_decode_mma() -> None:
    rng = np.random.default_rng(0)
    for m, n, k in ((1, 64, 32), (16, 64, 8), (5, 40, 16), (16, 130, 264), (3, 200, 1032),
                    (16, 64, 2056), (7, 1, 96)):
        a, w = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        for shape in DM_SHAPES:
            rows = shape[1] * shape[2] * 8
            tiles = (n + rows - 1) // rows
            # one CTA per tile, and a `waves` grid: the tiles rounded up to waves of 7 CTAs
            for ctas in sorted({tiles, min(n, -(-tiles // 7) * 7)}):
                err = np.abs(decode_mma(a, w, shape, ctas) - a @ w.T).max()
                assert err < 1e-9, f"gemm_decode_mma model {shape} {m}x{n}x{k} {ctas} CTAs: error {err}"


# ------------------------------------------------------------------------- sgemm Loader32

# SgemmShape<kThreads, kStages>: BM = threads / 2 rows of A, 128 of W, row pitches BM + 4 and 132.
SG_SHAPES = (256, 128)   # Square (bk16, bk32) and Half (bm64)


def sgemm_stage(threads: int, bk: int, a_mat: np.ndarray, w_mat: np.ndarray, m0: int, n0: int, kt: int) -> None:
    m, k = a_mat.shape
    n = w_mat.shape[0]
    bm, bn = threads // 2, 128
    pitch_a, pitch_w = bm + 4, bn + 4
    step = threads // 16
    copies_a, copies_w = bm // step, bn // step
    af, wf = a_mat.reshape(-1), w_mat.reshape(-1)
    size = bk * (pitch_a + pitch_w)
    stage = np.full(size, np.nan)
    written = np.zeros(size, dtype=int)

    def cp(dst: int, flat: np.ndarray, src: int, valid: bool) -> None:
        written[dst] += 1
        if valid:
            assert 0 <= src < flat.size
        stage[dst] = flat[src] if valid else 0.0

    interior = m0 + bm <= m and n0 + bn <= n
    for tid in range(threads):
        kk = tid % 8 + 8 * ((tid // 32) % 2)
        row0 = (tid // 8) % 4 + 4 * (tid // 64)
        rows_a = [m0 + row0 + step * i < m for i in range(copies_a)]
        rows_w = [n0 + row0 + step * i < n for i in range(copies_w)]
        pa0 = min(m0 + row0, m - 1) * k + kk
        pw0 = min(n0 + row0, n - 1) * k + kk
        sa = kk * pitch_a + row0
        sw = bk * pitch_a + kk * pitch_w + row0
        half_a, half_w = 16 * pitch_a, 16 * pitch_w
        if bk == 32 and interior and (kt + 1) * bk <= k:
            pa, pw = pa0 + kt * bk, pw0 + kt * bk
            for i in range(copies_a):
                cp(sa + step * i, af, pa, True)
                cp(sa + step * i + half_a, af, pa + 16, True)
                pa += step * k
            for i in range(copies_w):
                cp(sw + step * i, wf, pw, True)
                cp(sw + step * i + half_w, wf, pw + 16, True)
                pw += step * k
            continue
        for h in range(bk // 16):
            in_k = kt * bk + 16 * h + kk < k
            koff = kt * bk + 16 * h if in_k else 0
            pa, pw = pa0 + koff, pw0 + koff
            for i in range(copies_a):
                va = in_k and rows_a[i]
                cp(sa + h * half_a + step * i, af, pa if va else 0, va)
                pa += step * k
            for i in range(copies_w):
                vw = in_k and rows_w[i]
                cp(sw + h * half_w + step * i, wf, pw if vw else 0, vw)
                pw += step * k
    for base, pitch, x, r0, rows, tile_rows in ((0, pitch_a, a_mat, m0, m, bm),
                                                (bk * pitch_a, pitch_w, w_mat, n0, n, bn)):
        for kr in range(bk):
            for row in range(tile_rows):
                slot = base + kr * pitch + row
                gk, gr = kt * bk + kr, r0 + row
                want = x[gr, gk] if gr < rows and gk < k else 0.0
                where = f"sgemm {threads} threads bk{bk}: slot {(base, kr, row)}"
                assert written[slot] == 1, f"{where} written {written[slot]}x"
                assert stage[slot] == want, f"{where} = {stage[slot]}, want {want}"
        # the pitch's padding (rows tile_rows..pitch-1) is never written
        for kr in range(bk):
            assert not written[base + kr * pitch + tile_rows: base + (kr + 1) * pitch].any()


def check_sgemm_loaders() -> None:
    rng = np.random.default_rng(1)
    for m, n, k in ((256, 256, 64), (300, 1000, 100), (129, 257, 4104), (128, 128, 32), (5, 7, 3), (64, 128, 32)):
        a, w = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        for threads in SG_SHAPES:
            bm = threads // 2
            for bk in (16, 32):
                last = (k + bk - 1) // bk - 1
                for m0 in {0, ((m - 1) // bm) * bm}:
                    for n0 in {0, ((n - 1) // 128) * 128}:
                        for kt in {0, last}:
                            sgemm_stage(threads, bk, a, w, m0, n0, kt)


def check_sgemm_micro_tiles() -> None:
    """Every element of the BM x 128 block tile belongs to exactly one thread's 8 x 8 register
    tile (rows 4 ty + {0..3} and BM / 2 + 4 ty + {0..3}, columns 4 tx + {0..3} and 64 + 4 tx +
    {0..3}), and the distinct float4 of each warp-wide shared load are consecutive: the fewest
    wavefronts, no bank conflict; the transposed copies of a warp (8 k x 4 rows) hit 32 banks."""
    for threads in SG_SHAPES:
        bm = threads // 2

        def tile_of(tid: int) -> tuple[list[int], list[int]]:
            ty, tx = tid // 16, tid % 16
            return ([4 * ty + (bm // 2) * g + i for g in range(2) for i in range(4)],
                    [4 * tx + 64 * g + j for g in range(2) for j in range(4)])

        owner = np.zeros((bm, 128), dtype=int)
        for tid in range(threads):
            rows, cols = tile_of(tid)
            owner[np.ix_(rows, cols)] += 1
        assert (owner == 1).all(), f"sgemm {threads}: tile covered {owner.min()}..{owner.max()} times"
        for warp in range(threads // 32):
            tiles = [tile_of(32 * warp + lane) for lane in range(32)]
            for part in (0, 1):   # A loads (rows), then W loads (columns)
                for g in range(2):
                    starts = {t[part][4 * g] for t in tiles}
                    assert 4 * (max(starts) - min(starts) + 4) == 16 * len(starts), f"sgemm warp {warp}: gaps"
            for pitch in (bm + 4, 132):
                banks = {((t % 8 + 8 * ((t // 32) % 2)) * pitch + (t // 8) % 4 + 4 * (t // 64)) % 32
                         for t in range(32 * warp, 32 * warp + 32)}
                assert len(banks) == 32, f"sgemm {threads} warp {warp}: copies hit {len(banks)} banks"


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


# ------------------------------------------------------------------------- hgemm_mma bk64_pipe
# The pipelined main loop (hgemm_mma.cu, kPipe): (1) load_part's four slices of three copies
# write exactly load()'s chunks, each once, from the same element; (2) the fragment addresses
# (k-step-0 offset XOR 32 kk, + 2048 per 16 rows) equal bk64's Tl::offset ones; (3) one thread's
# program order of copies, commits, waits, barriers and ldmatrix reads: every read of tile t
# follows a barrier whose preceding wait<S-2> covered t's group, and every copy into a stage
# falls in a later barrier epoch than every read of the tile that stage held before.

MP_BK, MP_THREADS, MP_BM, MP_BN, MP_S = 64, 256, 128, 256, 4
MP_ROW_BYTES, MP_CHUNKS = 2 * MP_BK, 2 * MP_BK // 16
MP_A_BYTES, MP_B_BYTES = MP_BM * MP_ROW_BYTES, MP_BN * MP_ROW_BYTES
MP_A_COPIES, MP_B_COPIES = MP_A_BYTES // 16 // MP_THREADS, MP_B_BYTES // 16 // MP_THREADS
MP_K_STEPS = MP_BK // 16
MP_PER_STEP = (MP_A_COPIES + MP_B_COPIES) // MP_K_STEPS


def mp_offset(row: int, q: int) -> int:
    return swizzle(row * MP_ROW_BYTES + q * 16, MP_ROW_BYTES)


def check_mma_pipe_copy_split() -> None:
    m0, n0, kt, lda, ldw = 256, 512, 3, 1000, 1200
    row_step = (MP_THREADS // MP_CHUNKS) * MP_ROW_BYTES
    whole, split = {}, {}
    for tid in range(MP_THREADS):
        row, q = tid // MP_CHUNKS, tid % MP_CHUNKS
        soff = mp_offset(row, q)
        step_a, step_w = (MP_THREADS // MP_CHUNKS) * lda, (MP_THREADS // MP_CHUNKS) * ldw
        a = (m0 + row) * lda + 8 * q          # element index of InteriorCopies::a
        w = (n0 + row) * ldw + 8 * q
        pa, pw = a + kt * MP_BK, w + kt * MP_BK     # load(): pointers stepped
        for i in range(MP_A_COPIES):
            whole[soff + i * row_step] = ("A", pa)
            pa += step_a
        for i in range(MP_B_COPIES):
            whole[MP_A_BYTES + soff + i * row_step] = ("W", pw)
            pw += step_w
        for kk in range(MP_K_STEPS):             # load_part<kk * MP_PER_STEP, MP_PER_STEP>
            pa, pw = a + kt * MP_BK, w + kt * MP_BK
            for j in range(kk * MP_PER_STEP, (kk + 1) * MP_PER_STEP):
                if j < MP_A_COPIES:
                    key, src = soff + j * row_step, ("A", pa + j * step_a)
                else:
                    i = j - MP_A_COPIES
                    key, src = MP_A_BYTES + soff + i * row_step, ("W", pw + i * step_w)
                assert key not in split, "chunk copied twice"
                split[key] = src
    assert len(whole) == (MP_A_BYTES + MP_B_BYTES) // 16
    assert split == whole, "load_part slices differ from load()"


def check_mma_pipe_fragment_addresses() -> None:
    for warp in range(8):
        wm, wn = warp // 4, warp % 4
        for lane in range(32):
            a_off = mp_offset(wm * 64 + lane % 16, lane // 16)
            b_off = mp_offset(wn * 64 + lane % 8 + 8 * (lane // 16), (lane // 8) % 2)
            for kk in range(MP_K_STEPS):
                for i in range(4):
                    ref_a = mp_offset(wm * 64 + i * 16 + lane % 16, 2 * kk + lane // 16)
                    ref_b = MP_A_BYTES + mp_offset(wn * 64 + i * 16 + lane % 8 + 8 * (lane // 16),
                                             2 * kk + (lane // 8) % 2)
                    assert (a_off ^ (32 * kk)) + i * 16 * MP_ROW_BYTES == ref_a
                    assert MP_A_BYTES + (b_off ^ (32 * kk)) + i * 16 * MP_ROW_BYTES == ref_b


def mma_pipe_program(num_kt: int, fast_kt: int) -> list[tuple]:
    """The events of one thread, in program order (every thread runs the same sequence)."""
    ev = []
    for s in range(MP_S - 1):                       # prologue
        if s < num_kt:
            ev += [("copy", s % MP_S, s)] * (MP_A_COPIES + MP_B_COPIES)
        ev.append(("commit",))
    ev += [("wait", MP_S - 2), ("bar",)]
    ev += [("read", 0 % MP_S, 0)] * 8               # load_frags(af[0], bf[0], smem, 0)

    def ktile(kt, interior):
        nxt_tile = kt + MP_S - 1
        for kk in range(MP_K_STEPS):
            if not interior and kk == 0 and nxt_tile < num_kt:
                ev.extend([("copy", nxt_tile % MP_S, nxt_tile)] * (MP_A_COPIES + MP_B_COPIES))
            if kk + 1 < MP_K_STEPS:
                ev.extend([("read", kt % MP_S, kt)] * 8)
            if interior:
                ev.extend([("copy", nxt_tile % MP_S, nxt_tile)] * MP_PER_STEP)
            if kk + 1 == MP_K_STEPS:
                ev.extend([("commit",), ("wait", MP_S - 2), ("bar",)])
                ev.extend([("read", (kt + 1) % MP_S, kt + 1)] * 8)
            ev.append(("mma", kt))
    kt = 0
    while kt < fast_kt - (MP_S - 1):
        assert kt + MP_S - 1 < fast_kt
        ktile(kt, True)
        kt += 1
    while kt < num_kt:
        assert kt + MP_S - 1 >= fast_kt
        ktile(kt, False)
        kt += 1
    return ev


def check_mma_pipe_schedule(num_kt: int, fast_kt: int) -> None:
    ev = mma_pipe_program(num_kt, fast_kt)
    epoch, committed, group_tile = 0, 0, {}
    open_copies = []          # tiles copied since the last commit
    complete = set()          # tiles whose group this thread waited for
    reads, writes = [], []    # (epoch, stage, tile)
    landed_for_all = set()
    mmas = []
    for e in ev:
        if e[0] == "copy":
            writes.append((epoch, e[1], e[2]))
            open_copies.append(e[2])
        elif e[0] == "commit":
            assert len(set(open_copies)) <= 1, "one group holds two tiles"
            group_tile[committed] = open_copies[0] if open_copies else None
            committed += 1
            open_copies = []
        elif e[0] == "wait":
            assert not open_copies, "copies issued but not committed before a wait"
            for g in range(committed - e[1]):
                if group_tile.get(g) is not None:
                    complete.add(group_tile[g])
        elif e[0] == "bar":
            epoch += 1
            landed_for_all = set(complete)   # every thread ran the same waits
        elif e[0] == "read":
            _, stage, tile = e
            if tile < num_kt:
                assert tile in landed_for_all, f"read of tile {tile} before it landed for all"
            reads.append((epoch, stage, tile))
        elif e[0] == "mma":
            mmas.append(e[1])
    for (er, s, t) in reads:
        for (ew, s2, u) in writes:
            if s2 != s or u == t and u < num_kt:
                continue
            # a copy into the stage of a different tile than the one read
            if u > t:
                assert ew > er, f"tile {u} refills stage {s} in epoch {ew}, tile {t} read there in {er}"
            else:
                assert ew < er, f"tile {t} read in epoch {er} while old tile {u} written in {ew}"
    assert sorted(set(writes_t for (_, _, writes_t) in writes)) == list(range(num_kt))
    assert [mmas.count(t) for t in range(num_kt)] == [MP_K_STEPS] * num_kt
    # every real tile's reads: k-steps 0..3, 8 ldmatrix each
    for t in range(num_kt):
        assert sum(1 for r in reads if r[2] == t) == 8 * MP_K_STEPS



def check_mma_pipe() -> None:
    check_mma_pipe_copy_split()
    check_mma_pipe_fragment_addresses()
    for num_kt in range(0, 14):
        for fast_kt in {0, max(num_kt - 1, 0), num_kt, 1, 3, 4}:
            if fast_kt <= num_kt:
                check_mma_pipe_schedule(num_kt, fast_kt)


def main() -> int:
    checks = (check_decode_mma, check_sgemm_loaders, check_sgemm_micro_tiles, check_mma_interior_copies,
              check_mma_pipe)
    for check in checks:
        check()
        print(f"ok  {check.__name__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
