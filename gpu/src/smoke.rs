//! Smoke kernels: the smallest proof that each device facility works end to end.
use crate::arch::*;
use crate::layout::{mma_a, mma_b, mma_c};

/// `c = a + b` over `n` elements, grid-stride.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn vec_add(a: *const f32, b: *const f32, c: *mut f32, n: u32) {
    grid_stride(n, |i| unsafe {
        *c.add(i as usize) = *a.add(i as usize) + *b.add(i as usize)
    });
}

/// One partial sum per block of `x[0..n]` into `partial[block]`: warp shuffles, then shared
/// memory across warps (dynamic shared memory: one f32 per warp).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn block_sum(x: *const f32, partial: *mut f32, n: u32) {
    let mut v = 0.0;
    grid_stride(n, |i| v += unsafe { *x.add(i as usize) });
    let total = unsafe { crate::arch::block_sum(v, dynamic_shared::<f32>()) };
    if thread_x() == 0 {
        unsafe { *partial.add(block_x() as usize) = total };
    }
}

/// One warp computes one 16×8×8 tensor-core tile: `d = a·b` with `a` 16×8 row-major, `b` 8×8
/// row-major (k×n), both fp16 bits, `d` 16×8 fp32. Fragments are gathered with the layout
/// functions the GEMM's `ldmatrix` addressing is tested against.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn mma_tile(a: *const u16, b: *const u16, d: *mut f32) {
    let l = lane() as usize;
    let at = |i: usize, h: usize| {
        let (r, c) = mma_a(l, i, h);
        unsafe { *a.add(r * 8 + c) as u32 }
    };
    let af = [at(0, 0) | at(0, 1) << 16, at(1, 0) | at(1, 1) << 16];
    let bt = |h: usize| {
        let (k, n) = mma_b(l, 0, h);
        unsafe { *b.add(k * 8 + n) as u32 }
    };
    let mut acc = [0.0f32; 4];
    mma_m16n8k8_f32(&mut acc, af, bt(0) | bt(1) << 16);
    for (e, v) in acc.iter().enumerate() {
        let (r, c) = mma_c(l, e);
        unsafe { *d.add(r * 8 + c) = *v };
    }
}
