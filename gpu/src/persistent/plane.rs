//! Planes of activations or gradients (the layer engine's inputs of the layers past the first
//! and their output gradients, fp16 `[batch][width]`) whose writers publish columns of them and
//! the blocks of their part of the batch gather rows of them, within a step. A plane takes one
//! of two forms, the same for every plane of a model:
//! - flagged lines ([`Flagged`]) where the first hidden layer has at most [`FLAGGED_WIDTH`]
//!   units: a reader waits on the data itself, one round trip through L2;
//! - plain fp16 where it is wider: the writers announce at a counter of the part, and a reader
//!   waits on it before copying its rows with `cp.async`. Two round trips, but half the bytes:
//!   with more units the planes are wider and more blocks gather them, and the flagged lines'
//!   bytes cost more than the round trip they save (`docs/deeper.md` has the figures).
use super::context::Block;
use super::flagged::Flagged;
use super::*;
use crate::arch::*;

/// The widest first hidden layer whose planes travel as flagged lines.
pub const FLAGGED_WIDTH: usize = 128;

/// Whether the planes of a model whose first hidden layer has `hidden` units are flagged.
#[inline(always)]
pub fn flagged(hidden: usize) -> bool {
    hidden <= FLAGGED_WIDTH
}

/// A plane of `width` columns at `at` ([`plane_words`] words, either form), flagged or with
/// the counter of its meeting.
#[derive(Clone, Copy)]
pub struct Plane {
    at: *mut u32,
    width: usize,
    flagged: bool,
    counter: *mut u32,
}

impl Plane {
    #[inline(always)]
    pub fn new(at: *mut u32, width: usize, flagged: bool, counter: *mut u32) -> Plane {
        Plane {
            at,
            width,
            flagged,
            counter,
        }
    }

    /// The flag of step `k`: the launch's steps counted from 1 (the host zeroes the planes).
    #[inline(always)]
    fn flag(k: u32) -> u32 {
        k + 1
    }

    /// The block's rows of an fp16 `[rows][UNITS]` plane of its n-tile in shared memory at
    /// `from` into columns `j0..j0 + 8`, for step `k`; the plain form then announces them,
    /// after a barrier of the block's threads.
    #[inline(always)]
    pub fn publish(&self, b: &Block, from: u32, j0: u32, k: u32) {
        if b.tid < b.mine {
            let v = ld_shared_v4(from + (b.tid * UNITS * 2) as u32);
            let (r, j0) = (b.r0 + b.tid, j0 as usize);
            if self.flagged {
                Flagged::new(self.at, self.width).put8(r, j0, v, Self::flag(k));
            } else {
                let to = (self.at as *mut u16).wrapping_add(r * self.width + j0);
                st_global_v4(to as *mut u8, v);
            }
        }
        if !self.flagged {
            barrier_arrive(self.counter, sync_threads);
        }
    }

    /// The block's rows of step `k` into a batch buffer (`x`, `stride` bytes a row), once
    /// their writers have published them (in the plain form, a block of the part for each
    /// n-tile of the plane's width): whole 16-row tiles of whole k-steps of 16, zeros in the
    /// columns past the width and the rows past the block's.
    #[inline(always)]
    pub fn gather(&self, b: &Block, (x, stride): (u32, usize), k: u32) {
        let area = (b.mine.next_multiple_of(16), self.width.next_multiple_of(16));
        if self.flagged {
            let from = Flagged::new(self.at, self.width);
            from.gather(b.tid, (b.r0, b.mine), Self::flag(k), (x, stride), area);
            return;
        }
        let writers = (self.width / UNITS) as u32;
        barrier_wait(self.counter, writers * (k + 1), sync_threads);
        let pieces = area.1 / 8;
        let mut i = b.tid;
        while i < area.0 * pieces {
            let (r, c) = (i / pieces, i % pieces);
            let at = (b.r0 + r) * self.width + 8 * c;
            let src = (self.at as *const u16).wrapping_add(at) as *const u8;
            let bytes = if 8 * c < self.width && r < b.mine {
                16
            } else {
                0
            };
            cp_async_16(x + (r * stride + 16 * c) as u32, src, bytes);
            i += THREADS;
        }
        cp_async_commit();
        cp_async_wait::<0>();
    }
}
