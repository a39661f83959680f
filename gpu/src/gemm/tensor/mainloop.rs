//! The mainloop: fragments from shared memory by `ldmatrix`, the instruction tiles of each k
//! step by `mma.sync`, and the two pipelines that keep shared memory filled.
use crate::arch::*;
use crate::gemm::CP_ASYNC_MAX_STAGES;
use crate::layout::{Operand, ldmatrix_lane, swizzled_offset};

/// Shared-memory byte offsets at which this lane points `ldmatrix`, per fragment and per
/// 16-wide k step of a slice (at most 4: BK ≤ 64), for `MI` m-fragments of A and `NI / 2`
/// pairs of n-fragments of B: fixed for the whole kernel, so the swizzle arithmetic stays out
/// of the mainloop.
pub(super) struct Fragments<const MI: usize, const NI: usize> {
    a: [[u32; 4]; MI],
    b: [[u32; 4]; NI],
    /// Whether A's and B's tiles are stored k-contiguous (read by plain `ldmatrix`) or not
    /// (read by `.trans`).
    ka: bool,
    kb: bool,
}

impl<const MI: usize, const NI: usize> Fragments<MI, NI> {
    /// The offsets of the warp tile at `(wm0, wn0)`, for tiles of row length `rla` and `rlb`.
    #[inline(always)]
    pub(super) fn new<const BK: usize>(
        (ka, kb): (bool, bool),
        (rla, rlb): (usize, usize),
        (wm0, wn0): (usize, usize),
    ) -> Self {
        let mut f = Fragments {
            a: [[0u32; 4]; MI],
            b: [[0u32; 4]; NI],
            ka,
            kb,
        };
        for ks in 0..BK / 16 {
            for mi in 0..MI {
                f.a[mi][ks] = frag_offset(Operand::A, ka, rla, wm0 + 16 * mi, 16 * ks);
            }
            for q in 0..NI / 2 {
                f.b[q][ks] = frag_offset(Operand::B, kb, rlb, wn0 + 16 * q, 16 * ks);
            }
        }
        f
    }

    /// The fragments of k step `ks` from the stage whose A and B tiles start at `(a, b)`: A per
    /// m-fragment, B per pair of n-fragments.
    #[inline(always)]
    pub(super) fn load(&self, (a, b): (u32, u32), ks: usize) -> ([[u32; 4]; MI], [[u32; 4]; NI]) {
        let mut af = [[0u32; 4]; MI];
        let mut bf = [[0u32; 4]; NI];
        for mi in 0..MI {
            af[mi] = ldsm(a + self.a[mi][ks], self.ka);
        }
        for q in 0..NI / 2 {
            bf[q] = ldsm(b + self.b[q][ks], self.kb);
        }
        (af, bf)
    }
}

/// The instruction tiles of one k step: `IK` is the instruction K (16, or 8 on sm_75's
/// `m16n8k8`).
#[inline(always)]
pub(super) fn mma_step<A: Acc, const MI: usize, const NI: usize, const IK: usize>(
    acc: &mut [[A; NI]; MI],
    af: &[[u32; 4]; MI],
    bf: &[[u32; 4]; NI],
) {
    for mi in 0..MI {
        let a = &af[mi];
        for ni in 0..NI {
            // ldmatrix.x4 of B gave [b0, b1] of n-fragment 2·q, then of 2·q + 1.
            let b = &bf[ni / 2];
            let (b0, b1) = (b[2 * (ni % 2)], b[2 * (ni % 2) + 1]);
            if IK == 16 {
                acc[mi][ni].mma_k16(*a, [b0, b1]);
            } else {
                acc[mi][ni].mma_k8([a[0], a[1]], b0);
                acc[mi][ni].mma_k8([a[2], a[3]], b1);
            }
        }
    }
}

/// Shared byte offset at which `lane` points `ldmatrix` for the 16×16 block at (mn0, k0) of a
/// tile stored k-contiguous (`[mn][k]`, row_len = BK) or mn-contiguous (`[k][mn]`).
#[inline(always)]
fn frag_offset(op: Operand, k_contiguous: bool, row_len: usize, mn0: usize, k0: usize) -> u32 {
    let (mn, k) = ldmatrix_lane(lane() as usize, op, k_contiguous);
    let (row, col) = if k_contiguous {
        (mn0 + mn, k0 + k)
    } else {
        (k0 + k, mn0 + mn)
    };
    (swizzled_offset(row, col, row_len) * 2) as u32
}

#[inline(always)]
fn ldsm(addr: u32, k_contiguous: bool) -> [u32; 4] {
    if k_contiguous {
        ldmatrix_x4(addr)
    } else {
        ldmatrix_x4_trans(addr)
    }
}

/// The mainloop with `cp.async` (sm_80+): `STAGES - 1` slices in flight while one is read.
/// `copy(s, kt)` issues slice `kt`'s copies into stage `s`; `load(s, ks)` loads the fragments
/// of k step `ks` of stage `s`, which `mma_step` multiplies into `acc`.
#[inline(always)]
pub(super) fn mainloop_async<
    A: Acc,
    const MI: usize,
    const NI: usize,
    const BK: usize,
    const STAGES: usize,
>(
    acc: &mut [[A; NI]; MI],
    ktiles: usize,
    copy: impl Fn(u32, usize),
    load: impl Fn(u32, usize) -> ([[u32; 4]; MI], [[u32; 4]; NI]),
    mma_step: impl Fn(&mut [[A; NI]; MI], &[[u32; 4]; MI], &[[u32; 4]; NI]),
) {
    // The table's rules (`gemm/rules.rs`) already refuse other rows; these say what this
    // loop relies on.
    const {
        assert!(BK.is_multiple_of(32) && STAGES >= 2 && STAGES <= CP_ASYNC_MAX_STAGES);
    };
    let ksteps = BK / 16;
    let empty = || ([[0u32; 4]; MI], [[0u32; 4]; NI]);
    // Prologue: STAGES-1 slices in flight. Every thread commits one group per slice, empty or
    // not, so that "wait until STAGES-2 groups remain" always means "the next slice landed".
    for s in 0..STAGES as u32 - 1 {
        if (s as usize) < ktiles {
            copy(s, s as usize);
        }
        cp_async_commit();
    }
    let landed = || {
        match STAGES {
            2 => cp_async_wait::<0>(),
            3 => cp_async_wait::<1>(),
            4 => cp_async_wait::<2>(),
            _ => cp_async_wait::<3>(),
        }
        sync_threads();
    };
    landed();
    // Fragments of k step ks+1 load while step ks's mma run; the last step of a slice waits
    // for the next slice first, so its first fragments load under those mma too.
    let mut frags = [load(0, 0), empty()];
    // Stages cycle: slice kt is read from `read`, slice kt + STAGES - 1 lands in `write`.
    let after = |s: u32| if s + 1 == STAGES as u32 { 0 } else { s + 1 };
    let (mut read, mut write) = (0, STAGES as u32 - 1);
    for kt in 0..ktiles {
        // The stage refilled here was last read in slice kt-1, by threads that have all passed
        // the barrier of `landed` since.
        let next = kt + STAGES - 1;
        if next < ktiles {
            copy(write, next);
        }
        cp_async_commit();
        for ks in 0..ksteps {
            // Constant once unrolled; ksteps is even, so slice kt+1's first fragments land in
            // buffer 0, where its step 0 reads them.
            let cur = ks % 2;
            if ks + 1 < ksteps {
                frags[1 - cur] = load(read, ks + 1);
            } else if kt + 1 < ktiles {
                landed();
                frags[1 - cur] = load(after(read), 0);
            }
            let (af, bf) = &frags[cur];
            mma_step(acc, af, bf);
        }
        (read, write) = (after(read), after(write));
    }
}

/// The mainloop with register staging (sm_75): the next slice is loaded into registers
/// (`fetch(kt)`) while the tensor cores work on the current one, then stored to the other of
/// two stages (`store(s, regs)`).
#[inline(always)]
pub(super) fn mainloop_staged<A: Acc, const MI: usize, const NI: usize, const BK: usize, R>(
    acc: &mut [[A; NI]; MI],
    ktiles: usize,
    fetch: impl Fn(usize) -> R,
    store: impl Fn(u32, &R),
    load: impl Fn(u32, usize) -> ([[u32; 4]; MI], [[u32; 4]; NI]),
    mma_step: impl Fn(&mut [[A; NI]; MI], &[[u32; 4]; MI], &[[u32; 4]; NI]),
) {
    let ksteps = BK / 16;
    let empty = || ([[0u32; 4]; MI], [[0u32; 4]; NI]);
    let mut regs = fetch(0);
    store(0, &regs);
    sync_threads();
    for kt in 0..ktiles {
        let more = kt + 1 < ktiles;
        if more {
            // Global loads of the next slice are in flight during this slice's mma.
            regs = fetch(kt + 1);
        }
        let mut frags = [load(kt as u32 % 2, 0), empty()];
        for ks in 0..ksteps {
            if ks + 1 < ksteps {
                frags[(ks + 1) % 2] = load(kt as u32 % 2, ks + 1);
            }
            let (af, bf) = &frags[ks % 2];
            mma_step(acc, af, bf);
        }
        if more {
            store((kt as u32 + 1) % 2, &regs);
        }
        sync_threads();
    }
}
