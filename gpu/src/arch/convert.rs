//! fp16 conversions and packed `f16x2` arithmetic. fp16 values travel as their bits (`u16`),
//! pairs as one `u32` register, low half first.
use core::arch::asm;

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

/// `x` rounded to fp16 and back: the value the tensor cores see.
#[inline(always)]
pub fn round_h(x: f32) -> f32 {
    h2f(f2h(x))
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

#[inline(always)]
pub fn unpack_h2(v: u32) -> (f32, f32) {
    (h2f(v as u16), h2f((v >> 16) as u16))
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
