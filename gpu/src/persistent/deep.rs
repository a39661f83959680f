//! The layer engine's layout (the `deep` rows: two to [`MAX_LAYERS`] hidden layers
//! in one launch): what each block holds in shared memory ([`Plan`]) and what the blocks
//! share in global memory ([`Scratch`]); the loop is `layers.rs`, the design
//! `docs/deeper.md`.
//!
//! The blocks are the first layer's: a pair per slice of 8 units, each with half the batch
//! (or four, each with a quarter: batches past 128, or where a pair's layout does not fit).
//! Every later layer's n-tiles are dealt over the same slices, slice `s` taking n-tile `s`:
//! where a layer is narrower, the slices past its n-tiles are its shadows, which take no part
//! in its work. Each layer is a [`Block`](super::context::Block) of its own, so the one-layer
//! step's phases run unchanged on each: the first has the batch as input, a later one its
//! input gathered into its batch buffer, the last the classes as outputs. A step:
//! 1. layer 1's forward, `H1[:, s]`, block-local, published to global memory;
//! 2. each later layer's owners gather its input and run its forward, publishing its output
//!    (the last: the partial logits, the grid barrier, the softmax and its `dZ`);
//! 3. from the last layer down, its owners publish `dZ` and compute their shares of its
//!    gradients; then the layer below computes `dH[:, s] = dZ·W[:, s]` through its ReLU,
//!    `dZ` gathered and W's columns of the slice from the fp16 copy that their owners
//!    publish as each step starts (two copies alternate, so a step never overwrites a copy
//!    that a block may still be reading);
//! 4. each layer's exchange among the slice's parts and update (within a Hopper pair's
//!    cluster, elsewhere through global memory).
//!
//! In the code, layers count from 0 (`bs[0]` is the first hidden layer, whose weights are W1),
//! and what exists only past the first is indexed `l - 1` (`Scratch`, the later layers'
//! weights); docs, traces and the host's messages count from 1 (H1, "hidden layer 1").
//!
//! Inputs and `dZ` are planes (`plane`) that a block gathers as soon as they carry the step's
//! flag (a first layer of up to 128 units) or after a meeting of its part's blocks at a
//! counter. W's copies need neither: the step's grid barrier orders them. Each plane's next
//! write follows a grid barrier that its readers pass only after reading it: an input is read
//! before its step's grid barrier and rewritten the next step; a `dZ` is read before the next
//! step's barrier and rewritten after it; a W copy is rewritten two steps later, after the
//! next step's barrier.
use super::*;

/// Hidden widths of the layer engine's models, the input first: `[input, h1, …, hL]` (zeros
/// past the last), the layout's and the scratch's argument.
pub type Widths = [usize; MAX_LAYERS + 1];

/// The widths of `args`' input and its `L` hidden layers (the kernel's: `args.layers`).
#[inline(always)]
pub const fn widths_of<const L: usize>(args: &Params) -> Widths {
    let mut w = [0; MAX_LAYERS + 1];
    let mut l = 0;
    while l <= L {
        w[l] = args.widths[l] as usize;
        l += 1;
    }
    w
}

/// The layer engine's shared memory for `layers` hidden layers of `widths` at batch `batch`:
/// each layer's one-buffer layout in turn, 128-byte aligned (its `mbarrier`s and bulk-copy
/// targets keep their alignment), every one past the first with the first's partial sums
/// ([`Smem::inner`]: its batch buffer holds its input, gathered, later the gradient of its
/// own output, which the layer below reads); then the staged columns of a layer's W that the
/// input gradient of the layer below reads (fp16 `[unit][width]`, rows of [`cols_row`] for the
/// widest).
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub layers: [Smem; MAX_LAYERS],
    /// Where each layer's region starts (the first's at 0).
    pub starts: [usize; MAX_LAYERS],
    pub cols: usize,
    pub bytes: usize,
}

impl Plan {
    /// The plan with the batch in `parts` parts (the row's [`Variant::parts`]).
    pub const fn of(batch: usize, layers: usize, widths: Widths, parts: usize) -> Plan {
        let first = Smem::whole(batch, widths[0], 1, parts, false);
        let mut plan = [first; MAX_LAYERS];
        let mut starts = [0; MAX_LAYERS];
        let (mut end, mut widest, mut l) = (first.bytes, 0, 1);
        while l < layers {
            let at = end.next_multiple_of(128);
            starts[l] = at;
            plan[l] = Smem::inner(batch, widths[l], parts).placed(at, first.partials);
            end = plan[l].bytes;
            if widths[l + 1] > widest {
                widest = widths[l + 1];
            }
            l += 1;
        }
        let cols = end.next_multiple_of(16);
        Plan {
            layers: plan,
            starts,
            cols,
            bytes: cols + UNITS * cols_row(widest),
        }
    }
}

/// Bytes of a row of a W's staged columns: `width` rounded up to a k-step of 16, and 16 bytes
/// more, so the eight rows that a fragment's loads read start in different banks.
pub const fn cols_row(width: usize) -> usize {
    (width.next_multiple_of(16) + 8) * 2
}

/// Where the layer engine's blocks leave what the others read, in 32-bit words from
/// [`Params::scratch`], for each layer `l` past the first (index `l - 1`): its input `H_l` and
/// the gradient of its output `dZ_{l+1}` (`[batch][width]` each, room for flagged lines:
/// [`plane_words`]), and two fp16 copies of its W (`[input][unit]`: an input's weights of one
/// n-tile are 16 bytes, as the owners hold them).
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    pub h: [usize; MAX_LAYERS - 1],
    pub dz: [usize; MAX_LAYERS - 1],
    pub w: [[usize; 2]; MAX_LAYERS - 1],
    pub len: usize,
}

impl Scratch {
    pub const fn of(batch: usize, layers: usize, widths: Widths) -> Scratch {
        let mut s = Scratch {
            h: [0; MAX_LAYERS - 1],
            dz: [0; MAX_LAYERS - 1],
            w: [[0; 2]; MAX_LAYERS - 1],
            len: 0,
        };
        let (mut at, mut l) = (0, 1);
        while l < layers {
            let (input, units) = (widths[l], widths[l + 1]);
            let copy = input * units / 2;
            s.h[l - 1] = at;
            s.dz[l - 1] = at + plane_words(batch, input);
            let w = s.dz[l - 1] + plane_words(batch, units);
            s.w[l - 1] = [w, w + copy];
            at = w + 2 * copy;
            l += 1;
        }
        s.len = at;
        s
    }
}

/// The barrier counters in [`Params::counters`] of a model of `layers` hidden layers whose
/// first has `slices` slices: the grid barrier's, then each layer's slice counters, where the
/// parts of a slice exchange their shares through global memory ([`exchange_counter`]), then
/// the layer engine's meetings ([`meeting_counter`]).
pub const fn counters(layers: usize, slices: usize) -> usize {
    meetings_at(layers, slices) + MAX_PARTS * meetings(layers)
}
/// The counter at which the parts of slice `slice` of layer `layer` exchange.
pub const fn exchange_counter(layer: usize, slices: usize, slice: usize) -> usize {
    1 + layer * slices + slice
}
/// The meetings of each part's blocks where the planes are counted (`plane`), `[meeting]
/// [part]` from [`meetings_at`]: two for each layer `l` past the first, `2(l - 1)` after its
/// input is published and `2(l - 1) + 1` after the gradient of its output.
pub const fn meetings(layers: usize) -> usize {
    2 * (layers - 1)
}
/// The first meeting's counter: past the grid barrier's and every layer's slice counters.
pub const fn meetings_at(layers: usize, slices: usize) -> usize {
    1 + layers * slices
}
/// Meeting `meeting`'s counter for part `part`, from [`meetings_at`].
pub const fn meeting_counter(meeting: usize, part: usize) -> usize {
    MAX_PARTS * meeting + part
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::HOPPER_SMEM;

    /// `[input, hidden…]` of `sizes`, as the host passes them.
    fn widths(sizes: &[usize]) -> Widths {
        let mut w = [0; MAX_LAYERS + 1];
        w[..sizes.len()].copy_from_slice(sizes);
        w
    }

    /// A model's counters are apart and fill [`counters`]: the grid barrier's, each layer's
    /// slice counters, each meeting's of each part.
    #[test]
    fn counters_are_apart() {
        for (layers, slices) in [(1, 16), (2, 16), (2, 64), (4, 33)] {
            let mut used = vec![0; counters(layers, slices)];
            used[0] += 1;
            for l in 0..layers {
                for s in 0..slices {
                    used[exchange_counter(l, slices, s)] += 1;
                }
            }
            let at = meetings_at(layers, slices);
            for m in 0..meetings(layers) {
                for p in 0..MAX_PARTS {
                    used[at + meeting_counter(m, p)] += 1;
                }
            }
            assert!(used.iter().all(|&u| u == 1), "{layers} {slices}");
        }
    }

    /// The scratch regions follow one another, each starting 16-byte aligned (flagged lines
    /// and W's copies are written 16 bytes at a time): for each later layer its input and its
    /// output's gradient with room for lines (a word a value), and two copies of its W. At
    /// the CPU-reference tests' sizes, and at MNIST's batch up to 784-528-528.
    #[test]
    fn scratch_regions_are_aligned_and_in_order() {
        for (batch, hidden) in [
            (128, &[128, 128][..]),
            (120, &[48, 40]),
            (8, &[144, 136]),
            (128, &[528, 528]),
            (120, &[64, 48, 40]),
            (8, &[32, 32, 32, 24]),
        ] {
            let layers = hidden.len();
            let mut sizes = vec![784];
            sizes.extend(hidden);
            let s = Scratch::of(batch, layers, widths(&sizes));
            let mut regions = Vec::new();
            for l in 1..layers {
                let (input, units) = (sizes[l], sizes[l + 1]);
                regions.push((s.h[l - 1], batch * input));
                regions.push((s.dz[l - 1], batch * units));
                regions.push((s.w[l - 1][0], input * units / 2));
                regions.push((s.w[l - 1][1], input * units / 2));
            }
            assert_eq!(regions[0].0, 0);
            let ends: Vec<usize> = regions.iter().skip(1).map(|r| r.0).chain([s.len]).collect();
            for (&(start, words), end) in regions.iter().zip(ends) {
                assert!(start.is_multiple_of(4), "{batch} {hidden:?}: {start}");
                assert_eq!(end - start, words, "{batch} {hidden:?}");
            }
        }
    }

    /// The layouts of the design doc's models: each layer's region in order, past the last,
    /// the later layers sharing the first's partial sums, within Hopper's 227 KiB a block up
    /// to 784-528-528 (the widest first layer of slices of 8 on 132 SMs), 784-256-256-256 and
    /// 784-128-128-128-128; 784-256-256-256-256 does not fit.
    #[test]
    fn layer_plans_fit_hopper() {
        for (hidden, bytes) in [
            (&[128, 128][..], 160_032),
            (&[512, 256], 217_376),
            (&[512, 512], 221_472),
            (&[528, 528], 224_032),
            (&[256, 256, 256], 226_592),
            (&[128, 128, 128, 128], 215_328),
        ] {
            let layers = hidden.len();
            let mut sizes = vec![784];
            sizes.extend(hidden);
            let p = Plan::of(128, layers, widths(&sizes), PAIR);
            let first = p.layers[0];
            assert_eq!(first.bytes, 130_208, "the first layer's one-buffer layout");
            for l in 1..layers {
                let (prev, lay) = (p.layers[l - 1], p.layers[l]);
                assert!(
                    prev.bytes <= lay.x && lay.x.is_multiple_of(128),
                    "{hidden:?}"
                );
                assert_eq!(lay.partials, first.partials, "{hidden:?}");
                assert_eq!(lay.stride, row_stride(sizes[l]));
            }
            assert!(p.layers[layers - 1].bytes <= p.cols && p.cols.is_multiple_of(16));
            // What a phase redoes for a run-time layer: the same layout, field for field.
            for l in 1..layers {
                let lay = Smem::inner(128, sizes[l], PAIR).placed(p.starts[l], first.partials);
                assert_eq!(
                    format!("{lay:?}"),
                    format!("{:?}", p.layers[l]),
                    "{hidden:?}"
                );
            }
            assert_eq!(p.bytes, bytes, "{hidden:?}");
            assert!(p.bytes <= HOPPER_SMEM, "{hidden:?}");
        }
        let p = Plan::of(128, 4, widths(&[784, 256, 256, 256, 256]), PAIR);
        assert!(p.bytes > HOPPER_SMEM);
        // The first layer's block lays itself out by its row, the plan by the one-buffer
        // layout: the same bytes in the same places. A later layer's block takes its rows of
        // the batch from its row's layout too, and the plan places its regions: the same rows.
        for v in VARIANTS.iter().filter(|v| v.layers > 1) {
            for batch in [1, 8, 120, 128, 200, 256]
                .into_iter()
                .filter(|&b| v.takes_batch(b))
            {
                let plan = Plan::of(batch, 3, widths(&[784, 64, 48, 40]), v.parts);
                for (l, dim) in [(1, 64), (2, 48)] {
                    assert_eq!(plan.layers[l].rows, v.smem(batch, dim, 0).rows, "{batch}");
                }
            }
            let (row, plan) = (
                v.smem(128, 784, 0),
                Plan::of(128, 2, widths(&[784, 64, 64]), v.parts),
            );
            assert_eq!(
                (row.x, row.partials, row.bytes),
                (
                    plan.layers[0].x,
                    plan.layers[0].partials,
                    plan.layers[0].bytes
                )
            );
        }
        // A layer's output gradient, rows of whole k-steps, fits the rows of its input.
        for (input, units) in [(32, 24), (48, 40), (128, 128), (512usize, 504usize)] {
            assert!(
                row_stride(units.next_multiple_of(16)) <= row_stride(input),
                "{input}-{units}"
            );
        }
    }
}
