//! Kernels written in plain Rust for `nvptx64-nvidia-cuda`, compiled to PTX by the workspace's
//! `build.rs` and embedded in the host binary.
//!
//! The crate also builds for the host: there it exposes only what is target-independent
//! (fragment layouts, swizzles, the GEMM configuration table, the kernels' parameter blocks) so
//! that the CPU test suite checks the same index maps the kernels use, and the host launcher
//! reads the same tile table and fills the same parameter structs.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
// Index loops over register arrays are deliberate: they unroll into named registers.
#![allow(clippy::needless_range_loop)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_ptx,
        stdarch_nvptx,
        asm_experimental_arch,
        core_intrinsics,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem
    )
)]

pub mod gemm;
pub mod layout;
pub mod params;
pub mod persistent;
pub mod philox;
pub mod shuffle;
pub mod target;

/// Threads per block of the regression kernels (their grid-stride partial sums assume it).
pub const REGRESSION_THREADS: u32 = 256;

/// Rows of the batch a block of `gather_batch` copies, a warp a row.
pub const GATHER_ROWS: u32 = 8;

/// A block of `bias_grad`: the columns it sums (eight a lane, eight lanes across), the warps
/// that share its rows (four rows a warp at a time), and the rows it takes (a slice).
pub const BIAS_GRAD_COLS: u32 = 64;
pub const BIAS_GRAD_WARPS: u32 = 32;
pub const BIAS_GRAD_ROWS: u32 = 256;

/// Dynamic shared memory of a `bias_grad` block: each warp's column sums, and the last block's
/// flag.
pub const BIAS_GRAD_SHARED_BYTES: u32 = 4 * (BIAS_GRAD_WARPS * BIAS_GRAD_COLS + 1);

/// The grid of `bias_grad` over `rows × cols`: a block per group of [`BIAS_GRAD_COLS`] columns
/// (x) and slice of [`BIAS_GRAD_ROWS`] rows (y).
pub const fn bias_grad_grid(rows: usize, cols: usize) -> (u32, u32) {
    let slices = rows.div_ceil(BIAS_GRAD_ROWS as usize);
    let groups = cols.div_ceil(BIAS_GRAD_COLS as usize);
    (groups as u32, if slices == 0 { 1 } else { slices as u32 })
}

/// Values of `BiasGrad::partials` and of `BiasGrad::done` for `rows × cols`: a sum per column
/// and slice of rows, and a count per group of columns, or none where one slice takes every
/// row.
pub const fn bias_grad_scratch(rows: usize, cols: usize) -> (usize, usize) {
    let (groups, slices) = bias_grad_grid(rows, cols);
    if slices == 1 {
        (0, 0)
    } else {
        (slices as usize * cols, groups as usize)
    }
}

/// Rows of the softmax cross-entropy each block of `softmax_ce` takes, a thread a row.
pub const SOFTMAX_ROWS: u32 = 256;

/// The most classes `softmax_ce` takes: it keeps a row's logits and gradient in registers.
pub const SOFTMAX_MAX_CLASSES: usize = 16;

/// Dynamic shared memory of a `softmax_ce` block: each warp's sums (the loss, the count and a
/// gradient column for each class), and the last block's flag.
pub const SOFTMAX_SHARED_BYTES: u32 =
    4 * ((SOFTMAX_ROWS / 32) * (2 + SOFTMAX_MAX_CLASSES as u32) + 1);

/// Values of `SoftmaxCe::partials` for `rows` rows of `classes` classes: a loss and a count,
/// and the column sums, for each block of [`SOFTMAX_ROWS`] rows.
pub const fn softmax_partials(rows: usize, classes: usize) -> usize {
    rows.div_ceil(SOFTMAX_ROWS as usize) * (2 + classes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_grad_blocks_cover_every_row_and_column_once() {
        let (bc, br) = (BIAS_GRAD_COLS as usize, BIAS_GRAD_ROWS as usize);
        for (rows, cols) in [(1, 1), (128, 10), (br, bc), (br + 1, bc + 1), (2048, 4096)] {
            let (groups, slices) = bias_grad_grid(rows, cols);
            let (groups, slices) = (groups as usize, slices as usize);
            assert!(
                groups * bc >= cols && (groups - 1) * bc < cols,
                "{rows}×{cols}"
            );
            assert!(
                slices * br >= rows && (slices - 1) * br < rows,
                "{rows}×{cols}"
            );
            let scratch = bias_grad_scratch(rows, cols);
            let want = if slices == 1 {
                (0, 0)
            } else {
                (slices * cols, groups)
            };
            assert_eq!(scratch, want, "{rows}×{cols}");
        }
    }
}

#[cfg(target_arch = "nvptx64")]
pub mod arch;
#[cfg(target_arch = "nvptx64")]
mod elementwise;
#[cfg(target_arch = "nvptx64")]
mod mlp;
#[cfg(target_arch = "nvptx64")]
mod regression;
#[cfg(target_arch = "nvptx64")]
mod smoke;
#[cfg(target_arch = "nvptx64")]
mod softmax;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels are written not to panic (indices are checked explicitly); if one does, stop the
    // whole grid so the host sees a launch failure instead of a wrong answer.
    unsafe { core::arch::nvptx::trap() }
}
