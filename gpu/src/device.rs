//! The device-side runtime, in the spirit of `cuda_std`: indices, barriers, dynamic shared
//! memory, warp shuffles and block reductions.
use core::arch::asm;
use core::arch::nvptx;

/// Threads in a warp.
pub const WARP: u32 = 32;

/// `x`, hidden from the optimiser, so that what is derived from it is computed where it is
/// used instead of being hoisted out of a loop into registers held for the whole kernel.
#[inline(always)]
pub fn opaque(x: u32) -> u32 {
    let o: u32;
    unsafe {
        asm!("mov.b32 {o}, {x};", o = out(reg32) o, x = in(reg32) x, options(nomem, nostack))
    };
    o
}

/// Programmatic dependent launch exists in this build (sm_90 PTX, ISA 8.1).
const DEPENDENT_LAUNCH: bool = cfg!(all(target_feature = "sm_90", target_feature = "ptx81"));

/// Lets a kernel launched after this one as a dependent launch start before this grid ends:
/// its blocks may be scheduled, and run up to their [`wait_for_prior_grids`], once every block
/// of this grid has called this (or exited). A no-op before sm_90.
#[inline(always)]
pub fn launch_dependents() {
    if DEPENDENT_LAUNCH {
        unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) };
    }
}

/// In a kernel launched as a dependent launch: waits until the grids it depends on have
/// completed and their writes are visible. Returns at once after a plain launch, and before
/// sm_90 (where every launch is plain).
#[inline(always)]
pub fn wait_for_prior_grids() {
    if DEPENDENT_LAUNCH {
        unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
    }
}

#[inline(always)]
pub fn thread_x() -> u32 {
    unsafe { nvptx::_thread_idx_x() }
}
#[inline(always)]
pub fn block_x() -> u32 {
    unsafe { nvptx::_block_idx_x() }
}
#[inline(always)]
pub fn block_y() -> u32 {
    unsafe { nvptx::_block_idx_y() }
}
#[inline(always)]
pub fn block_z() -> u32 {
    unsafe { nvptx::_block_idx_z() }
}
#[inline(always)]
pub fn grid_dim_z() -> u32 {
    unsafe { nvptx::_grid_dim_z() }
}
#[inline(always)]
pub fn block_dim_x() -> u32 {
    unsafe { nvptx::_block_dim_x() }
}
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    unsafe { nvptx::_grid_dim_x() }
}
/// Global x index of this thread.
#[inline(always)]
pub fn global_x() -> u32 {
    block_x() * block_dim_x() + thread_x()
}
/// Total threads in the x dimension of the grid.
#[inline(always)]
pub fn grid_stride_x() -> u32 {
    grid_dim_x() * block_dim_x()
}

/// Calls `f(i)` for every `i < n` this thread owns in a grid-stride loop, so any grid size
/// covers any `n`.
#[inline(always)]
pub fn grid_stride(n: u32, mut f: impl FnMut(u32)) {
    let mut i = global_x();
    while i < n {
        f(i);
        i += grid_stride_x();
    }
}
#[inline(always)]
pub fn lane() -> u32 {
    thread_x() % WARP
}
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_x() / WARP
}

/// `__syncthreads()`: every thread of the block reaches this point before any continues.
#[inline(always)]
pub fn sync_threads() {
    unsafe { nvptx::_syncthreads() }
}

/// `__syncwarp()`: every lane of the warp reaches this point, and the shared-memory accesses
/// before it are visible to the whole warp after it.
#[inline(always)]
pub fn sync_warp() {
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
}

/// The block's dynamic shared memory (size chosen at launch), typed as `T`.
#[inline(always)]
pub fn dynamic_shared<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}

/// The 32-bit `.shared` window address of a generic pointer into shared memory, as `ldmatrix`,
/// `cp.async` and `ld/st.shared` take it.
#[inline(always)]
pub fn shared_addr<T>(p: *const T) -> u32 {
    let a: u32;
    unsafe {
        asm!("{{ .reg .u64 t; cvta.to.shared.u64 t, {p}; cvt.u32.u64 {a}, t; }}",
             a = out(reg32) a, p = in(reg64) p, options(pure, readonly, nostack));
    }
    a
}

#[inline(always)]
pub fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    let r: f32;
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;",
             r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask, options(nomem, nostack));
    }
    r
}

#[inline(always)]
pub fn shfl_xor_f64(v: f64, mask: u32) -> f64 {
    let bits = v.to_bits();
    let lo = shfl_xor_u32(bits as u32, mask);
    let hi = shfl_xor_u32((bits >> 32) as u32, mask);
    f64::from_bits(((hi as u64) << 32) | lo as u64)
}

#[inline(always)]
pub fn shfl_xor_u32(v: u32, mask: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;",
             r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask, options(nomem, nostack));
    }
    r
}

/// Sum over the 32 lanes of a warp; every lane gets the total.
#[inline(always)]
pub fn warp_sum_f32(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v += shfl_xor_f32(v, m);
        m /= 2;
    }
    v
}

#[inline(always)]
pub fn warp_sum_f64(mut v: f64) -> f64 {
    let mut m = 16;
    while m > 0 {
        v += shfl_xor_f64(v, m);
        m /= 2;
    }
    v
}

#[inline(always)]
pub fn warp_max_f32(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v = v.max(shfl_xor_f32(v, m));
        m /= 2;
    }
    v
}

/// Sum over the whole block: warp shuffles, then one value per warp through shared memory.
/// `scratch` must hold one `f32` per warp; the total is returned to every thread. Contains
/// barriers, so every thread of the block must call it.
///
/// # Safety
/// `scratch` points to shared memory with room for one value per warp.
#[inline(always)]
pub unsafe fn block_sum_f32(v: f32, scratch: *mut f32) -> f32 {
    let w = warp_sum_f32(v);
    let warps = block_dim_x().div_ceil(WARP);
    if lane() == 0 {
        unsafe { *scratch.add(warp_id() as usize) = w };
    }
    sync_threads();
    let mut t = if lane() < warps {
        unsafe { *scratch.add(lane() as usize) }
    } else {
        0.0
    };
    t = warp_sum_f32(t);
    sync_threads(); // scratch may be reused right after
    t
}

/// [`block_sum_f32`] in double precision, for reductions over millions of terms.
///
/// # Safety
/// As [`block_sum_f32`].
#[inline(always)]
pub unsafe fn block_sum_f64(v: f64, scratch: *mut f64) -> f64 {
    let w = warp_sum_f64(v);
    let warps = block_dim_x().div_ceil(WARP);
    if lane() == 0 {
        unsafe { *scratch.add(warp_id() as usize) = w };
    }
    sync_threads();
    let mut t = if lane() < warps {
        unsafe { *scratch.add(lane() as usize) }
    } else {
        0.0
    };
    t = warp_sum_f64(t);
    sync_threads();
    t
}

/// f16 bits to f32.
#[inline(always)]
pub fn h2f(h: u16) -> f32 {
    let r: f32;
    unsafe {
        asm!("cvt.f32.f16 {r}, {h};", r = out(reg32) r, h = in(reg16) h, options(pure, nomem, nostack))
    };
    r
}

/// f32 to f16 bits, round to nearest even.
#[inline(always)]
pub fn f2h(f: f32) -> u16 {
    let r: u16;
    unsafe {
        asm!("cvt.rn.f16.f32 {r}, {f};", r = out(reg16) r, f = in(reg32) f, options(pure, nomem, nostack))
    };
    r
}

/// Two f32 packed into one `f16x2` register (low half first), round to nearest even: one
/// instruction from sm_80 on.
#[inline(always)]
pub fn pack_h2(lo: f32, hi: f32) -> u32 {
    if cfg!(target_feature = "sm_80") {
        let r: u32;
        unsafe {
            asm!("cvt.rn.f16x2.f32 {r}, {hi}, {lo};", r = out(reg32) r, hi = in(reg32) hi,
                 lo = in(reg32) lo, options(pure, nomem, nostack))
        };
        r
    } else {
        f2h(lo) as u32 | ((f2h(hi) as u32) << 16)
    }
}

/// `f16x2` addition, round to nearest even.
#[inline(always)]
pub fn add_h2(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("add.rn.f16x2 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
             options(pure, nomem, nostack))
    };
    r
}

#[inline(always)]
pub fn unpack_h2(v: u32) -> (f32, f32) {
    (h2f(v as u16), h2f((v >> 16) as u16))
}
