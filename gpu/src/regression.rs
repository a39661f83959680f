//! Linear regression `y = w·x + b` by full-batch gradient descent on MSE: data generation with
//! Philox, the unfused kernels (one per op), and the fused pass. Both paths reduce the same
//! per-block partial sums in the same order, so every variant ends with the same `w` and `b`.
//!
//! Partial sums per block, in f64: `[Σ r², Σ r·x, Σ r]` with `r = (w·x + b) − y`; then
//! loss = Σr²/n, ∂w = 2Σr·x/n, ∂b = 2Σr/n.
use crate::arch::*;
use crate::params::{
    RegressionFused, RegressionGenerate, RegressionReduceUpdate, RegressionStep, RegressionUpdate,
};
use crate::philox::{philox4x32_10, uniform};
use crate::shuffle::permute;

use crate::REGRESSION_THREADS as THREADS;

/// Writes the data set in split order: slot `k` holds example `j = permute(k, n, seed)`, so
/// slots `0..n_train` are a random 80% and the rest the test set. `x_j = 10·j/n` (evenly spaced
/// over [0, 10)), `y_j = w·x_j + b + noise·N(0, 1)`, the normal draw by Box–Muller from
/// Philox4x32-10 with counter `(j, 0, 0, 0)` and key `(seed, 0)`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_generate(p: RegressionGenerate) {
    let (x, y) = (p.x as *mut f32, p.y as *mut f32);
    let (n, w, b, noise, seed) = (p.n, p.w, p.b, p.noise, p.seed);
    grid_stride(n, |k| {
        let j = permute(k, n, seed);
        let xv = 10.0 * (j as f64 / n as f64) as f32;
        let r = philox4x32_10([j, 0, 0, 0], [seed, 0]);
        let (u1, u2) = (uniform(r[0]), uniform(r[1]));
        let z = sqrt_approx(-2.0 * LN_2 * lg2_approx(u1)) * cos_approx(u2 * core::f32::consts::TAU);
        unsafe {
            *x.add(k as usize) = xv;
            *y.add(k as usize) = w * xv + b + noise * z;
        }
    });
}

/// Unfused op 1, forward: `pred = w·x + b`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_forward(
    x: *const f32,
    pred: *mut f32,
    n: u32,
    params: *const f32,
) {
    let (w, b) = unsafe { (*params, *params.add(1)) };
    grid_stride(n, |i| unsafe {
        *pred.add(i as usize) = w * *x.add(i as usize) + b
    });
}

/// Unfused op 2, loss residual: `r = pred − y`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_residual(
    pred: *const f32,
    y: *const f32,
    r: *mut f32,
    n: u32,
) {
    grid_stride(n, |i| unsafe {
        *r.add(i as usize) = *pred.add(i as usize) - *y.add(i as usize)
    });
}

/// Block `block` of a grid of `blocks` blocks: the three partial sums over the elements its
/// threads visit, written to `partials[3·block ..]`. Shared by both paths.
#[inline(always)]
fn partial_sums(
    n: u32,
    block: u32,
    blocks: u32,
    partials: *mut f64,
    residual: impl Fn(u32) -> (f32, f32),
) {
    let (mut s2, mut sx, mut s1) = (0.0f64, 0.0f64, 0.0f64);
    let mut i = block * THREADS + thread_x();
    while i < n {
        let (r, x) = residual(i);
        let r = r as f64;
        s2 += r * r;
        sx += r * x as f64;
        s1 += r;
        i += blocks * THREADS;
    }
    let scratch = dynamic_shared::<f64>();
    let t2 = unsafe { block_sum(s2, scratch) };
    let tx = unsafe { block_sum(sx, scratch) };
    let t1 = unsafe { block_sum(s1, scratch) };
    if thread_x() == 0 {
        let p = unsafe { partials.add(3 * block as usize) };
        unsafe {
            *p = t2;
            *p.add(1) = tx;
            *p.add(2) = t1;
        }
    }
}

/// Unfused op 3, gradient: per-block partial sums from the stored residuals.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_grad_partials(
    r: *const f32,
    x: *const f32,
    n: u32,
    partials: *mut f64,
) {
    partial_sums(n, block_x(), grid_dim_x(), partials, |i| unsafe {
        (*r.add(i as usize), *x.add(i as usize))
    });
}

/// The fused pass: forward, residual and partial sums in one read of `x` and `y`. Blocks are
/// numbered from `block_offset` in a grid of `blocks`, so the pass can be split over streams
/// and still produce exactly the partials of one launch.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_fused(p: RegressionFused) {
    let (x, y) = (p.x as *const f32, p.y as *const f32);
    let (params, partials) = (p.params as *const f32, p.partials as *mut f64);
    let (w, b) = unsafe { (*params, *params.add(1)) };
    partial_sums(p.n, p.block_offset + block_x(), p.blocks, partials, |i| {
        let xv = unsafe { *x.add(i as usize) };
        (w * xv + b - unsafe { *y.add(i as usize) }, xv)
    });
}

/// Sums `blocks` partial triples in a fixed order (one block). Every thread gets the totals.
#[inline(always)]
fn reduce(partials: *const f64, blocks: u32) -> [f64; 3] {
    let mut s = [0.0f64; 3];
    let mut i = thread_x();
    while i < blocks {
        for (c, v) in s.iter_mut().enumerate() {
            *v += unsafe { *partials.add(3 * i as usize + c) };
        }
        i += block_dim_x();
    }
    let scratch = dynamic_shared::<f64>();
    [
        unsafe { block_sum(s[0], scratch) },
        unsafe { block_sum(s[1], scratch) },
        unsafe { block_sum(s[2], scratch) },
    ]
}

/// The gradient step from the sums (one thread): records the loss of this epoch in
/// `history[*epoch]`, updates `params`, advances `*epoch`.
#[inline(always)]
fn step(sums: [f64; 3], p: RegressionStep) {
    let (params, history) = (p.params as *mut f32, p.history as *mut f32);
    let (epoch, n, lr) = (p.epoch as *mut u32, p.n as f64, p.lr);
    unsafe {
        let e = *epoch as usize;
        *history.add(e) = (sums[0] / n) as f32;
        let (w, b) = (*params as f64, *params.add(1) as f64);
        *params = (w - lr as f64 * 2.0 * sums[1] / n) as f32;
        *params.add(1) = (b - lr as f64 * 2.0 * sums[2] / n) as f32;
        *epoch = e as u32 + 1;
    }
}

/// Unfused op 4, reduction: the totals of the partials into `sums` (one block).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_reduce(
    partials: *const f64,
    blocks: u32,
    sums: *mut f64,
) {
    let s = reduce(partials, blocks);
    if thread_x() == 0 {
        for (c, v) in s.iter().enumerate() {
            unsafe { *sums.add(c) = *v };
        }
    }
}

/// Unfused op 5, update (one thread).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_update(p: RegressionUpdate) {
    let sums = p.sums as *const f64;
    if global_x() == 0 {
        step(unsafe { [*sums, *sums.add(1), *sums.add(2)] }, p.step);
    }
}

/// The fused path's second kernel: reduction and update together (one block).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn regression_reduce_update(p: RegressionReduceUpdate) {
    let s = reduce(p.partials as *const f64, p.blocks);
    if thread_x() == 0 {
        step(s, p.step);
    }
}
