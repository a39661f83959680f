//! The softmax cross-entropy of the MLP's logits, forward and backward in one pass: the loss,
//! the correct count, the logits' gradient and the logits' bias gradient (or its step).
use crate::arch::*;
use crate::mlp::{depend_on_prior_grids, last_to_arrive};
use crate::params::SoftmaxCe;
use crate::{SOFTMAX_MAX_CLASSES, SOFTMAX_ROWS};

/// A thread's sums, by slot: 0 the loss, 1 the count, `2 + c` its row's gradient in column `c`.
const SLOTS: usize = 2 + SOFTMAX_MAX_CLASSES;

/// Warps of a block.
const WARPS: usize = (SOFTMAX_ROWS / WARP) as usize;

// The warps' sums and the flag fill the shared memory the host gives a block.
const _: () = assert!(4 * (SLOTS * WARPS + 1) == crate::SOFTMAX_SHARED_BYTES as usize);

/// Softmax cross-entropy over `rows` rows of `classes` logits (fp16, leading dimension `ld`),
/// a thread a row, [`SOFTMAX_ROWS`] rows a block. Writes the mean loss to `loss[s]` and the
/// number of rows whose arg-max is the label to `correct[s]`; `s` is `*step`, which then
/// advances by one (so a replayed graph fills one slot per step), or 0 when `step` is null.
/// Unless `dlogits` is null, also the backward: `dlogits = (softmax − onehot) · scale`
/// (leading dimension `ld`) and the logits' bias gradient, its column sums, into `db` (or its
/// step, with `sgd`).
///
/// A thread keeps its row's sums in registers; the warps add them in a fixed tree and the
/// block in warp order. One block's sums are the totals: thread `t` finishes slot `t`, and
/// loads what it finishes with (the step counter, the bias's master weight and velocity) before
/// the rows' work, whose time hides the loads' latency. With several blocks, each leaves its
/// sums in `partials`, and the last to finish adds them in block order, in a fixed tree, so
/// the result does not depend on which block ends when. Launch with `rows / SOFTMAX_ROWS`
/// blocks (rounded up) of [`SOFTMAX_ROWS`] threads and
/// [`SOFTMAX_SHARED_BYTES`](crate::SOFTMAX_SHARED_BYTES) of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn softmax_ce(p: SoftmaxCe) {
    depend_on_prior_grids();
    let (blocks, grads) = (grid_dim_x(), p.dlogits != 0);
    let t = thread_x();
    let ahead = if blocks == 1 {
        load_ahead(&p, t)
    } else {
        Ahead::default()
    };
    let sums = cross_entropy_row(&p, block_x() * SOFTMAX_ROWS + t);
    let scratch = dynamic_shared::<f32>();
    let slots = if grads { 2 + p.classes } else { 2 };
    unsafe { warp_sums_to_shared(&sums, slots, scratch) };
    sync_threads();
    if blocks == 1 {
        finish(&p, t, slots, scratch, ahead);
        return;
    }
    if t < slots {
        let partials = p.partials as *mut f32;
        let b = block_x();
        let at = if t < 2 {
            2 * b + t
        } else {
            2 * blocks + b * p.classes + t - 2
        };
        unsafe { *partials.add(at as usize) = slot_total(scratch, t) };
    }
    let flag = unsafe { dynamic_shared::<u32>().add(SLOTS * WARPS) };
    if last_to_arrive(p.done as *mut u32, blocks, flag) {
        totals(&p, blocks, grads);
    }
}

/// What a thread of a lone block finishes with, loaded ahead: thread 0 the step counter,
/// thread `2 + c` column `c`'s master weight and velocity where the bias takes a step.
#[derive(Clone, Copy, Default)]
struct Ahead {
    slot: u32,
    state: (f32, f32),
}

fn load_ahead(p: &SoftmaxCe, t: u32) -> Ahead {
    let mut ahead = Ahead::default();
    if t == 0 {
        ahead.slot = step_slot(p);
    }
    if p.dlogits != 0 && !p.sgd.is_none() && t >= 2 && t < 2 + p.classes {
        ahead.state = p.sgd.state((t - 2) as usize);
    }
    ahead
}

/// A lone block's end: thread 0 records the loss and count, thread `2 + c` writes column `c`
/// of the bias gradient (or its step).
fn finish(p: &SoftmaxCe, t: u32, slots: u32, scratch: *const f32, ahead: Ahead) {
    if t == 0 {
        record(
            p,
            slot_total(scratch, 0),
            slot_total(scratch, 1),
            ahead.slot,
        );
    } else if t >= 2 && t < slots {
        let (c, h) = ((t - 2) as usize, f2h(slot_total(scratch, t)));
        let out = if p.sgd.is_none() {
            h
        } else {
            p.sgd.step_from(c, h2f(h), ahead.state)
        };
        unsafe { *(p.db as *mut u16).add(c) = out };
    }
}

/// Each warp's sums of its lanes' first `slots` slots, in a fixed tree, into
/// `scratch[warp · SLOTS + slot]`.
///
/// # Safety
/// `scratch` points to shared memory of `SLOTS` values a warp.
#[inline(always)]
unsafe fn warp_sums_to_shared(sums: &[f32; SLOTS], slots: u32, scratch: *mut f32) {
    let row = unsafe { scratch.add(SLOTS * warp_id() as usize) };
    for s in 0..SLOTS {
        if (s as u32) < slots {
            let total = warp_sum(sums[s]);
            if lane() == 0 {
                unsafe { *row.add(s) = total };
            }
        }
    }
}

/// Slot `s`'s sum over the block's warps, in warp order.
fn slot_total(scratch: *const f32, s: u32) -> f32 {
    let mut total = 0.0;
    for w in 0..WARPS {
        total += unsafe { *scratch.add(SLOTS * w + s as usize) };
    }
    total
}

/// Row `r`'s sums (zeros past the last row): its loss, whether its arg-max is its label, and
/// with a gradient asked for, its row of the logits' gradient, which it also stores.
#[inline(always)]
fn cross_entropy_row(p: &SoftmaxCe, r: u32) -> [f32; SLOTS] {
    let mut sums = [0.0f32; SLOTS];
    if r >= p.rows {
        return sums;
    }
    let z = unsafe { (p.logits as *const u16).add((r * p.ld) as usize) };
    let label = unsafe { *(p.labels as *const u8).add(r as usize) } as usize;
    let classes = p.classes as usize;
    let mut zs = [0.0f32; SOFTMAX_MAX_CLASSES];
    for c in 0..SOFTMAX_MAX_CLASSES {
        if c < classes {
            zs[c] = h2f(unsafe { *z.add(c) });
        }
    }
    let (mut max, mut arg, mut zl) = (f32::NEG_INFINITY, 0, 0.0);
    for c in 0..SOFTMAX_MAX_CLASSES {
        if c < classes {
            if zs[c] > max {
                max = zs[c];
                arg = c;
            }
            if c == label {
                zl = zs[c];
            }
        }
    }
    let mut e = [0.0f32; SOFTMAX_MAX_CLASSES];
    let mut sum = 0.0;
    for c in 0..SOFTMAX_MAX_CLASSES {
        if c < classes {
            e[c] = ex2_approx_ftz((zs[c] - max) * LOG2_E);
            sum += e[c];
        }
    }
    let dlogits = p.dlogits as *mut u16;
    if !dlogits.is_null() {
        let inv = 1.0 / sum;
        for c in 0..SOFTMAX_MAX_CLASSES {
            if c < classes {
                let g = f2h((e[c] * inv - (c == label) as u32 as f32) * p.scale);
                unsafe { *dlogits.add(r as usize * p.ld as usize + c) = g };
                // The bias gradient sums the gradient as stored.
                sums[2 + c] = h2f(g);
            }
        }
    }
    sums[0] = lg2_approx_ftz(sum) * LN_2 - (zl - max);
    sums[1] = (arg == label) as u32 as f32;
    sums
}

/// The last block's part: every block's sums added in block order, each lane taking blocks
/// `lane`, `lane + 32`, … before a fixed tree: warp `w` the bias gradient's columns `w`,
/// `w + warps`, … (or their step), warp 0 also the loss and count, which it records.
fn totals(p: &SoftmaxCe, blocks: u32, grads: bool) {
    let partials = p.partials as *const u32;
    let mut c = warp_id();
    while grads && c < p.classes {
        let total = over_blocks(partials, blocks, |b| 2 * blocks + b * p.classes + c);
        if lane() == 0 {
            let db = p.db as *mut u16;
            unsafe { *db.add(c as usize) = p.sgd.take(c as usize, f2h(total)) };
        }
        c += block_dim_x() / WARP;
    }
    if warp_id() == 0 {
        let loss = over_blocks(partials, blocks, |b| 2 * b);
        let correct = over_blocks(partials, blocks, |b| 2 * b + 1);
        if lane() == 0 {
            record(p, loss, correct, step_slot(p));
            // Ready for the next call.
            unsafe { *(p.done as *mut u32) = 0 };
        }
    }
}

/// The sum over `blocks` blocks of the partial (f32 bits) at `index(b)`: lane `l` adds blocks
/// `l`, `l + 32`, …, then the lanes add in a fixed tree. Other blocks wrote them: the loads
/// bypass L1.
fn over_blocks(partials: *const u32, blocks: u32, index: impl Fn(u32) -> u32) -> f32 {
    let mut sum = 0.0f32;
    let mut b = lane();
    while b < blocks {
        sum += f32::from_bits(ld_global_cg_u32(unsafe { partials.add(index(b) as usize) }));
        b += WARP;
    }
    warp_sum(sum)
}

/// The slot this step's loss and count go to: `*step`, or 0 when `step` is null.
fn step_slot(p: &SoftmaxCe) -> u32 {
    let step = p.step as *const u32;
    if step.is_null() { 0 } else { unsafe { *step } }
}

/// The mean loss and the correct count into slot `s`, and the step counter advanced past it.
fn record(p: &SoftmaxCe, loss: f32, correct: f32, s: u32) {
    unsafe {
        *(p.loss as *mut f32).add(s as usize) = loss / p.rows as f32;
        *(p.correct as *mut f32).add(s as usize) = correct;
        let step = p.step as *mut u32;
        if !step.is_null() {
            *step = s + 1;
        }
    }
}
