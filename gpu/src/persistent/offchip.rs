//! The offchip kernel: the persistent step for hidden layers whose W1 state the chip cannot
//! hold. At 4,096 hidden units W1's fp32 master values and momentum are 25.7 MB, against the
//! 34.6 MB of registers of an H100's 132 SMs; the wide kernels' pairs of blocks would need 224
//! registers a thread of it. Here the state stays in global memory (in L2, from one step to
//! the next, at that size), and each block reads and writes its slice's once a step, as it
//! applies each dW1 tile.
//!
//! Block `s` owns slice `s` of the row's n-tiles (32 units: 128 blocks at 4,096 units) for
//! the whole batch, so no block exchanges gradients with another: the logit sums at the grid
//! barrier are the step's only meeting. The block keeps the slice's fp16 copy of W1 in shared
//! memory (the forward reads it; the update rewrites it) and streams the batch through the
//! ring of `stream`, twice a step. Warp `w` owns the batch's 16-row tile `w`: its forward is
//! one accumulator chain per n-tile over every k-step, so no partial sums cross warps; its dW1
//! tiles are input tile `w` of each chunk, every n-tile, over the whole batch.
use super::backward::{self, ONES, column_sums, unit_frags};
use super::context::{Block, Step};
use super::forward::{activate, w1_frags};
use super::owners::{BIAS_WARP, OUTPUT_WARP, w2_word};
use super::stream::{Ring, chunks};
use super::trace::Trace;
use super::update::{sgd, small_sgd};
use super::weights::{self, w1_index, w1_shared};
use super::*;
use super::{logits, softmax};
use crate::arch::*;
use crate::layout::{Operand, ldmatrix_lane, mma_c};

/// 16-row tiles of the whole batch: one a warp.
const T: usize = MAX_BATCH / 16;
/// The forward's accumulators: fp16, as the wide kernels'.
type Acc16 = [u32; 2];

/// The training loop of one block of variant `F` (W1's state in global memory): `args.steps`
/// steps with slices of `N` n-tiles, the row's `n`.
#[inline(always)]
pub(super) unsafe fn train<F: Row, const N: usize>(args: Params) {
    const {
        let v = F::V;
        assert!(v.offchip() && v.ring() && v.parts == 1 && v.n == N && v.tiles() == T);
    };
    let block = Block::new::<F>(args, args.layer(0));
    load_w1(&block);
    weights::load_small(&block);
    block.clear_unfilled_rows();
    let mut ring = Ring::start(&block, true);
    for k in 0..args.steps {
        let b = block.for_step();
        let s = Step::new(&b, k);
        // One mark a phase of `trace::OFFCHIP`.
        let mut t = Trace::start(&args, k);
        let h = hidden::<N>(&b, &mut ring);
        t.mark();
        logits::add_partials::<Acc16, T, N>(&b, &s, &h, F::V.bulk());
        t.mark();
        logits::exchange(&b, &s);
        t.mark();
        let part = softmax::cross_entropy_whole_batch(&b, &s);
        softmax::loss_sums::<F>(&b, part);
        t.mark();
        backward::hidden_grad(&b, &h);
        t.mark();
        bias_grad::<N>(&b);
        t.mark();
        output_grads::<N>(&b);
        t.mark();
        dw1_step::<N>(&b, &mut ring);
        t.mark();
        softmax::record_loss::<F>(&b, &s);
        small_step::<N>(&b);
        t.mark();
    }
    // The last step's updates before the write-back reads them.
    sync_threads();
    store_w1(&block);
    weights::store_small(&block);
}

/// The slice's W1 rows in the parameter buffers: `units · dim` values from this index.
#[inline(always)]
fn w1_rows(b: &Block) -> usize {
    (b.layer.o_w1 + b.j0 * b.layer.dim) as usize
}

/// The fp16 copy of the slice's W1, from its master values, into the planes of shared memory
/// (`[n-tile][input][unit]`).
#[inline(always)]
fn load_w1(b: &Block) {
    let (dim, w32) = (b.layer.dim as usize, b.args.w32 as *const f32);
    let mut i = b.tid;
    while i < b.units() * dim {
        let (u, k) = (i / dim, i % dim);
        let m = unsafe { *w32.add(w1_rows(b) + i) };
        st_shared_u16(
            b.w1(u / UNITS) + ((k * UNITS + u % UNITS) * 2) as u32,
            f2h(m),
        );
        i += THREADS;
    }
}

/// The fp16 copy the layered kernels read, from the master values the launch has updated.
#[inline(always)]
fn store_w1(b: &Block) {
    let (w32, w16) = (b.args.w32 as *const f32, b.args.w16 as *mut u16);
    let mut i = w1_rows(b) + b.tid;
    while i < w1_rows(b) + b.units() * b.layer.dim as usize {
        unsafe { *w16.add(i) = f2h(*w32.add(i)) };
        i += THREADS;
    }
}

/// The forward over the streamed batch: warp `w` multiplies its tile by the slice's W1 in one
/// accumulator chain per n-tile, then adds the bias and applies the ReLU ([`activate`]). Every
/// thread calls it (the ring's barriers).
#[inline(always)]
fn hidden<const N: usize>(b: &Block, ring: &mut Ring) -> [[f32; 4]; N] {
    let (mm, kk) = ldmatrix_lane(b.lane, Operand::A, true);
    let a_off = ((16 * b.warp + mm) * CHUNK_STRIDE + 2 * kk) as u32;
    let mut acc = [Acc16::ZERO; N];
    for c in 0..MAX_CHUNKS {
        if c < chunks(b) {
            let x = ring.next(b) + a_off;
            if b.has_tile() {
                for j in 0..CHUNK / 16 {
                    let ks = CHUNK / 16 * c + j;
                    if ks < b.ktiles {
                        let a = ldmatrix_x4(x + 32 * j as u32);
                        let bf = w1_frags::<N>(b, ks);
                        for n in 0..N {
                            acc[n].mma_k16(a, bf[n]);
                        }
                    }
                }
            }
        }
    }
    activate::<Acc16, N>(b, &acc)
}

/// Where the bias warp leaves db1 for the update (f32, one per unit of the slice): the region
/// the other kernels receive their partner's shares in, which this kernel does not use.
#[inline(always)]
fn db1(b: &Block) -> *mut f32 {
    unsafe { b.base.add(b.lay.xch) as *mut f32 }
}

/// db1, dH's column sums over the batch: on the [`BIAS_WARP`], a product with ones per n-tile
/// (every row of it holds the sums; the lanes of row group 0 leave theirs, units `2t` and
/// `2t + 1`), from dH in shared memory after [`backward::hidden_grad`]'s barrier.
#[inline(always)]
fn bias_grad<const N: usize>(b: &Block) {
    if b.warp != BIAS_WARP {
        return;
    }
    for n in 0..N {
        let d = column_sums::<T>(b, b.dh(n));
        if b.group() == 0 {
            let at = UNITS * n + 2 * b.in_group();
            unsafe { (*db1(b).add(at), *db1(b).add(at + 1)) = (d[0], d[1]) };
        }
    }
}

/// dW2 = dlogitsᵀ·H (a fragment per n-tile) and db2 (dlogits' column sums) over the batch, on
/// the [`OUTPUT_WARP`], into [`Block::own`] for the update: n-tile `n`'s fragment at word
/// `128·n`, db2's after the last. Unlike [`backward::output_grads`], one n-tile at a time and
/// nothing sent: H's fragments of the whole batch for all four n-tiles would take 64 registers.
#[inline(always)]
fn output_grads<const N: usize>(b: &Block) {
    if b.warp != OUTPUT_WARP {
        return;
    }
    let l = b.lane;
    let (mm, kk) = ldmatrix_lane(l, Operand::A, false);
    let dl =
        |ks: usize| ldmatrix_x4_trans(b.dl() + (((16 * ks + kk) * MAX_CLASSES + mm) * 2) as u32);
    let keep = |word: usize, d: [f32; 4]| unsafe { *(b.own().add(word) as *mut [f32; 4]) = d };
    let mut db = [0.0f32; 4];
    for ks in 0..T {
        if ks < b.rows() / 16 {
            db.mma_k16(dl(ks), ONES);
        }
    }
    keep(128 * N + 4 * l, db);
    for n in 0..N {
        let hb = unit_frags::<T>(b, b.h(n));
        let mut dw = [0.0f32; 4];
        for ks in 0..T {
            if ks < b.rows() / 16 {
                dw.mma_k16(dl(ks), hb[ks]);
            }
        }
        keep(128 * n + 4 * l, dw);
    }
}

/// dW1 and its SGD step, over the streamed batch: chunk `c` holds input tile `8c + w` of warp
/// `w`, whose product over the whole batch is complete within the chunk, so the warp steps the
/// tile's master values and momentum in global memory and its fp16 copy in shared memory as
/// soon as it has it. The tile's state is loaded just before its product (a chunk earlier, it
/// ran slower: `docs/persistent.md`). Every thread calls it (the ring's barriers).
#[inline(always)]
fn dw1_step<const N: usize>(b: &Block, ring: &mut Ring) {
    let (mm, kk) = ldmatrix_lane(b.lane, Operand::A, false);
    let a_off = (kk * CHUNK_STRIDE + (16 * b.warp + mm) * 2) as u32;
    for c in 0..MAX_CHUNKS {
        if c < chunks(b) {
            let x = ring.next(b) + a_off;
            let mt = CHUNK / 16 * c + b.warp;
            if mt < b.ktiles {
                let state = State::<N>::load(b, mt);
                let mut acc = [[0.0f32; 4]; N];
                for ks in 0..T {
                    if ks < b.rows() / 16 {
                        let a = ldmatrix_x4_trans(x + (16 * ks * CHUNK_STRIDE) as u32);
                        for n in 0..N {
                            let row = (16 * ks + b.lane % 16) * UNITS * 2;
                            acc[n].mma_k16(a, ldmatrix_x2_trans(b.dh(n) + row as u32));
                        }
                    }
                }
                state.step(b, mt, &acc);
            }
        }
    }
}

/// The master values and momentum of the thread's elements of dW1ᵀ tile `mt`: element `e` of
/// n-tile `n`'s accumulator fragment.
struct State<const N: usize> {
    master: [[f32; 4]; N],
    momentum: [[f32; 4]; N],
}

impl<const N: usize> State<N> {
    #[inline(always)]
    fn load(b: &Block, mt: usize) -> State<N> {
        let (w32, vel) = (b.args.w32 as *const f32, b.args.vel as *const f32);
        let mut s = State {
            master: [[0.0; 4]; N],
            momentum: [[0.0; 4]; N],
        };
        for n in 0..N {
            for e in 0..4 {
                let (r, c) = mma_c(b.lane, e);
                let k = w1_index(b, n, mt, r, c);
                unsafe { (s.master[n][e], s.momentum[n][e]) = (*w32.add(k), *vel.add(k)) };
            }
        }
        s
    }

    /// The SGD step of the elements by the gradient `acc` (rounded to fp16 first, as the
    /// layered step keeps weight gradients): the state back to global memory, each new unit
    /// pair's fp16 word into the slice's plane.
    #[inline(always)]
    fn step(mut self, b: &Block, mt: usize, acc: &[[f32; 4]; N]) {
        let (w32, vel) = (b.args.w32 as *mut f32, b.args.vel as *mut f32);
        for n in 0..N {
            for p in 0..2 {
                let mut nw = [0.0; 2];
                for h in 0..2 {
                    let e = 2 * p + h;
                    let (w, v) = (&mut self.master[n][e], &mut self.momentum[n][e]);
                    nw[h] = sgd(b, w, v, round_h(acc[n][e]));
                    let (r, c) = mma_c(b.lane, e);
                    let k = w1_index(b, n, mt, r, c);
                    unsafe { (*w32.add(k), *vel.add(k)) = (*w, *v) };
                }
                let (r, c) = mma_c(b.lane, 2 * p);
                st_shared_u32(w1_shared(b, n, mt, r, c), pack_h2(nw[0], nw[1]));
            }
        }
    }
}

/// The SGD step of b1 (thread `t` takes unit `t`), W2's columns of the slice and b2
/// ([`small_sgd`]), from the gradients [`bias_grad`] and [`output_grads`] left, which the
/// ring's barriers in [`dw1_step`] have ordered before (it passes at least one: every input
/// width has a chunk).
#[inline(always)]
fn small_step<const N: usize>(b: &Block) {
    let t = b.tid;
    let b1 = (t < b.units()).then(|| (t, unsafe { *db1(b).add(t) }));
    small_sgd::<N>(b, b1, |n| unsafe { *b.own().add(128 * n + w2_word(b)) });
}
