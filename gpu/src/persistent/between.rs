//! What passes between the layer engine's layers besides the planes: the fp16 copies of W
//! that the owners publish as each step starts, the input gradient of the layer below that
//! reads them, and the labels, which the last layer's softmax finds in its batch buffer.
use super::context::{Block, Step};
use super::stack::{Shared, each, owner};
use super::*;
use crate::arch::*;
use crate::layout::{Operand, ldmatrix_lane};

/// Each later layer's fp16 W into step `k`'s copy, by the blocks of part 0 that own it.
#[inline(always)]
pub fn publish_ws<const L: usize>(bs: &[Block; L], shared: &Shared, k: u32) {
    each!(l in [1, 2, 3] {
        if l < L && owner(&bs[l]) && bs[l].part == 0 {
            publish_w(&bs[l], shared.w(l, k));
        }
    });
}

/// The owner's fp16 W (its n-tile's rows, `[input][unit]` in shared memory) into the step's
/// copy `[input][units]`, which the blocks read after the step's grid barrier: the barrier
/// orders it, so it needs no flags.
#[inline(always)]
fn publish_w(b: &Block, to: *mut u16) {
    let mut i = b.tid;
    while i < b.layer.dim as usize {
        let v = ld_shared_v4(b.w1(0) + (i * UNITS * 2) as u32);
        let at = i * b.layer.hidden as usize + b.j0 as usize;
        st_global_v4(to.wrapping_add(at) as *mut u8, v);
        i += THREADS;
    }
}

/// Each row's label from the first layer's batch buffer into the last's, where the softmax
/// finds it.
#[inline(always)]
pub fn copy_labels((b0, s0): (&Block, &Step), (b, s): (&Block, &Step)) {
    if b0.tid < b0.mine {
        let from = s0.x + (b0.tid * b0.lay.stride + label_offset(b0.layer.dim as usize)) as u32;
        let to = s.x + (b0.tid * b.lay.stride + label_offset(b.layer.dim as usize)) as u32;
        st_shared_u32(to, ld_shared_u32(from));
    }
}

/// `dH[:, s] = dZ·W[:, s]` through the ReLU of `h` (the lower layer's H fragment of its one
/// n-tile) for the tile warp's tile, stored fp16 in the lower block's dH plane, behind a block
/// barrier: `dZ`, the gradient of layer `l`'s output, gathered into its block's batch buffer
/// (free once its dW is done), W's columns of the slice staged from the step's copy.
#[inline(always)]
pub fn input_grad<const N: usize>(
    below: &Block,
    (b, s): (&Block, &Step),
    h: &[[f32; 4]; N],
    shared: &Shared,
    l: usize,
) {
    // Every warp is past dW's reads of the batch buffer, which dZ overwrites.
    sync_threads();
    let width = b.layer.hidden as usize;
    // W's columns first: their copies are in flight while the thread waits for dZ's lines.
    let (pieces, row, cols) = (width / 8, cols_row(width), shared.cols);
    let mut i = below.tid;
    while i < UNITS * pieces {
        let (u, c) = (i / pieces, i % pieces);
        let src = shared
            .w(l, s.k)
            .wrapping_add((below.j0 as usize + u) * width + 8 * c) as *const u8;
        cp_async_16_whole(cols + (u * row + 16 * c) as u32, src);
        i += THREADS;
    }
    cp_async_commit();
    // A width of half a k-step past the last whole one reads zeros there: another layer's
    // columns, of another row length, may have been staged over them.
    if !width.is_multiple_of(16) && below.tid < UNITS {
        st_shared_v4(cols + (below.tid * row + 2 * width) as u32, [0; 4]);
    }
    // Rows of whole k-steps (a width of 24 has 32 columns), and at most the input's.
    let stride = row_stride(width.next_multiple_of(16));
    shared.grad(l).gather(b, (s.x, stride), s.k);
    cp_async_wait::<0>();
    sync_threads();
    if below.has_tile() {
        let (w, g, t) = (below.warp, below.group(), below.in_group());
        let (mm, kk) = ldmatrix_lane(below.lane, Operand::A, true);
        let a0 = s.x + ((16 * w + mm) * stride + 2 * kk) as u32;
        let b0 = cols + (g * row + 4 * t) as u32;
        let mut d = [0.0f32; 4];
        for ks in 0..width.div_ceil(16) {
            let a = ldmatrix_x4(a0 + 32 * ks as u32);
            let at = b0 + 32 * ks as u32;
            d.mma_k16(a, [ld_shared_u32(at), ld_shared_u32(at + 16)]);
        }
        for e in 0..4 {
            d[e] = if h[0][e] > 0.0 { round_h(d[e]) } else { 0.0 };
        }
        let (row0, col) = ((16 * w + g) as u32, 2 * t as u32);
        st_shared_frag_f16(below.dh(0), UNITS as u32, row0, col, d);
    }
    sync_threads();
}
