//! Which thread owns which unit, element or word of the slice's small parameters and their
//! shares: the backward writes them, the exchange sends and sums them, the update applies
//! them, and each asks here (so none of those phases imports another for it).
use super::context::Block;
use super::*;
use crate::layout::mma_c;

/// The warp that computes dW2 and db2: the last, which has one dW1 tile fewer than warp 0.
pub const OUTPUT_WARP: usize = WARPS - 1;
/// The warp that computes db1, and updates b1 in every kernel but the offchip one. In the
/// kernels of half the batch it has neither a tile of dH, nor dW2, nor warp 0's extra dW1 tile,
/// and shares its scheduler with a tile warp (warp 1).
pub const BIAS_WARP: usize = 5;

/// The entry of db1 (and of b1, which it updates) of this thread of the [`BIAS_WARP`]: in the
/// product with ones every row holds dH's column sums, and lane `4g + t` takes unit
/// `2t + g % 2` of n-tile `g / 2`, which its fragment holds. `None` past the slice's units and
/// off the bias warp.
#[inline(always)]
pub fn bias_unit(b: &Block) -> Option<usize> {
    let (g, t) = (b.group(), b.in_group());
    (b.warp == BIAS_WARP && b.lane < b.units()).then_some(UNITS * (g / 2) + 2 * t + g % 2)
}

/// The word of each n-tile's dW2 fragment (and of the db2 fragment) whose element of W2 (and
/// b2) this thread updates, if [`w2_element`] gives it one: threads `128 + j` take word `j`.
#[inline(always)]
pub fn w2_word(b: &Block) -> usize {
    b.tid % 128
}

/// The element of W2 this thread updates in each n-tile, if any: its class and its unit in the
/// n-tile.
#[inline(always)]
pub fn w2_element(b: &Block) -> Option<(usize, usize)> {
    let j = w2_word(b);
    let (c, unit) = mma_c(j / 4, j % 4);
    (b.tid >= 128 && c < b.classes).then_some((c, unit))
}

/// Words of the db1 share, after dW2's and db2's, with slices of `n` n-tiles.
pub const fn db1_at(n: usize) -> usize {
    own_shares(n)
}
