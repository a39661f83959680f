//! The ping-pong rung (sm_90a): a persistent, warp-specialized `wgmma` kernel. Each block
//! stays resident and walks the tiles `block_x`, `block_x + grid_x`, …; its two consumer
//! warpgroups take those tiles in turn, each a whole `BM`×`BN` tile, so one warpgroup's
//! epilogue (and the ramp of its next tile) runs while the other's mainloop keeps the tensor
//! cores busy. The producer warpgroup fills one ring of stages for both, in the order the
//! tiles are walked, up to `STAGES` K steps ahead of the consumers, across the turns.
//!
//! The turns are ordered: a warpgroup starts a tile's mainloop only once the other has issued
//! its own (two named barriers, one a direction). That is also what keeps the ring's parity
//! waits sound: every stage the other read was full, so a stage's `full` barrier is never more
//! than one phase behind the K step a consumer waits for.
//!
//! The producer keeps few registers and gives the rest to the consumers (`setmaxnreg`,
//! [`PING_PONG_REGISTERS`]).
//!
//! Each consumer stages C in an area of its own where two fit beside the ring
//! ([`TileConfig::staging_areas`](super::TileConfig::staging_areas)): it writes it again once
//! the copy engine has read its own last tile, a whole mainloop after it issued the stores.
//! Where one area is all that fits (128×256 tiles, whose fp16 C is 64 KiB, in three stages),
//! the consumers take it in turn as they take tiles: a consumer writes it once the copy engine
//! has read the other's last tile out of it (two more named barriers).
//!
//! Shared memory: the staging areas (`BM`×`BN` fp16 each, as the copy engine's 64 × 64
//! boxes), then the ring, then its barriers
//! ([`TileConfig::smem_bytes`](super::TileConfig::smem_bytes)).
use super::accumulator::Accumulator;
use super::descriptor::{BK, C_BOX_BYTES, MAP_BYTES, WGMMA_M};
use super::staging::{
    EPILOGUE_BARRIER, staged, step_staged, store_pairs, store_staged_epilogue, wgmma_layouts,
};
use super::warpgroup::{Atom, Ring, k_step, load_operand, release};
use super::{Args, PING_PONG_REGISTERS};
use crate::arch::*;

/// Tile rows (of M) walked together: consecutive tiles of a block's walk share B's columns
/// over this many rows, and A's rows over the whole row of tiles, so both stay in L2.
const GROUP_M: u32 = 8;

/// Named barriers `TURN + wg`, which consumer warpgroup `wg` waits at for its turn, after its
/// own epilogue barriers ([`EPILOGUE_BARRIER`]` + wg`); barrier 0 is the block's.
const TURN: u32 = EPILOGUE_BARRIER + 2;

/// Named barriers `STAGING + wg`, which consumer warpgroup `wg` waits at, where the consumers
/// share one staging area, until the copy engine has read the other's last tile out of it.
const STAGING: u32 = TURN + 2;

/// The tiles of an M×N output walked by one block: `(m0, n0)` of its `i`-th, if it has one.
#[derive(Clone, Copy)]
struct Walk {
    tiles_m: u32,
    tiles_n: u32,
    first: u32,
    step: u32,
}

impl Walk {
    #[inline(always)]
    fn new(p: &Args, (bm, bn): (u32, u32)) -> Walk {
        Walk {
            tiles_m: p.m.div_ceil(bm),
            tiles_n: p.n.div_ceil(bn),
            first: block_x(),
            step: grid_dim_x(),
        }
    }

    /// Tile `i` of this block's walk as (tile row, tile column): tiles numbered a group of
    /// [`GROUP_M`] tile rows at a time, column by column within a group.
    #[inline(always)]
    fn tile(&self, i: u32) -> Option<(u32, u32)> {
        let t = self.first + i * self.step;
        if t >= self.tiles_m * self.tiles_n {
            return None;
        }
        let per_group = GROUP_M * self.tiles_n;
        let group = t / per_group;
        let rows = (self.tiles_m - group * GROUP_M).min(GROUP_M);
        let within = t % per_group;
        Some((group * GROUP_M + within % rows, within / rows))
    }
}

/// The ping-pong GEMM: two consumer warpgroups, each `MI` 64-row blocks of a `BN`-wide tile
/// (BM = 64·MI), and a producer warpgroup; `STAGES` stages; `AREAS` staging areas for C (2:
/// one a consumer, 1: one in turn). `A_MN`/`B_MN` and `maps` as in
/// [`super::warpgroup::gemm`], and `STEP`: the kernel takes the product's SGD step.
#[inline(always)]
pub fn gemm<
    A: Accumulator,
    const BN: usize,
    const MI: usize,
    const STAGES: usize,
    const AREAS: usize,
    const A_MN: bool,
    const B_MN: bool,
    const STEP: bool,
>(
    p: Args,
    maps: *const u8,
) {
    let bm = WGMMA_M * MI;
    let area_bytes = (MI * BN / 64) as u32 * C_BOX_BYTES;
    let staging = shared_addr(dynamic_shared::<Atom>());
    let ring = Ring::<STAGES> {
        base: staging + AREAS as u32 * area_bytes,
        a_bytes: (bm * BK * 2) as u32,
        b_bytes: (BN * BK * 2) as u32,
    };
    if thread_x() == 0 {
        for s in 0..STAGES as u32 {
            mbar_init(ring.full(s), 1);
            mbar_init(ring.empty(s), 1);
        }
    }
    sync_threads();
    let walk = Walk::new(&p, (bm as u32, BN as u32));
    let k_steps = p.k.div_ceil(BK as u32);
    let wg = thread_x() / 128;
    if wg == 2 {
        setmaxnreg_dec::<{ PING_PONG_REGISTERS.producer }>();
        if thread_x() == 256 {
            produce::<STAGES, A_MN, B_MN>(ring, walk, (bm as u32, BN as u32), k_steps, maps);
        }
        return;
    }
    setmaxnreg_inc::<{ PING_PONG_REGISTERS.consumer }>();
    let map_c = unsafe { maps.add(2 * MAP_BYTES) };
    let lane = thread_x() % 128;
    let area = staging + (wg % AREAS as u32) * area_bytes;
    let mut i = wg;
    while let Some((tm, tn)) = walk.tile(i) {
        // The other warpgroup has issued the last batch of the tile before this one.
        if i > 0 {
            bar_sync_n(TURN + wg, 256);
        }
        let next = walk.tile(i + 1).is_some();
        let turn = next.then_some(TURN + (1 - wg));
        let acc = mainloop::<A, BN, MI, STAGES, A_MN, B_MN>(ring, (i * k_steps, k_steps), turn);
        let at = (tm * bm as u32, tn * BN as u32);
        let turns = (i > 0, next);
        epilogue::<A, BN, MI, AREAS, STEP>(&p, &acc, (area, at, (wg, lane), map_c), turns);
        i += 2;
    }
    // The block ends only once the copy engine has read the last staged tile.
    if AREAS == 2 && lane == 0 {
        bulk_wait_read::<0>();
    }
}

/// The producer (one thread): every K step of every tile of the walk into the ring, in
/// order, each stage refilled once the consumer that read its previous K step released it.
#[inline(always)]
fn produce<const STAGES: usize, const A_MN: bool, const B_MN: bool>(
    ring: Ring<STAGES>,
    walk: Walk,
    (bm, bn): (u32, u32),
    k_steps: u32,
    maps: *const u8,
) {
    let (map_a, map_b) = (maps, unsafe { maps.add(MAP_BYTES) });
    let mut g = 0;
    let mut i = 0;
    while let Some((tm, tn)) = walk.tile(i) {
        for kt in 0..k_steps {
            let (s, parity) = Ring::<STAGES>::slot(g);
            if g >= STAGES as u32 {
                mbar_wait::<false>(ring.empty(s), parity ^ 1);
            }
            let (k0, full) = (kt * BK as u32, ring.full(s));
            mbar_expect(full, ring.a_bytes + ring.b_bytes);
            load_operand::<A_MN>(ring.a(s), map_a, (tm * bm, bm), k0, (full, 0));
            load_operand::<B_MN>(ring.b(s), map_b, (tn * bn, bn), k0, (full, 0));
            g += 1;
        }
        i += 1;
    }
}

/// A consumer warpgroup's mainloop over one tile, whose K steps are the ring's `g0`,
/// `g0 + 1`, …: a batch of `wgmma` per K step kept in flight while the next is issued, each
/// stage released once the batch that read it has completed, the last one too (the other
/// warpgroup's next tile reuses it). Once the last batch is issued, the warpgroup arrives at
/// the other's turn barrier `next`, if the other has a next tile: its first batch then
/// queues behind this one's last, and the tensor cores do not drain between the tiles.
#[inline(always)]
fn mainloop<
    A: Accumulator,
    const BN: usize,
    const MI: usize,
    const STAGES: usize,
    const A_MN: bool,
    const B_MN: bool,
>(
    ring: Ring<STAGES>,
    (g0, k_steps): (u32, u32),
    next: Option<u32>,
) -> [A; MI] {
    let lane = thread_x() % 128;
    let mut acc = [A::ZERO; MI];
    for g in g0..g0 + k_steps {
        k_step::<A, MI, STAGES, A_MN, B_MN>(ring, g, 0, &mut acc);
        wgmma_wait::<1>();
        if g > g0 && lane == 0 {
            release::<1>(ring.empty(Ring::<STAGES>::slot(g - 1).0), 0);
        }
    }
    if let Some(turn) = next {
        bar_arrive_n(turn, 256);
    }
    wgmma_wait::<0>();
    if lane == 0 {
        release::<1>(ring.empty(Ring::<STAGES>::slot(g0 + k_steps - 1).0), 0);
    }
    acc
}

/// A tile's epilogue: through the copy engine from staging area `area` where the epilogue
/// allows it, else pair by pair; with an SGD step, stepped from the area by the warpgroup.
///
/// With an area a consumer, the area is free once this warpgroup's previous tile's stores
/// have read it: their issuing thread waits for that here, a whole mainloop after it issued
/// them, and the barrier holds the warpgroup's other threads until it has (and, stepping,
/// until each has read its last quads out of it).
///
/// With one area in turn, `after`: the other warpgroup staged the tile before this one, so
/// this waits until that has been read; `before`: the other stages the next tile, so this
/// lets it know once the copy engine has read this one (the issuing thread waits for that,
/// and its warp arrives after it; stepping, each thread arrives once it has read its quads).
/// The wait also keeps the block alive until its last tile has been read.
#[inline(always)]
fn epilogue<
    A: Accumulator,
    const BN: usize,
    const MI: usize,
    const AREAS: usize,
    const STEP: bool,
>(
    p: &Args,
    acc: &[A; MI],
    (area, (m0, n0), (wg, lane), map_c): (u32, (u32, u32), (u32, u32), *const u8),
    (after, before): (bool, bool),
) {
    if STEP || staged(p) {
        if AREAS == 2 {
            if lane == 0 {
                bulk_wait_read::<0>();
            }
            bar_sync_n(EPILOGUE_BARRIER + wg, 128);
        } else if after {
            bar_sync_n(STAGING + wg, 256);
        }
        if STEP {
            step_staged::<A, MI, BN, 1>(p, acc, (area, (m0, n0), (wg, lane)));
        } else {
            store_staged_epilogue::<A, MI, BN, 1>(p, acc, (area, (m0, n0), (wg, lane), map_c));
        }
        if AREAS == 1 {
            if lane == 0 {
                bulk_wait_read::<0>();
            }
            if before {
                bar_arrive_n(STAGING + (1 - wg), 256);
            }
        }
    } else {
        store_pairs::<A, MI, BN>(p, acc, (m0, n0), lane);
    }
}

/// Exports `gemm_<config>_<layout>_<acc>` and `gemm_<config>_tn_<acc>_step` for every
/// ping-pong row of `tile_configs!` and accumulator of its row, as
/// [`export_warpgroup!`](super::warpgroup) does for the `wgmma` rows (this module is built into
/// sm_90a PTX alone): each warpgroup's tile `bm`×`bn`, `st` stages. The host's choice takes no
/// ping-pong row for a step (their one wave of blocks an SM is held up beside the backward
/// pass, as the larger `wgmma` tiles' is); `--config` runs their step kernels.
macro_rules! export_ping_pong {
    ($(($name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $im:expr, $in:expr, $ik:expr,
        $st:expr, $cm:expr, $mainloop:ident, [$($acc:ident)*]),)*) => {$(
        export_ping_pong!(@sm $mainloop, [$($acc)*], ($name, $bm, $bn, $st));
    )*};
    (@sm ping_pong, [$($acc:ident)*], $row:tt) => {
        $(export_ping_pong!(@acc $acc, $row);)*
    };
    (@sm $other:tt, $($row:tt)*) => {};
    (@acc f16, ($name:ident, $bm:expr, $bn:expr, $st:expr)) => {
        wgmma_layouts!(export_ping_pong, "_f16", [u32; $bn / 4], ($name, $bm, $bn, $st));
    };
    (@acc f32, ($name:ident, $bm:expr, $bn:expr, $st:expr)) => {
        wgmma_layouts!(export_ping_pong, "_f32", [f32; $bn / 2], ($name, $bm, $bn, $st));
    };
    (@one ($layout:literal, $acc_suffix:literal, $step:literal), $acc:ty,
     ($a_mn:literal, $b_mn:literal, $step_kernel:literal),
     ($name:ident, $bm:expr, $bn:expr, $st:expr)) => {
        const _: () = {
            #[unsafe(export_name = concat!("gemm_", stringify!($name), $layout, $acc_suffix, $step))]
            unsafe extern "ptx-kernel" fn kernel(p: Args, _maps: super::descriptor::TensorMaps) {
                let maps = param_address!(concat!(
                    "gemm_", stringify!($name), $layout, $acc_suffix, $step, "_param_1"
                ));
                const AREAS: usize = super::rows::$name.staging_areas();
                gemm::<$acc, $bn, { $bm / 64 }, $st, AREAS, $a_mn, $b_mn, $step_kernel>(p, maps);
            }
        };
    };
}
crate::tile_configs!(export_ping_pong);
