//! cuBLAS for comparison: the same row-major problem through `cublasGemmEx`, and the separate
//! epilogue kernel that follows it.
use crate::cuda::{Gpu, PushKernelArg};
use crate::gemm::{Problem, Ptrs};
use crate::kernels;
use anyhow::Result;
use cudarc::cublas::{CudaBlas, sys as cublas_sys};
use cudarc::driver::CudaStream;
use gpu::gemm::Accum;
use half::f16;
use std::sync::Arc;

/// cuBLAS on one stream, computing the same row-major problem (alpha and beta only: bias and
/// ReLU are what [`launch_bias_act`] adds).
pub struct Cublas {
    blas: CudaBlas,
    stream: Arc<CudaStream>,
}

impl Cublas {
    /// cuBLAS on the GPU's stream.
    pub fn new(gpu: &Gpu) -> Result<Cublas> {
        Cublas::on(gpu.stream.clone())
    }

    /// cuBLAS on `stream`.
    pub fn on(stream: Arc<CudaStream>) -> Result<Cublas> {
        let blas = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            CudaBlas::new(stream.clone())
        }))
        .map_err(|_| {
            anyhow::anyhow!("cuBLAS could not be loaded (libcublas not found on the library path)")
        })??;
        Ok(Cublas { blas, stream })
    }

    /// The stream its calls queue on.
    pub fn stream(&self) -> &CudaStream {
        &self.stream
    }

    /// Row-major `C = op(A)·op(B)` is column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`, so B goes first.
    pub fn gemm(&self, p: &Problem, ptrs: Ptrs, compute: Accum) -> Result<()> {
        use cublas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let op_b = if p.layout.trans_b() {
            CUBLAS_OP_T
        } else {
            CUBLAS_OP_N
        };
        let op_a = if p.layout.trans_a() {
            CUBLAS_OP_T
        } else {
            CUBLAS_OP_N
        };
        let (alpha16, beta16) = (f16::from_f32(p.alpha), f16::from_f32(p.beta));
        let (ap, bp, ct) = match compute {
            Accum::F16 => (
                &alpha16 as *const f16 as *const _,
                &beta16 as *const f16 as *const _,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_16F,
            ),
            Accum::F32 => (
                &p.alpha as *const f32 as *const _,
                &p.beta as *const f32 as *const _,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
        };
        let h = cublas_sys::cudaDataType::CUDA_R_16F;
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                op_b,
                op_a,
                p.n as i32,
                p.m as i32,
                p.k as i32,
                ap,
                ptrs.b as *const _,
                h,
                p.ldb as i32,
                ptrs.a as *const _,
                h,
                p.lda as i32,
                bp,
                ptrs.c as *mut _,
                h,
                p.ldc as i32,
                ct,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )?;
        }
        Ok(())
    }
}

/// The separate epilogue kernel (bias, ReLU) that follows a cuBLAS GEMM in comparisons, on
/// `stream`.
pub fn launch_bias_act(
    gpu: &Gpu,
    stream: &CudaStream,
    p: &Problem,
    (c, bias): (u64, u64),
) -> Result<()> {
    let f = gpu.function(kernels::BIAS_ACT_F16)?;
    let (ldc, m, n, relu) = (p.ldc as u32, p.m as u32, p.n as u32, p.relu as u32);
    let mut b = stream.launch_builder(&f);
    b.arg(&c).arg(&ldc).arg(&m).arg(&n).arg(&bias).arg(&relu);
    unsafe { b.launch(crate::cuda::grid_1d(p.m * p.n, 256)) }?;
    Ok(())
}
