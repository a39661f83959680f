//! Loads and stores that plain Rust cannot express: shared-memory accesses by `.shared`
//! address, vector widths, the `cg` cache hint, and reductions in global memory.
use core::arch::asm;

/// 16-byte load from global memory (the address must be 16-byte aligned).
#[inline(always)]
pub fn ld_global_v4(p: *const u8) -> [u32; 4] {
    let (r0, r1, r2, r3): (u32, u32, u32, u32);
    unsafe {
        asm!("ld.global.v4.u32 {{{r0}, {r1}, {r2}, {r3}}}, [{p}];",
             r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
             p = in(reg64) p, options(readonly, nostack));
    }
    [r0, r1, r2, r3]
}

/// [`ld_global_v4`] where `load` holds, else zeros: a predicated load, so that several can be
/// issued before the first is used without a branch between them.
#[inline(always)]
pub fn ld_global_v4_if(p: *const u8, load: bool) -> [u32; 4] {
    let (mut r0, mut r1, mut r2, mut r3) = (0u32, 0u32, 0u32, 0u32);
    unsafe {
        asm!("{{", ".reg .pred %p;", "setp.ne.u32 %p, {c}, 0;",
             "@%p ld.global.v4.u32 {{{r0}, {r1}, {r2}, {r3}}}, [{p}];", "}}",
             r0 = inout(reg32) r0, r1 = inout(reg32) r1, r2 = inout(reg32) r2,
             r3 = inout(reg32) r3, c = in(reg32) load as u32, p = in(reg64) p,
             options(readonly, nostack));
    }
    [r0, r1, r2, r3]
}

/// 16-byte store to global memory (the address must be 16-byte aligned).
#[inline(always)]
pub fn st_global_v4(p: *mut u8, v: [u32; 4]) {
    unsafe {
        asm!("st.global.v4.u32 [{p}], {{{v0}, {v1}, {v2}, {v3}}};",
             p = in(reg64) p, v0 = in(reg32) v[0], v1 = in(reg32) v[1], v2 = in(reg32) v[2],
             v3 = in(reg32) v[3], options(nostack));
    }
}

/// 16-byte relaxed store to global memory at the GPU's scope, for a reader on another SM
/// that polls it: each aligned 8-byte half reaches L2 whole, as NCCL's LL protocol relies on.
#[inline(always)]
pub fn st_relaxed_v4(p: *mut u32, v: [u32; 4]) {
    unsafe {
        asm!("st.relaxed.gpu.global.v4.u32 [{p}], {{{v0}, {v1}, {v2}, {v3}}};",
             p = in(reg64) p, v0 = in(reg32) v[0], v1 = in(reg32) v[1], v2 = in(reg32) v[2],
             v3 = in(reg32) v[3], options(nostack));
    }
}

/// 16-byte relaxed load from global memory at the GPU's scope: never served from L1, so a
/// loop of them sees another SM's [`st_relaxed_v4`] once it lands.
#[inline(always)]
pub fn ld_relaxed_v4(p: *const u32) -> [u32; 4] {
    let (r0, r1, r2, r3): (u32, u32, u32, u32);
    unsafe {
        asm!("ld.relaxed.gpu.global.v4.u32 {{{r0}, {r1}, {r2}, {r3}}}, [{p}];",
             r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
             p = in(reg64) p, options(nostack));
    }
    [r0, r1, r2, r3]
}

/// Loads that bypass L1 (`.cg`): for values other SMs wrote during this launch.
#[inline(always)]
pub fn ld_global_cg_u32(p: *const u32) -> u32 {
    let v: u32;
    unsafe {
        asm!("ld.global.cg.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p,
             options(readonly, nostack));
    }
    v
}

/// [`ld_global_cg_u32`] where `load` holds, else `or`: a predicated load, so code around it
/// stays branch-free.
#[inline(always)]
pub fn ld_global_cg_u32_if(p: *const u32, load: bool, or: u32) -> u32 {
    let mut v = or;
    unsafe {
        asm!("{{", ".reg .pred %p;", "setp.ne.u32 %p, {c}, 0;",
             "@%p ld.global.cg.u32 {v}, [{p}];", "}}",
             v = inout(reg32) v, c = in(reg32) load as u32, p = in(reg64) p,
             options(readonly, nostack));
    }
    v
}

#[inline(always)]
pub fn ld_global_cg_i64(p: *const i64) -> i64 {
    let v: i64;
    unsafe {
        asm!("ld.global.cg.s64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p,
             options(readonly, nostack));
    }
    v
}

/// Two adjacent ones in one load (16-byte aligned).
#[inline(always)]
pub fn ld_global_cg_v2_i64(p: *const i64) -> [i64; 2] {
    let (a, b): (i64, i64);
    unsafe {
        asm!("ld.global.cg.v2.s64 {{{a}, {b}}}, [{p}];", a = out(reg64) a, b = out(reg64) b,
             p = in(reg64) p, options(readonly, nostack));
    }
    [a, b]
}

/// Asks L2 for the 128-byte line holding `p`, so that a later access finds it there instead of
/// waiting on DRAM; the thread does not wait. L2 is where every SM's global accesses meet, so
/// the line cannot go stale there.
#[inline(always)]
pub fn prefetch_l2(p: *const u8) {
    unsafe { asm!("prefetch.global.L2 [{p}];", p = in(reg64) p, options(readonly, nostack)) };
}

/// `*p += v` in global memory, relaxed, at GPU scope, with no value returned.
#[inline(always)]
pub fn red_global_add_i64(p: *mut i64, v: i64) {
    unsafe {
        asm!("red.relaxed.gpu.global.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v,
             options(nostack));
    }
}

/// As [`red_global_add_i64`] for f32. Float addition does not associate: a slot that must come
/// out the same on every run receives at most two values (addition commutes).
#[inline(always)]
pub fn red_global_add_f32(p: *mut f32, v: f32) {
    unsafe {
        asm!("red.relaxed.gpu.global.add.f32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v,
             options(nostack));
    }
}

#[inline(always)]
pub fn ld_shared_u32(addr: u32) -> u32 {
    let v: u32;
    unsafe {
        asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr,
             options(readonly, nostack));
    }
    v
}

#[inline(always)]
pub fn ld_shared_v2(addr: u32) -> [u32; 2] {
    let (x, y): (u32, u32);
    unsafe {
        asm!("ld.shared.v2.b32 {{{x}, {y}}}, [{a}];", a = in(reg32) addr,
             x = out(reg32) x, y = out(reg32) y, options(readonly, nostack));
    }
    [x, y]
}

#[inline(always)]
pub fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    unsafe {
        asm!("ld.shared.v4.b32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg32) addr,
             x = out(reg32) x, y = out(reg32) y, z = out(reg32) z,
             w = out(reg32) w, options(readonly, nostack));
    }
    [x, y, z, w]
}

#[inline(always)]
pub fn st_shared_u16(addr: u32, v: u16) {
    unsafe {
        asm!("st.shared.u16 [{a}], {v};", a = in(reg32) addr, v = in(reg16) v,
             options(nostack));
    }
}

#[inline(always)]
pub fn st_shared_u32(addr: u32, v: u32) {
    unsafe {
        asm!("st.shared.u32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v,
             options(nostack));
    }
}

#[inline(always)]
pub fn st_shared_v2(addr: u32, v: [u32; 2]) {
    unsafe {
        asm!("st.shared.v2.b32 [{a}], {{{x}, {y}}};", a = in(reg32) addr,
             x = in(reg32) v[0], y = in(reg32) v[1], options(nostack));
    }
}

/// 16-byte store to shared memory.
#[inline(always)]
pub fn st_shared_v4(addr: u32, v: [u32; 4]) {
    unsafe {
        asm!("st.shared.v4.u32 [{a}], {{{v0}, {v1}, {v2}, {v3}}};",
             a = in(reg32) addr, v0 = in(reg32) v[0], v1 = in(reg32) v[1], v2 = in(reg32) v[2], v3 = in(reg32) v[3],
             options(nostack));
    }
}
