//! Launchers of the MLP's own kernels: the batch gather, the softmax cross-entropy, the bias
//! gradients and the SGD update (its GEMMs launch through `gemm`). Each kernel takes one
//! parameter block from `gpu::params`.
use crate::cuda::{Gpu, ParamBlock, PushKernelArg, grid_1d};
use crate::kernels;
use anyhow::{Result, ensure};
use cudarc::driver::{CudaStream, LaunchConfig};
use gpu::params::{BiasGrad, GatherBatch, SgdUpdate, SoftmaxCe};
use gpu::{
    BIAS_GRAD_SHARED_BYTES, BIAS_GRAD_WARPS, GATHER_ROWS, SOFTMAX_ROWS, SOFTMAX_SHARED_BYTES,
};
use gpu::{bias_grad_grid, bias_grad_scratch};

/// Launches `gather_batch` with `p` on the GPU's stream: a warp per row of the batch.
pub fn gather_batch(gpu: &Gpu, p: GatherBatch) -> Result<()> {
    let f = gpu.function(kernels::GATHER_BATCH)?;
    let cfg = LaunchConfig {
        grid_dim: (p.rows.div_ceil(GATHER_ROWS).max(1), 1, 1),
        block_dim: (32 * GATHER_ROWS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the kernel's one parameter is a `GatherBatch`, and it waits for the grid before
    // it first; the caller's buffers outlive the queued work.
    unsafe { gpu.launch_dependent(&gpu.stream, &f, cfg, p) }
}

/// Launches `bias_grad` with `p` on `stream`: a layer's bias gradient, the column sums of its
/// outputs' gradient, or the step they make. Where the rows take several slices, `p.partials`
/// and `p.done` must hold [`bias_grad_scratch`] values.
pub fn bias_grad(gpu: &Gpu, stream: &CudaStream, p: BiasGrad) -> Result<()> {
    let (rows, cols) = (p.rows as usize, p.cols as usize);
    ensure!(
        p.ld >= p.cols,
        "a bias gradient's rows of {cols} columns cannot be {} apart",
        p.ld
    );
    ensure!(
        bias_grad_scratch(rows, cols).0 == 0 || (p.partials != 0 && p.done != 0),
        "the bias gradient of {rows} rows needs its scratch"
    );
    let f = gpu.function(kernels::BIAS_GRAD)?;
    let (groups, slices) = bias_grad_grid(rows, cols);
    let cfg = LaunchConfig {
        grid_dim: (groups, slices, 1),
        block_dim: (32 * BIAS_GRAD_WARPS, 1, 1),
        shared_mem_bytes: BIAS_GRAD_SHARED_BYTES,
    };
    // SAFETY: the kernel's one parameter is a `BiasGrad`, and it waits for the grid before it
    // first; the caller's buffers outlive the queued work.
    unsafe { gpu.launch_dependent(stream, &f, cfg, p) }
}

/// Launches `sgd_update` with `p` on `stream`: one SGD step over `p.n` parameters from their
/// fp16 gradients.
pub fn sgd_update(gpu: &Gpu, stream: &CudaStream, p: SgdUpdate) -> Result<()> {
    let f = gpu.function(kernels::SGD_UPDATE)?;
    let mut b = stream.launch_builder(&f);
    let n = p.n as usize;
    let p = ParamBlock(p);
    b.arg(&p);
    // SAFETY: the kernel's one parameter is an `SgdUpdate`; the caller's buffers outlive the
    // queued work.
    unsafe { b.launch(grid_1d(n, 256)) }?;
    Ok(())
}

/// Launches `softmax_ce` with `p`: a block of [`SOFTMAX_ROWS`] threads for each as many rows,
/// with the shared memory its warps' sums and the last block's flag take.
pub fn softmax_ce(gpu: &Gpu, p: SoftmaxCe) -> Result<()> {
    let f = gpu.function(kernels::SOFTMAX_CE)?;
    let blocks = p.rows.div_ceil(SOFTMAX_ROWS).max(1);
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (SOFTMAX_ROWS, 1, 1),
        shared_mem_bytes: SOFTMAX_SHARED_BYTES,
    };
    // SAFETY: the kernel's one parameter is a `SoftmaxCe`, and it waits for the grid before it
    // first; the caller's buffers outlive the queued work.
    unsafe { gpu.launch_dependent(&gpu.stream, &f, cfg, p) }
}
