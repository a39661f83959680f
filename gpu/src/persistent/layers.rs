//! The step loop of every row but `offchip`: a model of `L` hidden layers, one to
//! [`MAX_LAYERS`]. The first layer's phases are the one-layer step's (the module's
//! description in `mod.rs`); with more, each later layer's owners run the same phases on
//! their n-tile, with the gathers between layers that `deep.rs` lays out. A later layer's
//! phases run through `each_later!`: a copy a layer below four layers, and from four one loop
//! over the layers, one copy of code for every layer, which brings a four-layer step's code
//! below three layers' copies (178 KB of sm_90a SASS against 183). In the loop a phase redoes
//! its layer's block from the parameters, and takes its layer's H fragments and shares from
//! arrays by a select per element (`pick`). A later layer's update, which steps its W state in
//! registers, is a copy a layer at every depth (`each!`). The first layer's W state is sized
//! for the batch's inputs, a later one's for `K` input tiles a warp.
use super::between::{copy_labels, input_grad, publish_ws};
use super::context::{Block, Step};
use super::exchange::{self, Outbox};
use super::fetch::Copies;
use super::stack::{Shared, Weights, blocks, each, each_later, final_blocks};
use super::stack::{later_at, owner, step_blocks};
use super::stream::Ring;
use super::trace::Trace;
use super::weights::W1;
use super::*;
use super::{backward, fetch, forward, logits, softmax, update};
use crate::arch::{Acc, sync_threads, sync_warp};
use crate::target::BUILT;

/// A layer's shares of its gradients for the slice's exchange: dW's words (the block's `O`
/// n-tiles, `K` input tiles a warp), db's entry, and where they went.
type Shares<A, const O: usize, const K: usize> = ([[A; O]; K], f32, Outbox);

/// What the loop assumes of its row `v` on this PTX with one hidden layer.
const fn assert_one_layer_row(v: &Variant) {
    assert!(v.parts >= PAIR && v.parts <= MAX_PARTS);
    assert!(
        !v.ring() || v.parts == PAIR,
        "the ring loads a half of the batch"
    );
    assert!(
        v.w1_copy_in_registers() == (v.single() && v.parts == MAX_PARTS && !BUILT.cp_async()),
        "W1's copy in registers: the quarters on sm_75"
    );
    assert!(
        BUILT.cp_async() || v.ring() || v.w1_copy_in_registers(),
        "sm_75 copies through registers: the ring, or one buffer of a quarter"
    );
    assert!(
        v.n == 1 || (BUILT.clusters() && v.single() && v.parts == PAIR),
        "wide slices: one buffer, a pair of blocks in a cluster"
    );
    assert!(
        !v.bulk() || (BUILT.clusters() && !v.ring()),
        "bulk reductions: Hopper, whole rows"
    );
    assert!(
        !matches!(v.batch, Batch::Double) || BUILT.clusters(),
        "two buffers: the next batch by the copy engine (Hopper)"
    );
}

/// What the loop assumes of its row `v` with several hidden layers, `k` input tiles a warp
/// past the first.
const fn assert_engine_row(v: &Variant, k: usize) {
    assert!(v.single() && v.tiles() <= tiles(PAIR) && BUILT.cp_async());
    assert!(v.n == 1 && v.inner_tiles() == k && k <= TILES_PER_WARP);
    assert!(!v.bulk() && !v.w1_copy_in_registers());
}

/// The training loop of one block of variant `F` (a row of [`VARIANTS`]): `args.steps`
/// steps, each the phases in order. A block is one of the `P` parts of a slice, holds `T`
/// 16-row tiles of the batch at most and a slice of `N` n-tiles of the first layer, of which
/// it updates `O`, and with `L` hidden layers the n-tile of each later one whose slice it is,
/// `K` input tiles a warp: the row's `parts`, [`Variant::tiles`], `n`, [`Variant::owned`],
/// `layers` and [`Variant::inner_tiles`], passed as parameters because they size the register
/// arrays and bound their loops.
#[inline(always)]
pub unsafe fn train<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
    const L: usize,
    const K: usize,
>(
    args: Params,
) {
    const {
        let v = F::V;
        assert!(P == v.parts && T == v.tiles() && N == v.n && O == v.owned());
        assert!(L == v.layers && L >= 1 && L <= MAX_LAYERS && v.exists_in(BUILT));
        if L == 1 {
            assert_one_layer_row(&v);
        } else {
            assert_engine_row(&v, K);
        }
    };
    let ring_fed = F::V.ring();
    let first = Block::new::<F>(args, args.layer(0));
    let bs = blocks::<F, L>(args, first);
    let mut w = Weights::<F, O, K>::load(&bs);
    each!(l in [0, 1, 2, 3] {
        if l < L {
            bs[l].clear_unfilled_rows();
            exchange::open::<P>(&bs[l]);
        }
    });
    if L > 1 {
        // Every layer's fp16 W in shared memory before the first step's `publish_ws` reads
        // it (other threads wrote it; on Hopper `fetch::start` has this barrier too, sm_80
        // none).
        sync_threads();
    }
    let mut ring = Ring::start(&first, ring_fed);
    let mut copies = if ring_fed {
        Copies::idle()
    } else {
        fetch::start(&first)
    };
    for k in 0..args.steps {
        let (bs, ss, shared) = step_blocks::<F, L>(args, k, &first);
        let (b0, s0) = (&bs[0], &ss[0]);
        // One mark a phase of `trace::phases_of`.
        let mut t = Trace::start(&args, k);
        publish_ws(&bs, &shared, k);
        if !ring_fed {
            fetch::wait(b0, s0, &copies);
        }
        exchange::wait_w1(b0, s0);
        t.mark();
        let h0 = forward::hidden::<A, F, T, N, O, TILES_PER_WARP>(b0, s0, &mut ring, &w.first);
        t.mark();
        // The next batch into the first layer's buffer, from the first receive the block runs
        // past that layer's dW shares, its last reader: with several layers, that of the
        // topmost layer it owns, so the copy overlaps the exchanges and updates that follow.
        let mut refilled = ring_fed;
        let mut refill = || {
            if !refilled {
                fetch::after_dw1(b0, s0, &mut copies);
                refilled = true;
            }
        };
        let (dw0, db0, out0) = if L == 1 {
            last_layer::<A, F, P, T, N, O, TILES_PER_WARP>((b0, s0), &h0, &mut ring, &mut t, None)
        } else {
            let at = (&shared, &mut w.later, &mut refill);
            later_layers::<A, F, P, T, N, O, L, K>((&bs, &ss), &mut ring, h0, at, &mut t)
        };
        let sums0 = exchange::receive::<A, P, N, O, TILES_PER_WARP>(b0, s0, (&dw0, db0), refill);
        if L == 1 {
            t.mark();
            softmax::record_loss::<F>(b0, s0);
        }
        update::sgd_step(b0, s0, &mut w.first, &sums0, &out0);
        // A warp barrier where each warp's next forward reads only W1 rows it updated itself.
        if const { L == 1 && forward::reads_own_w1_rows::<A>(F::V.ring(), T) } {
            sync_warp();
        } else {
            sync_threads();
        }
        t.mark();
    }
    // The last step's update before the write-back reads it.
    sync_threads();
    w.store(&final_blocks::<F, L>(args, &first));
}

/// Past the first layer's forward (`h0`), the step of a model of several layers up to the
/// first layer's shares: H1 published, every later layer's forward (the last one's through
/// its shares), the input gradients down to the first layer with each layer's shares, then
/// every later layer's exchange and update (`later`, its W state; the first exchange also
/// runs `refill`). Returns the first layer's shares.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn later_layers<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
    const L: usize,
    const K: usize,
>(
    (bs, ss): (&[Block; L], &[Step; L]),
    ring: &mut Ring,
    h0: [[f32; 4]; N],
    (shared, later, refill): (
        &Shared,
        &mut [W1<O, F, K>; MAX_LAYERS - 1],
        &mut impl FnMut(),
    ),
    t: &mut Trace,
) -> Shares<A, O, TILES_PER_WARP> {
    // The tile warps' rows of H before other warps publish them.
    sync_threads();
    shared
        .input(1)
        .publish(&bs[0], bs[0].h(0), bs[0].j0, ss[0].k);
    t.mark();
    let mut h = [[[0.0f32; 4]; N]; MAX_LAYERS];
    h[0] = h0;
    let last = forwards::<A, F, P, T, N, O, L, K>((bs, ss), ring, &mut h, (shared, later), t);
    let (mut shares, first) = backwards::<A, F, P, T, N, O, L, K>((bs, ss), ring, &h, shared, t);
    shares[L - 1] = last;
    each_later!(l in 1..L, down: true, {
        if let Some((dw, db, out)) = pick(&shares, l) {
            let (b, s) = &later_at::<F, L>((bs, ss), l);
            let sums = exchange::receive::<A, P, N, O, K>(b, s, (&dw, db), &mut *refill);
            if l == L - 1 {
                softmax::record_loss::<F>(b, s);
            }
            // The W state in registers, a copy of the update a layer.
            each!(j in [1, 2, 3] {
                if j < L && l == j {
                    update::sgd_step(b, s, &mut later[j - 1], &sums, &out);
                }
            });
        }
        t.mark();
    });
    first
}

/// The forwards of every layer past the first, each gathering its input and publishing its
/// output for the next: the H fragments of each layer (its ReLU) into `h`, and the last
/// layer's shares where the block owns it (its forward continues to the logits, the grid
/// barrier and its gradients).
#[inline(always)]
fn forwards<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
    const L: usize,
    const K: usize,
>(
    (bs, ss): (&[Block; L], &[Step; L]),
    ring: &mut Ring,
    h: &mut [[[f32; 4]; N]; MAX_LAYERS],
    (shared, w): (&Shared, &[W1<O, F, K>; MAX_LAYERS - 1]),
    t: &mut Trace,
) -> Option<Shares<A, O, K>> {
    let k = ss[0].k;
    let mut last = None;
    each_later!(l in 1..L, down: false, {
        let (b, s) = &later_at::<F, L>((bs, ss), l);
        if owner(b) {
            shared.input(l).gather(b, (s.x, b.lay.stride), k);
            if l == L - 1 {
                copy_labels((&bs[0], &ss[0]), (b, s));
            }
            sync_threads();
            t.mark();
            // An engine row keeps W's fp16 copy in shared memory (`assert_engine_row`), so the
            // forward reads no register of the W state it is given.
            let hl = forward::hidden::<A, F, T, N, O, K>(b, s, ring, &w[0]);
            if l < L - 1 {
                // The layer above takes the ReLU's backward through it; the last layer's
                // fragments go straight to its gradients.
                put(h, l, hl);
                sync_threads();
                shared.input(l + 1).publish(b, b.h(0), b.j0, k);
                t.mark();
            } else {
                let below = Some((shared, l));
                last = Some(last_layer::<A, F, P, T, N, O, K>((b, s), &hl, ring, t, below));
            }
        } else if l < L - 1 {
            t.skip(2);
        } else {
            t.skip(2);
            logits::exchange(b, s);
            t.skip(3);
        }
    });
    last
}

/// From the last layer down, the gradient of each layer's input, which is the gradient of
/// the layer below's output through its ReLU (`h`), published for the layer below that, then
/// that layer's shares: those of every layer past the first that the block owns but the last
/// (which `forwards` took), and the first's.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn backwards<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
    const L: usize,
    const K: usize,
>(
    (bs, ss): (&[Block; L], &[Step; L]),
    ring: &mut Ring,
    h: &[[[f32; 4]; N]; MAX_LAYERS],
    shared: &Shared,
    t: &mut Trace,
) -> (
    [Option<Shares<A, O, K>>; MAX_LAYERS],
    Shares<A, O, TILES_PER_WARP>,
) {
    let mut shares = [None; MAX_LAYERS];
    each_later!(l in 1..L, down: true, {
        let k = ss[0].k;
        let (below, s) = &if l == 1 {
            (bs[0], ss[0])
        } else {
            later_at::<F, L>((bs, ss), l - 1)
        };
        if owner(below) {
            let above = &later_at::<F, L>((bs, ss), l);
            input_grad(below, (&above.0, &above.1), &pick(h, l - 1), shared, l);
            t.mark();
            if l > 1 {
                shared.grad(l - 1).publish(below, below.dh(0), below.j0, k);
                let mine = layer_shares::<A, F, P, T, N, O, K>(below, s, ring);
                put(&mut shares, l - 1, Some(mine));
                t.mark();
            }
        } else {
            t.skip(if l > 1 { 2 } else { 1 });
        }
    });
    let first = layer_shares::<A, F, P, T, N, O, TILES_PER_WARP>(&bs[0], &ss[0], ring);
    t.mark();
    (shares, first)
}

/// The last layer's step from its forward to its shares (with several layers, its owners
/// only: shadows meet the grid, and take the gradient as every block below does): the
/// partial logits and the grid barrier, the softmax, its `dZ` published where it has layers
/// below (`below`: what they share and its index), then the shares of its db and dW and of
/// the output layer's W and b. A model of one layer marks each of these shares apart in the
/// trace (`trace::ONE_LAYER`).
#[inline(always)]
fn last_layer<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
    const K: usize,
>(
    (b, s): (&Block, &Step),
    h: &[[f32; 4]; N],
    ring: &mut Ring,
    t: &mut Trace,
    below: Option<(&Shared, usize)>,
) -> Shares<A, O, K> {
    let apart = below.is_none();
    logits::add_partials::<A, T, N>(b, s, h, F::V.bulk());
    t.mark();
    logits::exchange(b, s);
    t.mark();
    let part = softmax::cross_entropy::<F>(b, s);
    t.mark_if(apart);
    backward::hidden_grad(b, h);
    if let Some((shared, l)) = below {
        shared.grad(l).publish(b, b.dh(0), b.j0, s.k);
        t.mark();
    }
    let out = Outbox::new::<P>(b);
    let db = backward::bias_share::<T, N>(b, &out);
    t.mark_if(apart);
    backward::output_grads::<T, N>(b, &out);
    t.mark_if(apart);
    let send = |theirs: &_| out.send_dw1(b, theirs, b.peer0);
    let dw = backward::dw1_shares::<A, F, T, N, O, K>(b, s, ring, send);
    t.mark_if(apart);
    softmax::loss_sums::<F>(b, part);
    t.mark();
    (dw, db, out)
}

/// A layer's shares of db and dW from its dH plane.
#[inline(always)]
fn layer_shares<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
    const K: usize,
>(
    b: &Block,
    s: &Step,
    ring: &mut Ring,
) -> Shares<A, O, K> {
    let out = Outbox::new::<P>(b);
    let db = backward::bias_share::<T, N>(b, &out);
    let send = |theirs: &_| out.send_dw1(b, theirs, b.peer0);
    let dw = backward::dw1_shares::<A, F, T, N, O, K>(b, s, ring, send);
    (dw, db, out)
}
