//! The logits `H·W2ᵀ`, a sum over the slices. Each tile warp adds its partial product into the
//! step's slot of one global buffer in 64-bit fixed point, whose adds are associative: the
//! sums do not depend on the order of arrival, so runs repeat bit for bit and every block sees
//! the same logits once all have met at the grid barrier.
use super::context::{Block, Step};
use super::*;
use crate::arch::*;
use crate::layout::mma_c;

/// Fixed point of the logit sums: 32 fractional bits. Partial values beyond ±2^20 count as
/// divergence, which keeps any sum of up to 2^11 slices inside an i64.
pub const FIX: f32 = 4294967296.0;
const FIX_LIMIT: f32 = 1048576.0;

/// The tile warp's partial logits: the H fragment of each n-tile `hf[n]` is the A fragment of
/// an m16n8k8 product over its 8 units, accumulated over the slice's n-tiles.
#[inline(always)]
pub fn add_partials<const N: usize>(b: &Block, s: &Step, hf: &[[f32; 4]; N]) {
    if !b.has_tile() {
        return;
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

/// The exchange of the partial logits: every block meets the grid at the barrier, after which
/// the step's sums are complete. In the whole-batch kernel off Hopper only the tile warps meet
/// it (the loader warps, once their copies are issued, skip to the block barrier after the
/// softmax); elsewhere the whole block does, so the kernel needs no named barrier. While the
/// barrier waits, block 0 clears the slot of the next step's sums, which every block finished
/// reading before this step began.
#[inline(always)]
pub fn exchange(b: &Block, s: &Step) {
    if b.skips_barrier() {
        return;
    }
    if b.blk == 0 && b.warp < TILE_WARPS {
        let logits = b.args.logits as *mut i64;
        let next = unsafe { logits.add(((s.k as usize + 1) % LOGIT_SLOTS) * b.slot) };
        let mut i = b.tid;
        while i < b.slot {
            unsafe { *next.add(i) = 0 };
            i += THREADS / 2;
        }
    }
    let sync = if b.whole_block_meets() {
        sync_threads
    } else {
        bar_sync::<2, 128>
    };
    let counter = b.args.counters as *mut u32;
    grid_barrier(counter, b.blocks * (s.k + 1), sync);
}
