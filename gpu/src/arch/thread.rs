//! Where a thread is (indices of thread, warp, block and grid), the block's dynamic shared
//! memory, and values hidden from the optimiser.
use core::arch::asm;
use core::arch::nvptx;

/// Threads in a warp.
pub const WARP: u32 = 32;

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
pub fn block_dim_x() -> u32 {
    unsafe { nvptx::_block_dim_x() }
}
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    unsafe { nvptx::_grid_dim_x() }
}
#[inline(always)]
pub fn grid_dim_y() -> u32 {
    unsafe { nvptx::_grid_dim_y() }
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

/// [`opaque`] for a pointer (passed as its address: the asm only copies it).
#[inline(always)]
pub fn opaque_ptr(p: *mut u32) -> *mut u32 {
    let o: u64;
    unsafe {
        asm!("mov.b64 {o}, {p};", o = out(reg64) o, p = in(reg64) p as u64, options(nomem, nostack))
    };
    o as *mut u32
}

/// The GPU's nanosecond clock (`%globaltimer`), which every SM reads alike; it advances in steps
/// of up to a microsecond on some GPUs, so a single interval is coarse and a median of many is
/// not. Volatile: each read is where it stands in the program.
#[inline(always)]
pub fn global_timer() -> u64 {
    let t: u64;
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack)) };
    t
}
