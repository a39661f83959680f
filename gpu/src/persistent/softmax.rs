//! Softmax cross-entropy of the block's rows, from the logit sums the grid barrier completed:
//! each row's loss and whether its arg-max is the label, and the gradient of the logits,
//! scaled by 1/batch, into shared memory in fp16 for the backward.
use super::context::{Block, Step};
use super::exchange;
use super::logits::FIX;
use super::*;
use crate::arch::*;

/// Classes per thread of a row: a row's threads are adjacent lanes, `MAX_CLASSES / PER` of
/// them, and the block's threads cover 64 rows. Threads past the block's rows run it on rows
/// that store nothing (skipping them by thread index made the Hopper kernel 2-4% slower).
const PER_OF_BLOCK: usize = MAX_CLASSES * ROWS / THREADS;
/// The rows a block holds at most, with the batch in parts.
const ROWS: usize = MAX_TILES * 16;
/// Classes per thread of a row in the offchip kernel (Hopper), whose blocks hold the whole
/// batch: two threads a row.
#[cfg(all(target_feature = "sm_90", target_feature = "ptx81"))]
const PER_OF_WHOLE_BATCH: usize = MAX_CLASSES * MAX_BATCH / THREADS;

/// The softmax of the block's rows, behind a block barrier; returns the thread's part of the
/// loss and the correct count ([`loss_sums`]), for variant `F`.
#[inline(always)]
pub fn cross_entropy<F: Row>(b: &Block, s: &Step) -> (f32, f32) {
    let part = row::<PER_OF_BLOCK>(b, s, F::V.ring());
    sync_threads();
    part
}

/// [`cross_entropy`] of the whole batch (the offchip kernel, which streams it: the labels come
/// from the shuffled set).
#[cfg(all(target_feature = "sm_90", target_feature = "ptx81"))]
#[inline(always)]
pub fn cross_entropy_whole_batch(b: &Block, s: &Step) -> (f32, f32) {
    let part = row::<PER_OF_WHOLE_BATCH>(b, s, true);
    sync_threads();
    part
}

/// Slice 0, which records the loss: each warp's sums of the threads' `part`s in shared memory,
/// for [`record_loss`] after the next block barrier (where row `F`'s parts add theirs in part
/// order, [`exchange::loss_in_parts`], in the block's exchange area, for part 0's after the
/// slice's barrier). The kernels that exchange gradient shares call it where the block waits
/// for the other blocks' anyway, off the way from the softmax to the backward; the offchip
/// kernel, which waits for none, right after the softmax.
#[inline(always)]
pub fn loss_sums<F: Row>(b: &Block, (l_sum, c_sum): (f32, f32)) {
    if b.slice != 0 {
        return;
    }
    let (l_w, c_w) = (warp_sum(l_sum), warp_sum(c_sum));
    if b.lane == 0 && const { exchange::loss_in_parts(&F::V) } {
        exchange::put_loss(b, (l_w, c_w));
    } else if b.lane == 0 {
        unsafe {
            *b.small().loss.add(b.warp) = l_w;
            *b.small().correct.add(b.warp) = c_w;
        }
    }
}

/// The thread's part of its row: stores its classes' gradients and returns (on the row's first
/// thread) the row's loss and whether its arg-max is the label. Every thread that takes part
/// runs it (the shuffles need whole warps); threads past the block's rows compute on the
/// batch's row 0 and store zeros. (Not on this block's row 0: a block with no rows has it
/// past the batch.)
#[inline(always)]
fn row<const PER: usize>(b: &Block, s: &Step, ring: bool) -> (f32, f32) {
    let split = MAX_CLASSES / PER;
    let (cn, sums) = (b.classes, s.sums);
    let (r, side) = (b.tid / split, b.tid % split);
    let valid = r < b.mine;
    let row = unsafe { sums.add(if valid { b.r0 + r } else { 0 } * logits_row(cn)) };
    let c0 = PER * side;
    let mut q = [0i64; PER];
    // In pairs, 16 bytes a load, which issue in a fraction of the time of one load per sum.
    // Pairs past the last class are not loaded.
    for i in 0..PER / 2 {
        let c = 2 * i;
        if c0 + c < cn {
            [q[c], q[c + 1]] = ld_global_cg_v2_i64(unsafe { row.add(c0 + c) });
        }
    }
    let poisoned = ld_global_cg_i64(unsafe { sums.add(b.slot - 2) }) != 0;
    let label = if valid { label(b, s, r, ring) } else { 0 };
    let (mut l_sum, mut c_sum) = (0.0f32, 0.0f32);
    let mut z = [f32::NEG_INFINITY; PER];
    for c in 0..PER {
        if c0 + c < cn {
            let v = q[c] as f32 / FIX + unsafe { *b.small().b2_half.add(c0 + c) };
            z[c] = if poisoned { f32::NAN } else { v };
        }
    }
    // Arg-max: the first maximum, as a sequential scan would find it.
    let (mut max, mut arg) = (z[0], c0);
    for c in 1..PER {
        if z[c] > max {
            (max, arg) = (z[c], c0 + c);
        }
    }
    let mut m = 1;
    while m < split {
        let o_max = shfl_xor_f32(max, m as u32);
        let o_arg = shfl_xor_u32(arg as u32, m as u32) as usize;
        if o_max > max || (o_max == max && o_arg < arg) {
            (max, arg) = (o_max, o_arg);
        }
        m *= 2;
    }
    let mut e = [0.0f32; PER];
    let (mut sum, mut zl) = (0.0, 0.0);
    for c in 0..PER {
        if c0 + c < cn {
            e[c] = ex2_approx_ftz((z[c] - max) * LOG2_E);
            sum += e[c];
        }
        if c0 + c == label {
            zl = z[c];
        }
    }
    // The row's threads all get the same totals: IEEE addition is commutative.
    let mut m = 1;
    while m < split {
        sum += shfl_xor_f32(sum, m as u32);
        zl += shfl_xor_f32(zl, m as u32);
        m *= 2;
    }
    if valid && side == 0 {
        l_sum = lg2_approx_ftz(sum) * LN_2 - (zl - max);
        c_sum = (arg == label) as u32 as f32;
    }
    // The correctly rounded division is a sequence with a slow path, on the step's critical
    // path; the approximation is within an ulp or two, far below the gradient's fp16 rounding.
    let (inv, scale) = (rcp_approx_ftz(sum), 1.0 / b.args.batch as f32);
    let grad = |c: usize| {
        if valid && c0 + c < cn {
            (e[c] * inv - (c0 + c == label) as u32 as f32) * scale
        } else {
            0.0
        }
    };
    if r < b.rows() {
        for c2 in 0..PER / 2 {
            let c = 2 * c2;
            st_shared_u32(
                b.dl() + ((r * MAX_CLASSES + c0 + c) * 2) as u32,
                pack_h2(grad(c), grad(c + 1)),
            );
        }
    }
    (l_sum, c_sum)
}

/// The label of the block's row `r`, from the row's last 16 bytes: in the batch buffer, or
/// (`ring`: the ring holds no row whole) in the shuffled set, read-only for the launch.
#[inline(always)]
fn label(b: &Block, s: &Step, r: usize, ring: bool) -> usize {
    let at = label_offset(b.layer.dim as usize);
    if ring {
        let row = (s.index * b.args.batch) as usize + b.r0 + r;
        let batches = b.args.batches as *const u8;
        unsafe { *(batches.add(row * b.lay.stride + at) as *const u32) as usize }
    } else {
        ld_shared_u32(s.x + (r * b.lay.stride + at) as u32) as usize
    }
}

/// The thread that records the loss: warp 1's first, which has one dW1 tile fewer than warp 0
/// and no W2 to update.
const RECORDER: usize = 32;

/// Slice 0's [`RECORDER`] adds the step's mean loss and correct count into their slots: each
/// block its own part's, or ([`exchange::loss_in_parts`]) part 0's block the sums of all.
#[inline(always)]
pub fn record_loss<F: Row>(b: &Block, s: &Step) {
    let in_parts = const { exchange::loss_in_parts(&F::V) };
    if b.slice != 0 || b.tid != RECORDER || (in_parts && b.part != 0) {
        return;
    }
    let (mut ls, mut cs) = (0.0, 0.0);
    if in_parts {
        (ls, cs) = exchange::parts_loss(b, F::V.parts);
    } else {
        for i in 0..WARPS {
            unsafe {
                ls += *b.small().loss.add(i);
                cs += *b.small().correct.add(i);
            }
        }
    }
    let (loss, correct) = (b.args.loss as *mut f32, b.args.correct as *mut f32);
    // A product, not a quotient: a division has a slow path.
    red_global_add_f32(
        unsafe { loss.add(s.index as usize) },
        ls * (1.0 / b.args.batch as f32),
    );
    red_global_add_f32(unsafe { correct.add(s.index as usize) }, cs);
}
