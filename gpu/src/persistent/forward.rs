//! Forward: `H = relu(X·W1[s]ᵀ + b1[s])` for the block's rows. The forward warps split K (the
//! input): each takes k-steps `w, w + fwd, …` for every 16-row tile of the block, so each
//! element of W1's slice is read from shared memory once, not once per tile, and a warp's tiles
//! are independent accumulator chains. After a block barrier tile warp `t` sums tile `t`'s
//! partials and keeps H as an accumulator fragment (rows `g`, `g + 8`; units `2t`, `2t + 1`),
//! which is the A fragment of the partial logits; it is also stored fp16 for dW2.
use super::context::{Block, Step};
use super::stream::{Ring, chunks};
use super::weights::W1;
use super::*;
use crate::arch::*;
use crate::layout::{Operand, ldmatrix_lane};

/// Warps that split the forward's K for blocks of `tiles` 16-row tiles: all eight where their
/// partials fit [`partials_bytes`], else the tile warps (fp32 partials of four tiles fit four
/// warps). No warp fetches during the forward: on Hopper the copy engine fetches the next
/// batch, a ring's warps all load between chunks, and one whole-batch buffer fills after dW1.
const fn forward_warps<A: Acc>(tiles: usize) -> usize {
    if WARPS * tiles * 32 * size_of::<A>() <= partials_bytes(1) {
        WARPS
    } else {
        TILE_WARPS
    }
}

/// Whether each warp's forward reads only W1 rows that the warp itself updated (its k-steps
/// are its dW1 tiles: eight warps split K in the whole-batch kernels on Hopper), so that a step
/// can end with a warp barrier: the forward's block barrier comes before anything else reads
/// what the update wrote. (It would not before the launch's write-back, which has its own.)
pub const fn reads_own_w1_rows<A: Acc>(ring: bool, tiles: usize) -> bool {
    HOPPER && !ring && forward_warps::<A>(tiles) == WARPS
}

/// The tile warp's H fragment of each n-tile (zeros from other warps), after storing it fp16
/// in shared memory. Variants fed by a ring read the batch from `ring`. A block has `T` 16-row
/// tiles at most and `N` n-tiles; W1's fp16 values come from `w1` (where the variant keeps
/// them there, its registers).
#[inline(always)]
pub fn hidden<A: Acc, F: Row, const T: usize, const N: usize, const O: usize, const K: usize>(
    b: &Block,
    s: &Step,
    ring: &mut Ring,
    w1: &W1<O, F, K>,
) -> [[f32; 4]; N] {
    let (ring_fed, registers) = (F::V.ring(), F::V.w1_copy_in_registers());
    // The one-buffer kernel splits as the streamed ones do.
    const {
        let bytes = T * N * 32 * size_of::<A>();
        assert!(forward_warps::<A>(T) * bytes <= partials_bytes(N));
        assert!(T <= MAX_TILES);
        assert!(
            !F::V.w1_copy_in_registers()
                || (N == 1 && !F::V.ring() && forward_warps::<A>(T) == WARPS)
        );
    };
    let fwd = forward_warps::<A>(T);
    if ring_fed {
        // Every thread takes part in the ring, rows or not.
        let acc = k_chunks::<A, T, N>(b, ring, fwd);
        if b.warp < fwd {
            store_partials(b, &acc);
        }
        sync_threads();
    } else if b.mine > 0 {
        if registers {
            let acc = k_own::<A, F, T, N, O, K>(b, s, w1);
            store_partials(b, &acc);
        } else if b.warp < fwd {
            let acc = k_split::<A, T, N>(b, s, fwd);
            store_partials(b, &acc);
        }
        sync_threads();
    }
    let mut sums = [A::ZERO; N];
    if b.has_tile() {
        for n in 0..N {
            sums[n] = sum_partials::<A, T, N>(b, fwd, n);
        }
    }
    activate::<A, N>(b, &sums)
}

/// `H = relu(sums + b1)` of the tile warp's tile, where `sums[n]` is the accumulator of
/// n-tile `n`'s product: stored fp16 in shared memory and returned as accumulator fragments
/// (zeros from warps without a tile).
#[inline(always)]
pub fn activate<A: Acc, const N: usize>(b: &Block, sums: &[A; N]) -> [[f32; 4]; N] {
    let mut hf = [[0.0f32; 4]; N];
    if b.has_tile() {
        let (g, t) = (b.group(), b.in_group());
        let row = (16 * b.warp + g) as u32;
        for n in 0..N {
            let sum = sums[n];
            for e in 0..4 {
                let unit = UNITS * n + 2 * t + (e & 1);
                let v = unsafe { *b.small().b1_half.add(unit) } + sum.get(e);
                // A ReLU that lets NaN through, so a diverged run shows in the loss.
                hf[n][e] = round_h(if v < 0.0 { 0.0 } else { v });
            }
            st_shared_frag_f16(b.h(n), UNITS as u32, row, 2 * t as u32, hf[n]);
        }
    }
    hf
}

/// The B fragments of k-step `ks` of every n-tile of W1: one `ldmatrix.x4.trans` a pair of
/// planes (lanes 16-31 address the second), `.x2` for a slice of one.
#[inline(always)]
pub fn w1_frags<const N: usize>(b: &Block, ks: usize) -> [[u32; 2]; N] {
    let l = b.lane;
    let row = ((16 * ks + l % 16) * UNITS * 2) as u32;
    let mut bf = [[0u32; 2]; N];
    if N == 1 {
        bf[0] = ldmatrix_x2_trans(b.w1(0) + row);
    } else {
        for pair in 0..N / 2 {
            let r = ldmatrix_x4_trans(b.w1(2 * pair + l / 16) + row);
            bf[2 * pair] = [r[0], r[1]];
            bf[2 * pair + 1] = [r[2], r[3]];
        }
    }
    bf
}

/// The warp's partial products of every tile and n-tile over its k-steps.
#[inline(always)]
fn k_split<A: Acc, const T: usize, const N: usize>(b: &Block, s: &Step, fwd: usize) -> [[A; N]; T] {
    let (ktiles, l, stride) = (b.ktiles, b.lane, b.lay.stride);
    let tiles = b.rows() / 16;
    let mut acc = [[A::ZERO; N]; T];
    let (mm, kk) = ldmatrix_lane(l, Operand::A, true);
    let a0 = s.x + (mm * stride + 2 * kk) as u32;
    // Tiles past the block's last repeat it, branch-free (their sums are not used).
    let a_at: [u32; T] = core::array::from_fn(|m| a0 + (16 * m.min(tiles - 1) * stride) as u32);
    let frag = |ks: usize| {
        (
            a_at.map(|a| ldmatrix_x4(a + 32 * ks as u32)),
            w1_frags::<N>(b, ks),
        )
    };
    // The next k-step's fragments are loaded before this one's mma are issued.
    let mut ks = b.warp;
    if ks < ktiles {
        let mut next = frag(ks);
        while ks < ktiles {
            let (a, bf) = next;
            ks += fwd;
            if ks < ktiles {
                next = frag(ks);
            }
            for m in 0..T {
                for n in 0..N {
                    acc[m][n].mma_k16(a[m], bf[n]);
                }
            }
        }
    }
    acc
}

/// [`k_split`] with W1's B fragments in registers ([`W1State::RegistersWithCopy`]): every warp takes the
/// k-steps `warp + WARPS·i`, the input tiles whose dW1 it computes and whose W1 it updates,
/// with `i` unrolled so that the fragments stay in registers. Warps with a k-step fewer than
/// warp 0 (which sets the pace) multiply a repeat of their last by zeros, branch-free.
#[inline(always)]
fn k_own<A: Acc, F: Row, const T: usize, const N: usize, const O: usize, const K: usize>(
    b: &Block,
    s: &Step,
    w1: &W1<O, F, K>,
) -> [[A; N]; T] {
    let (ktiles, stride) = (b.ktiles, b.lay.stride);
    let tiles = b.rows() / 16;
    let mut acc = [[A::ZERO; N]; T];
    let (mm, kk) = ldmatrix_lane(b.lane, Operand::A, true);
    let a0 = s.x + (mm * stride + 2 * kk) as u32;
    let a_at: [u32; T] = core::array::from_fn(|m| a0 + (16 * m.min(tiles - 1) * stride) as u32);
    let frag = |i: usize| {
        let ks = b.warp + WARPS * i;
        let bf = if ks < ktiles { w1.half[i][0] } else { [0; 2] };
        let at = 32 * ks.min(ktiles - 1) as u32;
        (a_at.map(|a| ldmatrix_x4(a + at)), bf)
    };
    // The next k-step's fragments are loaded before this one's mma are issued.
    let steps = ktiles.div_ceil(WARPS);
    let mut next = frag(0);
    for i in 0..K {
        if i < steps {
            let (a, bf) = next;
            if i + 1 < steps {
                next = frag(i + 1);
            }
            for m in 0..T {
                acc[m][0].mma_k16(a[m], bf);
            }
        }
    }
    acc
}

/// [`k_split`] over the streamed batch: chunk `c` holds k-steps `8c..8c + 8`, of which warp `w`
/// takes `8c + w` (and `8c + w + 4` where four warps split K). Every thread calls it (the ring's
/// barriers); only the forward's warps compute.
#[inline(always)]
fn k_chunks<A: Acc, const T: usize, const N: usize>(
    b: &Block,
    ring: &mut Ring,
    fwd: usize,
) -> [[A; N]; T] {
    let (ktiles, l) = (b.ktiles, b.lane);
    let tiles = b.rows() / 16;
    let mut acc = [[A::ZERO; N]; T];
    let (mm, kk) = ldmatrix_lane(l, Operand::A, true);
    let a_off: [u32; T] =
        core::array::from_fn(|m| ((16 * m.min(tiles - 1) + mm) * CHUNK_STRIDE + 2 * kk) as u32);
    for c in 0..chunks(b) {
        let x = ring.next(b);
        if b.warp < fwd {
            for j in 0..WARPS / fwd {
                let local = b.warp + fwd * j;
                let ks = CHUNK / 16 * c + local;
                if ks < ktiles {
                    let bf = w1_frags::<N>(b, ks);
                    let a = a_off.map(|o| ldmatrix_x4(x + o + 32 * local as u32));
                    for m in 0..T {
                        for n in 0..N {
                            acc[m][n].mma_k16(a[m], bf[n]);
                        }
                    }
                }
            }
        }
    }
    acc
}

/// Where forward warp `from` leaves its partial sums of tile `m` (of `T`), n-tile `n`:
/// `[warp][tile][n-tile][lane]`.
#[inline(always)]
fn partial<A: Acc, const T: usize, const N: usize>(
    b: &Block,
    from: usize,
    m: usize,
    n: usize,
) -> u32 {
    let at = ((from * T + m) * N + n) * 32 + b.lane;
    b.at(b.lay.partials + at * size_of::<A>())
}

/// Stores the forward warp's partial sums of every tile and n-tile.
#[inline(always)]
fn store_partials<A: Acc, const T: usize, const N: usize>(b: &Block, acc: &[[A; N]; T]) {
    for m in 0..T {
        for n in 0..N {
            st_shared_acc(partial::<A, T, N>(b, b.warp, m, n), acc[m][n]);
        }
    }
}

/// Tile `warp`'s sum over every forward warp's partials of n-tile `n`, pairwise in warp
/// order, so runs repeat bit for bit. Every partial is loaded unconditionally (zeros from
/// warps past the forward's): loads each under its own branch, each waited for before the
/// next, cost more than the split saves.
#[inline(always)]
fn sum_partials<A: Acc, const T: usize, const N: usize>(b: &Block, fwd: usize, n: usize) -> A {
    let mut p: [A; WARPS] = core::array::from_fn(|from| {
        if from < fwd {
            ld_shared_acc(partial::<A, T, N>(b, from, b.warp, n))
        } else {
            A::ZERO
        }
    });
    let mut span = 1;
    while span < WARPS {
        for c in (0..WARPS).step_by(2 * span) {
            let other = p[c + span];
            p[c].add(&other);
        }
        span *= 2;
    }
    p[0]
}
