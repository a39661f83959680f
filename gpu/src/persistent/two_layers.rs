//! The two-hidden-layer step loop of the `deep` variant (Hopper): the one-layer step's phases
//! run once per layer, with the gathers of H1 and dZ2 that `deep.rs` lays out between them;
//! that file's description gives the step.
use super::context::{Block, Step};
use super::exchange::{self, Outbox};
use super::plane::{self, Plane};
use super::stream::Ring;
use super::trace::Trace;
use super::weights::{self, W1};
use super::*;
use super::{backward, fetch, forward, logits, softmax, update};
use crate::arch::*;
use crate::layout::{Operand, ldmatrix_lane};
use crate::target::BUILT;

const P: usize = PAIR;
const T: usize = tiles(PAIR);

/// A layer's shares of its gradients for the pair's exchange: dW's words, db's entry, and
/// where they went.
type Shares<A> = ([[A; 1]; TILES_PER_WARP], f32, Outbox);

/// What the blocks share in global memory ([`Scratch`] from [`Params::scratch`], the
/// meetings' counters of the block's half) and the block's staged W2 columns.
#[derive(Clone, Copy)]
struct Shared {
    base: *mut u32,
    at: Scratch,
    counters: *mut u32,
    part: usize,
    hidden: usize,
    hidden2: usize,
    cols: u32,
}

impl Shared {
    /// H1, which every block of the half publishes (meeting A where it is counted).
    #[inline(always)]
    fn h1(&self) -> Plane {
        let counter = self.counters.wrapping_add(meeting_counter(0, self.part));
        let at = self.base.wrapping_add(self.at.h1);
        Plane::new(at, self.hidden, plane::flagged(self.hidden), counter)
    }
    /// dZ2, which the owners of the half publish (meeting B where it is counted).
    #[inline(always)]
    fn dz2(&self) -> Plane {
        let counter = self.counters.wrapping_add(meeting_counter(1, self.part));
        let at = self.base.wrapping_add(self.at.dz2);
        Plane::new(at, self.hidden2, plane::flagged(self.hidden), counter)
    }
    /// The fp16 copy of W2 that step `k` reads.
    #[inline(always)]
    fn w2(&self, k: u32) -> *mut u16 {
        self.base.wrapping_add(self.at.w2[k as usize % 2]) as *mut u16
    }
}

/// `args` with widths the optimiser cannot see through, from which the blocks' layouts and
/// offsets are redone each step and for the write-back: kept for the whole launch, they
/// would push the two layers' weights out of registers.
#[inline(always)]
fn opaque_widths(args: Params) -> Params {
    let v = opaque(0);
    Params {
        batch: args.batch + v,
        dim: args.dim + v,
        hidden: args.hidden + v,
        hidden2: args.hidden2 + v,
        ..args
    }
}

/// Whether the block owns its n-tile of the second layer (is not a shadow).
#[inline(always)]
fn owner(b: &Block) -> bool {
    b.slice < b.args.hidden2 / UNITS as u32
}

/// The two layers' blocks of the launch with parameters `args`, and what they share.
#[inline(always)]
fn blocks<F: Row>(args: Params) -> (Block, Block, Shared) {
    let (batch, hidden, hidden2) = (
        args.batch as usize,
        args.hidden as usize,
        args.hidden2 as usize,
    );
    let lay = DeepSmem::of(batch, args.dim as usize, hidden, hidden2);
    let first = Block::new::<F>(Params { classes: 0, ..args });
    let shared = Shared {
        base: args.scratch as *mut u32,
        at: Scratch::of(batch, hidden, hidden2),
        counters: args.counters as *mut u32,
        part: first.part,
        hidden,
        hidden2,
        cols: first.at(lay.w2_cols),
    };
    (first, second_block::<F>(args, lay.second_at), shared)
}

/// The training loop of the deep kernel (variant `F`, accumulators `A`): the steps of
/// the module's description.
#[inline(always)]
pub unsafe fn train<A: Acc, F: Row>(args: Params) {
    const {
        let v = F::V;
        assert!(v.layers == 2 && v.single() && v.parts == PAIR && v.n == 1);
        assert!(v.clustered(BUILT) && !v.bulk() && !v.w1_copy_in_registers());
    };
    let (first, second, shared) = blocks::<F>(args);
    let mut w1 = W1::<1, F>::load(&first);
    let mut w2 = W1::<1, F>::load(&second);
    weights::load_small(&first);
    weights::load_small(&second);
    first.clear_unfilled_rows();
    second.clear_unfilled_rows();
    clear_cols(&first, shared.cols, args.hidden2 as usize);
    exchange::open::<P>(&first);
    exchange::open::<P>(&second);
    let mut ring = Ring::start(&first, false);
    let mut copies = fetch::start(&first);
    for k in 0..args.steps {
        let widths = opaque_widths(args);
        let (b1, b2, shared) = blocks::<F>(widths);
        let (b1, b2) = (b1.for_step(), b2.for_step());
        let (s1, s2) = (Step::new(&b1, k), Step::new(&b2, k));
        let owner = owner(&b1);
        // One mark a phase of `trace::TWO_LAYERS`.
        let mut t = Trace::start(&args, k);
        if owner && b2.part == 0 {
            publish_w2(&b2, shared.w2(k));
        }
        fetch::wait(&b1, &s1, &copies);
        t.mark();
        let h1 = forward::hidden::<A, F, T, 1, 1, TILES_PER_WARP>(&b1, &s1, &mut ring, &w1);
        t.mark();
        // The tile warps' H1 rows before other warps publish them.
        sync_threads();
        shared.h1().publish(&b1, b1.h(0), b1.j0, k);
        t.mark();
        let second_shares = if owner {
            Some(second_layer::<A, F>(
                (&b1, &s1),
                (&b2, &s2),
                (&mut ring, &mut t),
                &w2,
                &shared,
            ))
        } else {
            t.skip(2);
            logits::exchange(&b2, &s2);
            t.skip(3);
            None
        };
        input_grad(&b1, (&b2, &s2), &h1, &shared, k);
        t.mark();
        let (dw1, db1, out1) = shares::<A, F>(&b1, &s1, &mut ring);
        t.mark();
        if let Some((dw2, db2, out2)) = second_shares {
            let sums2 =
                exchange::receive::<A, P, 1, 1, TILES_PER_WARP>(&b2, &s2, (&dw2, db2), || {});
            softmax::record_loss(&b2, &s2);
            update::sgd_step(&b2, &s2, &mut w2, &sums2, &out2);
        }
        t.mark();
        let sums1 = exchange::receive::<A, P, 1, 1, TILES_PER_WARP>(&b1, &s1, (&dw1, db1), || {
            fetch::after_dw1(&b1, &s1, &mut copies)
        });
        update::sgd_step(&b1, &s1, &mut w1, &sums1, &out1);
        sync_threads();
        t.mark();
    }
    // The last step's update before the write-back reads it.
    sync_threads();
    let (first, second, _) = blocks::<F>(opaque_widths(args));
    if first.part == 0 {
        w1.store(&first);
        weights::store_small(&first);
        if owner(&first) {
            w2.store(&second);
            weights::store_small(&second);
        }
    }
}

/// The second layer's step up to its shares (its owners only: shadows meet the grid, and
/// take dZ2 as every block does): H1 gathered, the forward, the partial logits and the grid
/// barrier, the softmax, dZ2 published, then the shares of db2, dW3, db3 and dW2.
#[inline(always)]
fn second_layer<A: Acc, F: Row>(
    (b1, s1): (&Block, &Step),
    (b2, s2): (&Block, &Step),
    (ring, t): (&mut Ring, &mut Trace),
    w2: &W1<1, F>,
    shared: &Shared,
) -> Shares<A> {
    shared.h1().gather(b1, (s2.x, b2.lay.stride), s1.k);
    copy_labels(b1, s1, s2, b2.lay.stride);
    sync_threads();
    t.mark();
    let h2 = forward::hidden::<A, F, T, 1, 1, TILES_PER_WARP>(b2, s2, ring, w2);
    logits::add_partials::<A, T, 1>(b2, s2, &h2, false);
    t.mark();
    logits::exchange(b2, s2);
    t.mark();
    let part = softmax::cross_entropy::<F>(b2, s2);
    backward::hidden_grad(b2, &h2);
    shared.dz2().publish(b2, b2.dh(0), b2.j0, s2.k);
    t.mark();
    let out = Outbox::new::<P>(b2);
    let db = backward::bias_share::<T, 1>(b2, &out);
    backward::output_grads::<T, 1>(b2, &out);
    let send = |theirs: &_| out.send_dw1(b2, theirs, b2.peer0);
    let dw = backward::dw1_shares::<A, F, T, 1, 1, TILES_PER_WARP>(b2, s2, ring, send);
    softmax::loss_sums(b2, part);
    t.mark();
    (dw, db, out)
}

/// A layer's shares of db and dW from its dH plane (the first layer's: dH1).
#[inline(always)]
fn shares<A: Acc, F: Row>(b: &Block, s: &Step, ring: &mut Ring) -> Shares<A> {
    let out = Outbox::new::<P>(b);
    let db = backward::bias_share::<T, 1>(b, &out);
    let send = |theirs: &_| out.send_dw1(b, theirs, b.peer0);
    let dw = backward::dw1_shares::<A, F, T, 1, 1, TILES_PER_WARP>(b, s, ring, send);
    (dw, db, out)
}

/// The second layer's block: its input is H1 (`hidden` wide), its units the n-tile of the
/// slice (for a shadow, of slice `s mod slices2`, whose weights it loads and never uses),
/// its outputs the classes, its shared memory from `at`.
#[inline(always)]
fn second_block<F: Row>(args: Params, at: usize) -> Block {
    let b = Block::new::<F>(Params {
        dim: args.hidden,
        hidden: args.hidden2,
        o_w1: args.o_w2,
        o_b1: args.o_b2,
        o_w2: args.o_w3,
        o_b2: args.o_b3,
        ..args
    });
    let slices2 = args.hidden2 / UNITS as u32;
    Block {
        base: b.base.wrapping_add(at),
        s0: b.s0 + at as u32,
        j0: b.slice % slices2 * UNITS as u32,
        ..b
    }
}

/// Zeros the staged columns of W2, whose padding past `hidden2` stays so (the products of
/// dH1 run over whole k-steps).
#[inline(always)]
fn clear_cols(b: &Block, cols: u32, hidden2: usize) {
    let mut i = 4 * b.tid;
    while i < UNITS * cols_row(hidden2) {
        st_shared_u32(cols + i as u32, 0);
        i += 4 * THREADS;
    }
}

/// The owner's fp16 W2 (its n-tile's rows, `[input][unit]` in shared memory) into the
/// step's copy `[hidden][hidden2]`, which the blocks read after the step's grid barrier: the
/// barrier orders it, so it needs no flags.
#[inline(always)]
fn publish_w2(b: &Block, to: *mut u16) {
    let mut i = b.tid;
    while i < b.args.dim as usize {
        let v = ld_shared_v4(b.w1(0) + (i * UNITS * 2) as u32);
        let at = i * b.args.hidden as usize + b.j0 as usize;
        st_global_v4(to.wrapping_add(at) as *mut u8, v);
        i += THREADS;
    }
}

/// Each row's label from the first layer's batch buffer into the second's, where the
/// softmax finds it.
#[inline(always)]
fn copy_labels(b1: &Block, s1: &Step, s2: &Step, stride2: usize) {
    if b1.tid < b1.mine {
        let from = s1.x + (b1.tid * b1.lay.stride + label_offset(b1.args.dim as usize)) as u32;
        let to = s2.x + (b1.tid * stride2 + label_offset(b1.args.hidden as usize)) as u32;
        st_shared_u32(to, ld_shared_u32(from));
    }
}

/// `dH1[:, s] = dZ2·W2[:, s]` through the ReLU of `h1` (the first layer's H fragments) for
/// the tile warp's tile, stored fp16 in the first block's dH plane, behind a block barrier.
/// dZ2 is gathered into the second block's batch buffer (free once its dW2 is done), W2's
/// columns of the slice staged from step `k`'s copy.
#[inline(always)]
fn input_grad(b1: &Block, (b2, s2): (&Block, &Step), h1: &[[f32; 4]; 1], shared: &Shared, k: u32) {
    // Every warp is past dW2's reads of the second block's batch buffer, which dZ2 overwrites.
    sync_threads();
    let width = b1.args.hidden2 as usize;
    // W2's columns first: their copies are in flight while the thread waits for dZ2's lines.
    let (pieces, row, cols) = (width / 8, cols_row(width), shared.cols);
    let mut i = b1.tid;
    while i < UNITS * pieces {
        let (u, c) = (i / pieces, i % pieces);
        let src = shared
            .w2(k)
            .wrapping_add((b1.j0 as usize + u) * width + 8 * c) as *const u8;
        cp_async_16_whole(cols + (u * row + 16 * c) as u32, src);
        i += THREADS;
    }
    cp_async_commit();
    // Rows of whole k-steps (a width of 24 has 32 columns), and at most H1's.
    let stride = row_stride(width.next_multiple_of(16));
    shared.dz2().gather(b2, (s2.x, stride), k);
    cp_async_wait::<0>();
    sync_threads();
    if b1.has_tile() {
        let (w, g, t) = (b1.warp, b1.group(), b1.in_group());
        let (mm, kk) = ldmatrix_lane(b1.lane, Operand::A, true);
        let a0 = s2.x + ((16 * w + mm) * stride + 2 * kk) as u32;
        let b0 = cols + (g * row + 4 * t) as u32;
        let mut d = [0.0f32; 4];
        for ks in 0..width.div_ceil(16) {
            let a = ldmatrix_x4(a0 + 32 * ks as u32);
            let at = b0 + 32 * ks as u32;
            d.mma_k16(a, [ld_shared_u32(at), ld_shared_u32(at + 16)]);
        }
        for e in 0..4 {
            d[e] = if h1[0][e] > 0.0 { round_h(d[e]) } else { 0.0 };
        }
        st_shared_frag_f16(b1.dh(0), UNITS as u32, (16 * w + g) as u32, 2 * t as u32, d);
    }
    sync_threads();
}
