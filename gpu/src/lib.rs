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

/// Columns of the bias gradient one block of `bias_grad` sums (two per lane of a warp), and the
/// warps that share its rows.
pub const BIAS_GRAD_COLS: u32 = 64;
pub const BIAS_GRAD_WARPS: u32 = 32;

/// Rows of the softmax cross-entropy each block of `softmax_ce` takes, a thread a row.
pub const SOFTMAX_ROWS: u32 = 256;

/// Values of `SoftmaxCe::partials` for `rows` rows of `classes` classes: a loss and a count,
/// and the column sums, for each block of [`SOFTMAX_ROWS`] rows.
pub const fn softmax_partials(rows: usize, classes: usize) -> usize {
    rows.div_ceil(SOFTMAX_ROWS as usize) * (2 + classes)
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
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels are written not to panic (indices are checked explicitly); if one does, stop the
    // whole grid so the host sees a launch failure instead of a wrong answer.
    unsafe { core::arch::nvptx::trap() }
}
