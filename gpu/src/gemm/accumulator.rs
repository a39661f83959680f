//! The `wgmma` rungs' accumulators (sm_90a): one m64nN instruction's fragment of a warpgroup,
//! fp32 or f16x2, as the warpgroup and ping-pong mainloops add into it and their epilogues read
//! it.
use crate::arch::*;

/// A warpgroup's accumulators for one m64nN instruction, fp32 or f16x2.
pub trait Accumulator: Copy {
    const ZERO: Self;
    /// `self += A·B` over one k16 step; `A_MN`/`B_MN`: the operand is stored MN-major.
    fn mma<const A_MN: bool, const B_MN: bool>(&mut self, a: u64, b: u64);
    /// The two fp32 values of pair `j` ([`super::descriptor::accumulator_pair`]).
    fn pair(&self, j: usize) -> (f32, f32);
    /// Pair `j` rounded to fp16, as one `f16x2` word: what the plain product stores.
    fn packed(&self, j: usize) -> u32;
}

macro_rules! accumulator {
    ($ty:ty, $zero:expr, $mma:ident, $pair:ident, $packed:ident) => {
        impl Accumulator for $ty {
            const ZERO: Self = [$zero; _];
            #[inline(always)]
            fn mma<const A_MN: bool, const B_MN: bool>(&mut self, a: u64, b: u64) {
                $mma::<A_MN, B_MN>(self, a, b)
            }
            #[inline(always)]
            fn pair(&self, j: usize) -> (f32, f32) {
                $pair(self, j)
            }
            #[inline(always)]
            fn packed(&self, j: usize) -> u32 {
                $packed(self, j)
            }
        }
    };
}
accumulator!([f32; 32], 0.0, wgmma_m64n64k16_f32, f32_pair, f32_packed);
accumulator!([u32; 16], 0, wgmma_m64n64k16_f16, f16_pair, f16_packed);
accumulator!([f32; 64], 0.0, wgmma_m64n128k16_f32, f32_pair, f32_packed);
accumulator!([u32; 32], 0, wgmma_m64n128k16_f16, f16_pair, f16_packed);
accumulator!([f32; 128], 0.0, wgmma_m64n256k16_f32, f32_pair, f32_packed);
accumulator!([u32; 64], 0, wgmma_m64n256k16_f16, f16_pair, f16_packed);

/// Pair `j` of fp32 accumulators: two adjacent registers.
#[inline(always)]
fn f32_pair(acc: &[f32], j: usize) -> (f32, f32) {
    (acc[2 * j], acc[2 * j + 1])
}

/// Pair `j` of f16x2 accumulators: the two halves of one register.
#[inline(always)]
fn f16_pair(acc: &[u32], j: usize) -> (f32, f32) {
    (h2f(acc[j] as u16), h2f((acc[j] >> 16) as u16))
}

/// Pair `j` of fp32 accumulators rounded as [`f2h`] rounds: one `cvt` of both.
#[inline(always)]
fn f32_packed(acc: &[f32], j: usize) -> u32 {
    pack_h2(acc[2 * j], acc[2 * j + 1])
}

/// Pair `j` of f16x2 accumulators: the register itself.
#[inline(always)]
fn f16_packed(acc: &[u32], j: usize) -> u32 {
    acc[j]
}
