//! The epilogue straight from the accumulators: alpha, bias, ReLU and gate per pair of
//! outputs, stored inline where the block tile allows, out of line at C's edges, or as raw
//! partial sums for the split-K reduction.
use crate::arch::*;
use crate::gemm::Args;
use crate::gemm::simt::{positive, store_pair};
use crate::layout::mma_c;

/// Whether the block tile at `(bm0, bn0)` stores inline: inside C, with nothing to read from C
/// (beta = 0), no split-K workspace, and aligned pairs.
#[inline(always)]
pub(super) fn stores_inline<const BM: usize, const BN: usize>(
    p: &Args,
    ws: *mut f32,
    (bm0, bn0): (u32, u32),
) -> bool {
    let aligned = |x: usize| x.is_multiple_of(4);
    ws.is_null()
        && p.beta == 0.0
        && bm0 + BM as u32 <= p.m
        && bn0 + BN as u32 <= p.n
        && p.ldc.is_multiple_of(2)
        && aligned(p.c as usize)
        && aligned(p.bias as usize)
        && aligned(p.gate as usize)
}

/// The gate pairs of fragment row `mi` of the warp tile at `(wm0, wn0)`, rows `i` and `i + 8`
/// of each fragment (zeros where the tile does not store inline: then `store_fragment` reads
/// the gate itself). All are loaded before the row's first store, which the compiler must
/// assume could overwrite them: one memory latency a row of fragments, not one a pair.
#[inline(always)]
pub(super) fn tile_row_gates<const NI: usize>(
    p: &Args,
    inline: bool,
    (bm0, bn0): (u32, u32),
    (wm0, wn0): (usize, usize),
    mi: usize,
) -> [[u32; 2]; NI] {
    if !inline {
        return [[0; 2]; NI];
    }
    let (r, c) = mma_c(lane() as usize, 0);
    let i = bm0 + (wm0 + 16 * mi + r) as u32;
    core::array::from_fn(|ni| {
        let j = bn0 + (wn0 + 8 * ni + c) as u32;
        [gate_pair(*p, i, j), gate_pair(*p, i + 8, j)]
    })
}

/// The epilogue straight from the accumulators of the warp tile at `(wm0, wn0)` of the block
/// tile at `(bm0, bn0)`; `early`: the gate pairs, where they were loaded before the mainloop.
#[inline(always)]
pub(super) fn store_tile<
    A: Acc,
    const BM: usize,
    const BN: usize,
    const MI: usize,
    const NI: usize,
>(
    p: Args,
    ws: *mut f32,
    acc: &[[A; NI]; MI],
    (bm0, bn0): (u32, u32),
    (wm0, wn0): (usize, usize),
    early: Option<[[[u32; 2]; NI]; MI]>,
) {
    // Epilogue straight from the accumulators, fully unrolled, so every accumulator is a named
    // register (a run-time index would move them to local memory). A block tile inside C with
    // nothing to read from it (beta = 0) and aligned pairs stores each pair inline as one 4-byte
    // word; the rest goes through the general, out-of-line `store_fragment`.
    let inline = stores_inline::<BM, BN>(&p, ws, (bm0, bn0));
    let (r, c) = mma_c(lane() as usize, 0);
    for (mi, row) in acc.iter().enumerate() {
        let i = bm0 + (wm0 + 16 * mi + r) as u32;
        let j = |ni: usize| bn0 + (wn0 + 8 * ni + c) as u32;
        let gates = match early {
            Some(g) => g[mi],
            None => tile_row_gates::<NI>(&p, inline, (bm0, bn0), (wm0, wn0), mi),
        };
        for (ni, frag) in row.iter().enumerate() {
            let (j, v) = (j(ni), [frag.get(0), frag.get(1), frag.get(2), frag.get(3)]);
            if inline {
                store_pair_inside(p, i, j, gates[ni][0], v[0], v[1]);
                store_pair_inside(p, i + 8, j, gates[ni][1], v[2], v[3]);
            } else if ws.is_null() {
                store_fragment(p, i, j, v);
            } else {
                store_partial(
                    p.m,
                    p.n,
                    unsafe { ws.add((block_z() * p.m * p.n) as usize) },
                    i,
                    j,
                    v,
                );
            }
        }
    }
}

/// The gate's fp16 pair at (i, j..j+2) as one word, or a pair of ones where there is no gate.
#[inline(always)]
fn gate_pair(p: Args, i: u32, j: u32) -> u32 {
    const ONES: u32 = 0x3c00_3c00;
    if p.gate.is_null() {
        ONES
    } else {
        unsafe { *(p.gate.add((i * p.ldc + j) as usize) as *const u32) }
    }
}

/// Two adjacent outputs (i, j..j+2), known to lie inside C, with beta = 0 and their gate pair
/// (from [`gate_pair`]): the epilogue of [`epilogue`](crate::gemm::simt::epilogue) in the same order
/// (alpha, bias, ReLU, gate), stored as one 4-byte word. It repeats `epilogue` rather than
/// calling it twice to load the bias and gate pairs as one word each and drop the beta branch,
/// which calling it twice does not (1-3% slower: `docs/gemm.md`).
#[inline(always)]
fn store_pair_inside(p: Args, i: u32, j: u32, gate: u32, v0: f32, v1: f32) {
    let (mut a, mut b) = (p.alpha * v0, p.alpha * v1);
    if !p.bias.is_null() {
        let pair = unsafe { *(p.bias.add(j as usize) as *const u32) };
        a += h2f(pair as u16);
        b += h2f((pair >> 16) as u16);
    }
    if p.relu != 0 {
        (a, b) = (a.max(0.0), b.max(0.0));
    }
    if !positive(gate as u16) {
        a = 0.0;
    }
    if !positive((gate >> 16) as u16) {
        b = 0.0;
    }
    let dst = unsafe { p.c.add((i * p.ldc + j) as usize) } as *mut u32;
    unsafe { *dst = f2h(a) as u32 | (f2h(b) as u32) << 16 };
}

/// A fragment's raw fp32 sums into one split's `m × n` slice of the workspace.
#[inline(always)]
fn store_partial(m: u32, n: u32, ws: *mut f32, i: u32, j: u32, v: [f32; 4]) {
    let put = |r: u32, c: u32, x: f32| {
        if r < m && c < n {
            unsafe { *ws.add((r * n + c) as usize) = x };
        }
    };
    put(i, j, v[0]);
    put(i, j + 1, v[1]);
    put(i + 8, j, v[2]);
    put(i + 8, j + 1, v[3]);
}

/// Writes one lane's share of a 16×8 accumulator tile: `v[0..2]` at (i, j..j+2) and `v[2..4]`
/// at (i+8, j..j+2), through the shared epilogue, skipping what lies outside C. (The values are
/// passed by name, never indexed at run time, so they stay in registers.)
#[inline(always)]
fn store_fragment(p: Args, i: u32, j: u32, v: [f32; 4]) {
    let (c, ldc, m, n) = (p.c, p.ldc, p.m, p.n);
    let (bias, alpha, beta, relu, gate) = (p.bias, p.alpha, p.beta, p.relu, p.gate);
    store_pair_out_of_line(
        c, ldc, m, n, bias, alpha, beta, relu, gate, i, j, v[0], v[1],
    );
    store_pair_out_of_line(
        c,
        ldc,
        m,
        n,
        bias,
        alpha,
        beta,
        relu,
        gate,
        i + 8,
        j,
        v[2],
        v[3],
    );
}

/// [`store_pair`] out of line, with scalar arguments only (they travel in registers):
/// inlined, its branches would double the PTX of every kernel.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(in crate::gemm) fn store_pair_out_of_line(
    c: *mut u16,
    ldc: u32,
    m: u32,
    n: u32,
    bias: *const u16,
    alpha: f32,
    beta: f32,
    relu: u32,
    gate: *const u16,
    i: u32,
    j: u32,
    v0: f32,
    v1: f32,
) {
    let p = Args::epilogue_only(m, n, c, ldc, bias, alpha, beta, relu, gate);
    store_pair(&p, i, j, v0, v1);
}
