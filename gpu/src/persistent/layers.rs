//! The layer engine's step loop (the `deep` rows): the one-layer step's phases run
//! once per hidden layer, `L` of them, with the gathers between layers that `deep.rs` lays
//! out; that file's description gives the step. Per-layer values live in arrays indexed by
//! constants ([`each!`]), so each layer's W state stays in registers: the first layer's
//! sized for the batch's inputs, a later one's for `K` input tiles a warp.
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

/// A layer's shares of its gradients for the slice's exchange: dW's words (`K` input tiles a
/// warp), db's entry, and where they went.
type Shares<A, const K: usize> = ([[A; 1]; K], f32, Outbox);

/// Runs `$body` once for each layer `$l` of the list, in its order, with `$l` a literal: the
/// per-layer arrays it indexes stay in registers, which a loop the optimiser might keep would
/// put in local memory.
macro_rules! each {
    ($l:ident in [$($v:literal),*] $body:block) => {
        $({
            let $l: usize = $v;
            $body
        })*
    };
}
const _: () = assert!(MAX_LAYERS == 4, "each! lists the layers 0..4");

/// What the blocks share in global memory ([`Scratch`] from [`Params::scratch`], the
/// meetings' counters from [`meetings_at`]) and where the block stages W's columns.
#[derive(Clone, Copy)]
struct Shared {
    base: *mut u32,
    at: Scratch,
    meetings: *mut u32,
    part: usize,
    widths: Widths,
    flagged: bool,
    cols: u32,
}

impl Shared {
    /// The input of layer `l` (past the first), which the owners of layer `l - 1` publish.
    #[inline(always)]
    fn input(&self, l: usize) -> Plane {
        let counter = self
            .meetings
            .wrapping_add(meeting_counter(2 * (l - 1), self.part));
        let at = self.base.wrapping_add(self.at.h[l - 1]);
        Plane::new(at, self.widths[l], self.flagged, counter)
    }
    /// The gradient of layer `l`'s output (past the first), which its owners publish.
    #[inline(always)]
    fn grad(&self, l: usize) -> Plane {
        let counter = self
            .meetings
            .wrapping_add(meeting_counter(2 * (l - 1) + 1, self.part));
        let at = self.base.wrapping_add(self.at.dz[l - 1]);
        Plane::new(at, self.widths[l + 1], self.flagged, counter)
    }
    /// The fp16 copy of layer `l`'s W that step `k` reads: the copies follow each other, so
    /// the step picks one by arithmetic (an index by the step would put the scratch's offsets
    /// in local memory).
    #[inline(always)]
    fn w(&self, l: usize, k: u32) -> *mut u16 {
        let copy = self.at.w[l - 1][1] - self.at.w[l - 1][0];
        let at = self.at.w[l - 1][0] + (k as usize % 2) * copy;
        self.base.wrapping_add(at) as *mut u16
    }
}

/// `args` with widths the optimiser cannot see through, from which the blocks' layouts and
/// offsets are redone each step and for the write-back: kept for the whole launch, they
/// would push the layers' weights out of registers.
#[inline(always)]
fn opaque_widths(args: Params) -> Params {
    let v = opaque(0);
    Params {
        batch: args.batch + v,
        widths: args.widths.map(|w| w + v),
        ..args
    }
}

/// Whether the block owns its n-tile of its layer (is not a shadow).
#[inline(always)]
fn owner(b: &Block) -> bool {
    b.slice < b.layer.hidden / UNITS as u32
}

/// The blocks of the `L` layers of the launch with parameters `args`, and what they share.
#[inline(always)]
fn blocks<F: Row, const L: usize>(args: Params) -> ([Block; L], Shared) {
    let (batch, widths) = (args.batch as usize, widths_of(&args));
    let plan = Plan::of(batch, L, widths, F::V.parts);
    let first = Block::new::<F>(args, args.layer(0));
    let slices = first.blocks as usize / F::V.parts;
    let mut bs = [first; L];
    each!(l in [1, 2, 3] {
        if l < L {
            bs[l] = later_block::<F>(args, l, plan.layers[l]);
        }
    });
    let shared = Shared {
        base: args.scratch as *mut u32,
        at: Scratch::of(batch, L, widths),
        meetings: (args.counters as *mut u32).wrapping_add(meetings_at(L, slices)),
        part: first.part,
        widths,
        flagged: plane::flagged(widths[1]),
        cols: first.at(plan.cols),
    };
    (bs, shared)
}

/// Layer `l`'s block (past the first), laid out as `lay`: its units are the n-tile of the
/// slice (for a shadow, of slice `s mod slices`, whose weights it loads and never uses).
#[inline(always)]
fn later_block<F: Row>(args: Params, l: usize, lay: Smem) -> Block {
    let b = Block::new::<F>(args, args.layer(l));
    let slices = args.widths[l + 1] / UNITS as u32;
    Block {
        lay,
        j0: b.slice % slices * UNITS as u32,
        ..b
    }
}

/// The W state of every layer in registers: the first's, sized for the batch's inputs, and
/// each later layer's (`later[l - 1]`), sized for `K` input tiles a warp.
struct Weights<F: Row, const K: usize> {
    first: W1<1, F>,
    later: [W1<1, F, K>; MAX_LAYERS - 1],
}

impl<F: Row, const K: usize> Weights<F, K> {
    /// Every layer's W state, and the rest of its parameters into shared memory.
    #[inline(always)]
    fn load<const L: usize>(bs: &[Block; L]) -> Weights<F, K> {
        let mut w = Weights {
            first: W1::load(&bs[0]),
            later: [const { W1::zero() }; MAX_LAYERS - 1],
        };
        weights::load_small(&bs[0]);
        each!(l in [1, 2, 3] {
            if l < L {
                w.later[l - 1] = W1::load(&bs[l]);
                weights::load_small(&bs[l]);
            }
        });
        w
    }

    /// Every layer's parameters out of the launch, by the blocks of part 0 that own them.
    #[inline(always)]
    fn store<const L: usize>(&self, bs: &[Block; L]) {
        if bs[0].part == 0 {
            self.first.store(&bs[0]);
            weights::store_small(&bs[0]);
            each!(l in [1, 2, 3] {
                if l < L && owner(&bs[l]) {
                    self.later[l - 1].store(&bs[l]);
                    weights::store_small(&bs[l]);
                }
            });
        }
    }
}

/// The training loop of the layer engine (variant `F`, accumulators `A`, the batch in `P`
/// parts of `T` 16-row tiles at most, `L` hidden layers, `K` input tiles a warp past the
/// first): the steps of `deep.rs`'s description.
#[inline(always)]
pub unsafe fn train<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const L: usize,
    const K: usize,
>(
    args: Params,
) {
    const {
        let v = F::V;
        assert!(v.layers == L && L >= 2 && L <= MAX_LAYERS);
        assert!(v.single() && v.parts == P && T == v.tiles() && T <= tiles(PAIR));
        assert!(v.n == 1 && v.inner_tiles() == K && K <= TILES_PER_WARP);
        assert!(v.exists_in(BUILT) && BUILT.cp_async());
        assert!(!v.bulk() && !v.w1_copy_in_registers());
    };
    let (bs, _) = blocks::<F, L>(args);
    let mut w = Weights::<F, K>::load(&bs);
    each!(l in [0, 1, 2, 3] {
        if l < L {
            bs[l].clear_unfilled_rows();
            exchange::open::<P>(&bs[l]);
        }
    });
    // Every layer's fp16 W in shared memory before the first step's `publish_w` reads it
    // (other threads wrote it; on Hopper `fetch::start` has this barrier too, sm_80 none).
    sync_threads();
    let mut ring = Ring::start(&bs[0], false);
    let mut copies = fetch::start(&bs[0]);
    for k in 0..args.steps {
        let (bs, ss, shared) = step_blocks::<F, L>(args, k);
        // One mark a phase of `trace::phases_of`.
        let mut t = Trace::start(&args, k);
        each!(l in [1, 2, 3] {
            if l < L && owner(&bs[l]) && bs[l].part == 0 {
                publish_w(&bs[l], shared.w(l, k));
            }
        });
        fetch::wait(&bs[0], &ss[0], &copies);
        t.mark();
        let (h, last) = forwards::<A, F, P, T, L, K>((&bs, &ss), &mut ring, &w, &shared, &mut t);
        let (mut shares, first) =
            backwards::<A, F, P, T, L, K>((&bs, &ss), &mut ring, &h, &shared, &mut t);
        shares[L - 1] = last;
        each!(l in [3, 2, 1] {
            if l < L {
                if let Some((dw, db, out)) = shares[l].take() {
                    let (b, s) = (&bs[l], &ss[l]);
                    let sums = exchange::receive::<A, P, 1, 1, K>(b, s, (&dw, db), || {});
                    if l == L - 1 {
                        softmax::record_loss::<F>(b, s);
                    }
                    update::sgd_step(b, s, &mut w.later[l - 1], &sums, &out);
                }
                t.mark();
            }
        });
        let ((b0, s0), (dw0, db0, out0)) = ((&bs[0], &ss[0]), first);
        let sums0 = exchange::receive::<A, P, 1, 1, TILES_PER_WARP>(b0, s0, (&dw0, db0), || {
            fetch::after_dw1(b0, s0, &mut copies)
        });
        update::sgd_step(b0, s0, &mut w.first, &sums0, &out0);
        sync_threads();
        t.mark();
    }
    // The last step's update before the write-back reads it.
    sync_threads();
    w.store(&blocks::<F, L>(opaque_widths(args)).0);
}

/// Step `k`'s blocks and steps of the `L` layers (as [`Block::for_step`] sees them), and what
/// they share.
#[inline(always)]
fn step_blocks<F: Row, const L: usize>(args: Params, k: u32) -> ([Block; L], [Step; L], Shared) {
    let (mut bs, shared) = blocks::<F, L>(opaque_widths(args));
    let mut ss = [Step::new(&bs[0], k); L];
    each!(l in [0, 1, 2, 3] {
        if l < L {
            bs[l] = bs[l].for_step();
            ss[l] = Step::new(&bs[l], k);
        }
    });
    (bs, ss, shared)
}

/// The forwards of every layer, each publishing its output for the next to gather: the H
/// fragments of each layer (its ReLU), and the last layer's shares where the block owns it
/// (its forward continues to the logits, the grid barrier and its gradients).
#[inline(always)]
fn forwards<A: Acc, F: Row, const P: usize, const T: usize, const L: usize, const K: usize>(
    (bs, ss): (&[Block; L], &[Step; L]),
    ring: &mut Ring,
    w: &Weights<F, K>,
    shared: &Shared,
    t: &mut Trace,
) -> ([[[f32; 4]; 1]; MAX_LAYERS], Option<Shares<A, K>>) {
    let k = ss[0].k;
    let mut h = [[[0.0f32; 4]; 1]; MAX_LAYERS];
    h[0] = forward::hidden::<A, F, T, 1, 1, TILES_PER_WARP>(&bs[0], &ss[0], ring, &w.first);
    t.mark();
    // The tile warps' rows of H before other warps publish them.
    sync_threads();
    shared.input(1).publish(&bs[0], bs[0].h(0), bs[0].j0, k);
    t.mark();
    let mut last = None;
    each!(l in [1, 2, 3] {
        if l < L {
            let (b, s) = (&bs[l], &ss[l]);
            if owner(b) {
                shared.input(l).gather(b, (s.x, b.lay.stride), k);
                if l == L - 1 {
                    copy_labels((&bs[0], &ss[0]), (b, s));
                }
                sync_threads();
                t.mark();
                h[l] = forward::hidden::<A, F, T, 1, 1, K>(b, s, ring, &w.later[l - 1]);
                if l < L - 1 {
                    sync_threads();
                    shared.input(l + 1).publish(b, b.h(0), b.j0, k);
                    t.mark();
                } else {
                    let at = (shared, l);
                    last = Some(last_layer::<A, F, P, T, K>((b, s), &h[l], ring, t, at));
                }
            } else if l < L - 1 {
                t.skip(2);
            } else {
                t.skip(2);
                logits::exchange(b, s);
                t.skip(3);
            }
        }
    });
    (h, last)
}

/// From the last layer down, the gradient of each layer's input, which is the gradient of
/// the layer below's output through its ReLU (`h`), published for the layer below that, then
/// that layer's shares: those of every layer past the first that the block owns but the last
/// (which `forwards` took), and the first's.
#[inline(always)]
fn backwards<A: Acc, F: Row, const P: usize, const T: usize, const L: usize, const K: usize>(
    (bs, ss): (&[Block; L], &[Step; L]),
    ring: &mut Ring,
    h: &[[[f32; 4]; 1]; MAX_LAYERS],
    shared: &Shared,
    t: &mut Trace,
) -> (
    [Option<Shares<A, K>>; MAX_LAYERS],
    Shares<A, TILES_PER_WARP>,
) {
    let mut shares = [const { None }; MAX_LAYERS];
    each!(l in [3, 2, 1] {
        if l < L {
            let below = &bs[l - 1];
            if owner(below) {
                input_grad(below, (&bs[l], &ss[l]), &h[l - 1], shared, l);
                t.mark();
                if l > 1 {
                    shared.grad(l - 1).publish(below, below.dh(0), below.j0, ss[0].k);
                    let s = &ss[l - 1];
                    shares[l - 1] = Some(layer_shares::<A, F, P, T, K>(below, s, ring));
                    t.mark();
                }
            } else {
                t.skip(if l > 1 { 2 } else { 1 });
            }
        }
    });
    let first = layer_shares::<A, F, P, T, TILES_PER_WARP>(&bs[0], &ss[0], ring);
    t.mark();
    (shares, first)
}

/// The last layer's step from its forward to its shares (its owners only: shadows meet the
/// grid, and take the gradient as every block below does): the partial logits and the grid
/// barrier, the softmax, its `dZ` published (the last layer is `l`), then the shares of its
/// db and dW and of the output layer's W and b.
#[inline(always)]
fn last_layer<A: Acc, F: Row, const P: usize, const T: usize, const K: usize>(
    (b, s): (&Block, &Step),
    h: &[[f32; 4]; 1],
    ring: &mut Ring,
    t: &mut Trace,
    (shared, l): (&Shared, usize),
) -> Shares<A, K> {
    logits::add_partials::<A, T, 1>(b, s, h, false);
    t.mark();
    logits::exchange(b, s);
    t.mark();
    let part = softmax::cross_entropy::<F>(b, s);
    backward::hidden_grad(b, h);
    shared.grad(l).publish(b, b.dh(0), b.j0, s.k);
    t.mark();
    let out = Outbox::new::<P>(b);
    let db = backward::bias_share::<T, 1>(b, &out);
    backward::output_grads::<T, 1>(b, &out);
    let send = |theirs: &_| out.send_dw1(b, theirs, b.peer0);
    let dw = backward::dw1_shares::<A, F, T, 1, 1, K>(b, s, ring, send);
    softmax::loss_sums::<F>(b, part);
    t.mark();
    (dw, db, out)
}

/// A layer's shares of db and dW from its dH plane.
#[inline(always)]
fn layer_shares<A: Acc, F: Row, const P: usize, const T: usize, const K: usize>(
    b: &Block,
    s: &Step,
    ring: &mut Ring,
) -> Shares<A, K> {
    let out = Outbox::new::<P>(b);
    let db = backward::bias_share::<T, 1>(b, &out);
    let send = |theirs: &_| out.send_dw1(b, theirs, b.peer0);
    let dw = backward::dw1_shares::<A, F, T, 1, 1, K>(b, s, ring, send);
    (dw, db, out)
}

/// The owner's fp16 W (its n-tile's rows, `[input][unit]` in shared memory) into the step's
/// copy `[input][units]`, which the blocks read after the step's grid barrier: the barrier
/// orders it, so it needs no flags.
#[inline(always)]
fn publish_w(b: &Block, to: *mut u16) {
    let mut i = b.tid;
    while i < b.layer.dim as usize {
        let v = ld_shared_v4(b.w1(0) + (i * UNITS * 2) as u32);
        let at = i * b.layer.hidden as usize + b.j0 as usize;
        st_global_v4(to.wrapping_add(at) as *mut u8, v);
        i += THREADS;
    }
}

/// Each row's label from the first layer's batch buffer into the last's, where the softmax
/// finds it.
#[inline(always)]
fn copy_labels((b0, s0): (&Block, &Step), (b, s): (&Block, &Step)) {
    if b0.tid < b0.mine {
        let from = s0.x + (b0.tid * b0.lay.stride + label_offset(b0.layer.dim as usize)) as u32;
        let to = s.x + (b0.tid * b.lay.stride + label_offset(b.layer.dim as usize)) as u32;
        st_shared_u32(to, ld_shared_u32(from));
    }
}

/// `dH[:, s] = dZ·W[:, s]` through the ReLU of `h` (the lower layer's H fragments) for the
/// tile warp's tile, stored fp16 in the lower block's dH plane, behind a block barrier:
/// `dZ`, the gradient of layer `l`'s output, gathered into its block's batch buffer (free
/// once its dW is done), W's columns of the slice staged from the step's copy.
#[inline(always)]
fn input_grad(
    below: &Block,
    (b, s): (&Block, &Step),
    h: &[[f32; 4]; 1],
    shared: &Shared,
    l: usize,
) {
    // Every warp is past dW's reads of the batch buffer, which dZ overwrites.
    sync_threads();
    let width = b.layer.hidden as usize;
    // W's columns first: their copies are in flight while the thread waits for dZ's lines.
    let (pieces, row, cols) = (width / 8, cols_row(width), shared.cols);
    let mut i = below.tid;
    while i < UNITS * pieces {
        let (u, c) = (i / pieces, i % pieces);
        let src = shared
            .w(l, s.k)
            .wrapping_add((below.j0 as usize + u) * width + 8 * c) as *const u8;
        cp_async_16_whole(cols + (u * row + 16 * c) as u32, src);
        i += THREADS;
    }
    cp_async_commit();
    // A width of half a k-step past the last whole one reads zeros there: another layer's
    // columns, of another row length, may have been staged over them.
    if !width.is_multiple_of(16) && below.tid < UNITS {
        st_shared_v4(cols + (below.tid * row + 2 * width) as u32, [0; 4]);
    }
    // Rows of whole k-steps (a width of 24 has 32 columns), and at most the input's.
    let stride = row_stride(width.next_multiple_of(16));
    shared.grad(l).gather(b, (s.x, stride), s.k);
    cp_async_wait::<0>();
    sync_threads();
    if below.has_tile() {
        let (w, g, t) = (below.warp, below.group(), below.in_group());
        let (mm, kk) = ldmatrix_lane(below.lane, Operand::A, true);
        let a0 = s.x + ((16 * w + mm) * stride + 2 * kk) as u32;
        let b0 = cols + (g * row + 4 * t) as u32;
        let mut d = [0.0f32; 4];
        for ks in 0..width.div_ceil(16) {
            let a = ldmatrix_x4(a0 + 32 * ks as u32);
            let at = b0 + 32 * ks as u32;
            d.mma_k16(a, [ld_shared_u32(at), ld_shared_u32(at + 16)]);
        }
        for e in 0..4 {
            d[e] = if h[0][e] > 0.0 { round_h(d[e]) } else { 0.0 };
        }
        let (row0, col) = ((16 * w + g) as u32, 2 * t as u32);
        st_shared_frag_f16(below.dh(0), UNITS as u32, row0, col, d);
    }
    sync_threads();
}
