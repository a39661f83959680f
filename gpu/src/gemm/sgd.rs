//! The SGD epilogue ([`Args::sgd`]): the block's gradient tile, `alpha·AB` rounded to fp16 (a
//! step takes no bias, ReLU or gate), is staged in shared memory, free once the mainloop has
//! ended, then the whole block walks it row by row, four columns a thread. The fp32 master
//! weights and velocity, 16 of the 18 bytes an element moves here, then travel as whole 16-byte
//! accesses, several rows of them in flight at once; stored from the accumulators' fragment
//! layout, each thread would wait on them one fragment at a time. The `wgmma` rungs stage each
//! warpgroup's tile as the copy engine's boxes and have that warpgroup walk it ([`step_quads`]).
use super::{Args, SGD_DEEP, SGD_SHALLOW, STAGED_PAD, sgd_quads_in_flight};
use crate::arch::*;
use crate::layout::mma_c;

/// Four fp32 values, 16-byte aligned so they move as one vector access.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F4([f32; 4]);

/// Four fp16 values as one 8-byte access.
#[repr(C, align(8))]
struct U2([u32; 2]);

/// Four adjacent elements of the tile: whether any lies inside C, the first's offset in C (and
/// in the master weights and velocity), how many lie inside, and where they are staged.
struct Quad {
    inside: bool,
    k: usize,
    columns: usize,
    staged: u32,
}

/// The smallest block tile (in elements) whose step prefetches. Such a block, with its staged
/// tile, has an SM to itself, and the [`SGD_SHALLOW`] quads of its threads keep too few bytes in
/// flight to use DRAM's bandwidth; smaller tiles share an SM with others that fill it, and the
/// prefetches only add requests (`docs/gemm.md` has both measurements).
pub const PREFETCH_AREA: usize = 128 * 256;

/// Starts the master weights and velocity of the block tile at `(bm0, bn0)` on their way into
/// L2, for the block's threads to issue once the mainloop has ended: every line the step reads
/// is then requested at once, while the gradient tile is staged. Issued before the mainloop
/// instead, the prefetches delay the operands' loads of a short-K product.
#[inline(always)]
pub fn prefetch_tile<const BM: usize, const BN: usize>(
    p: &Args,
    (bm0, bn0): (u32, u32),
    threads: usize,
) {
    const LINE: usize = 128;
    // Lines of one row's span of the tile (one more where the span does not start a line),
    // clamped to the row's last column inside C.
    let per_row = (4 * BN).div_ceil(LINE) + 1;
    let mut t = thread_x() as usize;
    while t < 2 * BM * per_row {
        let (array, rest) = (t / (BM * per_row), t % (BM * per_row));
        let (r, line) = (rest / per_row, rest % per_row);
        let i = bm0 + r as u32;
        if i < p.m && bn0 < p.n {
            let base = if array == 0 {
                p.sgd.master
            } else {
                p.sgd.velocity
            };
            let first = unsafe { base.add((i * p.ldc + bn0) as usize) } as usize;
            let last = unsafe { base.add((i * p.ldc + p.n.min(bn0 + BN as u32) - 1) as usize) };
            let at = (first & !(LINE - 1)) + line * LINE;
            prefetch_l2(at.min(last as usize) as *const u8);
        }
        t += threads;
    }
}

/// Steps the weights of the block tile at `(bm0, bn0)` by the gradients in `acc`, the warp
/// tile at `(wm0, wn0)` of it, and stores their new fp16 copy to C. `smem`: the stages' shared
/// memory, which holds the staged tile (`TileConfig::smem_bytes_stepping` counts it).
#[inline(always)]
pub fn step_tile<A: Acc, const BM: usize, const BN: usize, const MI: usize, const NI: usize>(
    p: Args,
    smem: u32,
    acc: &[[A; NI]; MI],
    (bm0, bn0): (u32, u32),
    (wm0, wn0): (usize, usize),
    threads: usize,
) {
    let row_bytes = ((BN + STAGED_PAD) * 2) as u32;
    let at = |r: usize, c: usize| smem + r as u32 * row_bytes + 2 * c as u32;
    // Every warp has read its last fragments from the stages.
    sync_threads();
    let (r, c) = mma_c(lane() as usize, 0);
    for (mi, row) in acc.iter().enumerate() {
        for (ni, frag) in row.iter().enumerate() {
            for half in 0..2 {
                let (tr, tc) = (wm0 + 16 * mi + r + 8 * half, wn0 + 8 * ni + c);
                let (i, j) = (bm0 + tr as u32, bn0 + tc as u32);
                let g = |e: usize| f2h(p.alpha * frag.get(e)) as u32;
                if i < p.m && j < p.n {
                    st_shared_u32(at(tr, tc), g(2 * half) | g(2 * half + 1) << 16);
                }
            }
        }
    }
    sync_threads();
    let thread = (thread_x() as usize, threads);
    if sgd_quads_in_flight(MI * NI) == SGD_DEEP {
        step_quads::<BN, SGD_DEEP>(&p, at, (BM, (bm0, bn0)), thread);
    } else {
        step_quads::<BN, SGD_SHALLOW>(&p, at, (BM, (bm0, bn0)), thread);
    }
}

/// The step of the staged tile of `rows` rows at `(bm0, bn0)`, walked row by row, four
/// columns a thread, `IN_FLIGHT` quads of loads at a time, by the `threads` threads that
/// stepping it falls to, this one being `thread` of them. `staged(r, c)`: the shared address of
/// the tile's element (r, c), where its quad's 8 bytes lie together.
#[inline(always)]
pub(super) fn step_quads<const BN: usize, const IN_FLIGHT: usize>(
    p: &Args,
    staged: impl Fn(usize, usize) -> u32,
    (rows, (bm0, bn0)): (usize, (u32, u32)),
    (thread, threads): (usize, usize),
) {
    let sgd = p.sgd;
    let vector = p.ldc.is_multiple_of(4)
        && (sgd.master as usize).is_multiple_of(16)
        && (sgd.velocity as usize).is_multiple_of(16)
        && (p.c as usize).is_multiple_of(8);
    let quads = rows * BN / 4;
    let mut first = thread;
    while first < quads {
        let quad = |u: usize| {
            let q = first + u * threads;
            let (tr, tc) = (q / (BN / 4), 4 * (q % (BN / 4)));
            let (i, j) = (bm0 + tr as u32, bn0 + tc as u32);
            Quad {
                inside: q < quads && i < p.m && j < p.n,
                k: (i * p.ldc + j) as usize,
                columns: 4.min(p.n.saturating_sub(j)) as usize,
                staged: staged(tr, tc),
            }
        };
        let vectors = |q: &Quad| q.inside && q.columns == 4 && vector;
        let loaded: [(F4, F4); IN_FLIGHT] = core::array::from_fn(|u| {
            let q = quad(u);
            if vectors(&q) {
                unsafe {
                    let w = *(sgd.master.add(q.k) as *const F4);
                    (w, *(sgd.velocity.add(q.k) as *const F4))
                }
            } else {
                (F4([0.0; 4]), F4([0.0; 4]))
            }
        });
        for (u, (w, v)) in loaded.iter().enumerate() {
            let q = quad(u);
            if !q.inside {
                continue;
            }
            let g = ld_shared_v2(q.staged);
            let g = [
                g[0] as u16,
                (g[0] >> 16) as u16,
                g[1] as u16,
                (g[1] >> 16) as u16,
            ];
            if vectors(&q) {
                let (mut nw, mut nv) = (F4([0.0; 4]), F4([0.0; 4]));
                for e in 0..4 {
                    (nw.0[e], nv.0[e]) = sgd.apply(w.0[e], v.0[e], h2f(g[e]));
                }
                let h = nw.0.map(f2h);
                unsafe {
                    *(sgd.master.add(q.k) as *mut F4) = nw;
                    *(sgd.velocity.add(q.k) as *mut F4) = nv;
                    *(p.c.add(q.k) as *mut U2) = U2([
                        h[0] as u32 | (h[1] as u32) << 16,
                        h[2] as u32 | (h[3] as u32) << 16,
                    ]);
                }
            } else {
                // The right edge of C, or operands not aligned for vectors: one at a time.
                for e in 0..q.columns {
                    unsafe { *p.c.add(q.k + e) = sgd.step(q.k + e, h2f(g[e])) };
                }
            }
        }
        first += IN_FLIGHT * threads;
    }
}
