//! Training kernels of the MLP: batch gather, softmax cross-entropy forward and backward in one
//! pass, bias gradients and the SGD update. GEMMs come from `gemm`, whose epilogue also takes
//! the ReLUs forward (`relu`) and backward (`gate`), and the weights' updates (`sgd`); the
//! bias gradients here take their biases' updates the same way.
use crate::arch::*;
use crate::gemm::Sgd;
use crate::params::{BiasGrad, GatherBatch, SgdUpdate, SoftmaxCe};
use crate::shuffle::permute;
use crate::{BIAS_GRAD_COLS, BIAS_GRAD_WARPS};

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
/// in one block. Writes the mean loss to `loss[s]` and the number of rows whose arg-max is the
/// label to `correct[s]`; `s` is `*step`, which then advances by one (so a replayed graph fills
/// one slot per step), or 0 when `step` is null. Unless `dlogits` is null, also the backward:
/// `dlogits = (softmax − onehot) · scale` (leading dimension `ld`) and the logits' bias
/// gradient, its column sums, into `db` (or its step, with `sgd`).
/// Launch with one block (rows are few and short; one block keeps the sums deterministic) and
/// one f32 of dynamic shared memory per warp.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn softmax_ce(p: SoftmaxCe) {
    let (logits, labels) = (p.logits as *const u16, p.labels as *const u8);
    let (dlogits, loss, correct) = (
        p.dlogits as *mut u16,
        p.loss as *mut f32,
        p.correct as *mut f32,
    );
    let step = p.step as *mut u32;
    let (ld, rows, classes, scale) = (p.ld, p.rows, p.classes, p.scale);
    let (mut l_sum, mut c_sum) = (0.0f32, 0.0f32);
    let mut r = thread_x();
    while r < rows {
        let z = unsafe { logits.add((r * ld) as usize) };
        let label = unsafe { *labels.add(r as usize) } as u32;
        let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
        for c in 0..classes {
            let v = h2f(unsafe { *z.add(c as usize) });
            if v > max {
                max = v;
                arg = c;
            }
        }
        let mut sum = 0.0;
        for c in 0..classes {
            sum += ex2_approx_ftz((h2f(unsafe { *z.add(c as usize) }) - max) * LOG2_E);
        }
        let zl = h2f(unsafe { *z.add(label as usize) });
        l_sum += lg2_approx_ftz(sum) * LN_2 - (zl - max);
        c_sum += (arg == label) as u32 as f32;
        if !dlogits.is_null() {
            let inv = 1.0 / sum;
            for c in 0..classes {
                let p = ex2_approx_ftz((h2f(unsafe { *z.add(c as usize) }) - max) * LOG2_E) * inv;
                let g = (p - (c == label) as u32 as f32) * scale;
                unsafe { *dlogits.add((r * ld + c) as usize) = f2h(g) };
            }
        }
        r += block_dim_x();
    }
    let scratch = dynamic_shared::<f32>();
    let l_total = unsafe { block_sum(l_sum, scratch) };
    let c_total = unsafe { block_sum(c_sum, scratch) };
    if !dlogits.is_null() {
        // `block_sum`'s barriers have made every row's gradient visible to the whole block.
        column_sums(dlogits, rows, classes, ld, p.db as *mut u16, &p.sgd);
    }
    if thread_x() == 0 {
        let s = if step.is_null() {
            0
        } else {
            unsafe { *step as usize }
        };
        unsafe {
            *loss.add(s) = l_total / rows as f32;
            *correct.add(s) = c_total;
            if !step.is_null() {
                *step = s as u32 + 1;
            }
        }
    }
}

/// `db[c] = Σ_r d[r][c]` (or with `sgd` its step) by one block: warp `w` sums columns `w`,
/// `w + warps`, …, each lane the rows `lane`, `lane + 32`, …, then the lanes in a fixed tree:
/// the result does not depend on timing.
fn column_sums(d: *const u16, rows: u32, cols: u32, ld: u32, db: *mut u16, sgd: &Sgd) {
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
            unsafe { *db.add(c as usize) = sgd.take(c as usize, f2h(total)) };
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
