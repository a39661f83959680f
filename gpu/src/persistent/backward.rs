//! Backward: the block's shares (its rows of the batch) of the gradients. dH through the ReLU
//! on the tile warps, db1 on the bias warp, dW2 and db2 on the output warp, dW1 on every warp;
//! the shares of the small ones go to the slice's other blocks as they are done ([`Outbox`]),
//! dW1's after the phase.
use super::context::Block;
use super::context::Step;
use super::exchange::Outbox;
use super::owners::{BIAS_WARP, OUTPUT_WARP, bias_unit, db1_at};
use super::stream::{Ring, chunks};
use super::*;
use crate::arch::*;
use crate::layout::{Operand, ldmatrix_lane};

/// `f16x2` (1, 1): the B fragment that turns a product into row sums of A (db2).
pub const ONES: [u32; 2] = [0x3c00_3c00; 2];
/// The A fragment of ones, which turns a product into column sums of B (db1).
const ONES_A: [u32; 4] = [0x3c00_3c00; 4];
/// dH = dlogits·W2[:, s] for the tile warp's tile (one k16 step over the classes per n-tile),
/// through the ReLU (the H fragments `hf` have the same layout), stored fp16, behind a block
/// barrier.
#[inline(always)]
pub fn hidden_grad<const N: usize>(b: &Block, hf: &[[f32; 4]; N]) {
    let (w, l, g, t) = (b.warp, b.lane, b.group(), b.in_group());
    if b.has_tile() {
        let (mm, kk) = ldmatrix_lane(l, Operand::A, true);
        let a = ldmatrix_x4(b.dl() + ((16 * w + mm) * MAX_CLASSES * 2 + 2 * kk) as u32);
        let row = (16 * w + g) as u32;
        for n in 0..N {
            let b0 = b.w2_uc() + (((UNITS * n + g) * MAX_CLASSES + 2 * t) * 2) as u32;
            let mut d = [0.0f32; 4];
            d.mma_k16(a, [ld_shared_u32(b0), ld_shared_u32(b0 + 16)]);
            for e in 0..4 {
                d[e] = if hf[n][e] > 0.0 { round_h(d[e]) } else { 0.0 };
            }
            st_shared_frag_f16(b.dh(n), UNITS as u32, row, 2 * t as u32, d);
        }
    }
    sync_threads();
}

/// The block's share of db1, dH's column sums over its rows: a product with ones on the
/// [`BIAS_WARP`] (one k16 step per 16 rows, fp32 accumulators; the whole warp, as `ldmatrix`
/// and `mma` need), from dH in shared memory after [`hidden_grad`]'s barrier. Each thread with
/// a [`bias_unit`] gets that entry and sends it; the others 0.
#[inline(always)]
pub fn bias_share<const T: usize, const N: usize>(b: &Block, out: &Outbox) -> f32 {
    if b.warp != BIAS_WARP {
        return 0.0;
    }
    let g = b.group();
    let mut db1 = 0.0;
    for n in 0..N {
        let d = column_sums::<T>(b, b.dh(n));
        // By select, not by index: a computed index would put `d` in local memory.
        if n == g / 2 {
            db1 = if g.is_multiple_of(2) { d[0] } else { d[1] };
        }
    }
    match bias_unit(b) {
        Some(unit) => {
            out.small(b, db1_at(b.lay.n) + unit, db1);
            db1
        }
        None => 0.0,
    }
}

/// The column sums over the block's rows of an fp16 `[rows][UNITS]` plane in shared memory (a
/// product with ones: every row of the fragment holds them), `T` 16-row tiles at most.
#[inline(always)]
pub fn column_sums<const T: usize>(b: &Block, plane: u32) -> [f32; 4] {
    let bf = unit_frags::<T>(b, plane);
    let mut d = [0.0f32; 4];
    for ks in 0..T {
        if ks < b.rows() / 16 {
            d.mma_k16(ONES_A, bf[ks]);
        }
    }
    d
}

/// B fragments of `k`-steps 0..rows/16 (`T` at most) of an fp16 `[rows][UNITS]` plane in
/// shared memory (k = row, n = unit): one `ldmatrix.x4.trans` covers two steps, lane l naming
/// row l (the plane has rows up to a multiple of 32, zeros past the block's).
#[inline(always)]
pub fn unit_frags<const T: usize>(b: &Block, plane: u32) -> [[u32; 2]; T] {
    let mut bf = [[0u32; 2]; T];
    for pair in 0..T.div_ceil(2) {
        if 32 * pair < b.rows() {
            let r = ldmatrix_x4_trans(plane + ((32 * pair + b.lane) * UNITS * 2) as u32);
            bf[2 * pair] = [r[0], r[1]];
            if 2 * pair + 1 < T {
                bf[2 * pair + 1] = [r[2], r[3]];
            }
        }
    }
    bf
}

/// The output warp's dW2 = dlogitsᵀ·H (a fragment per n-tile) and db2 (its column sums) over
/// the block's rows, sent to the slice's other blocks and kept in [`Block::own`] for the update.
#[inline(always)]
pub fn output_grads<const T: usize, const N: usize>(b: &Block, out: &Outbox) {
    if b.warp != OUTPUT_WARP {
        return;
    }
    let l = b.lane;
    let (mut dw, mut db) = ([[0.0f32; 4]; N], [0.0f32; 4]);
    let hb: [[[u32; 2]; T]; N] = core::array::from_fn(|n| unit_frags::<T>(b, b.h(n)));
    let (mm, kk) = ldmatrix_lane(l, Operand::A, false);
    for ks in 0..T {
        if ks < b.rows() / 16 {
            let a = ldmatrix_x4_trans(b.dl() + (((16 * ks + kk) * MAX_CLASSES + mm) * 2) as u32);
            for n in 0..N {
                dw[n].mma_k16(a, hb[n][ks]);
            }
            db.mma_k16(a, ONES);
        }
    }
    let db_at = 128 * N;
    for n in 0..N {
        out.small4(b, 128 * n + 4 * l, dw[n]);
    }
    out.small4(b, db_at + 4 * l, db);
    unsafe {
        for n in 0..N {
            *(b.own().add(128 * n + 4 * l) as *mut [f32; 4]) = dw[n];
        }
        *(b.own().add(db_at + 4 * l) as *mut [f32; 4]) = db;
    }
}

/// The warp's shares of dW1 of the n-tiles the partner updates, given to `send` as soon as they
/// are done, and of those this block updates, returned (with a slice of one n-tile, which both
/// blocks update, the same). Two n-tiles take one pass over the batch, each X fragment feeding
/// both; four take two, the partner's first, since registers hold the accumulators of two
/// n-tiles at a time beside the W1 state.
#[inline(always)]
pub fn dw1_shares<
    A: Acc,
    F: Row,
    const T: usize,
    const N: usize,
    const O: usize,
    const K: usize,
>(
    b: &Block,
    s: &Step,
    ring: &mut Ring,
    send: impl Fn(&[[A; O]; K]),
) -> [[A; O]; K] {
    if N == 2 {
        // Plane `part` is this block's, the other the partner's: chosen by select, not by
        // index, so the accumulators stay in registers.
        let both = input_grads::<A, F, T, 2, K>(b, s, ring, 0);
        let plane = |i: usize, own: bool| {
            if (b.part == 0) == own {
                both[i][0]
            } else {
                both[i][1]
            }
        };
        send(&core::array::from_fn(|i| {
            core::array::from_fn(|_| plane(i, false))
        }));
        core::array::from_fn(|i| core::array::from_fn(|_| plane(i, true)))
    } else {
        let theirs = input_grads::<A, F, T, O, K>(b, s, ring, b.peer0);
        send(&theirs);
        if N == 1 {
            theirs
        } else {
            input_grads::<A, F, T, O, K>(b, s, ring, b.own0)
        }
    }
}

/// The warp's shares of the dW1ᵀ tiles `w, w + WARPS, …` of the `O` n-tiles from `plane0`:
/// `Xᵀ·dH` over the block's rows, from the batch in shared memory or (variants fed by a
/// ring) from the ring. Warps with one tile fewer (with MNIST's 49 tiles, warps 1-7 have six) run a copy of
/// the loop without the last, rather than computing a tile to discard.
#[inline(always)]
fn input_grads<A: Acc, F: Row, const T: usize, const O: usize, const K: usize>(
    b: &Block,
    s: &Step,
    ring: &mut Ring,
    plane0: usize,
) -> [[A; O]; K] {
    let bf: [[[u32; 2]; T]; O] = core::array::from_fn(|g| unit_frags::<T>(b, b.dh(plane0 + g)));
    if F::V.ring() {
        dw1_chunks::<A, T, O, K>(b, ring, &bf)
    } else if F::V.layers > 1 && b.ktiles <= 4 * WARPS {
        // A later layer of the layer engine, whose input (a hidden layer) is a few tiles a
        // warp.
        match b.ktiles.div_ceil(WARPS) {
            1 => dw1_tiles::<A, 1, T, O, K>(b, s, &bf),
            2 => dw1_tiles::<A, 2, T, O, K>(b, s, &bf),
            _ => dw1_tiles::<A, 4, T, O, K>(b, s, &bf),
        }
    } else if b.warp + WARPS * (TILES_PER_WARP - 1) < b.ktiles {
        dw1_tiles::<A, TILES_PER_WARP, T, O, K>(b, s, &bf)
    } else {
        dw1_tiles::<A, { TILES_PER_WARP - 1 }, T, O, K>(b, s, &bf)
    }
}

/// [`input_grads`] over `NT` tiles (the rest of the array stays zero). Within the `NT` a warp
/// past the last tile repeats it, branch-free: a branch per tile serialises each load and its
/// `mma`.
#[inline(always)]
fn dw1_tiles<A: Acc, const NT: usize, const T: usize, const O: usize, const K: usize>(
    b: &Block,
    s: &Step,
    bf: &[[[u32; 2]; T]; O],
) -> [[A; O]; K] {
    let (mm, kk) = ldmatrix_lane(b.lane, Operand::A, false);
    let a_at =
        |ks: usize, mt: usize| s.x + ((16 * ks + kk) * b.lay.stride + (16 * mt + mm) * 2) as u32;
    let mut acc = [[A::ZERO; O]; K];
    for ks in 0..T {
        if ks < b.rows() / 16 {
            for i in 0..NT.min(K) {
                let mt = (b.warp + WARPS * i).min(b.ktiles - 1);
                let a = ldmatrix_x4_trans(a_at(ks, mt));
                for g in 0..O {
                    acc[i][g].mma_k16(a, bf[g][ks]);
                }
            }
        }
    }
    acc
}

/// [`dw1_tiles`] over the streamed batch: chunk `c` holds tile `w + WARPS·c` of each warp `w`,
/// whose product is complete within the chunk. Every thread calls it (the ring's barriers).
#[inline(always)]
fn dw1_chunks<A: Acc, const T: usize, const O: usize, const K: usize>(
    b: &Block,
    ring: &mut Ring,
    bf: &[[[u32; 2]; T]; O],
) -> [[A; O]; K] {
    let (mm, kk) = ldmatrix_lane(b.lane, Operand::A, false);
    let a_off = (kk * CHUNK_STRIDE + (16 * b.warp + mm) * 2) as u32;
    let mut acc = [[A::ZERO; O]; K];
    for c in 0..MAX_CHUNKS.min(K) {
        if c < chunks(b) {
            let x = ring.next(b) + a_off;
            if b.warp + WARPS * c < b.ktiles {
                for ks in 0..T {
                    if ks < b.rows() / 16 {
                        let a = ldmatrix_x4_trans(x + (16 * ks * CHUNK_STRIDE) as u32);
                        for g in 0..O {
                            acc[c][g].mma_k16(a, bf[g][ks]);
                        }
                    }
                }
            }
        }
    }
    acc
}
