//! The warpgroup rungs (sm_90a): `wgmma.mma_async` reading both operands from shared memory,
//! which the copy engine fills through tensor maps (TMA) in a ring of stages.
//!
//! Hierarchy: a threadblock computes a BM×BN tile of C, walking K in steps of 64 ([`BK`]); each
//! of its consumer warpgroups owns `MI` blocks of 64 rows × BN (the warpgroup tile), made of one
//! m64nBNk16 instruction per block and k16 step. Shared memory is laid out as
//! [`super::descriptor`] says; `full[s]` counts the bytes of stage `s` landing, `empty[s]` the
//! consumer warpgroups that have finished reading it. One thread of a producer warpgroup issues
//! the copies: it refills stage `s` with the K step `STAGES` ahead once `empty[s]` completes.
//!
//! Blocks may form clusters of `CM` along M, which need the same B tiles: each block's producer
//! loads its A tile and a `1/CM` share of B, the copy engine multicasting the share into every
//! block of the cluster, so each B byte leaves L2 once per cluster. A block's stage is then
//! written by every producer of the cluster, so `empty[s]` counts the consumer warpgroups of
//! the whole cluster, and each consumer releases a stage in every block.
use super::Args;
use super::accumulator::Accumulator;
use super::descriptor::operand_descriptor;
use super::descriptor::{ATOM_BYTES, BK, C_BOX_BYTES, MAP_BYTES, MN_CHUNK_BYTES, WGMMA_M};
use super::staging::{staged, step_staged, store_pairs, store_staged_epilogue, wgmma_layouts};
use crate::arch::*;

/// Dynamic shared memory typed by its alignment: the swizzle atoms must start 1024-aligned.
#[repr(C, align(1024))]
pub(super) struct Atom([u8; ATOM_BYTES as usize]);

/// The ring of stages in shared memory (each an A tile then a B tile), then one `full` and one
/// `empty` barrier per stage.
#[derive(Clone, Copy)]
pub(super) struct Ring<const STAGES: usize> {
    pub(super) base: u32,
    pub(super) a_bytes: u32,
    pub(super) b_bytes: u32,
}

impl<const STAGES: usize> Ring<STAGES> {
    #[inline(always)]
    pub(super) fn a(&self, s: u32) -> u32 {
        self.base + s * (self.a_bytes + self.b_bytes)
    }
    #[inline(always)]
    pub(super) fn b(&self, s: u32) -> u32 {
        self.a(s) + self.a_bytes
    }
    #[inline(always)]
    pub(super) fn full(&self, s: u32) -> u32 {
        self.a(STAGES as u32) + 8 * s
    }
    #[inline(always)]
    pub(super) fn empty(&self, s: u32) -> u32 {
        self.full(STAGES as u32) + 8 * s
    }
    /// Stage and phase parity of K step `kt`.
    #[inline(always)]
    pub(super) fn slot(kt: u32) -> (u32, u32) {
        (kt % STAGES as u32, (kt / STAGES as u32) & 1)
    }
}

/// The warpgroup GEMM: `WG` consumer warpgroups along M, each `MI` 64-row blocks of a BN-wide
/// tile (BM = 64·MI·WG), and one producer warpgroup after them; `STAGES` stages; clusters of
/// `CM` blocks along M sharing B (the launch's cluster shape must be 1 × `CM`). `A_MN`/`B_MN`:
/// the operand is stored MN-major (A as `[K][M]`, B as `[K][N]`), else K-major (A as `[M][K]`,
/// B as `[N][K]`). `maps` is the generic address of the kernel's
/// [`TensorMaps`](super::descriptor::TensorMaps) parameter: the copy engine reads the maps where
/// the launch put them. `STEP`: the kernel takes the product's SGD step ([`step_staged`]);
/// else it stores the product and ignores [`Args::sgd`].
#[inline(always)]
pub fn gemm<
    A: Accumulator,
    const BN: usize,
    const MI: usize,
    const WG: usize,
    const STAGES: usize,
    const CM: usize,
    const A_MN: bool,
    const B_MN: bool,
    const STEP: bool,
>(
    p: Args,
    maps: *const u8,
) {
    let bm = WGMMA_M * MI * WG;
    let ring = Ring::<STAGES> {
        base: shared_addr(dynamic_shared::<Atom>()),
        a_bytes: (bm * BK * 2) as u32,
        b_bytes: (BN * BK * 2) as u32,
    };
    let origin = (block_y() * bm as u32, block_x() * BN as u32);
    if thread_x() == 0 {
        for s in 0..STAGES as u32 {
            mbar_init(ring.full(s), 1);
            mbar_init(ring.empty(s), (WG * CM) as u32);
        }
    }
    // The other blocks' copies and releases reach this block's barriers: the cluster waits
    // until every block has initialised its own.
    if CM > 1 {
        cluster_sync()
    } else {
        sync_threads()
    }
    if thread_x() / 128 == WG as u32 {
        if thread_x() == 128 * WG as u32 {
            produce::<STAGES, CM, A_MN, B_MN>(ring, origin, (bm as u32, BN as u32), p.k, maps);
        }
    } else {
        let map_c = unsafe { maps.add(2 * MAP_BYTES) };
        consume::<A, BN, MI, WG, STAGES, CM, A_MN, B_MN, STEP>(&p, ring, origin, map_c);
    }
    // A block's barriers receive the other blocks' releases until those have finished: none
    // exits before the whole cluster is done.
    if CM > 1 {
        cluster_sync();
    }
}

/// The producer (one thread): every K step of the block's `bm`×`bn` tile at `(m0, n0)` into
/// the ring, each stage refilled once the consumers (of the whole cluster) have released its
/// previous K step. With `CM` > 1, the block's share of B goes to every block of the cluster.
#[inline(always)]
fn produce<const STAGES: usize, const CM: usize, const A_MN: bool, const B_MN: bool>(
    ring: Ring<STAGES>,
    (m0, n0): (u32, u32),
    (bm, bn): (u32, u32),
    k: u32,
    maps: *const u8,
) {
    let (map_a, map_b) = (maps, unsafe { maps.add(MAP_BYTES) });
    // With clusters this block loads a share of B into every block of the cluster: in both
    // layouts `share` rows of N start `share` × 128 bytes into the tile (K-major: one 128-byte
    // row per row of N; MN-major: one 64 × 64 box of 8192 bytes per 64 of N).
    let (rank, share, to) = if CM > 1 {
        (cluster_rank(), bn / CM as u32, ((1u32 << CM) - 1) as u16)
    } else {
        (0, bn, 0)
    };
    let b_offset = rank * share * (2 * BK) as u32;
    for kt in 0..k.div_ceil(BK as u32) {
        let (s, parity) = Ring::<STAGES>::slot(kt);
        if kt >= STAGES as u32 {
            mbar_wait::<false>(ring.empty(s), parity ^ 1);
        }
        let (k0, full) = (kt * BK as u32, ring.full(s));
        mbar_expect(full, ring.a_bytes + ring.b_bytes);
        load_operand::<A_MN>(ring.a(s), map_a, (m0, bm), k0, (full, 0));
        let b_share = (n0 + rank * share, share);
        load_operand::<B_MN>(ring.b(s) + b_offset, map_b, b_share, k0, (full, to));
    }
}

/// One operand's tile of K step `k0` into shared memory at `dst`: the `rows` of M or N from
/// `mn0`, as one box where it is stored K-major, or one 64 × 64 box per 64 of them where it is
/// stored MN-major (`MN`), counted at `full`; into every block of the cluster in the bit mask
/// `to`, or where it is 0 into this block alone.
#[inline(always)]
pub(super) fn load_operand<const MN: bool>(
    dst: u32,
    map: *const u8,
    (mn0, rows): (u32, u32),
    k0: u32,
    (full, to): (u32, u16),
) {
    if MN {
        for c in 0..rows / 64 {
            load_box(
                dst + c * MN_CHUNK_BYTES,
                map,
                (mn0 + 64 * c, k0),
                (full, to),
            );
        }
    } else {
        load_box(dst, map, (k0, mn0), (full, to));
    }
}

/// One box of `map` at `xy` into `dst`, multicast to the blocks in `to` unless it is 0.
#[inline(always)]
fn load_box(dst: u32, map: *const u8, xy: (u32, u32), (full, to): (u32, u16)) {
    if to == 0 {
        tma_load_2d(dst, map, xy, full);
    } else {
        tma_load_2d_multicast(dst, map, xy, full, to);
    }
}

/// One K step of a consumer warpgroup, the ring's `g`-th: waits until its stage is full, then
/// issues its k16 steps for the `MI` 64-row blocks of A from block `first` as one committed
/// batch of `wgmma`, which the caller waits for.
#[inline(always)]
pub(super) fn k_step<
    A: Accumulator,
    const MI: usize,
    const STAGES: usize,
    const A_MN: bool,
    const B_MN: bool,
>(
    ring: Ring<STAGES>,
    g: u32,
    first: u32,
    acc: &mut [A; MI],
) {
    let (s, parity) = Ring::<STAGES>::slot(g);
    mbar_wait::<false>(ring.full(s), parity);
    wgmma_fence();
    for ks in 0..(BK / 16) as u32 {
        let b = operand_descriptor(ring.b(s), !B_MN, 0, ks);
        for (mi, acc) in acc.iter_mut().enumerate() {
            let block = first + mi as u32;
            acc.mma::<A_MN, B_MN>(operand_descriptor(ring.a(s), !A_MN, block, ks), b);
        }
    }
    wgmma_commit();
}

/// A consumer warpgroup: one batch of wgmma per K step, kept in flight while the next is
/// issued, a stage released once the batch that read it has completed; then the epilogue, or
/// with `STEP` the SGD step.
#[inline(always)]
fn consume<
    A: Accumulator,
    const BN: usize,
    const MI: usize,
    const WG: usize,
    const STAGES: usize,
    const CM: usize,
    const A_MN: bool,
    const B_MN: bool,
    const STEP: bool,
>(
    p: &Args,
    ring: Ring<STAGES>,
    (m0, n0): (u32, u32),
    map_c: *const u8,
) {
    let (wg, lane) = (thread_x() / 128, thread_x() % 128);
    let k_steps = p.k.div_ceil(BK as u32);
    if STEP {
        // SAFETY: the host launches no product with K = 0 (`Problem::ensure_positive`). Told so,
        // the compiler keeps one path to the step, through the mainloop: a second one,
        // holding the zeroed accumulators, makes ptxas serialise the `wgmma` (C7515).
        unsafe { core::hint::assert_unchecked(k_steps > 0) };
    }
    let mut acc = [A::ZERO; MI];
    for kt in 0..k_steps {
        k_step::<A, MI, STAGES, A_MN, B_MN>(ring, kt, wg * MI as u32, &mut acc);
        wgmma_wait::<1>();
        if kt > 0 && lane < CM as u32 {
            release::<CM>(ring.empty(Ring::<STAGES>::slot(kt - 1).0), lane);
        }
    }
    wgmma_wait::<0>();
    let row0 = m0 + wg * (MI * WGMMA_M) as u32;
    // Each warpgroup stages its tile in the ring.
    const { assert!(WG * MI * BN * WGMMA_M * 2 <= STAGES * (WGMMA_M * MI * WG + BN) * BK * 2) };
    let area = ring.base + wg * (MI * BN / 64) as u32 * C_BOX_BYTES;
    if STEP {
        step_staged::<A, MI, BN, WG>(p, &acc, (area, (row0, n0), (wg, lane)));
    } else if staged(p) {
        store_staged_epilogue::<A, MI, BN, WG>(p, &acc, (area, (row0, n0), (wg, lane), map_c));
        if lane == 0 {
            bulk_wait_read::<0>();
        }
    } else {
        store_pairs::<A, MI, BN>(p, &acc, (row0, n0), lane);
    }
}

/// Thread `r` of a consumer warpgroup arrives at the `empty` barrier `bar` of block `r` of the
/// cluster, each of which writes a share of the stage (without clusters, thread 0 at this
/// block's). The arrival releases at the block's scope alone, as CUTLASS's does: the
/// `wgmma` reads it orders have completed at their wait, and a cluster-scope release (a fence
/// for the thread's outstanding memory operations) made the kernel 30% slower.
#[inline(always)]
pub(super) fn release<const CM: usize>(bar: u32, r: u32) {
    if CM > 1 {
        mbar_arrive_cluster(peer_addr(bar, r));
    } else {
        mbar_arrive(bar);
    }
}

/// Exports `gemm_<config>_<layout>_<acc>` for every `wgmma` row of `tile_configs!` and
/// accumulator of its row (this module is built into sm_90a PTX alone), and
/// `gemm_<config>_tn_<acc>_step`, which takes the SGD step of a weight gradient (the TN layout):
/// block tile `bm`×`bn`, warpgroup tile `wm`×`bn`, `st` stages, clusters of `cm` blocks along M.
/// The step is a kernel of its own because the registers of its loads in flight would count
/// against every product's blocks an SM.
macro_rules! export_warpgroup {
    ($(($name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $im:expr, $in:expr, $ik:expr,
        $st:expr, $cm:expr, $mainloop:ident, [$($acc:ident)*]),)*) => {$(
        export_warpgroup!(@sm $mainloop, [$($acc)*], ($name, $bm, $bn, $wm, ($st, $cm)));
    )*};
    (@sm wgmma, [$($acc:ident)*], $row:tt) => {
        $(export_warpgroup!(@acc $acc, $row);)*
    };
    (@sm $other:tt, $($row:tt)*) => {};
    (@acc f16, ($name:ident, $bm:expr, $bn:expr, $wm:expr, $pipe:tt)) => {
        wgmma_layouts!(export_warpgroup, "_f16", [u32; $bn / 4], ($name, $bm, $bn, $wm, $pipe));
    };
    (@acc f32, ($name:ident, $bm:expr, $bn:expr, $wm:expr, $pipe:tt)) => {
        wgmma_layouts!(export_warpgroup, "_f32", [f32; $bn / 2], ($name, $bm, $bn, $wm, $pipe));
    };
    (@one ($layout:literal, $acc_suffix:literal, $step:literal), $acc:ty,
     ($a_mn:literal, $b_mn:literal, $step_kernel:literal),
     ($name:ident, $bm:expr, $bn:expr, $wm:expr, ($st:expr, $cm:expr))) => {
        const _: () = {
            #[unsafe(export_name = concat!("gemm_", stringify!($name), $layout, $acc_suffix, $step))]
            unsafe extern "ptx-kernel" fn kernel(p: Args, _maps: super::descriptor::TensorMaps) {
                let maps = param_address!(concat!(
                    "gemm_", stringify!($name), $layout, $acc_suffix, $step, "_param_1"
                ));
                gemm::<$acc, $bn, { $wm / 64 }, { $bm / $wm }, $st, $cm, $a_mn, $b_mn, $step_kernel>(
                    p, maps,
                );
            }
        };
    };
}
crate::tile_configs!(export_warpgroup);
