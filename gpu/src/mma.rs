//! Tensor-core and asynchronous-copy instructions as inline PTX.
//!
//! Fragments are the registers each lane holds (layouts in [`crate::layout`]):
//! an `f16x2` register is a `u32`; an fp32 accumulator fragment is `[f32; 4]`.
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

/// Asynchronous 16-byte global→shared copy (sm_80+). `src_bytes` below 16 zero-fills the rest,
/// so 0 writes zeros without reading global memory: how tile edges are padded.
#[inline(always)]
pub fn cp_async_16(dst: u32, src: *const u8, src_bytes: u32) {
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};",
             d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
    }
}

/// [`cp_async_16`] of a whole chunk: no source size operand.
#[inline(always)]
pub fn cp_async_16_whole(dst: u32, src: *const u8) {
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16;",
             d = in(reg32) dst, s = in(reg64) src, options(nostack));
    }
}

/// Closes the group of `cp.async` issued so far by this thread.
#[inline(always)]
pub fn cp_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// Waits until at most `N` committed groups of this thread are still in flight.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

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

/// 16-byte store to shared memory.
#[inline(always)]
pub fn st_shared_v4(addr: u32, v: [u32; 4]) {
    unsafe {
        asm!("st.shared.v4.u32 [{a}], {{{v0}, {v1}, {v2}, {v3}}};",
             a = in(reg32) addr, v0 = in(reg32) v[0], v1 = in(reg32) v[1], v2 = in(reg32) v[2], v3 = in(reg32) v[3],
             options(nostack));
    }
}
