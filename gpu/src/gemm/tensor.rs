//! The tensor-core rungs: warp-tiled `mma.sync`, fed from swizzled shared memory by `ldmatrix`.
//!
//! Hierarchy (CUTLASS names): a threadblock computes a BM×BN tile of C, walking K in BK slices
//! staged in shared memory; its warps each own a WM×WN warp tile, made of (WM/16)×(WN/8)
//! instruction tiles of 16×8, each accumulated by one `mma.sync` per instruction K (8 or 16).
//!
//! Two ways of filling shared memory, chosen by the configuration:
//! - register staging (sm_75): the next slice is loaded into registers while the tensor cores
//!   work on the current one, then stored to the other of two buffers;
//! - `cp.async` (sm_80+): STAGES−1 slices are in flight while one is consumed.
use super::Args;
use super::sgd::{PREFETCH_AREA, prefetch_tile, step_tile};
use super::simt::{positive, store_pair};
use crate::arch::*;
use crate::layout::{CHUNK, Operand, ldmatrix_lane, mma_c, swizzled_offset};

/// One operand's tile in shared memory and the global matrix it is copied from.
///
/// The tile keeps the storage orientation of the global matrix, so every copy moves whole
/// 16-byte chunks: `rows × row_len` elements, row-major, swizzled by 16-byte chunk.
#[derive(Clone, Copy)]
struct Tile {
    /// Global matrix in storage orientation: `rows × cols`, leading dimension `ld`.
    src: *const u16,
    ld: u32,
    rows: u32,
    cols: u32,
    /// Whether every full chunk can be copied as one aligned 16-byte access.
    vector: bool,
    /// Tile shape in shared memory.
    tile_rows: usize,
    row_len: usize,
}

impl Tile {
    fn new(
        src: *const u16,
        ld: u32,
        rows: u32,
        cols: u32,
        tile_rows: usize,
        row_len: usize,
    ) -> Tile {
        let vector = ld.is_multiple_of(CHUNK as u32) && (src as usize).is_multiple_of(16);
        Tile {
            src,
            ld,
            rows,
            cols,
            vector,
            tile_rows,
            row_len,
        }
    }

    const fn chunks(&self) -> usize {
        self.tile_rows * self.row_len / CHUNK
    }

    /// Global (row, col) and shared byte offset of chunk `id` for a tile at (r0, c0).
    #[inline(always)]
    fn chunk(&self, id: usize, r0: u32, c0: u32) -> (u32, u32, u32) {
        let per_row = self.row_len / CHUNK;
        let (row, ch) = (id / per_row, id % per_row);
        let off = swizzled_offset(row, ch * CHUNK, self.row_len) * 2;
        (r0 + row as u32, c0 + (ch * CHUNK) as u32, off as u32)
    }

    /// Whether the chunk at (gr, gc) is in bounds and can move as one 16-byte access.
    #[inline(always)]
    fn whole(&self, gr: u32, gc: u32) -> bool {
        self.vector && gr < self.rows && gc + CHUNK as u32 <= self.cols
    }

    /// The chunk at (gr, gc) element by element, zero outside the matrix.
    #[inline(always)]
    fn load_partial(&self, gr: u32, gc: u32) -> [u32; 4] {
        let mut v = [0u32; 4];
        if gr < self.rows {
            for e in 0..CHUNK {
                let c = gc + e as u32;
                if c < self.cols {
                    let h = unsafe { *self.src.add((gr * self.ld + c) as usize) } as u32;
                    v[e / 2] |= h << (16 * (e % 2));
                }
            }
        }
        v
    }

    #[inline(always)]
    fn load_chunk(&self, gr: u32, gc: u32) -> [u32; 4] {
        if self.whole(gr, gc) {
            ld_global_v4(unsafe { self.src.add((gr * self.ld + gc) as usize) } as *const u8)
        } else {
            self.load_partial(gr, gc)
        }
    }

    /// Whether the whole tile at (r0, c0) lies inside the matrix and every chunk can move as
    /// one aligned 16-byte access: then no chunk needs a bounds check.
    #[inline(always)]
    fn inside(&self, r0: u32, c0: u32) -> bool {
        self.vector
            && r0 + self.tile_rows as u32 <= self.rows
            && c0 + self.row_len as u32 <= self.cols
    }

    /// Issues `cp.async` for this thread's chunks of the tile at (r0, c0) into `dst`. Tiles
    /// inside the matrix (all of them, away from the edges) take a path without per-chunk
    /// bounds checks: with them, the copies took about as many instructions as the `mma`s.
    #[inline(always)]
    fn copy_async(&self, dst: u32, r0: u32, c0: u32, threads: usize) {
        let per_row = self.row_len / CHUNK;
        let passes = self.chunks().is_multiple_of(threads) && threads.is_multiple_of(per_row);
        if self.inside(r0, c0) && passes {
            // Each pass of the block copies `threads` chunks, `threads / per_row` whole rows,
            // and a thread keeps its chunk column: one pointer, advanced by a fixed stride,
            // and shared offsets the compiler folds to constants.
            let tid = thread_x() as usize;
            let (row0, ch) = (tid / per_row, tid % per_row);
            let rows_per_pass = threads / per_row;
            let first = (r0 + row0 as u32) * self.ld + c0 + (ch * CHUNK) as u32;
            let src = unsafe { self.src.add(first as usize) } as *const u8;
            // Opaque, so the per-pass offsets are not hoisted out of the K loop into registers.
            let stride = 2 * opaque(rows_per_pass as u32 * self.ld) as usize;
            for pass in 0..self.chunks() / threads {
                let row = row0 + pass * rows_per_pass;
                let off = (swizzled_offset(row, ch * CHUNK, self.row_len) * 2) as u32;
                cp_async_16_whole(dst + off, unsafe { src.add(pass * stride) });
            }
            return;
        }
        let mut id = thread_x() as usize;
        while id < self.chunks() {
            let (gr, gc, off) = self.chunk(id, r0, c0);
            if self.whole(gr, gc) {
                let src = unsafe { self.src.add((gr * self.ld + gc) as usize) } as *const u8;
                cp_async_16(dst + off, src, 16);
            } else if gr >= self.rows || gc >= self.cols {
                cp_async_16(dst + off, self.src as *const u8, 0); // zero fill, reads nothing
            } else {
                st_shared_v4(dst + off, self.load_partial(gr, gc));
            }
            id += threads;
        }
    }
}

/// This thread's `N` chunks of the tile at (r0, c0), into registers (register staging).
#[inline(always)]
fn load_regs<const N: usize>(t: &Tile, r0: u32, c0: u32, threads: usize) -> [[u32; 4]; N] {
    let mut regs = [[0; 4]; N];
    let inside = t.inside(r0, c0);
    for (i, r) in regs.iter_mut().enumerate() {
        let (gr, gc, _) = t.chunk(thread_x() as usize + i * threads, r0, c0);
        *r = if inside {
            ld_global_v4(unsafe { t.src.add((gr * t.ld + gc) as usize) } as *const u8)
        } else {
            t.load_chunk(gr, gc)
        };
    }
    regs
}

#[inline(always)]
fn store_regs<const N: usize>(t: &Tile, dst: u32, threads: usize, regs: &[[u32; 4]; N]) {
    for (i, r) in regs.iter().enumerate() {
        let (_, _, off) = t.chunk(thread_x() as usize + i * threads, 0, 0);
        st_shared_v4(dst + off, *r);
    }
}

/// Shared byte offset at which `lane` points `ldmatrix` for the 16×16 block at (mn0, k0) of a
/// tile stored k-contiguous (`[mn][k]`, row_len = BK) or mn-contiguous (`[k][mn]`).
#[inline(always)]
fn frag_offset(op: Operand, k_contiguous: bool, row_len: usize, mn0: usize, k0: usize) -> u32 {
    let (mn, k) = ldmatrix_lane(lane() as usize, op, k_contiguous);
    let (row, col) = if k_contiguous {
        (mn0 + mn, k0 + k)
    } else {
        (k0 + k, mn0 + mn)
    };
    (swizzled_offset(row, col, row_len) * 2) as u32
}

#[inline(always)]
fn ldsm(addr: u32, k_contiguous: bool) -> [u32; 4] {
    if k_contiguous {
        ldmatrix_x4(addr)
    } else {
        ldmatrix_x4_trans(addr)
    }
}

/// The tensor-core GEMM. `MI`×`NI` instruction tiles per warp (warp tile `16·MI × 8·NI`), `IK`
/// the instruction K, `ASYNC` selects `cp.async` (sm_80+) over register staging, `CA`/`CB` are
/// the 16-byte chunks of the A/B tile each thread copies per K slice.
#[inline(always)]
pub fn gemm<
    A: Acc,
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const MI: usize,
    const NI: usize,
    const IK: usize,
    const STAGES: usize,
    const ASYNC: bool,
    const CA: usize,
    const CB: usize,
    const TA: bool,
    const TB: bool,
>(
    p: Args,
    ws: *mut f32,
    k_slice: u32,
) {
    let (wm, wn) = (16 * MI, 8 * NI);
    let warps_n = BN / wn;
    let threads = (BM / wm) * warps_n * 32;
    let (bm0, bn0) = (block_y() * BM as u32, block_x() * BN as u32);
    let w = warp_id() as usize;
    let (wm0, wn0) = ((w / warps_n) * wm, (w % warps_n) * wn);

    // Operand tiles in their storage orientation: A is [M][K] (or [K][M] if TA); B is [N][K] if
    // TB, else [K][N]. "k-contiguous" tiles are read by plain ldmatrix, the others by .trans.
    let (ka, kb) = (!TA, TB);
    let ta = if ka {
        Tile::new(p.a, p.lda, p.m, p.k, BM, BK)
    } else {
        Tile::new(p.a, p.lda, p.k, p.m, BK, BM)
    };
    let tb = if kb {
        Tile::new(p.b, p.ldb, p.n, p.k, BN, BK)
    } else {
        Tile::new(p.b, p.ldb, p.k, p.n, BK, BN)
    };
    // Tile origin (row, col) in storage orientation for the K slice starting at k0.
    let origin_a = |k0: u32| if ka { (bm0, k0) } else { (k0, bm0) };
    let origin_b = |k0: u32| if kb { (bn0, k0) } else { (k0, bn0) };

    let smem = shared_addr(dynamic_shared::<u8>());
    let stage_bytes = ((BM + BN) * BK * 2) as u32;
    let a_stage = |s: u32| smem + s * stage_bytes;
    let b_stage = |s: u32| smem + s * stage_bytes + (BM * BK * 2) as u32;
    let (rla, rlb) = (if ka { BK } else { BM }, if kb { BK } else { BN });

    let mut acc = [[A::ZERO; NI]; MI];
    // Split-K: block z of the grid covers K from z·k_slice (a multiple of BK) and, when `ws` is
    // given, leaves raw fp32 partial sums there for `splitk_reduce`.
    let k_begin = block_z() * k_slice;
    let ktiles = (p.k.min(k_begin + k_slice) - k_begin).div_ceil(BK as u32) as usize;

    // Shared-memory byte offsets at which this lane points ldmatrix, per fragment and per
    // 16-wide k step of a slice (at most 4: BK ≤ 64): fixed for the whole kernel, so the
    // swizzle arithmetic stays out of the main loop.
    let ksteps = BK / 16;
    let mut a_off = [[0u32; 4]; MI];
    let mut b_off = [[0u32; 4]; NI];
    for ks in 0..ksteps {
        for mi in 0..MI {
            a_off[mi][ks] = frag_offset(Operand::A, ka, rla, wm0 + 16 * mi, 16 * ks);
        }
        for q in 0..NI / 2 {
            b_off[q][ks] = frag_offset(Operand::B, kb, rlb, wn0 + 16 * q, 16 * ks);
        }
    }
    // Fragments of one k step: A per m-fragment, B per pair of n-fragments.
    let load = |s: u32, ks: usize| {
        let mut af = [[0u32; 4]; MI];
        let mut bf = [[0u32; 4]; NI];
        for mi in 0..MI {
            af[mi] = ldsm(a_stage(s) + a_off[mi][ks], ka);
        }
        for q in 0..NI / 2 {
            bf[q] = ldsm(b_stage(s) + b_off[q][ks], kb);
        }
        (af, bf)
    };
    // The instruction tiles of one k step.
    let mma_step = |acc: &mut [[A; NI]; MI], af: &[[u32; 4]; MI], bf: &[[u32; 4]; NI]| {
        for mi in 0..MI {
            let a = &af[mi];
            for ni in 0..NI {
                // ldmatrix.x4 of B gave [b0, b1] of n-fragment 2·q, then of 2·q + 1.
                let b = &bf[ni / 2];
                let (b0, b1) = (b[2 * (ni % 2)], b[2 * (ni % 2) + 1]);
                if IK == 16 {
                    acc[mi][ni].mma_k16(*a, [b0, b1]);
                } else {
                    acc[mi][ni].mma_k8([a[0], a[1]], b0);
                    acc[mi][ni].mma_k8([a[2], a[3]], b1);
                }
            }
        }
    };
    const {
        assert!(
            !ASYNC || BK.is_multiple_of(32),
            "the cp.async pipeline needs an even number of 16-wide k steps per slice"
        )
    };

    // Launched as a dependent on sm_90: everything above is set-up that overlaps the kernel
    // before; its results are read (and C written) only after it has completed.
    wait_for_prior_grids();
    // A warp tile of one or two fragments loads its gate pairs now, so they arrive with the
    // operands instead of after the mainloop: at a short K (the input gradient through the
    // output layer, K = 10) that latency is a large part of the call. Larger warp tiles would
    // hold the registers through the mainloop, and load each row's pairs at the end.
    let early = (MI * NI <= 2).then(|| {
        let inline = stores_inline::<BM, BN>(&p, ws, (bm0, bn0));
        core::array::from_fn(|mi| tile_row_gates::<NI>(&p, inline, (bm0, bn0), (wm0, wn0), mi))
    });
    // One K slice's copy of both operands into stage `s`.
    let copy_async = |s: u32, kt: usize| {
        let k0 = k_begin + (kt * BK) as u32;
        let (r, c) = origin_a(k0);
        ta.copy_async(a_stage(s), r, c, threads);
        let (r, c) = origin_b(k0);
        tb.copy_async(b_stage(s), r, c, threads);
    };
    // One K slice of both operands into registers, and from there into stage `s`.
    let fetch = |kt: usize| {
        let k0 = k_begin + (kt * BK) as u32;
        let (r, c) = origin_a(k0);
        let ra = load_regs::<CA>(&ta, r, c, threads);
        let (r, c) = origin_b(k0);
        (ra, load_regs::<CB>(&tb, r, c, threads))
    };
    let store = |s: u32, (ra, rb): &([[u32; 4]; CA], [[u32; 4]; CB])| {
        store_regs(&ta, a_stage(s), threads, ra);
        store_regs(&tb, b_stage(s), threads, rb);
    };
    if ASYNC {
        mainloop_async::<A, MI, NI, BK, STAGES>(&mut acc, ktiles, copy_async, load, mma_step);
    } else {
        mainloop_staged::<A, MI, NI, BK, _>(&mut acc, ktiles, fetch, store, load, mma_step);
    }

    let steps = !p.sgd.is_none() && ws.is_null();
    if steps && BM * BN >= PREFETCH_AREA {
        prefetch_tile::<BM, BN>(&p, (bm0, bn0), threads);
    }
    // The kernel after this one (the split-K reduction, the next GEMM) is a dependent launch
    // on sm_90: once every block is here, it may be scheduled and wait for this grid on the
    // GPU, not behind a launch. Not earlier: its blocks would take SMs as the first ones free
    // up, unevenly, while they can do nothing but wait.
    launch_dependents();

    if steps {
        step_tile::<A, BM, BN, MI, NI>(p, smem, &acc, (bm0, bn0), (wm0, wn0), threads);
    } else {
        store_tile::<A, BM, BN, MI, NI>(p, ws, &acc, (bm0, bn0), (wm0, wn0), early);
    }
}

/// The mainloop with `cp.async` (sm_80+): `STAGES - 1` slices in flight while one is read.
/// `copy(s, kt)` issues slice `kt`'s copies into stage `s`; `load(s, ks)` loads the fragments
/// of k step `ks` of stage `s`, which `mma_step` multiplies into `acc`.
#[inline(always)]
fn mainloop_async<
    A: Acc,
    const MI: usize,
    const NI: usize,
    const BK: usize,
    const STAGES: usize,
>(
    acc: &mut [[A; NI]; MI],
    ktiles: usize,
    copy: impl Fn(u32, usize),
    load: impl Fn(u32, usize) -> ([[u32; 4]; MI], [[u32; 4]; NI]),
    mma_step: impl Fn(&mut [[A; NI]; MI], &[[u32; 4]; MI], &[[u32; 4]; NI]),
) {
    let ksteps = BK / 16;
    let empty = || ([[0u32; 4]; MI], [[0u32; 4]; NI]);
    // Prologue: STAGES-1 slices in flight. Every thread commits one group per slice, empty or
    // not, so that "wait until STAGES-2 groups remain" always means "the next slice landed".
    for s in 0..STAGES as u32 - 1 {
        if (s as usize) < ktiles {
            copy(s, s as usize);
        }
        cp_async_commit();
    }
    let landed = || {
        match STAGES {
            2 => cp_async_wait::<0>(),
            3 => cp_async_wait::<1>(),
            4 => cp_async_wait::<2>(),
            _ => cp_async_wait::<3>(),
        }
        sync_threads();
    };
    landed();
    // Fragments of k step ks+1 load while step ks's mma run; the last step of a slice waits
    // for the next slice first, so its first fragments load under those mma too.
    let mut frags = [load(0, 0), empty()];
    // Stages cycle: slice kt is read from `read`, slice kt + STAGES - 1 lands in `write`.
    let after = |s: u32| if s + 1 == STAGES as u32 { 0 } else { s + 1 };
    let (mut read, mut write) = (0, STAGES as u32 - 1);
    for kt in 0..ktiles {
        // The stage refilled here was last read in slice kt-1, by threads that have all passed
        // the barrier of `landed` since.
        let next = kt + STAGES - 1;
        if next < ktiles {
            copy(write, next);
        }
        cp_async_commit();
        for ks in 0..ksteps {
            // Constant once unrolled; ksteps is even, so slice kt+1's first fragments land in
            // buffer 0, where its step 0 reads them.
            let cur = ks % 2;
            if ks + 1 < ksteps {
                frags[1 - cur] = load(read, ks + 1);
            } else if kt + 1 < ktiles {
                landed();
                frags[1 - cur] = load(after(read), 0);
            }
            let (af, bf) = &frags[cur];
            mma_step(acc, af, bf);
        }
        (read, write) = (after(read), after(write));
    }
}

/// The mainloop with register staging (sm_75): the next slice is loaded into registers
/// (`fetch(kt)`) while the tensor cores work on the current one, then stored to the other of
/// two stages (`store(s, regs)`).
#[inline(always)]
fn mainloop_staged<A: Acc, const MI: usize, const NI: usize, const BK: usize, R>(
    acc: &mut [[A; NI]; MI],
    ktiles: usize,
    fetch: impl Fn(usize) -> R,
    store: impl Fn(u32, &R),
    load: impl Fn(u32, usize) -> ([[u32; 4]; MI], [[u32; 4]; NI]),
    mma_step: impl Fn(&mut [[A; NI]; MI], &[[u32; 4]; MI], &[[u32; 4]; NI]),
) {
    let ksteps = BK / 16;
    let empty = || ([[0u32; 4]; MI], [[0u32; 4]; NI]);
    let mut regs = fetch(0);
    store(0, &regs);
    sync_threads();
    for kt in 0..ktiles {
        let more = kt + 1 < ktiles;
        if more {
            // Global loads of the next slice are in flight during this slice's mma.
            regs = fetch(kt + 1);
        }
        let mut frags = [load(kt as u32 % 2, 0), empty()];
        for ks in 0..ksteps {
            if ks + 1 < ksteps {
                frags[(ks + 1) % 2] = load(kt as u32 % 2, ks + 1);
            }
            let (af, bf) = &frags[ks % 2];
            mma_step(acc, af, bf);
        }
        if more {
            store((kt as u32 + 1) % 2, &regs);
        }
        sync_threads();
    }
}

/// Whether the block tile at `(bm0, bn0)` stores inline: inside C, with nothing to read from C
/// (beta = 0), no split-K workspace, and aligned pairs.
#[inline(always)]
fn stores_inline<const BM: usize, const BN: usize>(
    p: &Args,
    ws: *mut f32,
    (bm0, bn0): (u32, u32),
) -> bool {
    let aligned = |x: usize| x.is_multiple_of(4);
    ws.is_null()
        && p.beta == 0.0
        && bm0 + BM as u32 <= p.m
        && bn0 + BN as u32 <= p.n
        && p.ldc.is_multiple_of(2)
        && aligned(p.c as usize)
        && aligned(p.bias as usize)
        && aligned(p.gate as usize)
}

/// The gate pairs of fragment row `mi` of the warp tile at `(wm0, wn0)`, rows `i` and `i + 8`
/// of each fragment (zeros where the tile does not store inline: then `store_fragment` reads
/// the gate itself). All are loaded before the row's first store, which the compiler must
/// assume could overwrite them: one memory latency a row of fragments, not one a pair.
#[inline(always)]
fn tile_row_gates<const NI: usize>(
    p: &Args,
    inline: bool,
    (bm0, bn0): (u32, u32),
    (wm0, wn0): (usize, usize),
    mi: usize,
) -> [[u32; 2]; NI] {
    if !inline {
        return [[0; 2]; NI];
    }
    let (r, c) = mma_c(lane() as usize, 0);
    let i = bm0 + (wm0 + 16 * mi + r) as u32;
    core::array::from_fn(|ni| {
        let j = bn0 + (wn0 + 8 * ni + c) as u32;
        [gate_pair(*p, i, j), gate_pair(*p, i + 8, j)]
    })
}

/// The epilogue straight from the accumulators of the warp tile at `(wm0, wn0)` of the block
/// tile at `(bm0, bn0)`; `early`: the gate pairs, where they were loaded before the mainloop.
#[inline(always)]
fn store_tile<A: Acc, const BM: usize, const BN: usize, const MI: usize, const NI: usize>(
    p: Args,
    ws: *mut f32,
    acc: &[[A; NI]; MI],
    (bm0, bn0): (u32, u32),
    (wm0, wn0): (usize, usize),
    early: Option<[[[u32; 2]; NI]; MI]>,
) {
    // Epilogue straight from the accumulators, fully unrolled, so every accumulator is a named
    // register (a run-time index would move them to local memory). A block tile inside C with
    // nothing to read from it (beta = 0) and aligned pairs stores each pair inline as one 4-byte
    // word; the rest goes through the general, out-of-line `store_fragment`.
    let inline = stores_inline::<BM, BN>(&p, ws, (bm0, bn0));
    let (r, c) = mma_c(lane() as usize, 0);
    for (mi, row) in acc.iter().enumerate() {
        let i = bm0 + (wm0 + 16 * mi + r) as u32;
        let j = |ni: usize| bn0 + (wn0 + 8 * ni + c) as u32;
        let gates = match early {
            Some(g) => g[mi],
            None => tile_row_gates::<NI>(&p, inline, (bm0, bn0), (wm0, wn0), mi),
        };
        for (ni, frag) in row.iter().enumerate() {
            let (j, v) = (j(ni), [frag.get(0), frag.get(1), frag.get(2), frag.get(3)]);
            if inline {
                store_pair_inside(p, i, j, gates[ni][0], v[0], v[1]);
                store_pair_inside(p, i + 8, j, gates[ni][1], v[2], v[3]);
            } else if ws.is_null() {
                store_fragment(p, i, j, v);
            } else {
                store_partial(
                    p.m,
                    p.n,
                    unsafe { ws.add((block_z() * p.m * p.n) as usize) },
                    i,
                    j,
                    v,
                );
            }
        }
    }
}

/// The gate's fp16 pair at (i, j..j+2) as one word, or a pair of ones where there is no gate.
#[inline(always)]
fn gate_pair(p: Args, i: u32, j: u32) -> u32 {
    const ONES: u32 = 0x3c00_3c00;
    if p.gate.is_null() {
        ONES
    } else {
        unsafe { *(p.gate.add((i * p.ldc + j) as usize) as *const u32) }
    }
}

/// Two adjacent outputs (i, j..j+2), known to lie inside C, with beta = 0 and their gate pair
/// (from [`gate_pair`]): the epilogue of [`epilogue`](super::simt::epilogue) in the same order
/// (alpha, bias, ReLU, gate), stored as one 4-byte word. It repeats `epilogue` rather than
/// calling it twice to load the bias and gate pairs as one word each and drop the beta branch,
/// which calling it twice does not (1-3% slower: `docs/gemm.md`).
#[inline(always)]
fn store_pair_inside(p: Args, i: u32, j: u32, gate: u32, v0: f32, v1: f32) {
    let (mut a, mut b) = (p.alpha * v0, p.alpha * v1);
    if !p.bias.is_null() {
        let pair = unsafe { *(p.bias.add(j as usize) as *const u32) };
        a += h2f(pair as u16);
        b += h2f((pair >> 16) as u16);
    }
    if p.relu != 0 {
        (a, b) = (a.max(0.0), b.max(0.0));
    }
    if !positive(gate as u16) {
        a = 0.0;
    }
    if !positive((gate >> 16) as u16) {
        b = 0.0;
    }
    let dst = unsafe { p.c.add((i * p.ldc + j) as usize) } as *mut u32;
    unsafe { *dst = f2h(a) as u32 | (f2h(b) as u32) << 16 };
}

/// A fragment's raw fp32 sums into one split's `m × n` slice of the workspace.
#[inline(always)]
fn store_partial(m: u32, n: u32, ws: *mut f32, i: u32, j: u32, v: [f32; 4]) {
    let put = |r: u32, c: u32, x: f32| {
        if r < m && c < n {
            unsafe { *ws.add((r * n + c) as usize) = x };
        }
    };
    put(i, j, v[0]);
    put(i, j + 1, v[1]);
    put(i + 8, j, v[2]);
    put(i + 8, j + 1, v[3]);
}

/// Writes one lane's share of a 16×8 accumulator tile: `v[0..2]` at (i, j..j+2) and `v[2..4]`
/// at (i+8, j..j+2), through the shared epilogue, skipping what lies outside C. (The values are
/// passed by name, never indexed at run time, so they stay in registers.)
#[inline(always)]
fn store_fragment(p: Args, i: u32, j: u32, v: [f32; 4]) {
    let (c, ldc, m, n) = (p.c, p.ldc, p.m, p.n);
    let (bias, alpha, beta, relu, gate) = (p.bias, p.alpha, p.beta, p.relu, p.gate);
    store_pair_out_of_line(
        c, ldc, m, n, bias, alpha, beta, relu, gate, i, j, v[0], v[1],
    );
    store_pair_out_of_line(
        c,
        ldc,
        m,
        n,
        bias,
        alpha,
        beta,
        relu,
        gate,
        i + 8,
        j,
        v[2],
        v[3],
    );
}

/// [`store_pair`] out of line, with scalar arguments only (they travel in registers):
/// inlined, its branches would double the PTX of every kernel.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn store_pair_out_of_line(
    c: *mut u16,
    ldc: u32,
    m: u32,
    n: u32,
    bias: *const u16,
    alpha: f32,
    beta: f32,
    relu: u32,
    gate: *const u16,
    i: u32,
    j: u32,
    v0: f32,
    v1: f32,
) {
    let p = Args::epilogue_only(m, n, c, ldc, bias, alpha, beta, relu, gate);
    store_pair(&p, i, j, v0, v1);
}

/// Exports `gemm_<config>_<layout>_<acc>` for every row of `tile_configs!` this PTX's
/// architecture supports: the `mma.sync` rows (`warpgroup` exports the `wgmma` ones).
macro_rules! export_tensor {
    ($(($name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $im:expr, $in:expr, $ik:expr,
        $st:expr, $cm:expr, $mainloop:ident),)*) => {$(
        export_tensor!(@sm $name, $bm, $bn, $bk, $wm, $wn, $ik, $st, $mainloop);
    )*};
    (@sm $name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $ik:expr, $st:expr, staged) => {
        export_tensor!(@acc $name, $bm, $bn, $bk, $wm, $wn, $ik, $st, false);
    };
    (@sm $name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $ik:expr, $st:expr, cp_async) => {
        #[cfg(target_feature = "sm_80")]
        export_tensor!(@acc $name, $bm, $bn, $bk, $wm, $wn, $ik, $st, true);
    };
    (@sm $name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $ik:expr, $st:expr, wgmma) => {};
    (@acc $($cfg:tt)*) => {
        export_tensor!(@one "_nn_f16", [u32; 2], false, false, $($cfg)*);
        export_tensor!(@one "_nt_f16", [u32; 2], false, true, $($cfg)*);
        export_tensor!(@one "_tn_f16", [u32; 2], true, false, $($cfg)*);
        export_tensor!(@one "_nn_f32", [f32; 4], false, false, $($cfg)*);
        export_tensor!(@one "_nt_f32", [f32; 4], false, true, $($cfg)*);
        export_tensor!(@one "_tn_f32", [f32; 4], true, false, $($cfg)*);
    };
    (@one $suffix:literal, $acc:ty, $ta:literal, $tb:literal,
     $name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $ik:expr, $st:expr, $async:literal) => {
        const _: () = {
            #[unsafe(export_name = concat!("gemm_", stringify!($name), $suffix))]
            unsafe extern "ptx-kernel" fn kernel(p: Args, ws: *mut f32, k_slice: u32) {
                const THREADS: usize = 32 * ($bm / $wm) * ($bn / $wn);
                gemm::<$acc, $bm, $bn, $bk, { $wm / 16 }, { $wn / 8 }, $ik, $st, $async,
                       { $bm * $bk / 8 / THREADS }, { $bn * $bk / 8 / THREADS }, $ta, $tb>(
                    p, ws, k_slice,
                );
            }
        };
    };
}
crate::tile_configs!(export_tensor);
