//! Exchanges between the lanes of a warp (`shfl.sync`) and the sums built on them: over a warp,
//! and over a block through one value per warp in shared memory.
use super::sync::sync_threads;
use super::thread::{WARP, block_dim_x, lane, warp_id};
use crate::layout::transpose_sources;
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

/// Lane `src`'s `v`.
#[inline(always)]
pub fn shfl_idx_u32(v: u32, src: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.idx.b32 {r}, {v}, {s}, 0x1f, 0xffffffff;",
             r = out(reg32) r, v = in(reg32) v, s = in(reg32) src, options(nomem, nostack));
    }
    r
}

/// `lane`'s word of the transpose of an 8×8 matrix of 16-bit values that the warp holds as an
/// accumulator fragment, one word a lane ([`transpose_sources`]): the B fragment (k8) of the
/// matrix whose rows are k. Two shuffles; every lane of the warp must take part.
#[inline(always)]
pub fn transpose_b16(lane: usize, word: u32) -> u32 {
    let (a, b, h) = transpose_sources(lane);
    let (x, y) = (shfl_idx_u32(word, a as u32), shfl_idx_u32(word, b as u32));
    if h == 0 {
        (x & 0xffff) | (y << 16)
    } else {
        (x >> 16) | (y & 0xffff_0000)
    }
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
