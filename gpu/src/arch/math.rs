//! The special-function unit's approximations (`.approx`): a few ulp off the correctly rounded
//! value, one instruction each. `_ftz` flushes subnormal inputs and results to zero.
use core::arch::asm;

pub const LOG2_E: f32 = core::f32::consts::LOG2_E;
pub const LN_2: f32 = core::f32::consts::LN_2;

/// `2^x` (max relative error 2^-22).
#[inline(always)]
pub fn ex2_approx_ftz(x: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("ex2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

/// `1 / x` (max relative error 2^-23).
#[inline(always)]
pub fn rcp_approx_ftz(x: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("rcp.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

/// `log2(x)`.
#[inline(always)]
pub fn lg2_approx_ftz(x: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("lg2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

/// `log2(x)`.
#[inline(always)]
pub fn lg2_approx(x: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("lg2.approx.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

#[inline(always)]
pub fn sqrt_approx(x: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("sqrt.approx.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

/// `cos(x)`, `x` in radians.
#[inline(always)]
pub fn cos_approx(x: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("cos.approx.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}
