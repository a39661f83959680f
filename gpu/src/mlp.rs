//! Training kernels of the MLP: batch gather, bias gradients and the SGD update (the softmax
//! cross-entropy has its own module). GEMMs come from `gemm`, whose epilogue also takes
//! the ReLUs forward (`relu`) and backward (`gate`), and the weights' updates (`sgd`); the
//! bias gradients here take their biases' updates the same way.
use crate::arch::*;
use crate::gemm::Sgd;
use crate::params::{BiasGrad, GatherBatch, SgdUpdate};
use crate::shuffle::permute;
use crate::{BIAS_GRAD_COLS, BIAS_GRAD_ROWS, BIAS_GRAD_WARPS, GATHER_ROWS};

/// The start of the kernels launched as dependent launches on sm_90 (the gather, the softmax
/// cross-entropy, the bias gradients): wait for the grid before, then let the kernel after be
/// scheduled at once. This kernel is safe because it reads nothing before its wait; the kernel
/// after, because it waits in turn, and this grid ends only after the grids before it. Its
/// blocks are scheduled only once every block of this grid has started, so they wait beside
/// this grid rather than in its way.
#[inline(always)]
pub(crate) fn depend_on_prior_grids() {
    wait_for_prior_grids();
    launch_dependents();
}

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
/// example `permute(step·step_rows + first + r, n, *seed)`. A warp copies a row, which it looks
/// up once, [`GATHER_ROWS`] rows a block: as 16-byte vectors where the rows allow (`dim` a
/// multiple of 8, both sets 16-byte aligned), each lane with up to four in flight; else a
/// feature at a time.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gather_batch(p: GatherBatch) {
    depend_on_prior_grids();
    let r = block_x() * GATHER_ROWS + warp_id();
    if r >= p.rows {
        return;
    }
    let (step, seed) = unsafe { (*(p.step as *const u32), *(p.seed as *const u32)) };
    let src = permute(step * p.step_rows + p.first + r, p.n, seed);
    let dim = p.dim as usize;
    let from = (p.x as *const u16).wrapping_add(src as usize * dim);
    let to = (p.xb as *mut u16).wrapping_add(r as usize * dim);
    if dim.is_multiple_of(8) && (p.x | p.xb).is_multiple_of(16) {
        copy_vectors(from as *const u8, to as *mut u8, dim / 8);
    } else {
        let mut c = lane() as usize;
        while c < dim {
            unsafe { *to.add(c) = *from.add(c) };
            c += WARP as usize;
        }
    }
    if lane() == 0 {
        unsafe { *(p.yb as *mut u8).add(r as usize) = *(p.y as *const u8).add(src as usize) };
    }
}

/// `n` 16-byte vectors from `from` to `to` by one warp: lane `l` copies vectors `l`, `l + 32`,
/// …, loading four before it stores them.
fn copy_vectors(from: *const u8, to: *mut u8, n: usize) {
    const IN_FLIGHT: usize = 4;
    let mut v = lane() as usize;
    while v < n {
        let at = |j: usize| v + j * WARP as usize;
        let words: [[u32; 4]; IN_FLIGHT] = core::array::from_fn(|j| {
            if at(j) < n {
                ld_global_v4(from.wrapping_add(16 * at(j)))
            } else {
                [0; 4]
            }
        });
        for j in 0..IN_FLIGHT {
            if at(j) < n {
                st_global_v4(to.wrapping_add(16 * at(j)), words[j]);
            }
        }
        v += IN_FLIGHT * WARP as usize;
    }
}

/// Whether this block is the last of `blocks` to arrive at `counter`, once every thread of the
/// block has written its part: then it sees every other block's writes. Thread 0 arrives and
/// tells the block through `flag` (a word of shared memory). Contains barriers, so every thread
/// of the block must call it.
pub(crate) fn last_to_arrive(counter: *mut u32, blocks: u32, flag: *mut u32) -> bool {
    sync_threads();
    if thread_x() == 0 {
        unsafe { *flag = (arrive_counted(counter) == blocks - 1) as u32 };
    }
    sync_threads();
    unsafe { *flag != 0 }
}

/// `db[j] = Σ_i dy[i][j]` over a `rows × cols` fp16 matrix of leading dimension `ld`: the bias
/// gradient, or with `sgd` the bias's step. Block `(x, y)` sums the [`BIAS_GRAD_COLS`] columns
/// of group `x` over the [`BIAS_GRAD_ROWS`] rows of slice `y` ([`lane_sums`]). A warp's lanes
/// add their rows in a fixed tree, the warps meet in shared memory and are added in warp order.
/// With one slice those are the totals. With several, each block leaves its sums in `partials`
/// and the last block of its group to finish (counted in `done[x]`) adds the slices in order,
/// so the result does not depend on which block ends when.
/// Launch with [`bias_grad_grid`](crate::bias_grad_grid) blocks of `32 × BIAS_GRAD_WARPS`
/// threads and [`BIAS_GRAD_SHARED_BYTES`](crate::BIAS_GRAD_SHARED_BYTES) of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bias_grad(p: BiasGrad) {
    depend_on_prior_grids();
    let first = block_x() * BIAS_GRAD_COLS;
    let (chunk, across) = (lane() % CHUNKS, lane() / CHUNKS);
    let mut sums = lane_sums(&p, first + LANE_COLS * chunk, block_y() * BIAS_GRAD_ROWS);
    // The lanes of one chunk of columns (`across` = 0..4) add their rows.
    for k in 0..LANE_COLS as usize {
        sums[k] += shfl_xor_f32(sums[k], CHUNKS);
        sums[k] += shfl_xor_f32(sums[k], 2 * CHUNKS);
    }
    let partial = dynamic_shared::<f32>();
    if across == 0 {
        let row = shared_addr(partial) + 4 * warp_id() * BIAS_GRAD_COLS;
        for h in 0..2 {
            let four = [0, 1, 2, 3].map(|k| sums[4 * h + k].to_bits());
            st_shared_v4(row + 4 * spread(LANE_COLS * chunk + 4 * h as u32), four);
        }
    }
    sync_threads();
    // Thread `t` of the first `BIAS_GRAD_COLS` adds column `first + t` over the warps.
    let (t, cols) = (thread_x(), p.cols);
    let c = first + t;
    let mine = t < BIAS_GRAD_COLS && c < cols;
    let mut sum = 0.0f32;
    if mine {
        for w in 0..BIAS_GRAD_WARPS {
            sum += unsafe { *partial.add((w * BIAS_GRAD_COLS + spread(t)) as usize) };
        }
    }
    let db = p.db as *mut u16;
    let slices = grid_dim_y();
    if slices == 1 {
        if mine {
            unsafe { *db.add(c as usize) = p.sgd.take(c as usize, f2h(sum)) };
        }
        return;
    }
    let partials = p.partials as *mut f32;
    if mine {
        unsafe { *partials.add((block_y() * cols + c) as usize) = sum };
    }
    let (flag, done) = unsafe {
        let flag = partial.add((BIAS_GRAD_WARPS * BIAS_GRAD_COLS) as usize) as *mut u32;
        (flag, (p.done as *mut u32).add(block_x() as usize))
    };
    if !last_to_arrive(done, slices, flag) {
        return;
    }
    if mine {
        // Other blocks wrote the slices: the loads bypass L1.
        let mut total = 0.0f32;
        for y in 0..slices {
            let at = unsafe { partials.add((y * cols + c) as usize) } as *const u32;
            total += f32::from_bits(ld_global_cg_u32(at));
        }
        unsafe { *db.add(c as usize) = p.sgd.take(c as usize, f2h(total)) };
    }
    if t == 0 {
        // Ready for the next call.
        unsafe { *done = 0 };
    }
}

/// Columns of `bias_grad` a lane sums: eight fp16, one 16-byte load a row.
const LANE_COLS: u32 = 8;
/// Lanes across a block's columns; the warp's other lanes take further rows.
const CHUNKS: u32 = BIAS_GRAD_COLS / LANE_COLS;
/// Rows a warp takes at a time, and rows a block takes in one pass of its warps.
const ACROSS: u32 = WARP / CHUNKS;
const PASS: u32 = ACROSS * BIAS_GRAD_WARPS;
const _: () = assert!(
    WARP.is_multiple_of(CHUNKS) && BIAS_GRAD_ROWS.is_multiple_of(PASS) && BIAS_GRAD_COLS >= 8
);
// The warps' sums and the flag fill the shared memory the host gives a block.
const _: () = assert!(4 * (BIAS_GRAD_WARPS * BIAS_GRAD_COLS + 1) == crate::BIAS_GRAD_SHARED_BYTES);

/// Where column `t` of a group sits in a warp's row of sums in shared memory: each lane's first
/// four columns in the row's first half, its last four in the second, so that a lane stores its
/// sums as two 16-byte vectors and each store of the warp is one contiguous, conflict-free span.
const fn spread(t: u32) -> u32 {
    (t % LANE_COLS / 4) * (BIAS_GRAD_COLS / 2) + 4 * (t / LANE_COLS) + t % 4
}

/// This lane's sums of columns `c..c + 8` over its rows of the slice from row `slice`: in pass
/// `j`, row `slice + j·PASS + 4·w + a` for lane `a·CHUNKS + chunk` of warp `w`, so that each
/// load of a warp reads four whole rows of the group. Where the layout allows (`ld` a multiple
/// of 8, `dy` 16-byte aligned) a row is one vector load, whose columns past `cols` are padding
/// and never stored; the loads are predicated on the row, so every one is issued before the
/// first add. Otherwise each column is a load of its own.
fn lane_sums(p: &BiasGrad, c: u32, slice: u32) -> [f32; LANE_COLS as usize] {
    const PASSES: usize = (BIAS_GRAD_ROWS / PASS) as usize;
    let dy = p.dy as *const u16;
    let mut sums = [0.0f32; LANE_COLS as usize];
    let row = |j: u32| slice + j * PASS + ACROSS * warp_id() + lane() / CHUNKS;
    if c >= p.cols || row(0) >= p.rows {
        return sums;
    }
    if p.ld.is_multiple_of(LANE_COLS) && p.dy.is_multiple_of(16) {
        let words: [[u32; 4]; PASSES] = core::array::from_fn(|j| {
            let r = row(j as u32);
            let at = dy.wrapping_add((r * p.ld + c) as usize) as *const u8;
            ld_global_v4_if(at, r < p.rows)
        });
        for j in 0..PASSES {
            for k in 0..4 {
                let (lo, hi) = unpack_h2(words[j][k]);
                sums[2 * k] += lo;
                sums[2 * k + 1] += hi;
            }
        }
    } else {
        for j in 0..PASSES as u32 {
            let r = row(j);
            for k in 0..LANE_COLS as usize {
                if r < p.rows && c + (k as u32) < p.cols {
                    sums[k] += h2f(unsafe { *dy.add((r * p.ld + c) as usize + k) });
                }
            }
        }
    }
    sums
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
