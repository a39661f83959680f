//! Exchanges between the lanes of a warp (`shfl.sync`) and the sums built on them: over a warp,
//! and over a block through one value per warp in shared memory.
use super::sync::sync_threads;
use super::thread::{WARP, block_dim_x, lane, warp_id};
use core::arch::asm;
use core::ops::Add;

#[inline(always)]
pub fn shfl_xor_u32(v: u32, mask: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;",
             r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask, options(nomem, nostack));
    }
    r
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

/// A value the lanes of a warp can exchange and add: f32, or f64 (two 32-bit shuffles) for
/// reductions over millions of terms.
pub trait Lanes: Copy + Add<Output = Self> {
    const ZERO: Self;
    /// The value of lane `lane ^ mask`.
    fn shfl_xor(self, mask: u32) -> Self;
}

impl Lanes for f32 {
    const ZERO: f32 = 0.0;
    #[inline(always)]
    fn shfl_xor(self, mask: u32) -> f32 {
        shfl_xor_f32(self, mask)
    }
}

impl Lanes for f64 {
    const ZERO: f64 = 0.0;
    #[inline(always)]
    fn shfl_xor(self, mask: u32) -> f64 {
        let bits = self.to_bits();
        let lo = shfl_xor_u32(bits as u32, mask);
        let hi = shfl_xor_u32((bits >> 32) as u32, mask);
        f64::from_bits(((hi as u64) << 32) | lo as u64)
    }
}

/// Sum over the 32 lanes of a warp, as a butterfly: every lane gets the same total.
#[inline(always)]
pub fn warp_sum<T: Lanes>(mut v: T) -> T {
    let mut m = 16;
    while m > 0 {
        v = v + v.shfl_xor(m);
        m /= 2;
    }
    v
}

/// Sum over the whole block: warp sums, then one value per warp through shared memory.
/// `scratch` must hold one value per warp; the total is returned to every thread. Contains
/// barriers, so every thread of the block must call it.
///
/// # Safety
/// `scratch` points to shared memory with room for one value per warp.
#[inline(always)]
pub unsafe fn block_sum<T: Lanes>(v: T, scratch: *mut T) -> T {
    let w = warp_sum(v);
    let warps = block_dim_x().div_ceil(WARP);
    if lane() == 0 {
        unsafe { *scratch.add(warp_id() as usize) = w };
    }
    sync_threads();
    let t = if lane() < warps {
        unsafe { *scratch.add(lane() as usize) }
    } else {
        T::ZERO
    };
    let t = warp_sum(t);
    sync_threads(); // scratch may be reused right after
    t
}
