//! Training kernels of the MLP: batch gather, softmax cross-entropy forward and backward in one
//! pass, bias gradients and the SGD update. GEMMs come from `gemm`, whose epilogue also takes
//! the ReLUs forward (`relu`) and backward (`gate`), and the weights' updates (`sgd`); the
//! bias gradients here take their biases' updates the same way.
use crate::arch::*;
use crate::gemm::Sgd;
use crate::params::{BiasGrad, GatherBatch, SgdUpdate, SoftmaxCe};
use crate::shuffle::permute;
use crate::{BIAS_GRAD_COLS, BIAS_GRAD_WARPS, SOFTMAX_ROWS};

/// Pixels `u8` → normalised fp16, `(p / 255 − mean) / std`, once for the whole data set.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn normalize_u8(
    src: *const u8,
    dst: *mut u16,
    n: u32,
    mean: f32,
    inv_std: f32,
) {
    grid_stride(n, |i| {
        let p = unsafe { *src.add(i as usize) } as f32 / 255.0;
        unsafe { *dst.add(i as usize) = f2h((p - mean) * inv_std) };
    });
}

/// Copies rows `first..first + rows` of batch `*step` of this epoch's shuffled order: row `r` is
/// example `permute(step·step_rows + first + r, n, *seed)`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gather_batch(p: GatherBatch) {
    let (x, y) = (p.x as *const u16, p.y as *const u8);
    let (xb, yb) = (p.xb as *mut u16, p.yb as *mut u8);
    let (step, seed) = unsafe { (*(p.step as *const u32), *(p.seed as *const u32)) };
    let dim = p.dim;
    grid_stride(p.rows * dim, |e| {
        let (r, c) = (e / dim, e % dim);
        let src = permute(step * p.step_rows + p.first + r, p.n, seed);
        unsafe { *xb.add(e as usize) = *x.add((src * dim + c) as usize) };
        if c == 0 {
            unsafe { *yb.add(r as usize) = *y.add(src as usize) };
        }
    });
}

/// Softmax cross-entropy over `rows` rows of `classes` logits (fp16, leading dimension `ld`),
/// a thread a row, [`SOFTMAX_ROWS`] rows a block. Writes the mean loss to `loss[s]` and the
/// number of rows whose arg-max is the label to `correct[s]`; `s` is `*step`, which then
/// advances by one (so a replayed graph fills one slot per step), or 0 when `step` is null.
/// Unless `dlogits` is null, also the backward: `dlogits = (softmax − onehot) · scale`
/// (leading dimension `ld`) and the logits' bias gradient, its column sums, into `db` (or its
/// step, with `sgd`).
///
/// One block's sums are the totals. With several, each leaves its rows' sums in `partials`, and
/// the last to finish adds them in block order, in a fixed tree, so the result does not depend
/// on which block ends when. Launch with `rows / SOFTMAX_ROWS` blocks (rounded up) of
/// [`SOFTMAX_ROWS`] threads and 33 words of dynamic shared memory: the warps' sums in the first
/// 32 (one a warp), the last block's flag after them.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn softmax_ce(p: SoftmaxCe) {
    let first = block_x() * SOFTMAX_ROWS;
    let (l, c) = cross_entropy_row(&p, first + thread_x());
    let scratch = dynamic_shared::<f32>();
    let (l_total, c_total) = unsafe { (block_sum(l, scratch), block_sum(c, scratch)) };
    let (blocks, grads) = (grid_dim_x(), p.dlogits != 0);
    // `block_sum`'s barriers have made every row's gradient visible to the whole block.
    let d = (p.dlogits as *const u16).wrapping_add((first * p.ld) as usize);
    let rows = p.rows.min(first + SOFTMAX_ROWS) - first;
    if blocks == 1 {
        if grads {
            let db = p.db as *mut u16;
            column_sums(d, rows, p.classes, p.ld, |c, total| unsafe {
                *db.add(c as usize) = p.sgd.take(c as usize, f2h(total))
            });
        }
        if thread_x() == 0 {
            record(&p, l_total, c_total);
        }
        return;
    }
    let partials = p.partials as *mut f32;
    if grads {
        let sums = unsafe { partials.add((2 * blocks + block_x() * p.classes) as usize) };
        column_sums(d, rows, p.classes, p.ld, |c, total| unsafe {
            *sums.add(c as usize) = total
        });
    }
    if thread_x() == 0 {
        unsafe {
            *partials.add(2 * block_x() as usize) = l_total;
            *partials.add(2 * block_x() as usize + 1) = c_total;
        }
    }
    let last = unsafe { dynamic_shared::<u32>().add(WARP as usize) };
    sync_threads();
    if thread_x() == 0 {
        unsafe { *last = (arrive_counted(p.done as *mut u32) == blocks - 1) as u32 };
    }
    sync_threads();
    if unsafe { *last } != 0 {
        totals(&p, blocks, grads);
    }
}

/// Row `r`'s loss and whether its arg-max is its label (0 past the last row), and with a
/// gradient asked for, its row of the logits' gradient.
fn cross_entropy_row(p: &SoftmaxCe, r: u32) -> (f32, f32) {
    if r >= p.rows {
        return (0.0, 0.0);
    }
    let z = unsafe { (p.logits as *const u16).add((r * p.ld) as usize) };
    let label = unsafe { *(p.labels as *const u8).add(r as usize) } as u32;
    let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
    for c in 0..p.classes {
        let v = h2f(unsafe { *z.add(c as usize) });
        if v > max {
            max = v;
            arg = c;
        }
    }
    let mut sum = 0.0;
    for c in 0..p.classes {
        sum += ex2_approx_ftz((h2f(unsafe { *z.add(c as usize) }) - max) * LOG2_E);
    }
    let zl = h2f(unsafe { *z.add(label as usize) });
    let dlogits = p.dlogits as *mut u16;
    if !dlogits.is_null() {
        let inv = 1.0 / sum;
        for c in 0..p.classes {
            let e = ex2_approx_ftz((h2f(unsafe { *z.add(c as usize) }) - max) * LOG2_E) * inv;
            let g = (e - (c == label) as u32 as f32) * p.scale;
            unsafe { *dlogits.add((r * p.ld + c) as usize) = f2h(g) };
        }
    }
    (
        lg2_approx_ftz(sum) * LN_2 - (zl - max),
        (arg == label) as u32 as f32,
    )
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
            record(p, loss, correct);
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

/// The mean loss and the correct count into the step's slot, and the slot advanced.
fn record(p: &SoftmaxCe, loss: f32, correct: f32) {
    let step = p.step as *mut u32;
    let s = if step.is_null() {
        0
    } else {
        unsafe { *step as usize }
    };
    unsafe {
        *(p.loss as *mut f32).add(s) = loss / p.rows as f32;
        *(p.correct as *mut f32).add(s) = correct;
        if !step.is_null() {
            *step = s as u32 + 1;
        }
    }
}

/// `f(c, Σ_r d[r][c])` for each column `c` of `rows` rows by one block: warp `w` sums columns
/// `w`, `w + warps`, …, each lane the rows `lane`, `lane + 32`, …, then the lanes in a fixed
/// tree: the result does not depend on timing. Lane 0 of the column's warp calls `f`.
fn column_sums(d: *const u16, rows: u32, cols: u32, ld: u32, f: impl Fn(u32, f32)) {
    let warps = block_dim_x() / WARP;
    let mut c = warp_id();
    while c < cols {
        let mut sum = 0.0f32;
        let mut r = lane();
        while r < rows {
            sum += h2f(unsafe { *d.add((r * ld + c) as usize) });
            r += WARP;
        }
        let total = warp_sum(sum);
        if lane() == 0 {
            f(c, total);
        }
        c += warps;
    }
}

/// `db[j] = Σ_i dy[i][j]` over a `rows × cols` fp16 matrix of leading dimension `ld`: the bias
/// gradient, or with `sgd` the bias's step. Each block sums
/// [`BIAS_GRAD_COLS`] columns with [`BIAS_GRAD_WARPS`] warps: warp `w` takes rows `w`,
/// `w + BIAS_GRAD_WARPS`, …, each lane two adjacent columns, so even a few columns (the logits')
/// are summed by many warps at once. The warps' sums meet in shared memory and are added in
/// warp order: the result does not depend on timing.
/// Launch with `BIAS_GRAD_WARPS` warps and `BIAS_GRAD_WARPS × BIAS_GRAD_COLS` f32 of dynamic
/// shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bias_grad(p: BiasGrad) {
    let (dy, db) = (p.dy as *const u16, p.db as *mut u16);
    let (rows, cols, ld) = (p.rows, p.cols, p.ld);
    let first = block_x() * BIAS_GRAD_COLS;
    let c = first + 2 * lane();
    let mut sums = [0.0f32; 2];
    let mut i = warp_id();
    while i < rows {
        for (k, sum) in sums.iter_mut().enumerate() {
            let col = c + k as u32;
            if col < cols {
                *sum += h2f(unsafe { *dy.add((i * ld + col) as usize) });
            }
        }
        i += BIAS_GRAD_WARPS;
    }
    let partial = dynamic_shared::<f32>();
    let row = warp_id() * BIAS_GRAD_COLS;
    for (k, sum) in sums.into_iter().enumerate() {
        unsafe { *partial.add((row + 2 * lane()) as usize + k) = sum };
    }
    sync_threads();
    let t = thread_x();
    if t < BIAS_GRAD_COLS && first + t < cols {
        let mut s = 0.0f32;
        for w in 0..BIAS_GRAD_WARPS {
            s += unsafe { *partial.add((w * BIAS_GRAD_COLS + t) as usize) };
        }
        let c = (first + t) as usize;
        unsafe { *db.add(c) = p.sgd.take(c, f2h(s)) };
    }
}

/// SGD with momentum over the whole flat parameter buffer at once: `v = μ·v + g`,
/// `w -= lr·v` on the fp32 master weights, then the fp16 copy the GEMMs read.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sgd_update(p: SgdUpdate) {
    let sgd = Sgd {
        master: p.w as *mut f32,
        velocity: p.v as *mut f32,
        lr: p.lr,
        momentum: p.momentum,
    };
    let (w16, g) = (p.w16 as *mut u16, p.g as *const u16);
    grid_stride(p.n, |i| {
        let k = i as usize;
        unsafe { *w16.add(k) = sgd.step(k, h2f(*g.add(k))) };
    });
}

/// Copies fp32 master weights to the fp16 buffer the GEMMs read (after init or load).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn f32_to_f16(src: *const f32, dst: *mut u16, n: u32) {
    grid_stride(n, |i| unsafe {
        *dst.add(i as usize) = f2h(*src.add(i as usize))
    });
}
