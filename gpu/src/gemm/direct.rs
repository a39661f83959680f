//! The direct rung: `mma.sync` fed straight from global memory, no shared memory and no
//! barrier. It is for products of one K step (an MLP's input gradient through its output
//! layer: K = 10 classes), where the tile kernels have nothing to pipeline and their copy
//! through shared memory is one more round trip on the call's only path. It computes any
//! shape, but every k step of 16 costs a full round trip to L1 or L2.
//!
//! A warp computes a [`DIRECT_WARP`] tile of C: each lane loads its fragments' element pairs
//! itself (one 4-byte load where the pair is contiguous in memory, two 2-byte loads where it
//! runs down a column), and the gate of its outputs before the first product. The four lanes
//! of a group then trade their accumulators so that each holds 8 consecutive columns of its
//! two rows, which it stores, gates and biases as 16-byte accesses.
use super::simt::positive;
use super::tensor::store_pair_out_of_line;
use super::{Args, DIRECT_WARP};
use crate::arch::*;
use crate::layout::{mma_a, mma_b};

/// n-fragments of a warp tile.
const NI: usize = DIRECT_WARP.1 / 8;
const _: () = assert!(
    DIRECT_WARP.0 == 16 && NI == 4,
    "one m-fragment; a group of 4 lanes trades 4 n-fragments"
);

/// An operand in its storage orientation, `[rows][ld]`, and how its element pairs load.
#[derive(Clone, Copy)]
struct Matrix {
    src: *const u16,
    ld: u32,
    rows: u32,
    cols: u32,
    /// Whether every pair along a row that starts at an even column is one aligned 4-byte
    /// word, wholly inside or wholly outside the matrix.
    words: bool,
}

impl Matrix {
    fn new(src: *const u16, ld: u32, (rows, cols): (u32, u32)) -> Matrix {
        let words =
            ld.is_multiple_of(2) && cols.is_multiple_of(2) && (src as usize).is_multiple_of(4);
        Matrix {
            src,
            ld,
            rows,
            cols,
            words,
        }
    }

    /// Element `(r, c)`, zero outside the matrix. The load is not conditional (its address
    /// is clamped into the matrix), so that a lane's loads all issue before the first product
    /// that waits for one.
    #[inline(always)]
    fn at(&self, r: u32, c: u32) -> u32 {
        let at = (r.min(self.rows - 1) * self.ld + c.min(self.cols - 1)) as usize;
        let v = unsafe { *self.src.add(at) } as u32;
        if r < self.rows && c < self.cols { v } else { 0 }
    }

    /// Elements `(r, c)` and the next one along k, as fp16x2: `along_row`, the next is
    /// `(r, c + 1)` (`c` even: one 4-byte load where the rows are [`Matrix::words`]), else
    /// `(r + 1, c)`.
    #[inline(always)]
    fn pair(&self, (r, c): (u32, u32), along_row: bool) -> u32 {
        if !along_row {
            return self.at(r, c) | self.at(r + 1, c) << 16;
        }
        if !self.words {
            return self.at(r, c) | self.at(r, c + 1) << 16;
        }
        let at = (r.min(self.rows - 1) * self.ld + c.min(self.cols - 2)) as usize;
        let v = unsafe { *(self.src.add(at) as *const u32) };
        if r < self.rows && c < self.cols { v } else { 0 }
    }
}

/// A fragment of op(A) at rows `i0..i0 + 16`, k `k0..k0 + 16`: A is `[M][K]`, or `[K][M]` if
/// `TA`.
#[inline(always)]
fn fragment_a<const TA: bool>(a: &Matrix, i0: u32, k0: u32) -> [u32; 4] {
    core::array::from_fn(|reg| {
        let (row, col) = mma_a(lane() as usize, reg, 0);
        let (i, k) = (i0 + row as u32, k0 + col as u32);
        if TA {
            a.pair((k, i), false)
        } else {
            a.pair((i, k), true)
        }
    })
}

/// A fragment of op(B) at k `k0..k0 + 16`, columns `j0..j0 + 8`: B is `[K][N]`, or `[N][K]`
/// if `TB`.
#[inline(always)]
fn fragment_b<const TB: bool>(b: &Matrix, k0: u32, j0: u32) -> [u32; 2] {
    core::array::from_fn(|reg| {
        let (kk, col) = mma_b(lane() as usize, reg, 0);
        let (k, j) = (k0 + kk as u32, j0 + col as u32);
        if TB {
            b.pair((j, k), true)
        } else {
            b.pair((k, j), false)
        }
    })
}

/// One lane's pairs of one accumulator row, `v[f]` at columns `8f + 2t, +1` of n-fragment `f`
/// (`t` the lane in its group of 4), traded within the group so that `v[s]` holds columns
/// `8t + 2s, +1` of n-fragment `t`: a 4×4 transpose of pairs, as two swaps of 2×2 blocks.
#[inline(always)]
fn transpose_in_group(v: &mut [[f32; 2]; 4]) {
    let t = lane() % 4;
    let trade =
        |send: [f32; 2], mask: u32| [shfl_xor_f32(send[0], mask), shfl_xor_f32(send[1], mask)];
    // Off-diagonal 2×2 blocks change places: lanes 0, 1 send fragments 2, 3; lanes 2, 3 send 0, 1.
    let high = t & 2 != 0;
    let (s0, s1) = if high { (v[0], v[1]) } else { (v[2], v[3]) };
    let (r0, r1) = (trade(s0, 2), trade(s1, 2));
    if high {
        (v[0], v[1]) = (r0, r1);
    } else {
        (v[2], v[3]) = (r0, r1);
    }
    // Each 2×2 block transposes: even lanes send 1, 3; odd lanes send 0, 2.
    let odd = t & 1 != 0;
    let (s0, s1) = if odd { (v[0], v[2]) } else { (v[1], v[3]) };
    let (r0, r1) = (trade(s0, 1), trade(s1, 1));
    if odd {
        (v[0], v[2]) = (r0, r1);
    } else {
        (v[1], v[3]) = (r0, r1);
    }
}

/// The gate and bias of one lane's 16-byte chunk of C, loaded before the products (where the
/// warp tile stores whole chunks and they exist).
#[derive(Clone, Copy)]
struct Early {
    gate: Option<[u32; 4]>,
    bias: Option<[u32; 4]>,
}

impl Early {
    #[inline(always)]
    fn load(p: &Args, (i, j): (u32, u32), whole: bool) -> Early {
        let chunk = |src: *const u16, at: u32| {
            (whole && !src.is_null())
                .then(|| ld_global_v4(unsafe { src.add(at as usize) } as *const u8))
        };
        Early {
            gate: chunk(p.gate, i * p.ldc + j),
            bias: chunk(p.bias, j),
        }
    }
}

/// Whether the warp tile at `(i0, j0)` stores with 16-byte accesses: inside C, nothing to read
/// from C (beta = 0), and every row of C, the gate and the bias 16-byte aligned.
#[inline(always)]
fn stores_whole_chunks(p: &Args, (i0, j0): (u32, u32)) -> bool {
    let aligned = |x: usize| x.is_multiple_of(16);
    p.beta == 0.0
        && i0 + DIRECT_WARP.0 as u32 <= p.m
        && j0 + DIRECT_WARP.1 as u32 <= p.n
        && p.ldc.is_multiple_of(8)
        && aligned(p.c as usize)
        && aligned(p.gate as usize)
        && aligned(p.bias as usize)
}

/// The 8 outputs from `(i, j)` on: scale, bias, ReLU and gate (the chunks loaded early), as
/// one 16-byte store.
#[inline(always)]
fn store_chunk(p: &Args, i: u32, j: u32, v: [[f32; 2]; 4], Early { gate, bias }: Early) {
    let out: [u32; 4] = core::array::from_fn(|s| {
        let half = |word: u32, h: usize| (word >> (16 * h)) as u16;
        let one = |h: usize| {
            let mut x = p.alpha * v[s][h];
            if let Some(b) = bias {
                x += h2f(half(b[s], h));
            }
            if p.relu != 0 {
                x = x.max(0.0);
            }
            match gate {
                Some(g) if !positive(half(g[s], h)) => 0.0,
                _ => x,
            }
        };
        pack_h2(one(0), one(1))
    });
    st_global_v4(unsafe { p.c.add((i * p.ldc + j) as usize) } as *mut u8, out);
}

/// The direct kernel: grid (⌈N / 32⌉, ⌈M / (16·warps)⌉), warps stacked along M.
#[inline(always)]
pub fn gemm<const TA: bool, const TB: bool>(p: Args) {
    let (wm, wn) = (DIRECT_WARP.0 as u32, DIRECT_WARP.1 as u32);
    let warps = block_dim_x() / 32;
    let (i0, j0) = ((block_y() * warps + warp_id()) * wm, block_x() * wn);
    let (g, t) = (lane() / 4, lane() % 4);
    let whole = stores_whole_chunks(&p, (i0, j0));
    // Launched as a dependent on sm_90: nothing global is read before the grid before ends.
    wait_for_prior_grids();
    // The gate and bias of this lane's two chunks of C, loaded first: at K = 10 the gate's
    // latency is most of the call's.
    let early = [i0 + g, i0 + g + 8].map(|i| Early::load(&p, (i, j0 + 8 * t), whole));
    let a = if TA {
        Matrix::new(p.a, p.lda, (p.k, p.m))
    } else {
        Matrix::new(p.a, p.lda, (p.m, p.k))
    };
    let b = if TB {
        Matrix::new(p.b, p.ldb, (p.n, p.k))
    } else {
        Matrix::new(p.b, p.ldb, (p.k, p.n))
    };
    let mut acc = [[0f32; 4]; NI];
    let mut k0 = 0;
    while k0 < p.k {
        // Every fragment of the k step loads before the first product waits for one.
        let fa = fragment_a::<TA>(&a, i0, k0);
        let fb: [[u32; 2]; NI] =
            core::array::from_fn(|f| fragment_b::<TB>(&b, k0, j0 + 8 * f as u32));
        for f in 0..NI {
            mma_m16n8k16_f32(&mut acc[f], fa, fb[f]);
        }
        k0 += 16;
    }
    launch_dependents();
    // Row g holds accumulator elements 0 and 1, row g + 8 elements 2 and 3 (named, never
    // indexed at run time, so the accumulators stay in registers).
    let row = |e: usize| core::array::from_fn(|f| [acc[f][e], acc[f][e + 1]]);
    let j = j0 + 8 * t;
    store_row(&p, (i0 + g, j), row(0), early[0], whole);
    store_row(&p, (i0 + g + 8, j), row(2), early[1], whole);
}

/// One lane's pairs of an accumulator row (as [`transpose_in_group`] takes them), stored from
/// `(i, j)` on: as one 16-byte chunk where the warp tile stores `whole` chunks, else pair by
/// pair through the shared epilogue.
#[inline(always)]
fn store_row(p: &Args, (i, j): (u32, u32), mut v: [[f32; 2]; 4], early: Early, whole: bool) {
    transpose_in_group(&mut v);
    if whole {
        store_chunk(p, i, j, v, early);
        return;
    }
    let (c, ldc, m, n) = (p.c, p.ldc, p.m, p.n);
    let (bias, alpha, beta, relu, gate) = (p.bias, p.alpha, p.beta, p.relu, p.gate);
    // Four calls, not a loop: a pair indexed at run time would move `v` to local memory.
    let put = |s: usize| {
        let ([x, y], j) = (v[s], j + 2 * s as u32);
        store_pair_out_of_line(c, ldc, m, n, bias, alpha, beta, relu, gate, i, j, x, y);
    };
    put(0);
    put(1);
    put(2);
    put(3);
}

/// Exports `gemm_direct_<layout>` (sm_80+: `m16n8k16`), with the tensor-core kernels'
/// parameters; it never splits K, so the workspace and slice depth go unread.
macro_rules! export_direct {
    ($suffix:literal, $ta:literal, $tb:literal) => {
        const _: () = {
            #[unsafe(export_name = concat!("gemm_direct", $suffix))]
            unsafe extern "ptx-kernel" fn kernel(p: Args, _ws: *mut f32, _k_slice: u32) {
                gemm::<$ta, $tb>(p);
            }
        };
    };
}
export_direct!("_nn", false, false);
export_direct!("_nt", false, true);
export_direct!("_tn", true, false);
