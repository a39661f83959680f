//! Barriers and memory ordering: of a warp, of a block (whole or named), of the whole grid
//! through a counter in global memory, and of grids launched one after another.
use super::HOPPER;
use super::thread::thread_x;
use core::arch::asm;
use core::arch::nvptx;

/// `__syncthreads()`: every thread of the block reaches this point before any continues.
#[inline(always)]
pub fn sync_threads() {
    unsafe { nvptx::_syncthreads() }
}

/// `__syncwarp()`: every lane of the warp reaches this point, and the shared-memory accesses
/// before it are visible to the whole warp after it.
#[inline(always)]
pub fn sync_warp() {
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
}

/// Named barrier `id` of `threads` threads (whole warps), both given at run time: only the
/// warps that take part wait, and no other warp may arrive at it.
#[inline(always)]
pub fn bar_sync_n(id: u32, threads: u32) {
    unsafe {
        asm!("bar.sync {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack))
    };
}

/// Arrives at named barrier `id` of `threads` threads without waiting: the warps that wait
/// there with [`bar_sync_n`] go on once the arrivals and their own make up `threads`.
#[inline(always)]
pub fn bar_arrive_n(id: u32, threads: u32) {
    unsafe {
        asm!("bar.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack))
    };
}

/// Makes this thread's earlier writes to shared memory visible to the copy engine (the async
/// proxy), which reads them for a [`tma_store_2d`](super::tma_store_2d) or a
/// [`bulk_reduce_add_u64`](super::bulk_reduce_add_u64).
#[inline(always)]
pub fn fence_proxy_async_shared() {
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}

/// Orders the copy engine's completed writes to global memory (the async proxy's) before this
/// thread's later accesses and fences (the generic proxy's).
#[inline(always)]
pub fn fence_proxy_async_global() {
    unsafe { asm!("fence.proxy.async.global;", options(nostack)) };
}

/// Every block counted by `counter` arrives; returns when it reaches `target` (arrivals per
/// round times the rounds done so far: its owner zeroes it before the launch). All blocks must
/// be resident at once (a cooperative launch). `sync` is the barrier of the block's threads
/// that take part (thread 0 among them). Thread 0 announces and polls ([`announce`],
/// [`poll`]) within warp 0's branch.
#[inline(always)]
pub fn grid_barrier(counter: *mut u32, target: u32, sync: fn()) {
    sync();
    if thread_x() < 32 {
        if thread_x() == 0 {
            announce(counter);
            poll(counter, target);
        }
        // The rest of warp 0 waits here for lane 0, so the warp reaches the block barrier
        // whole: `bar.sync` counts warps, and a warp arriving split would be counted for the
        // next round too.
        sync_warp();
    }
    sync();
}

/// [`grid_barrier`]'s first half, for a block with work to do between announcing its arrival
/// and needing the others': after `sync`, the barrier of its threads, thread 0 announces.
#[inline(always)]
pub fn barrier_arrive(counter: *mut u32, sync: fn()) {
    sync();
    if thread_x() == 0 {
        announce(counter);
    }
}

/// [`grid_barrier`]'s second half: returns when the count reaches `target`.
#[inline(always)]
pub fn barrier_wait(counter: *mut u32, target: u32, sync: fn()) {
    if thread_x() < 32 {
        if thread_x() == 0 {
            poll(counter, target);
        }
        sync_warp();
    }
    sync();
}

/// Adds this block's arrival to `counter`, after a fence that makes the block's earlier writes
/// visible to every block that sees the count.
#[inline(always)]
fn announce(counter: *mut u32) {
    unsafe {
        asm!("fence.acq_rel.gpu;", "red.relaxed.gpu.global.add.u32 [{c}], 1;",
             c = in(reg64) counter, options(nostack));
    }
}

/// Adds this block's arrival to `counter` and returns the count before it, after a fence that
/// makes the block's earlier writes visible to the block that reads the last count; that
/// block's thread then sees every other block's writes (the add acquires). Thread 0 calls it,
/// after the barrier of the block's threads.
#[inline(always)]
pub fn arrive_counted(counter: *mut u32) -> u32 {
    let before: u32;
    unsafe {
        asm!("fence.acq_rel.gpu;", "atom.acq_rel.gpu.global.add.u32 {b}, [{c}], 1;",
             b = out(reg32) before, c = in(reg64) counter, options(nostack));
    }
    before
}

/// Spins until `counter` reaches `target`, with acquire loads, which order what follows
/// without a fence after the loop.
#[inline(always)]
fn poll(counter: *mut u32, target: u32) {
    loop {
        let v: u32;
        unsafe {
            asm!("ld.acquire.gpu.global.u32 {v}, [{c}];",
                 v = out(reg32) v, c = in(reg64) counter, options(nostack));
        }
        if v >= target {
            break;
        }
    }
}

/// Lets a kernel launched after this one as a dependent launch start before this grid ends:
/// its blocks may be scheduled, and run up to their [`wait_for_prior_grids`], once every block
/// of this grid has called this (or exited). A no-op before sm_90.
#[inline(always)]
pub fn launch_dependents() {
    if HOPPER {
        unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) };
    }
}

/// In a kernel launched as a dependent launch: waits until the grids it depends on have
/// completed and their writes are visible. Returns at once after a plain launch, and before
/// sm_90 (where every launch is plain).
#[inline(always)]
pub fn wait_for_prior_grids() {
    if HOPPER {
        unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
    }
}
