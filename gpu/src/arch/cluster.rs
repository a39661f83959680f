//! Thread-block clusters (sm_90, PTX 8.1): a block's rank, the shared memory of the other
//! blocks of its cluster (distributed shared memory), stores into it counted at the receiver's
//! `mbarrier` (`st.async`), arrivals at another block's `mbarrier`, and the barrier of the whole
//! cluster.
use core::arch::asm;

/// This block's rank in its cluster.
#[inline(always)]
pub fn cluster_rank() -> u32 {
    let r: u32;
    unsafe {
        asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) r, options(nomem, nostack));
    }
    r
}

/// The address of the same shared-memory location in block `rank` of the cluster.
#[inline(always)]
pub fn peer_addr(addr: u32, rank: u32) -> u32 {
    let a: u32;
    unsafe {
        asm!("mapa.shared::cluster.u32 {a}, {s}, {r};", a = out(reg32) a, s = in(reg32) addr,
             r = in(reg32) rank, options(nomem, nostack));
    }
    a
}

/// Stores into another block's shared memory (an address from [`peer_addr`]) and counts the
/// bytes at its `mbarrier` `bar` (also from [`peer_addr`]): 4, 8 or 16 bytes.
#[inline(always)]
pub fn st_async_u32(addr: u32, v: u32, bar: u32) {
    unsafe {
        asm!("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [{a}], {v}, [{b}];",
             a = in(reg32) addr, v = in(reg32) v, b = in(reg32) bar, options(nostack));
    }
}

#[inline(always)]
pub fn st_async_v2(addr: u32, v: [u32; 2], bar: u32) {
    unsafe {
        asm!("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [{a}], {{{x}, {y}}}, [{b}];",
             a = in(reg32) addr, x = in(reg32) v[0], y = in(reg32) v[1], b = in(reg32) bar,
             options(nostack));
    }
}

#[inline(always)]
pub fn st_async_v4(addr: u32, v: [u32; 4], bar: u32) {
    unsafe {
        asm!("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [{a}], {{{x}, {y}, {z}, {w}}}, [{b}];",
             a = in(reg32) addr, x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2],
             w = in(reg32) v[3], b = in(reg32) bar, options(nostack));
    }
}

/// Arrives once at the `mbarrier` `bar` of a block of the cluster (an address from
/// [`peer_addr`], this block's own included), releasing at the scope of this block alone: a
/// consumer telling a block that writes its shared memory through the copy engine that it has
/// finished reading it.
#[inline(always)]
pub fn mbar_arrive_cluster(bar: u32) {
    unsafe {
        asm!("mbarrier.arrive.shared::cluster.b64 _, [{b}];",
             b = in(reg32) bar, options(nostack));
    }
}

/// Barrier of every thread of the cluster; what each wrote before it (to any block's shared
/// memory) is visible to all after it.
#[inline(always)]
pub fn cluster_sync() {
    unsafe {
        asm!(
            "barrier.cluster.arrive.release;",
            "barrier.cluster.wait.acquire;",
            options(nostack)
        );
    }
}
