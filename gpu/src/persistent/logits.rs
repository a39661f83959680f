//! The logits `H·W2ᵀ`, a sum over the slices. Each tile warp adds its partial product into the
//! step's slot of one global buffer in 64-bit fixed point, whose adds are associative: the
//! sums do not depend on the order of arrival, so runs repeat bit for bit and every block sees
//! the same logits once all have met at the grid barrier. The adds are a `red` per value, or in
//! the kernels of many slices bulk reductions of the copy engine, a few per tile.
use super::context::{Block, Step};
use super::*;
use crate::arch::*;
use crate::layout::mma_c;

/// Fixed point of the logit sums: 32 fractional bits. Partial values beyond ±2^20 count as
/// divergence, which keeps any sum of up to 2^11 slices inside an i64.
pub const FIX: f32 = 4294967296.0;
const FIX_LIMIT: f32 = 1048576.0;

/// The tile warp's partial logits: the H fragment of each n-tile `hf[n]` is the A fragment of
/// an m16n8k8 product over its 8 units, accumulated over the slice's n-tiles. `A` and `T` are
/// the kernel's accumulator and tiles a block. `bulk` adds them by one bulk reduction of the
/// copy engine (`cp.reduce.async.bulk`) per piece rather than a `red` per value: the kernels
/// for many slices (Hopper), whose `red`s into the same sums contend in L2, take it: the wide
/// kernels (64 slices at 1,024 and 2,048 hidden units) and the two-buffer kernel for 24 slices
/// of 8 units or more. With fewer slices (MNIST's default: 16) the reduction's round trip costs
/// more than it saves (`docs/persistent.md`).
#[inline(always)]
pub fn add_partials<A: Acc, const T: usize, const N: usize>(
    b: &Block,
    s: &Step,
    hf: &[[f32; 4]; N],
    bulk: bool,
) {
    if !b.has_tile() {
        return;
    }
    if bulk {
        return stage_and_reduce::<A, T, N>(b, s, hf);
    }
    let (w, l, g, t, cn) = (b.warp, b.lane, b.group(), b.in_group(), b.classes);
    let a = hf.map(|h| [pack_h2(h[0], h[1]), pack_h2(h[2], h[3])]);
    let units = b.units();
    // The sums of the thread's rows (g and g + 8 of the tile), and the count of values that
    // were not finite or too large for the fixed point.
    let row_sums = [0, 8].map(|h| {
        s.sums
            .wrapping_add((b.r0 + 16 * w + g + h) * logits_row(cn))
    });
    let poison = s.sums.wrapping_add(b.slot - 2);
    for nt in 0..MAX_CLASSES / 8 {
        if 8 * nt < cn {
            // `products` and `fixed`, written out: the code ptxas makes of the kernels that
            // add by `red` moves with this function's shape, and calling them here makes those
            // kernels slower at 128 units.
            let mut d = [0.0f32; 4];
            for n in 0..N {
                let unit = UNITS * n + 2 * t;
                let bf = ld_shared_u32(b.w2_cu() + (((8 * nt + g) * units + unit) * 2) as u32);
                mma_m16n8k8_f32(&mut d, a[n], bf);
            }
            for e in 0..4 {
                let (r, c) = mma_c(l, e);
                let (row, class) = ((16 * w + r) as u32, (8 * nt + c) as u32);
                if row < b.mine as u32 && class < cn as u32 {
                    let v = d[e];
                    let (at, add) = if v.abs() < FIX_LIMIT {
                        // In range: the conversion needs no saturation.
                        let fixed = unsafe { (v * FIX).to_int_unchecked::<i64>() };
                        (row_sums[e / 2].wrapping_add(class as usize), fixed)
                    } else {
                        (poison, 1)
                    };
                    red_global_add_i64(at, add);
                }
            }
        }
    }
}

/// The partial logits of classes `8·nt..8·nt + 8` for the tile's rows, an accumulator
/// fragment, from the H fragments `a` of the slice's n-tiles.
#[inline(always)]
fn products<const N: usize>(b: &Block, a: &[[u32; 2]; N], nt: usize) -> [f32; 4] {
    let (g, t, units) = (b.group(), b.in_group(), b.units());
    let mut d = [0.0f32; 4];
    for n in 0..N {
        let unit = UNITS * n + 2 * t;
        let bf = ld_shared_u32(b.w2_cu() + (((8 * nt + g) * units + unit) * 2) as u32);
        mma_m16n8k8_f32(&mut d, a[n], bf);
    }
    d
}

/// [`add_partials`] by a bulk reduction: the tile warp stages its fixed-point values as its
/// rows of the slot lay them out, in the parts of the forward's partial sums that only it
/// reads, which it has summed: tile `w`'s of each forward warp, which lie together (a piece).
/// Lane 0 then adds them into the sums, a reduction a piece, waits until their writes are
/// complete and orders them before its later fences: the block's barrier and then the grid
/// barrier's arrival follow.
#[inline(always)]
fn stage_and_reduce<A: Acc, const T: usize, const N: usize>(
    b: &Block,
    s: &Step,
    hf: &[[f32; 4]; N],
) {
    let (w, g, t, cn) = (b.warp, b.group(), b.in_group(), b.classes);
    let a = hf.map(|h| [pack_h2(h[0], h[1]), pack_h2(h[2], h[3])]);
    let row_len = logits_row(cn);
    let piece = N * 32 * size_of::<A>();
    const {
        let piece = N * 32 * size_of::<A>();
        assert!(16 * MAX_CLASSES * 8 <= WARPS * piece && piece.is_multiple_of(16));
    };
    let at = |byte: usize| {
        let (i, within) = (byte / piece, byte % piece);
        b.at(b.lay.partials + ((i * T + w) * N * 32) * size_of::<A>() + within)
    };
    // Every lane has read its partial sums before the staging overwrites them.
    sync_warp();
    for nt in 0..MAX_CLASSES / 8 {
        if 8 * nt < cn {
            let d = products(b, &a, nt);
            // Rows g and g + 8 of the tile, classes c and c + 1: 16 bytes, in one piece.
            let c = 8 * nt + 2 * t;
            for h in 0..2 {
                let r = g + 8 * h;
                if 16 * w + r < b.mine && c < row_len {
                    let [x, y] = [0, 1].map(|i| fixed(b, s, d[2 * h + i], c + i));
                    let words = |v: i64| [v as u32, (v >> 32) as u32];
                    let ([x0, x1], [y0, y1]) = (words(x), words(y));
                    st_shared_v4(at((r * row_len + c) * 8), [x0, x1, y0, y1]);
                }
            }
        }
    }
    // The copy engine reads what the lanes wrote.
    fence_proxy_async_shared();
    sync_warp();
    if b.lane == 0 {
        let bytes = (b.mine - 16 * w).min(16) * row_len * 8;
        let sums = s.sums.wrapping_add((b.r0 + 16 * w) * row_len);
        for first in (0..bytes).step_by(piece) {
            let n = piece.min(bytes - first);
            bulk_reduce_add_u64(sums.wrapping_add(first / 8), at(first), n as u32);
        }
        bulk_commit();
        bulk_wait::<0>();
        fence_proxy_async_global();
    }
}

/// The fixed-point value of `v`, of class `class` of a row of the block. A value that is not
/// finite or too large for the fixed point counts at the slot's poison count instead (classes
/// past the last are zeros: W2 is padded so).
#[inline(always)]
fn fixed(b: &Block, s: &Step, v: f32, class: usize) -> i64 {
    if v.abs() < FIX_LIMIT {
        // In range: the conversion needs no saturation.
        unsafe { (v * FIX).to_int_unchecked::<i64>() }
    } else {
        if class < b.classes {
            red_global_add_i64(s.sums.wrapping_add(b.slot - 2), 1);
        }
        0
    }
}

/// The exchange of the partial logits: every block meets the grid at the barrier, after which
/// the step's sums are complete (the whole block meets it, so the kernel needs no named
/// barrier). While the barrier waits, block 0 clears the slot of the next step's sums, which
/// every block finished reading before this step began.
#[inline(always)]
pub fn exchange(b: &Block, s: &Step) {
    if b.blk == 0 && b.warp < TILE_WARPS {
        let logits = b.args.logits as *mut i64;
        let next = unsafe { logits.add(((s.k as usize + 1) % LOGIT_SLOTS) * b.slot) };
        let mut i = b.tid;
        while i < b.slot {
            unsafe { *next.add(i) = 0 };
            i += THREADS / 2;
        }
    }
    let counter = b.args.counters as *mut u32;
    grid_barrier(counter, b.blocks * (s.k + 1), sync_threads);
}
