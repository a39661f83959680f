//! The hidden layers of one launch as the step loop (`layers`) holds them: each layer's
//! [`Block`], what the layers share in global memory ([`Shared`]) and every layer's W state
//! ([`Weights`]). A model of one layer has the first alone; the layout of the others is
//! `deep.rs`'s.
use super::context::{Block, Step};
use super::plane::{self, Plane};
use super::weights::{self, W1};
use super::*;
use crate::arch::opaque;

/// Runs `$body` once for each layer `$l` of the list, in its order, with `$l` a literal: the
/// per-layer arrays it indexes stay in registers, which a loop the optimiser might keep would
/// put in local memory. The price is a copy of the body a layer, so from [`LOOP_FROM`] layers
/// the step's phases loop over the later layers instead ([`each_later!`]).
macro_rules! each {
    ($l:ident in [$($v:literal),*] $body:block) => {
        $({
            let $l: usize = $v;
            $body
        })*
    };
}
pub(super) use each;
const _: () = assert!(MAX_LAYERS == 4, "each! lists the layers 0..4");

/// The depth from which a later layer's phases run as one loop ([`each_later!`]) rather than
/// as a copy a layer. Three layers' copies (183 KB of sm_90a SASS) still run from the
/// instruction cache and beat the loop, which redoes its layer's block in every phase; four
/// layers' (226 KB) refetch from L2 every step (`docs/deeper.md`, "Cost").
pub const LOOP_FROM: usize = 4;

/// Runs `$body` for each later layer `$l` in `1..$L`, from the top down where `$down`. Below
/// [`LOOP_FROM`] layers it is a copy a layer with `$l` a constant, as [`each!`] is; from there
/// a loop the optimiser cannot unroll (each index passes through [`opaque`]), one copy of code
/// for every layer. A macro, not a function taking a closure: the per-layer arrays the body
/// reads by [`pick`] must stay in the caller's registers.
macro_rules! each_later {
    ($l:ident in 1..$L:ident, down: $down:expr, $body:block) => {{
        if $L < $crate::persistent::stack::LOOP_FROM {
            $crate::persistent::stack::each!(j in [1, 2, 3] {
                if j < $L {
                    let $l: usize = if $down { $L - j } else { j };
                    $body
                }
            });
        } else {
            let mut i = 1;
            while i < $L {
                let $l = $crate::arch::opaque(if $down { $L - i } else { i } as u32) as usize;
                $body
                i = $crate::arch::opaque(i as u32 + 1) as usize;
            }
        }
    }};
}
pub(super) use each_later;

/// What the blocks share in global memory ([`Scratch`] from [`Params::scratch`], the
/// meetings' counters from [`meetings_at`]) and where the block stages W's columns. With one
/// layer nothing reads it, and the optimiser drops its arithmetic.
#[derive(Clone, Copy)]
pub struct Shared {
    base: *mut u32,
    at: Scratch,
    meetings: *mut u32,
    part: usize,
    widths: Widths,
    flagged: bool,
    pub cols: u32,
}

impl Shared {
    /// What the `L` layers of the launch with parameters `args` share, for a block whose first
    /// layer's is `first`.
    #[inline(always)]
    pub fn of<F: Row, const L: usize>(args: Params, first: &Block) -> Shared {
        let (batch, widths) = (args.batch as usize, widths_of::<L>(&args));
        let plan = Plan::of(batch, L, widths, F::V.parts);
        let slices = first.blocks as usize / F::V.parts;
        Shared {
            base: args.scratch as *mut u32,
            at: Scratch::of(batch, L, widths),
            meetings: (args.counters as *mut u32).wrapping_add(meetings_at(L, slices)),
            part: first.part,
            widths,
            flagged: plane::flagged(widths[1]),
            cols: first.at(plan.cols),
        }
    }

    /// The input of layer `l` (past the first), which the owners of layer `l - 1` publish.
    #[inline(always)]
    pub fn input(&self, l: usize) -> Plane {
        let counter = self
            .meetings
            .wrapping_add(meeting_counter(2 * (l - 1), self.part));
        let at = self.base.wrapping_add(pick(&self.at.h, l - 1));
        Plane::new(at, pick(&self.widths, l), self.flagged, counter)
    }
    /// The gradient of layer `l`'s output (past the first), which its owners publish.
    #[inline(always)]
    pub fn grad(&self, l: usize) -> Plane {
        let counter = self
            .meetings
            .wrapping_add(meeting_counter(2 * (l - 1) + 1, self.part));
        let at = self.base.wrapping_add(pick(&self.at.dz, l - 1));
        Plane::new(at, pick(&self.widths, l + 1), self.flagged, counter)
    }
    /// The fp16 copy of layer `l`'s W that step `k` reads: the copies follow each other, so
    /// the step picks one by arithmetic (an index by the step would put the scratch's offsets
    /// in local memory).
    #[inline(always)]
    pub fn w(&self, l: usize, k: u32) -> *mut u16 {
        let [w0, w1] = pick(&self.at.w, l - 1);
        let at = w0 + (k as usize % 2) * (w1 - w0);
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
pub fn owner(b: &Block) -> bool {
    b.slice < b.layer.hidden / UNITS as u32
}

/// The blocks of the `L` layers of the launch with parameters `args` whose first layer's is
/// `first`.
#[inline(always)]
pub fn blocks<F: Row, const L: usize>(args: Params, first: Block) -> [Block; L] {
    let mut bs = [first; L];
    if L > 1 {
        let (batch, widths) = (args.batch as usize, widths_of::<L>(&args));
        let plan = Plan::of(batch, L, widths, F::V.parts);
        each!(l in [1, 2, 3] {
            if l < L {
                bs[l] = later_block::<F>(args, args.layer(l), plan.layers[l]);
            }
        });
    }
    bs
}

/// The blocks of the `L` layers, each redone from `args` with widths the optimiser cannot
/// see through.
#[inline(always)]
fn opaque_blocks<F: Row, const L: usize>(args: Params) -> ([Block; L], Shared) {
    let args = opaque_widths(args);
    let first = Block::new::<F>(args, args.layer(0));
    (
        blocks::<F, L>(args, first),
        Shared::of::<F, L>(args, &first),
    )
}

/// Layer `l`'s block (past the first), laid out as `lay`: its units are the n-tile of the
/// slice (for a shadow, of slice `s mod slices`, whose weights it loads and never uses).
#[inline(always)]
fn later_block<F: Row>(args: Params, layer: Layer, lay: Smem) -> Block {
    let b = Block::new::<F>(args, layer);
    let slices = layer.hidden / UNITS as u32;
    Block {
        lay,
        j0: b.slice % slices * UNITS as u32,
        ..b
    }
}

/// Layer `l` of `args` for a run-time `l`, as [`Params::layer`] gives it for a constant one.
#[inline(always)]
fn layer_at(args: &Params, l: usize) -> Layer {
    Layer {
        index: l as u32,
        dim: pick(&args.widths, l),
        hidden: pick(&args.widths, l + 1),
        classes: if l + 1 == args.layers as usize {
            pick(&args.widths, l + 2)
        } else {
            0
        },
        o_w1: pick(&args.o_w, l),
        o_b1: pick(&args.o_b, l),
        o_w2: pick(&args.o_w, l + 1),
        o_b2: pick(&args.o_b, l + 1),
    }
}

/// Layer `l`'s block and step (past the first) as a later layer's phase sees them: below
/// [`LOOP_FROM`] layers `l` is a constant and they are the step's own; in the loop they are
/// redone from the parameters (widths the optimiser cannot see through) each time a phase
/// needs them, since the step's array indexed at run time would live in local memory.
#[inline(always)]
pub fn later_at<F: Row, const L: usize>(
    (bs, ss): (&[Block; L], &[Step; L]),
    l: usize,
) -> (Block, Step) {
    if L < LOOP_FROM {
        return (bs[l], ss[l]);
    }
    let args = opaque_widths(bs[0].args);
    let (batch, widths) = (args.batch as usize, widths_of::<L>(&args));
    let plan = Plan::of(batch, L, widths, F::V.parts);
    let lay = Smem::inner(batch, pick(&widths, l), F::V.parts);
    let lay = lay.placed(pick(&plan.starts, l), plan.layers[0].partials);
    let b = later_block::<F>(args, layer_at(&args, l), lay).for_step();
    (b, Step::new(&b, ss[0].k))
}

/// Step `k`'s blocks and steps of the `L` layers (as [`Block::for_step`] sees them), and what
/// they share. One layer's block is the launch's, `first`, as the step sees it; several
/// layers' are redone from the parameters.
#[inline(always)]
pub fn step_blocks<F: Row, const L: usize>(
    args: Params,
    k: u32,
    first: &Block,
) -> ([Block; L], [Step; L], Shared) {
    if L == 1 {
        let b = first.for_step();
        return ([b; L], [Step::new(&b, k); L], Shared::of::<F, L>(args, &b));
    }
    let (mut bs, shared) = opaque_blocks::<F, L>(args);
    let mut ss = [Step::new(&bs[0], k); L];
    each!(l in [0, 1, 2, 3] {
        if l < L {
            bs[l] = bs[l].for_step();
            ss[l] = Step::new(&bs[l], k);
        }
    });
    (bs, ss, shared)
}

/// The blocks of the `L` layers for the write-back: one layer's, the launch's `first`;
/// several layers', redone from the parameters.
#[inline(always)]
pub fn final_blocks<F: Row, const L: usize>(args: Params, first: &Block) -> [Block; L] {
    if L == 1 {
        [*first; L]
    } else {
        opaque_blocks::<F, L>(args).0
    }
}

/// The W state of every layer in registers, the block's `O` n-tiles of each: the first's,
/// sized for the batch's inputs, and each later layer's (`later[l - 1]`), sized for `K` input
/// tiles a warp.
pub struct Weights<F: Row, const O: usize, const K: usize> {
    pub first: W1<O, F>,
    pub later: [W1<O, F, K>; MAX_LAYERS - 1],
}

impl<F: Row, const O: usize, const K: usize> Weights<F, O, K> {
    /// Every layer's W state, and the rest of its parameters into shared memory.
    #[inline(always)]
    pub fn load<const L: usize>(bs: &[Block; L]) -> Weights<F, O, K> {
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

    /// Every layer's parameters out of the launch, by the blocks of part 0 that own them;
    /// with slices of several n-tiles, each block writes back the first layer's n-tiles it
    /// updates.
    #[inline(always)]
    pub fn store<const L: usize>(&self, bs: &[Block; L]) {
        if bs[0].part == 0 || F::V.n > 1 {
            self.first.store(&bs[0]);
        }
        if bs[0].part == 0 {
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
