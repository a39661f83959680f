//! The SIMT rungs of the ladder: fp32 accumulation on CUDA cores. Each rung adds one idea.
use super::{Args, RB_K, RB_MICRO, RB_THREADS, RB_TILE, SMEM_TILE};
use crate::arch::*;

/// Element `(i, kk)` of op(A), or zero outside M×K.
#[inline(always)]
fn load_a<const TA: bool>(p: &Args, i: u32, kk: u32) -> f32 {
    if i >= p.m || kk >= p.k {
        return 0.0;
    }
    let idx = if TA { kk * p.lda + i } else { i * p.lda + kk };
    h2f(unsafe { *p.a.add(idx as usize) })
}

/// Element `(kk, j)` of op(B), or zero outside K×N.
#[inline(always)]
fn load_b<const TB: bool>(p: &Args, kk: u32, j: u32) -> f32 {
    if kk >= p.k || j >= p.n {
        return 0.0;
    }
    let idx = if TB { j * p.ldb + kk } else { kk * p.ldb + j };
    h2f(unsafe { *p.b.add(idx as usize) })
}

/// What the SIMT rungs and the split-K reduction store at (i, j) of C: the [`output`], or with
/// an SGD step the new weight it is the gradient of.
#[inline(always)]
pub fn epilogue(p: &Args, i: u32, j: u32, acc: f32) -> u16 {
    p.sgd.take((i * p.ldc + j) as usize, output(p, i, j, acc))
}

/// The output every version shares: scale, accumulate into C, bias, ReLU, gate, round to fp16.
#[inline(always)]
pub fn output(p: &Args, i: u32, j: u32, acc: f32) -> u16 {
    let mut v = p.alpha * acc;
    if p.beta != 0.0 {
        v += p.beta * h2f(unsafe { *p.c.add((i * p.ldc + j) as usize) });
    }
    if !p.bias.is_null() {
        v += h2f(unsafe { *p.bias.add(j as usize) });
    }
    if p.relu != 0 {
        v = v.max(0.0);
    }
    if !p.gate.is_null() && !positive(unsafe { *p.gate.add((i * p.ldc + j) as usize) }) {
        v = 0.0;
    }
    f2h(v)
}

/// Whether fp16 bits are a positive number: `0x0001..=0x7fff`, what a ReLU passed through
/// (NaN, which training stops on, counts as passed).
#[inline(always)]
pub(super) fn positive(h: u16) -> bool {
    h != 0 && h & 0x8000 == 0
}

/// Outputs (i, j) and (i, j+1) through [`output`], skipping what lies outside C, as one
/// 4-byte store where both lie inside and the pair is aligned. The tensor-core rungs' edge
/// stores: `wgmma` kernels inline it (they keep no calls), `mma.sync` ones call it out of line.
/// It takes no SGD step: the tile rungs step from a staged tile (`sgd.rs`), whose quads move
/// as 16-byte vectors.
#[inline(always)]
pub fn store_pair(p: &Args, i: u32, j: u32, v0: f32, v1: f32) {
    if i >= p.m || j >= p.n {
        return;
    }
    let dst = unsafe { p.c.add((i * p.ldc + j) as usize) };
    let h0 = output(p, i, j, v0);
    if j + 1 < p.n {
        let h1 = output(p, i, j + 1, v1);
        if (dst as usize).is_multiple_of(4) {
            unsafe { *(dst as *mut u32) = h0 as u32 | (h1 as u32) << 16 };
        } else {
            unsafe {
                *dst = h0;
                *dst.add(1) = h1;
            }
        }
    } else {
        unsafe { *dst = h0 };
    }
}

#[inline(always)]
fn store(p: &Args, i: u32, j: u32, acc: f32) {
    if i < p.m && j < p.n {
        let v = epilogue(p, i, j, acc);
        unsafe { *p.c.add((i * p.ldc + j) as usize) = v };
    }
}

/// Rung 1: one thread per output, operands straight from global memory.
/// Grid: (⌈N/16⌉, ⌈M/16⌉) blocks of 16×16 threads.
#[inline(always)]
pub fn naive<const TA: bool, const TB: bool>(p: Args) {
    let j = block_x() * 16 + thread_x() % 16;
    let i = block_y() * 16 + thread_x() / 16;
    if i >= p.m || j >= p.n {
        return;
    }
    let mut acc = 0.0f32;
    for kk in 0..p.k {
        acc += load_a::<TA>(&p, i, kk) * load_b::<TB>(&p, kk, j);
    }
    store(&p, i, j, acc);
}

/// Rung 2: a 16×16 block stages 16×16 tiles of A and B in shared memory, so each element
/// read from global memory serves 16 products. Grid as [`naive`].
#[inline(always)]
pub fn smem<const TA: bool, const TB: bool>(p: Args) {
    const T: u32 = SMEM_TILE as u32;
    let s = dynamic_shared::<f32>();
    let (sa, sb) = (s, unsafe { s.add(SMEM_TILE * SMEM_TILE) });
    let (tx, ty) = (thread_x() % T, thread_x() / T);
    let j = block_x() * T + tx;
    let i = block_y() * T + ty;
    let mut acc = 0.0f32;
    let mut k0 = 0;
    while k0 < p.k {
        unsafe {
            *sa.add((ty * T + tx) as usize) = load_a::<TA>(&p, i, k0 + tx);
            *sb.add((ty * T + tx) as usize) = load_b::<TB>(&p, k0 + ty, j);
        }
        sync_threads();
        for kk in 0..T {
            acc += unsafe { *sa.add((ty * T + kk) as usize) * *sb.add((kk * T + tx) as usize) };
        }
        sync_threads();
        k0 += T;
    }
    store(&p, i, j, acc);
}

/// Rung 3: each thread computes a 4×4 micro-tile of a 64×64 block tile from registers; per k
/// step it reads 4 + 4 values from shared memory for 16 products.
/// Grid: (⌈N/64⌉, ⌈M/64⌉) blocks of 256 threads.
#[inline(always)]
pub fn regblock<const TA: bool, const TB: bool>(p: Args) {
    const T: u32 = RB_TILE as u32;
    const K: u32 = RB_K as u32;
    const R: usize = RB_MICRO;
    let s = dynamic_shared::<f32>();
    // Both tiles stored k-major ([K][64]) so a thread's 4 rows/cols are contiguous.
    let (sa, sb) = (s, unsafe { s.add(RB_K * RB_TILE) });
    let t = thread_x();
    let (tr, tc) = (
        (t / (T / R as u32)) * R as u32,
        (t % (T / R as u32)) * R as u32,
    );
    let (i0, j0) = (block_y() * T, block_x() * T);
    let mut acc = [[0.0f32; R]; R];
    let mut k0 = 0;
    while k0 < p.k {
        let mut e = t;
        while e < T * K {
            // Consecutive threads walk the contiguous dimension of each operand's storage.
            let (kk, mn) = if TA { (e / T, e % T) } else { (e % K, e / K) };
            unsafe { *sa.add((kk * T + mn) as usize) = load_a::<TA>(&p, i0 + mn, k0 + kk) };
            let (kk, mn) = if TB { (e % K, e / K) } else { (e / T, e % T) };
            unsafe { *sb.add((kk * T + mn) as usize) = load_b::<TB>(&p, k0 + kk, j0 + mn) };
            e += RB_THREADS as u32;
        }
        sync_threads();
        for kk in 0..K {
            let mut a = [0.0f32; R];
            let mut b = [0.0f32; R];
            for r in 0..R {
                a[r] = unsafe { *sa.add((kk * T + tr) as usize + r) };
                b[r] = unsafe { *sb.add((kk * T + tc) as usize + r) };
            }
            for r in 0..R {
                for c in 0..R {
                    acc[r][c] += a[r] * b[c];
                }
            }
        }
        sync_threads();
        k0 += K;
    }
    for r in 0..R {
        for c in 0..R {
            store(&p, i0 + tr + r as u32, j0 + tc + c as u32, acc[r][c]);
        }
    }
}

/// Exports `gemm_<version>_<layout>` for every SIMT version and layout.
macro_rules! export_simt {
    ($($version:ident),*) => {$(
        export_simt!(@one $version, "_nn", false, false);
        export_simt!(@one $version, "_nt", false, true);
        export_simt!(@one $version, "_tn", true, false);
    )*};
    (@one $version:ident, $suffix:literal, $ta:literal, $tb:literal) => {
        const _: () = {
            #[unsafe(export_name = concat!("gemm_", stringify!($version), $suffix))]
            unsafe extern "ptx-kernel" fn kernel(p: Args) {
                $version::<$ta, $tb>(p);
            }
        };
    };
}
export_simt!(naive, smem, regblock);
