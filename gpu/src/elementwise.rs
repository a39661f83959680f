//! Elementwise kernels on fp16 matrices.
use crate::device::*;

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
