//! Hopper's tensor memory accelerator (sm_90): `cp.async.bulk.tensor` copies a box of a 2-D
//! tensor from global to shared memory on the copy engine, as a tensor map built on the host
//! describes it (shape, strides, box, 128-byte swizzle, zero fill outside the tensor), and
//! counts its bytes at an `mbarrier` ([`super::copy`]).
//!
//! The maps are kernel parameters, passed by value, and read in place: a map in global memory
//! would need a copy before every launch (which a captured graph cannot repeat) and a proxy
//! fence in the kernel.
use core::arch::asm;

/// The generic address of the kernel parameter whose PTX name is `$symbol`
/// (`<kernel>_param_<i>`), so the copy engine reads a tensor map where the launch put it. Rust
/// offers no way to name a parameter's own address (taking a reference copies it to local
/// memory), hence the symbol. Built where its users, the `wgmma` kernels, are: sm_90a PTX.
#[cfg(target_feature = "sm_90a")]
macro_rules! param_address {
    ($symbol:expr) => {{
        let a: u64;
        unsafe {
            core::arch::asm!(concat!("mov.b64 {a}, ", $symbol, ";"), "cvta.param.u64 {a}, {a};",
                             a = out(reg64) a, options(pure, nomem, nostack));
        }
        a as *const u8
    }};
}
#[cfg(target_feature = "sm_90a")]
pub(crate) use param_address;

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

/// Copies the box of shared memory at `src`, laid out as the tensor map `map` says, to the
/// tensor at coordinates (`x` innermost, `y`), on the copy engine: only the part inside the
/// tensor is written. The copy joins this thread's bulk group ([`bulk_commit`]); the shared
/// writes it reads must be made visible to the copy engine first
/// ([`fence_proxy_async_shared`](super::fence_proxy_async_shared)).
#[inline(always)]
pub fn tma_store_2d(map: *const u8, (x, y): (u32, u32), src: u32) {
    unsafe {
        asm!("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [{m}, {{{x}, {y}}}], [{s}];",
             m = in(reg64) map, x = in(reg32) x, y = in(reg32) y, s = in(reg32) src,
             options(nostack));
    }
}

/// Closes this thread's group of bulk copies to global memory issued so far.
#[inline(always)]
pub fn bulk_commit() {
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
}

/// Adds `bytes` (a multiple of 16; both addresses 16-byte aligned) of u64 words from shared
/// memory at `src` into global memory at `dst`, element by element, on the copy engine. Joins
/// this thread's bulk group ([`bulk_commit`]), as [`tma_store_2d`] does.
#[inline(always)]
pub fn bulk_reduce_add_u64(dst: *mut i64, src: u32, bytes: u32) {
    unsafe {
        asm!("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [{d}], [{s}], {n};",
             d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes, options(nostack));
    }
}

/// Waits until at most `N` of this thread's committed bulk groups are incomplete: the others
/// have read their shared memory and performed their writes to global memory.
#[inline(always)]
pub fn bulk_wait<const N: u32>() {
    unsafe { asm!("cp.async.bulk.wait_group {n};", n = const N, options(nostack)) };
}

/// Waits until at most `N` of this thread's committed bulk groups still read their shared
/// memory (their writes to global memory may still be under way).
#[inline(always)]
pub fn bulk_wait_read<const N: u32>() {
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack)) };
}

/// [`tma_load_2d`] into every block of the cluster named in the bit mask `ctas` (bit `r`: the
/// block of rank `r`) at once: each receives the box at the same shared address `dst`, its
/// bytes completing at its own `mbarrier` at `bar`. One read of global memory and L2 feeds them
/// all (the copy engine's multicast, optimised on sm_90a).
#[inline(always)]
pub fn tma_load_2d_multicast(dst: u32, map: *const u8, (x, y): (u32, u32), bar: u32, ctas: u16) {
    unsafe {
        asm!("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [{d}], [{m}, {{{x}, {y}}}], [{b}], {c};",
             d = in(reg32) dst, m = in(reg64) map, x = in(reg32) x, y = in(reg32) y,
             b = in(reg32) bar, c = in(reg16) ctas, options(nostack));
    }
}
