//! The tensor-core rungs: warp-tiled `mma.sync`, fed from swizzled shared memory by `ldmatrix`.
//!
//! Hierarchy (CUTLASS names): a threadblock computes a BM×BN tile of C, walking K in BK slices
//! staged in shared memory; its warps each own a WM×WN warp tile, made of (WM/16)×(WN/8)
//! instruction tiles of 16×8, each accumulated by one `mma.sync` per instruction K (8 or 16).
//!
//! Two ways of filling shared memory, chosen by the configuration:
//! - register staging (sm_75): the next slice is loaded into registers while the tensor cores
//!   work on the current one, then stored to the other of two buffers;
//! - `cp.async` (sm_80+): STAGES−1 slices are in flight while one is consumed.
mod epilogue;
mod mainloop;
mod tile;

// For the direct kernel, which is sm_80's on.
#[cfg(target_feature = "sm_80")]
pub(super) use epilogue::store_pair_out_of_line;

use super::Args;
use super::sgd::{PREFETCH_AREA, prefetch_tile, step_tile};
use crate::arch::*;
use epilogue::{store_tile, stores_inline, tile_row_gates};
use mainloop::{Fragments, mainloop_async, mainloop_staged, mma_step};
use tile::{Operands, Staged};

/// The tensor-core GEMM. `MI`×`NI` instruction tiles per warp (warp tile `16·MI × 8·NI`), `IK`
/// the instruction K, `ASYNC` selects `cp.async` (sm_80+) over register staging, `CA`/`CB` are
/// the 16-byte chunks of the A/B tile each thread copies per K slice.
#[inline(always)]
pub fn gemm<
    A: Acc,
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const MI: usize,
    const NI: usize,
    const IK: usize,
    const STAGES: usize,
    const ASYNC: bool,
    const CA: usize,
    const CB: usize,
    const TA: bool,
    const TB: bool,
>(
    p: Args,
    ws: *mut f32,
    k_slice: u32,
) {
    let (wm, wn) = (16 * MI, 8 * NI);
    let warps_n = BN / wn;
    let threads = (BM / wm) * warps_n * 32;
    let (bm0, bn0) = (block_y() * BM as u32, block_x() * BN as u32);
    let w = warp_id() as usize;
    let (wm0, wn0) = ((w / warps_n) * wm, (w % warps_n) * wn);

    let (ka, kb) = (!TA, TB);
    let operands = Operands::new::<BM, BN, BK>(&p, (ka, kb), (bm0, bn0), threads);
    let smem = shared_addr(dynamic_shared::<u8>());
    let stage_bytes = ((BM + BN) * BK * 2) as u32;
    // Shared byte addresses of stage `s`'s A and B tiles.
    let stage = |s: u32| {
        let a = smem + s * stage_bytes;
        (a, a + (BM * BK * 2) as u32)
    };
    let (rla, rlb) = (if ka { BK } else { BM }, if kb { BK } else { BN });

    let mut acc = [[A::ZERO; NI]; MI];
    // Split-K: block z of the grid covers K from z·k_slice (a multiple of BK) and, when `ws` is
    // given, leaves raw fp32 partial sums there for `splitk_reduce`.
    let k_begin = block_z() * k_slice;
    let ktiles = (p.k.min(k_begin + k_slice) - k_begin).div_ceil(BK as u32) as usize;

    let frags = Fragments::<MI, NI>::new::<BK>((ka, kb), (rla, rlb), (wm0, wn0));
    let load = |s: u32, ks: usize| frags.load(stage(s), ks);

    // Launched as a dependent on sm_90: everything above is set-up that overlaps the kernel
    // before; its results are read (and C written) only after it has completed.
    wait_for_prior_grids();
    // A warp tile of one or two fragments loads its gate pairs now, so they arrive with the
    // operands instead of after the mainloop: at a short K (the input gradient through the
    // output layer, K = 10) that latency is a large part of the call. Larger warp tiles would
    // hold the registers through the mainloop, and load each row's pairs at the end.
    let early = (MI * NI <= 2).then(|| {
        let inline = stores_inline::<BM, BN>(&p, ws, (bm0, bn0));
        core::array::from_fn(|mi| tile_row_gates::<NI>(&p, inline, (bm0, bn0), (wm0, wn0), mi))
    });
    let k0 = |kt: usize| k_begin + (kt * BK) as u32;
    let mma = mma_step::<A, MI, NI, IK>;
    if ASYNC {
        let copy = |s: u32, kt: usize| operands.copy_async(stage(s), k0(kt));
        mainloop_async::<A, MI, NI, BK, STAGES>(&mut acc, ktiles, copy, load, mma);
    } else {
        let fetch = |kt: usize| operands.fetch::<CA, CB>(k0(kt));
        let store = |s: u32, regs: &Staged<CA, CB>| operands.store(stage(s), regs);
        mainloop_staged::<A, MI, NI, BK, _>(&mut acc, ktiles, fetch, store, load, mma);
    }

    let steps = !p.sgd.is_none() && ws.is_null();
    if steps && BM * BN >= PREFETCH_AREA {
        prefetch_tile::<BM, BN>(&p, (bm0, bn0), threads);
    }
    // The kernel after this one (the split-K reduction, the next GEMM) is a dependent launch
    // on sm_90: once every block is here, it may be scheduled and wait for this grid on the
    // GPU, not behind a launch. Not earlier: its blocks would take SMs as the first ones free
    // up, unevenly, while they can do nothing but wait.
    launch_dependents();

    if steps {
        step_tile::<A, BM, BN, MI, NI>(p, smem, &acc, (bm0, bn0), (wm0, wn0), threads);
    } else {
        store_tile::<A, BM, BN, MI, NI>(p, ws, &acc, (bm0, bn0), (wm0, wn0), early);
    }
}

/// Exports `gemm_<config>_<layout>_<acc>` for every row of `tile_configs!` this PTX's
/// architecture supports and accumulator of its row: the `mma.sync` rows (`warpgroup` and
/// `pingpong` export the others).
macro_rules! export_tensor {
    ($(($name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $im:expr, $in:expr, $ik:expr,
        $st:expr, $cm:expr, $mainloop:ident, [$($acc:ident)*]),)*) => {$(
        export_tensor!(@sm $mainloop, [$($acc)*], ($name, $bm, $bn, $bk, $wm, $wn, $ik, $st));
    )*};
    (@sm staged, [$($acc:ident)*], $row:tt) => {
        $(export_tensor!(@acc $acc, $row, false);)*
    };
    (@sm cp_async, [$($acc:ident)*], $row:tt) => {
        $(#[cfg(target_feature = "sm_80")]
        export_tensor!(@acc $acc, $row, true);)*
    };
    (@sm $other:tt, $($row:tt)*) => {};
    (@acc f16, ($($row:tt)*), $async:literal) => {
        export_tensor!(@one "_nn_f16", [u32; 2], false, false, $($row)*, $async);
        export_tensor!(@one "_nt_f16", [u32; 2], false, true, $($row)*, $async);
        export_tensor!(@one "_tn_f16", [u32; 2], true, false, $($row)*, $async);
    };
    (@acc f32, ($($row:tt)*), $async:literal) => {
        export_tensor!(@one "_nn_f32", [f32; 4], false, false, $($row)*, $async);
        export_tensor!(@one "_nt_f32", [f32; 4], false, true, $($row)*, $async);
        export_tensor!(@one "_tn_f32", [f32; 4], true, false, $($row)*, $async);
    };
    (@one $suffix:literal, $acc:ty, $ta:literal, $tb:literal,
     $name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $ik:expr, $st:expr, $async:literal) => {
        const _: () = {
            #[unsafe(export_name = concat!("gemm_", stringify!($name), $suffix))]
            unsafe extern "ptx-kernel" fn kernel(p: Args, ws: *mut f32, k_slice: u32) {
                const THREADS: usize = 32 * ($bm / $wm) * ($bn / $wn);
                gemm::<$acc, $bm, $bn, $bk, { $wm / 16 }, { $wn / 8 }, $ik, $st, $async,
                       { $bm * $bk / 8 / THREADS }, { $bn * $bk / 8 / THREADS }, $ta, $tb>(
                    p, ws, k_slice,
                );
            }
        };
    };
}
crate::tile_configs!(export_tensor);
