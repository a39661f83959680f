//! Two hidden layers in one launch (the `deep` variant, Hopper): the one-layer step's phases
//! run once per layer, each layer a [`Block`](super::context::Block) of its own, with the
//! blocks of each half of the batch passing activations and gradients between them
//! (`docs/deeper.md`).
//!
//! The blocks are the first layer's: a pair per slice of 8 units, each with half the batch.
//! The second layer's n-tiles are dealt over the same slices, slice `s` taking n-tile `s`;
//! where the second layer is narrower, the slices past its n-tiles are shadows, which take no
//! part in its work: they meet the grid, and compute dH1 from dZ2 as every block does. The
//! first layer's block has the batch as input and no classes; the second's input is H1,
//! gathered into its batch buffer, and its outputs the logits. A step:
//! 1. layer 1's forward, `H1[:, s]`, block-local, published to global memory (fp16);
//! 2. each owner gathers H1 of its rows; layer 2's forward, the partial logits and the grid
//!    barrier, the softmax and `dZ2[:, t]`: the one-layer step's phases on the second block;
//! 3. `dZ2[:, t]` is published, and the owners compute the shares of db2, dW3, db3 and
//!    `dW2[t] = dZ2[:, t]ᵀ·H1`;
//! 4. `dH1[:, s] = dZ2·W2[:, s]` through the ReLU: dZ2 gathered, W2's columns of the slice from
//!    the fp16 copy that their owners publish as each step starts (two copies alternate, so a
//!    step never overwrites a copy that a block may still be reading);
//! 5. layer 1's shares of db1 and dW1, then each layer's exchange within the pair and update.
//!
//! H1 and dZ2 are planes (`plane`) that a block gathers as soon as they carry the step's flag
//! (a first layer of up to 128 units) or after a meeting of its half's blocks at a counter (A
//! for H1, B for dZ2). W2's copy needs neither: the step's grid barrier orders it. Each plane's
//! next write follows a grid barrier that its readers pass only after reading it: H1 is read
//! before its step's grid barrier and rewritten the next step; dZ2 is read before the next
//! step's barrier and rewritten after it; W2's copy is rewritten two steps later, after the
//! next step's barrier.
use super::*;

/// The deep kernel's shared memory: the first layer's layout (the row's own, one buffer of
/// half the batch), the second's after it (its batch buffer holds the gathered H1, later dZ2),
/// then the slice's columns of W2 (fp16 `[unit][hidden2]`, rows of [`cols_row`] bytes).
#[derive(Clone, Copy, Debug)]
pub struct DeepSmem {
    pub first: Smem,
    pub second_at: usize,
    pub second: Smem,
    pub w2_cols: usize,
    pub bytes: usize,
}

impl DeepSmem {
    pub const fn of(batch: usize, dim: usize, hidden: usize, hidden2: usize) -> DeepSmem {
        let v = rows::deep;
        let first = v.smem(batch, dim, 0);
        // 128 bytes: the second layout's mbarriers and bulk-copy targets keep their alignment.
        let second_at = first.bytes.next_multiple_of(128);
        let second = v.smem(batch, hidden, 0);
        let w2_cols = (second_at + second.bytes).next_multiple_of(16);
        DeepSmem {
            first,
            second_at,
            second,
            w2_cols,
            bytes: w2_cols + UNITS * cols_row(hidden2),
        }
    }
}

/// Bytes of a row of W2's staged columns: `hidden2` rounded up to a k-step of 16, and 16 bytes
/// more, so the eight rows that a fragment's loads read start in different banks.
pub const fn cols_row(hidden2: usize) -> usize {
    (hidden2.next_multiple_of(16) + 8) * 2
}

/// Where the blocks of the deep kernel leave what the others read, in 32-bit words from
/// [`Params::scratch`]: H1 and dZ2 (`[batch][width]` each, room for flagged lines:
/// [`plane_words`]) and the two fp16 copies of W2 (`[hidden][hidden2]`: an input's weights of
/// one n-tile are 16 bytes, as the owners hold them).
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    pub h1: usize,
    pub dz2: usize,
    pub w2: [usize; 2],
    pub len: usize,
}

impl Scratch {
    pub const fn of(batch: usize, hidden: usize, hidden2: usize) -> Scratch {
        let dz2 = plane_words(batch, hidden);
        let w2 = dz2 + plane_words(batch, hidden2);
        let copy = hidden * hidden2 / 2;
        Scratch {
            h1: 0,
            dz2,
            w2: [w2, w2 + copy],
            len: w2 + 2 * copy,
        }
    }
}

/// The meetings of each half's blocks where the planes are counted (`plane`), `[meeting]
/// [part]` in [`Params::counters`] after the grid barrier's: A after H1 is published, B after
/// dZ2.
pub const MEETINGS: usize = 2;
pub const fn meeting_counter(meeting: usize, part: usize) -> usize {
    1 + PAIR * meeting + part
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::HOPPER_SMEM;

    /// The scratch regions follow one another, each starting 16-byte aligned (flagged lines
    /// and W2's copies are written 16 bytes at a time), H1 and dZ2 with room for lines (a word
    /// a value): at the CPU-reference tests' sizes, and at MNIST's batch up to 784-528-528.
    #[test]
    fn scratch_regions_are_aligned_and_in_order() {
        for (batch, h1, h2) in [
            (128, 128, 128),
            (120, 48, 40),
            (8, 144, 136),
            (128, 528, 528),
        ] {
            let s = Scratch::of(batch, h1, h2);
            let regions = [
                (s.h1, s.dz2, batch * h1),
                (s.dz2, s.w2[0], batch * h2),
                (s.w2[0], s.w2[1], h1 * h2 / 2),
                (s.w2[1], s.len, h1 * h2 / 2),
            ];
            assert_eq!(s.h1, 0);
            for (start, end, words) in regions {
                assert!(start.is_multiple_of(4), "{batch} {h1}-{h2}: {start}");
                assert_eq!(end - start, words, "{batch} {h1}-{h2}");
            }
        }
    }

    /// The layouts of the design doc's models: the two layers' regions in order, each past
    /// the last, within Hopper's 227 KiB a block up to 784-528-528 (the widest first layer of
    /// slices of 8 on 132 SMs).
    #[test]
    fn deep_layouts_fit_hopper() {
        for (h1, h2, bytes) in [
            (128, 128, 168_224),
            (512, 256, 225_568),
            (512, 512, 229_664),
            (528, 528, 232_224),
        ] {
            let l = DeepSmem::of(128, 784, h1, h2);
            assert_eq!(
                l.first.bytes, 130_208,
                "the first layer's one-buffer layout"
            );
            assert!(l.first.bytes <= l.second_at && l.second_at + l.second.bytes <= l.w2_cols);
            assert!(l.second_at.is_multiple_of(128) && l.w2_cols.is_multiple_of(16));
            assert_eq!(l.bytes, bytes, "{h1}-{h2}");
            assert!(l.bytes <= HOPPER_SMEM, "{h1}-{h2}");
        }
        // dZ2's rows, of whole k-steps, fit in H1's rows of the second layer's buffer.
        for (h1, h2) in [(32, 24), (48, 40), (128, 128), (512usize, 504usize)] {
            assert!(
                row_stride(h2.next_multiple_of(16)) <= row_stride(h1),
                "{h1}-{h2}"
            );
        }
    }
}
