//! Asynchronous copies from global to shared memory and the barriers that count them:
//! `cp.async` (sm_80+), in 16-byte pieces a thread issues and waits for by group; Hopper's bulk
//! copies on the copy engine (sm_90, PTX 8.0), which report their bytes at an `mbarrier`.
use core::arch::asm;

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

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared
/// memory on the copy engine, counting them at `bar` (sm_90).
#[inline(always)]
pub fn bulk_copy(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    unsafe {
        asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
             d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar,
             options(nostack));
    }
}

/// Initialises an `mbarrier` for `count` arrivals per phase, visible to the copy engine and
/// the cluster (sm_90).
#[inline(always)]
pub fn mbar_init(bar: u32, count: u32) {
    unsafe {
        asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", "fence.mbarrier_init.release.cluster;",
             b = in(reg32) bar, c = in(reg32) count, options(nostack));
    }
}

/// Arrives at `bar` announcing `bytes` to come: the phase completes once they have landed
/// (sm_90).
#[inline(always)]
pub fn mbar_expect(bar: u32, bytes: u32) {
    unsafe {
        let _state: u64;
        asm!("mbarrier.arrive.expect_tx.shared::cta.b64 {s}, [{b}], {n};",
             s = out(reg64) _state, b = in(reg32) bar, n = in(reg32) bytes, options(nostack));
    }
}

/// Arrives at `bar` once (sm_90): a consumer saying it has finished with what the barrier guards.
#[inline(always)]
pub fn mbar_arrive(bar: u32) {
    unsafe {
        let _state: u64;
        asm!("mbarrier.arrive.shared::cta.b64 {s}, [{b}];",
             s = out(reg64) _state, b = in(reg32) bar, options(nostack));
    }
}

/// Waits until the phase of `bar` with this parity has completed (sm_90). `CLUSTER`: the phase
/// is completed by another block's [`st_async`](super::cluster) stores, which must be visible
/// after it (acquire at cluster scope; the copy engine's bytes need only the block's).
#[inline(always)]
pub fn mbar_wait<const CLUSTER: bool>(bar: u32, parity: u32) {
    loop {
        let done: u32;
        unsafe {
            if CLUSTER {
                asm!("{{ .reg .pred p;",
                     "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [{b}], {ph};",
                     "selp.u32 {d}, 1, 0, p; }}",
                     d = out(reg32) done, b = in(reg32) bar, ph = in(reg32) parity,
                     options(nostack));
            } else {
                asm!("{{ .reg .pred p;",
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph};",
                     "selp.u32 {d}, 1, 0, p; }}",
                     d = out(reg32) done, b = in(reg32) bar, ph = in(reg32) parity,
                     options(nostack));
            }
        }
        if done != 0 {
            break;
        }
    }
}
