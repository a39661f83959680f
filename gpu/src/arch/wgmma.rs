//! Hopper's warpgroup MMA (`sm_90a` PTX only): `wgmma.mma_async` multiplies a 64×N×16 tile
//! whose operands both lie in shared memory, described by 64-bit matrix descriptors
//! ([`crate::gemm::descriptor`]), into registers spread over the warpgroup's 128 threads.
//!
//! The instructions are asynchronous and `.aligned`: every thread of the warpgroup runs them in
//! uniform control flow. A batch is opened by [`wgmma_fence`], closed by [`wgmma_commit`] and
//! awaited by [`wgmma_wait`]; until then nothing else may write the accumulators (ptxas would
//! serialise the whole pipeline, warning C7515), nor may a function call intervene (C7510),
//! which `build.rs` turns into a build error.
use core::arch::asm;

/// Orders earlier register and shared-memory accesses before the next `wgmma`.
#[inline(always)]
pub fn wgmma_fence() {
    unsafe { asm!("wgmma.fence.sync.aligned;", options(nostack)) };
}

/// Closes the batch of `wgmma` issued since the last commit into one group.
#[inline(always)]
pub fn wgmma_commit() {
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) };
}

/// Waits until at most `N` committed groups are still in flight.
#[inline(always)]
pub fn wgmma_wait<const N: u32>() {
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) };
}

/// One `wgmma` function per accumulator type and instruction N: `D += A·B` with A (64×16) and B
/// (16×N) read through descriptors `a` and `b`. `A_MN`/`B_MN` say that an operand is stored
/// MN-major (the instruction's transpose immediates); otherwise it is K-major. The accumulator
/// list is written out because every register is an operand of the one instruction.
macro_rules! wgmma {
    ($(#[$doc:meta])* $name:ident, $shape:literal, $types:literal, [$elem:ty; $len:literal]; $first:literal $(, $i:literal)*) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name<const A_MN: bool, const B_MN: bool>(d: &mut [$elem; $len], a: u64, b: u64) {
            unsafe {
                asm!(
                    concat!("wgmma.mma_async.sync.aligned.", $shape, ".", $types, " {{{", $first, "}" $(, ", {", $i, "}")*,
                            "}}, {a}, {b}, 1, 1, 1, {ta}, {tb};"),
                    inout(reg32) d[$first], $(inout(reg32) d[$i],)*
                    a = in(reg64) a, b = in(reg64) b, ta = const A_MN as u32, tb = const B_MN as u32,
                    options(nostack)
                );
            }
        }
    };
}

wgmma!(
    /// m64n64k16 with fp32 accumulators: 32 registers a thread.
    wgmma_m64n64k16_f32, "m64n64k16", "f32.f16.f16", [f32; 32];
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31
);

wgmma!(
    /// m64n64k16 with fp16 accumulators (f16x2 pairs): 16 registers a thread.
    wgmma_m64n64k16_f16, "m64n64k16", "f16.f16.f16", [u32; 16];
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
);

wgmma!(
    /// m64n128k16 with fp32 accumulators: 64 registers a thread.
    wgmma_m64n128k16_f32, "m64n128k16", "f32.f16.f16", [f32; 64];
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
    50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
);

wgmma!(
    /// m64n128k16 with fp16 accumulators (f16x2 pairs): 32 registers a thread.
    wgmma_m64n128k16_f16, "m64n128k16", "f16.f16.f16", [u32; 32];
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31
);

wgmma!(
    /// m64n256k16 with fp32 accumulators: 128 registers a thread.
    wgmma_m64n256k16_f32, "m64n256k16", "f32.f16.f16", [f32; 128];
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
    50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73,
    74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97,
    98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116,
    117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127
);

wgmma!(
    /// m64n256k16 with fp16 accumulators (f16x2 pairs): 64 registers a thread.
    wgmma_m64n256k16_f16, "m64n256k16", "f16.f16.f16", [u32; 64];
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
    50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
);

/// Raises this warpgroup's registers a thread to `N` (a multiple of 8, 24 to 256), once the
/// others of the block have released enough: `setmaxnreg` moves registers between the
/// warpgroups of a warp-specialized kernel, whose entry declares the count it starts with
/// (`.maxnreg`).
#[inline(always)]
pub fn setmaxnreg_inc<const N: u32>() {
    unsafe { asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}

/// Lowers this warpgroup's registers a thread to `N`, releasing the rest to the block.
#[inline(always)]
pub fn setmaxnreg_dec<const N: u32>() {
    unsafe { asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}
