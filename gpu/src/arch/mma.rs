//! Tensor cores through `mma.sync` (a warp's 16×8 tile; `m16n8k8` from sm_75, `m16n8k16` from
//! sm_80) and the `ldmatrix` loads that feed them from shared memory.
//!
//! Fragments are the registers each lane holds (layouts in [`crate::layout`]):
//! an `f16x2` register is a `u32`; an fp32 accumulator fragment is `[f32; 4]`.
use super::convert::{add_h2, h2f, pack_h2, unpack_h2};
use super::memory::{ld_shared_v2, ld_shared_v4, st_shared_u32, st_shared_v2, st_shared_v4};
use core::arch::asm;

/// `D = A·B + D` on a 16×8×8 tile, fp16 inputs and fp16 accumulators (sm_75+).
#[inline(always)]
pub fn mma_m16n8k8_f16(d: &mut [u32; 2], a: [u32; 2], b: u32) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {{{d0}, {d1}}}, {{{a0}, {a1}}}, {{{b0}}}, {{{d0}, {d1}}};",
             d0 = inout(reg32) d[0], d1 = inout(reg32) d[1],
             a0 = in(reg32) a[0], a1 = in(reg32) a[1], b0 = in(reg32) b,
             options(pure, nomem, nostack));
    }
}

/// `D = A·B + D` on a 16×8×8 tile, fp16 inputs and fp32 accumulators (sm_75+).
#[inline(always)]
pub fn mma_m16n8k8_f32(d: &mut [f32; 4], a: [u32; 2], b: u32) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}}}, {{{b0}}}, {{{d0}, {d1}, {d2}, {d3}}};",
             d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
             a0 = in(reg32) a[0], a1 = in(reg32) a[1], b0 = in(reg32) b,
             options(pure, nomem, nostack));
    }
}

/// `D = A·B + D` on a 16×8×16 tile, fp16 inputs and fp16 accumulators (sm_80+).
#[inline(always)]
pub fn mma_m16n8k16_f16(d: &mut [u32; 2], a: [u32; 4], b: [u32; 2]) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {{{d0}, {d1}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}}};",
             d0 = inout(reg32) d[0], d1 = inout(reg32) d[1],
             a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
             b0 = in(reg32) b[0], b1 = in(reg32) b[1],
             options(pure, nomem, nostack));
    }
}

/// `D = A·B + D` on a 16×8×16 tile, fp16 inputs and fp32 accumulators (sm_80+).
#[inline(always)]
pub fn mma_m16n8k16_f32(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};",
             d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
             a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
             b0 = in(reg32) b[0], b1 = in(reg32) b[1],
             options(pure, nomem, nostack));
    }
}

/// Four 8×8 b16 matrices from shared memory; lane `l` gives the address of row `l % 8` of matrix
/// `l / 8`, and register `i` receives matrix `i` in the mma fragment layout.
#[inline(always)]
pub fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let r: [u32; 4];
    unsafe {
        let (r0, r1, r2, r3);
        asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{r0}, {r1}, {r2}, {r3}}}, [{a}];",
             r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
             a = in(reg32) addr, options(readonly, nostack));
        r = [r0, r1, r2, r3];
    }
    r
}

/// The inverse of [`ldmatrix_x4`] (sm_90): register `q` of every lane of the warp forms 8×8
/// matrix `q` (lane `l` holding row `l / 4`, columns `2(l % 4)` and `+1`), and lane `8q + i`
/// gives the shared address of row `i` of matrix `q`.
#[inline(always)]
pub fn stmatrix_x4(addr: u32, r: [u32; 4]) {
    unsafe {
        asm!("stmatrix.sync.aligned.m8n8.x4.shared.b16 [{a}], {{{r0}, {r1}, {r2}, {r3}}};",
             a = in(reg32) addr, r0 = in(reg32) r[0], r1 = in(reg32) r[1], r2 = in(reg32) r[2],
             r3 = in(reg32) r[3], options(nostack));
    }
}

/// As [`ldmatrix_x4`], each 8×8 matrix transposed on the way (for operands stored MN-contiguous).
#[inline(always)]
pub fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    let r: [u32; 4];
    unsafe {
        let (r0, r1, r2, r3);
        asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{r0}, {r1}, {r2}, {r3}}}, [{a}];",
             r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
             a = in(reg32) addr, options(readonly, nostack));
        r = [r0, r1, r2, r3];
    }
    r
}

/// Two 8×8 b16 matrices, each transposed on the way: lane `l < 16` gives the address of row
/// `l % 8` of matrix `l / 8`; one k16 step's B fragment of a K-major `[k][8]` tile.
#[inline(always)]
pub fn ldmatrix_x2_trans(addr: u32) -> [u32; 2] {
    let r: [u32; 2];
    unsafe {
        let (r0, r1);
        asm!("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{{r0}, {r1}}}, [{a}];",
             r0 = out(reg32) r0, r1 = out(reg32) r1, a = in(reg32) addr, options(readonly, nostack));
        r = [r0, r1];
    }
    r
}

/// Accumulator fragment of one 16×8 instruction tile: fp16 pairs or fp32.
pub trait Acc: Copy {
    const ZERO: Self;
    fn mma_k8(&mut self, a: [u32; 2], b: u32);
    /// One k = 16 step: `m16n8k16` from sm_80; on sm_75 two `m16n8k8` on the same fragments
    /// (the k16 A fragment's registers 0-1 and 2-3, and B's registers 0 and 1, are the two k8
    /// halves').
    fn mma_k16(&mut self, a: [u32; 4], b: [u32; 2]);
    /// Element `e` (see [`crate::layout::mma_c`]) as f32.
    fn get(&self, e: usize) -> f32;
    /// The elements rounded to fp16, as two `f16x2` pairs (elements 0-1, 2-3): for fp16
    /// accumulators the registers themselves.
    fn pairs(&self) -> [u32; 2];
    /// Adds another accumulator of the same tile, in the accumulator's precision.
    fn add(&mut self, other: &Self);
    /// The sum of `n` fp16 pairs `pair(0), pair(1), …` (the shares of a gradient), added in
    /// that order in the accumulator's precision, as f32.
    fn sum_pairs(n: usize, pair: impl Fn(usize) -> u32) -> [f32; 2];
}

impl Acc for [u32; 2] {
    const ZERO: Self = [0; 2];
    #[inline(always)]
    fn mma_k8(&mut self, a: [u32; 2], b: u32) {
        mma_m16n8k8_f16(self, a, b)
    }
    #[inline(always)]
    fn mma_k16(&mut self, a: [u32; 4], b: [u32; 2]) {
        if cfg!(target_feature = "sm_80") {
            mma_m16n8k16_f16(self, a, b)
        } else {
            self.mma_k8([a[0], a[1]], b[0]);
            self.mma_k8([a[2], a[3]], b[1]);
        }
    }
    #[inline(always)]
    fn get(&self, e: usize) -> f32 {
        h2f((self[e / 2] >> (16 * (e % 2))) as u16)
    }
    #[inline(always)]
    fn pairs(&self) -> [u32; 2] {
        *self
    }
    #[inline(always)]
    fn add(&mut self, other: &Self) {
        for i in 0..2 {
            self[i] = add_h2(self[i], other[i]);
        }
    }
    #[inline(always)]
    fn sum_pairs(n: usize, pair: impl Fn(usize) -> u32) -> [f32; 2] {
        let sum = (1..n).fold(pair(0), |sum, q| add_h2(sum, pair(q)));
        let (lo, hi) = unpack_h2(sum);
        [lo, hi]
    }
}

impl Acc for [f32; 4] {
    const ZERO: Self = [0.0; 4];
    #[inline(always)]
    fn mma_k8(&mut self, a: [u32; 2], b: u32) {
        mma_m16n8k8_f32(self, a, b)
    }
    #[inline(always)]
    fn mma_k16(&mut self, a: [u32; 4], b: [u32; 2]) {
        if cfg!(target_feature = "sm_80") {
            mma_m16n8k16_f32(self, a, b)
        } else {
            self.mma_k8([a[0], a[1]], b[0]);
            self.mma_k8([a[2], a[3]], b[1]);
        }
    }
    #[inline(always)]
    fn get(&self, e: usize) -> f32 {
        self[e]
    }
    #[inline(always)]
    fn pairs(&self) -> [u32; 2] {
        [pack_h2(self[0], self[1]), pack_h2(self[2], self[3])]
    }
    #[inline(always)]
    fn add(&mut self, other: &Self) {
        for i in 0..4 {
            self[i] += other[i];
        }
    }
    #[inline(always)]
    fn sum_pairs(n: usize, pair: impl Fn(usize) -> u32) -> [f32; 2] {
        let (lo, hi) = unpack_h2(pair(0));
        (1..n).fold([lo, hi], |[lo, hi], q| {
            let (a, b) = unpack_h2(pair(q));
            [lo + a, hi + b]
        })
    }
}

/// An f32 result fragment of an `m16n8` `mma` to a row-major fp16 tile in shared memory at
/// `base`, `stride` elements a row, as the fragment lays it out: this lane's pairs go to rows
/// `row` and `row + 8`, columns `col` and `col + 1` (`row`, `col`: the lane's group and twice its
/// index in the group, plus the fragment's origin).
#[inline(always)]
pub fn st_shared_frag_f16(base: u32, stride: u32, row: u32, col: u32, d: [f32; 4]) {
    st_shared_u32(base + (row * stride + col) * 2, pack_h2(d[0], d[1]));
    st_shared_u32(base + ((row + 8) * stride + col) * 2, pack_h2(d[2], d[3]));
}

/// An accumulator fragment to shared memory as one 8- or 16-byte access.
#[inline(always)]
pub fn st_shared_acc<A: Acc>(addr: u32, a: A) {
    const { assert!(size_of::<A>() == 8 || size_of::<A>() == 16) };
    if size_of::<A>() == 8 {
        st_shared_v2(addr, unsafe { core::mem::transmute_copy(&a) });
    } else {
        st_shared_v4(addr, unsafe { core::mem::transmute_copy(&a) });
    }
}

/// An accumulator fragment from shared memory as one 8- or 16-byte access.
#[inline(always)]
pub fn ld_shared_acc<A: Acc>(addr: u32) -> A {
    const { assert!(size_of::<A>() == 8 || size_of::<A>() == 16) };
    if size_of::<A>() == 8 {
        unsafe { core::mem::transmute_copy(&ld_shared_v2(addr)) }
    } else {
        unsafe { core::mem::transmute_copy(&ld_shared_v4(addr)) }
    }
}
