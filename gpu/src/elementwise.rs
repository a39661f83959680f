//! Elementwise kernels on fp16 matrices.
use crate::arch::*;

/// In place, `C[i][j] = act(C[i][j] + bias[j])` over an M×N matrix with leading dimension
/// `ldc`: the epilogue as a separate kernel, which the fused GEMM epilogue is measured against.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bias_act_f16(
    c: *mut u16,
    ldc: u32,
    m: u32,
    n: u32,
    bias: *const u16,
    relu: u32,
) {
    grid_stride(m * n, |e| {
        let (i, j) = (e / n, e % n);
        let p = unsafe { c.add((i * ldc + j) as usize) };
        let mut v = h2f(unsafe { *p });
        if !bias.is_null() {
            v += h2f(unsafe { *bias.add(j as usize) });
        }
        if relu != 0 {
            v = v.max(0.0);
        }
        unsafe { *p = f2h(v) };
    });
}

/// Finishes a split-K GEMM: `C = act(alpha·Σ_z ws[z] + beta·C + bias)` over `splits` fp32
/// partial products of `m × n`, summed in a fixed order so results repeat bit for bit. `p` is
/// the GEMM's arguments (only its epilogue's fields are read).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn splitk_reduce(ws: *const f32, splits: u32, p: crate::gemm::Args) {
    // Launched as a dependent of the split GEMM on sm_90: its partial sums are complete here.
    wait_for_prior_grids();
    let (m, n, c, ldc) = (p.m, p.n, p.c, p.ldc);
    grid_stride(m * n, |e| {
        let mut acc = 0.0f32;
        for z in 0..splits {
            acc += unsafe { *ws.add((z * m * n + e) as usize) };
        }
        let (i, j) = (e / n, e % n);
        let v = crate::gemm::epilogue(&p, i, j, acc);
        unsafe { *c.add((i * ldc + j) as usize) = v };
    });
}
