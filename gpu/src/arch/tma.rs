//! Hopper's tensor memory accelerator (sm_90): `cp.async.bulk.tensor` copies a box of a 2-D
//! tensor from global to shared memory on the copy engine, as a tensor map built on the host
//! describes it (shape, strides, box, 128-byte swizzle, zero fill outside the tensor), and
//! counts its bytes at an `mbarrier` ([`super::copy`]).
use core::arch::asm;

/// Makes the tensor map at `map` (in global memory, written before the launch) visible to the
/// copy engine's tensor-map proxy, which does not see generic writes by itself.
#[inline(always)]
pub fn tensormap_acquire(map: *const u8) {
    unsafe {
        asm!("fence.proxy.tensormap::generic.acquire.gpu [{m}], 128;",
             m = in(reg64) map, options(nostack));
    }
}

/// Copies the box whose first element is at coordinates (`x` innermost, `y`) of the tensor of
/// `map` into shared memory at `dst`, completing its bytes at `bar`. Elements outside the tensor
/// arrive as zeros, and count as bytes all the same.
#[inline(always)]
pub fn tma_load_2d(dst: u32, map: *const u8, (x, y): (u32, u32), bar: u32) {
    unsafe {
        asm!("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{b}];",
             d = in(reg32) dst, m = in(reg64) map, x = in(reg32) x, y = in(reg32) y,
             b = in(reg32) bar, options(nostack));
    }
}
