//! The warpgroup rungs' epilogue (sm_90a): a consumer warpgroup's tile of C, staged in shared
//! memory as the copy engine's 64 × 64 boxes, then stored by the copy engine or, with an SGD
//! step, stepped from there by the warpgroup's threads; or, where the copy engine does not take
//! the epilogue, stored pair by pair from the accumulators.
use super::accumulator::Accumulator;
use super::descriptor::{C_BOX_BYTES, WGMMA_M, accumulator_pair, copy_engine_reaches};
use super::descriptor::{staged_c_element, staged_c_row};
use super::sgd::step_quads;
use super::simt::store_pair;
use super::{Args, SGD_DEEP};
use crate::arch::*;

/// The kernels each `wgmma` rung exports for a row and accumulator: per layout, whether A and B
/// are stored MN-major (NN stores B as `[K][N]`, NT neither, TN both), then TN's SGD step
/// kernel. Expands to `$then!(@one (layout, accumulator suffix, step suffix), $acc, (a_mn, b_mn,
/// step), $row)` for each.
macro_rules! wgmma_layouts {
    ($then:ident, $acc_suffix:literal, $acc:ty, $row:tt) => {
        $then!(@one ("_nn", $acc_suffix, ""), $acc, (false, true, false), $row);
        $then!(@one ("_nt", $acc_suffix, ""), $acc, (false, false, false), $row);
        $then!(@one ("_tn", $acc_suffix, ""), $acc, (true, true, false), $row);
        $then!(@one ("_tn", $acc_suffix, "_step"), $acc, (true, true, true), $row);
    };
}
pub(super) use wgmma_layouts;

/// [`store_staged`] of this epilogue: the plain product's rounding alone where [`plain`]
/// holds, else the whole epilogue.
#[inline(always)]
pub(super) fn store_staged_epilogue<
    A: Accumulator,
    const MI: usize,
    const BN: usize,
    const WG: usize,
>(
    p: &Args,
    acc: &[A; MI],
    at: (u32, (u32, u32), (u32, u32), *const u8),
) {
    if plain(p) {
        store_staged::<A, MI, BN, WG, true>(p, acc, at);
    } else {
        store_staged::<A, MI, BN, WG, false>(p, acc, at);
    }
}

/// The warpgroup's accumulators into C pair by pair, where the copy engine does not take them:
/// rows from `row0`, columns from `n0`, the lane's pairs of each 64-row block.
#[inline(always)]
pub(super) fn store_pairs<A: Accumulator, const MI: usize, const BN: usize>(
    p: &Args,
    acc: &[A; MI],
    (row0, n0): (u32, u32),
    lane: u32,
) {
    for (mi, acc) in acc.iter().enumerate() {
        for j in 0..BN / 4 {
            let (r, c) = accumulator_pair(lane as usize, j);
            let (v0, v1) = acc.pair(j);
            store_pair(p, row0 + (mi * WGMMA_M + r) as u32, n0 + c as u32, v0, v1);
        }
    }
}

/// Whether the epilogue is the plain product (alpha 1, no beta, bias, ReLU or gate): then the
/// accumulators go to C as they are, rounded to fp16, without any arithmetic.
#[inline(always)]
pub(super) fn plain(p: &Args) -> bool {
    let plain = p.alpha == 1.0 && p.beta == 0.0 && p.relu == 0;
    plain && p.bias.is_null() && p.gate.is_null()
}

/// Whether the epilogue goes through the copy engine ([`store_staged`]): where the copy engine
/// can address C, any epilogue but one with a beta or a gate (which read C's own layout) or a
/// bias not aligned to 4-byte words. The other path writes each 32-byte sector of C in halves,
/// a thread's pairs as 4-byte words; that store pattern, not the arithmetic, is most of its
/// cost (`docs/gemm.md`).
#[inline(always)]
pub(super) fn staged(p: &Args) -> bool {
    let bias_words = (p.bias as usize).is_multiple_of(4);
    p.beta == 0.0 && p.gate.is_null() && bias_words && copy_engine_reaches(p.c as u64, p.ldc as u64)
}

/// Accumulator pair `j` through the epilogue as [`output`](super::simt::output) computes it
/// (alpha, then the bias, then the ReLU), rounded to fp16 as one `f16x2` word; `bias`: the
/// pair's two bias values as one word ([`bias_words`]).
#[inline(always)]
fn output_word<A: Accumulator>(p: &Args, acc: &A, j: usize, bias: u32) -> u32 {
    let (v0, v1) = acc.pair(j);
    let (mut a, mut b) = (p.alpha * v0, p.alpha * v1);
    if !p.bias.is_null() {
        let (b0, b1) = unpack_h2(bias);
        a += b0;
        b += b1;
    }
    if p.relu != 0 {
        (a, b) = (a.max(0.0), b.max(0.0));
    }
    pack_h2(a, b)
}

/// The columns of C whose bias a warpgroup thread holds at once in the staged store: 16 words,
/// which the widest fp32 tile (128 accumulators a thread) still fits beside.
const BIAS_PART: usize = 128;

/// The bias of the columns this warpgroup thread's pairs hold in [`BIAS_PART`] columns of C
/// from `c0`, word `w` for pairs `2w` and `2w + 1` of the part (whose first column is even):
/// zero past N, the first half alone where only it lies inside, zeros without a bias. All are
/// loaded before the first is used, so the thread waits on their latency once, not once a
/// column.
#[inline(always)]
fn bias_words(p: &Args, c0: u32, lane: u32) -> [u32; BIAS_PART / 8] {
    core::array::from_fn(|w| {
        let col = c0 + accumulator_pair(lane as usize, 2 * w).1 as u32;
        if p.bias.is_null() || col >= p.n {
            0
        } else if col + 1 < p.n {
            unsafe { *(p.bias.add(col as usize) as *const u32) }
        } else {
            unsafe { *p.bias.add(col as usize) as u32 }
        }
    })
}

/// Named barrier `EPILOGUE_BARRIER + wg`: consumer warpgroup `wg`'s own, which its threads
/// meet at before the staged tile's tensor stores.
pub(super) const EPILOGUE_BARRIER: u32 = 2;

/// Stores the warpgroup's accumulators through the copy engine: [`stage`] into `area`, then
/// one tensor store a box, which writes only what lies inside C. The issuing thread (lane 0)
/// commits the stores as one bulk group; the caller waits until the copy engine has read them
/// before the area is written again or the block ends.
#[inline(always)]
fn store_staged<
    A: Accumulator,
    const MI: usize,
    const BN: usize,
    const WG: usize,
    const PLAIN: bool,
>(
    p: &Args,
    acc: &[A; MI],
    (area, (row0, n0), (wg, lane), map_c): (u32, (u32, u32), (u32, u32), *const u8),
) {
    stage::<A, MI, BN, WG, PLAIN>(p, acc, (area, n0, (wg, lane)));
    if lane == 0 {
        for mi in 0..MI {
            for b in 0..BN / 64 {
                let staged = area + ((mi * BN / 64 + b) as u32) * C_BOX_BYTES;
                let at = (n0 + 64 * b as u32, row0 + (mi * WGMMA_M) as u32);
                tma_store_2d(map_c, at, staged);
            }
        }
        bulk_commit();
    }
}

/// Writes the warpgroup's accumulators into the staging `area`, rounded to fp16 as they are
/// (`PLAIN`) or through [`output_word`], [`BIAS_PART`] columns at a time, as 64 × 64 boxes as
/// C's tensor map says; its threads then meet at their barrier, the area whole. The caller
/// makes the area free, but for the `WG` > 1 consumers of a warpgroup block, whose areas lie
/// in the ring: nothing writes it after the last K step once every consumer's last batch has
/// completed, which they meet at barrier 1 for.
#[inline(always)]
fn stage<A: Accumulator, const MI: usize, const BN: usize, const WG: usize, const PLAIN: bool>(
    p: &Args,
    acc: &[A; MI],
    (area, n0, (wg, lane)): (u32, u32, (u32, u32)),
) {
    if WG > 1 {
        bar_sync_n(1, 128 * WG as u32);
    }
    // The area was last written or read by the copy engine.
    fence_proxy_async_shared();
    for part in 0..BN.div_ceil(BIAS_PART) {
        let bias = if PLAIN {
            [0; BIAS_PART / 8]
        } else {
            bias_words(p, n0 + (part * BIAS_PART) as u32, lane)
        };
        for (mi, acc) in acc.iter().enumerate() {
            for t in part * BIAS_PART / 16..((part + 1) * BIAS_PART).min(BN) / 16 {
                let r = core::array::from_fn(|q| {
                    let j = 4 * t + q;
                    if PLAIN {
                        acc.packed(j)
                    } else {
                        output_word(p, acc, j, bias[j / 2 - part * BIAS_PART / 8])
                    }
                });
                stmatrix_x4(area + staged_c_row(lane as usize, mi, t, BN), r);
            }
        }
    }
    fence_proxy_async_shared();
    bar_sync_n(EPILOGUE_BARRIER + wg, 128);
}

/// The SGD epilogue ([`Args::sgd`]): the warpgroup's gradient tile, `alpha·AB` rounded to fp16
/// (a step takes no beta, bias, ReLU or gate), [`stage`]d in `area`, then stepped by the warpgroup's
/// threads from there ([`step_quads`]), [`SGD_DEEP`] quads of master weights and velocity in
/// flight a thread: the accumulators are dead by then, and their registers hold the loads. The
/// caller makes the area free, as for [`store_staged`].
#[inline(always)]
pub(super) fn step_staged<A: Accumulator, const MI: usize, const BN: usize, const WG: usize>(
    p: &Args,
    acc: &[A; MI],
    (area, (row0, n0), (wg, lane)): (u32, (u32, u32), (u32, u32)),
) {
    if plain(p) {
        stage::<A, MI, BN, WG, true>(p, acc, (area, n0, (wg, lane)));
    } else {
        stage::<A, MI, BN, WG, false>(p, acc, (area, n0, (wg, lane)));
    }
    let staged = |r: usize, c: usize| area + staged_c_element(r, c, BN);
    let tile = (WGMMA_M * MI, (row0, n0));
    step_quads::<BN, SGD_DEEP>(p, staged, tile, (lane as usize, 128));
}
