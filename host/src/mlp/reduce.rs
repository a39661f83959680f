//! A replica's gradient sum. The first layer's weight gradient is the largest and the last one the
//! backward pass makes; a replica makes it in pieces along the layer's outputs (rows of W1),
//! sums each piece through NCCL on a stream of its own as soon as its GEMM ends, and steps
//! each piece's parameters as soon as its sum ends. The sums then overlap the GEMMs of later
//! pieces, and the updates of earlier pieces overlap the later sums. The last piece also sums
//! every other parameter (b1, W2, …: they follow W1 in the flat buffer), made beside W1's.
//!
//! One piece is one sum of the whole buffer after the backward pass and one update.
use super::model::Mlp;
use super::options::Options;
use super::params::param_layout;
use crate::cuda::{Gpu, SideStream};
use crate::gemm::SgdStep;
use crate::nccl::Comm;
use anyhow::Result;
use cudarc::driver::CudaEvent;
use half::f16;
use std::ops::Range;

/// Output units of the first layer a piece holds a whole number of: its rows of the gradient
/// start 16-byte aligned for the GEMM's copies, and its parameters 64-element aligned as every
/// buffer of the model is.
const PIECE_UNITS: usize = 64;

/// The first layer's `outputs` units in at most `pieces` pieces of whole `PIECE_UNITS` (the
/// last takes what is left): fewer where the layer is too narrow for that many.
pub fn split_units(outputs: usize, pieces: usize) -> Vec<Range<usize>> {
    let per = outputs
        .div_ceil(pieces.max(1))
        .next_multiple_of(PIECE_UNITS)
        .min(outputs);
    (0..outputs)
        .step_by(per)
        .map(|u| u..(u + per).min(outputs))
        .collect()
}

/// The parameters each piece's sum covers, in the flat buffer of a model of widths `sizes`: its
/// rows of W1, and for the last, everything after W1 too.
pub fn param_ranges(sizes: &[usize], units: &[Range<usize>]) -> Vec<Range<usize>> {
    let (_, n_params) = param_layout(sizes);
    let inputs = sizes[0];
    let mut ranges: Vec<_> = units
        .iter()
        .map(|u| u.start * inputs..u.end * inputs)
        .collect();
    if let Some(last) = ranges.last_mut() {
        last.end = n_params;
    }
    ranges
}

/// The pieces a replica's sum is split into: `--reduce-pieces`, else one. Each sum is a call of
/// NCCL's with a fixed cost (8 to 19 µs on H100s joined by NVLink) larger than the piece of the
/// first layer's GEMM it could hide, so more pieces end later on all but one of the shapes
/// measured, and there by 2% (`docs/parallel.md`).
pub fn pieces(o: &Options) -> usize {
    o.reduce_pieces.unwrap_or(1)
}

/// A replica's gradient sum, split as [`split_units`] says: the stream the sums run on, and an
/// event per piece that its sum records and its update waits for.
pub struct Reduction {
    side: SideStream,
    reduced: Vec<CudaEvent>,
    units: Vec<Range<usize>>,
    ranges: Vec<Range<usize>>,
}

impl Reduction {
    /// The sum of a model of widths `sizes` in `pieces` pieces (fewer where the first layer is
    /// narrow), on `gpu`.
    pub fn new(gpu: &Gpu, sizes: &[usize], pieces: usize) -> Result<Reduction> {
        let units = split_units(sizes[1], pieces);
        let reduced = units
            .iter()
            .map(|_| gpu.ctx.new_event(None))
            .collect::<Result<_, _>>()?;
        Ok(Reduction {
            side: SideStream::new(gpu)?,
            reduced,
            ranges: param_ranges(sizes, &units),
            units,
        })
    }

    pub fn pieces(&self) -> usize {
        self.units.len()
    }

    /// Queues `model`'s backward pass over `rows` rows of `x`, each piece's sum over `comm` and
    /// each piece's update `step`. The sums' stream meets the GPU's at the end, even when
    /// queueing fails, so a capture in progress ends joined.
    pub fn backward_and_step(
        &self,
        model: &Mlp,
        comm: &Comm,
        (x, rows): (u64, usize),
        step: SgdStep,
    ) -> Result<()> {
        let gpu = model.gpu();
        let forked = std::cell::Cell::new(false);
        let queued = model
            .backward_then(x, rows, None, || {
                self.queue_sums(model, comm, (x, rows), &forked)
            })
            .and_then(|()| {
                self.ranges
                    .iter()
                    .zip(&self.reduced)
                    .try_for_each(|(r, reduced)| {
                        gpu.stream.wait(reduced)?;
                        model.update(step, r.clone())
                    })
            });
        // Joined even when queueing failed, so that a capture ends joined; the queueing's
        // error, if any, is the one reported.
        let joined = match forked.get() {
            true => self.side.join(gpu),
            false => Ok(()),
        };
        queued.and(joined)
    }

    /// Queues each piece's GEMM on the GPU's stream and its sum on the sums' stream, once the
    /// GEMM (for the last, every gradient) is made, setting `forked` once that stream has work.
    fn queue_sums(
        &self,
        model: &Mlp,
        comm: &Comm,
        (x, rows): (u64, usize),
        forked: &std::cell::Cell<bool>,
    ) -> Result<()> {
        let gpu = model.gpu();
        let last = self.pieces() - 1;
        for (i, (units, r)) in self.units.iter().zip(&self.ranges).enumerate() {
            model.first_weight_gradient(x, rows, units.clone())?;
            if i == last {
                model.join_beside()?;
            }
            self.side.fork(gpu)?;
            forked.set(true);
            comm.sum_in_place::<f16>(model.g16.at(r.start), r.len(), &self.side.stream)?;
            self.reduced[i].record(&self.side.stream)?;
        }
        Ok(())
    }
}

impl Drop for Reduction {
    /// Sums queued on the stream write the model's gradients, in an arena that outlives this:
    /// they must end first.
    fn drop(&mut self) {
        let _ = self.side.stream.synchronize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // A list of one piece is what is meant, not a range of them.
    #[allow(clippy::single_range_in_vec_init)]
    fn pieces_are_whole_blocks_of_units_that_cover_the_layer() {
        assert_eq!(
            split_units(4096, 4),
            [0..1024, 1024..2048, 2048..3072, 3072..4096]
        );
        assert_eq!(split_units(4096, 3), [0..1408, 1408..2816, 2816..4096]);
        // Too narrow for the pieces asked: fewer, the last one short.
        assert_eq!(split_units(100, 4), [0..64, 64..100]);
        assert_eq!(split_units(40, 8), [0..40]);
        assert_eq!(split_units(4096, 1), [0..4096]);
    }

    #[test]
    fn the_pieces_sums_cover_every_parameter_once() {
        let sizes = [784, 200, 10];
        let units = split_units(200, 3);
        let ranges = param_ranges(&sizes, &units);
        assert_eq!(ranges.len(), units.len());
        let (_, n_params) = param_layout(&sizes);
        assert_eq!(ranges[0].start, 0);
        assert_eq!(ranges.last().unwrap().end, n_params);
        for w in ranges.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            // Aligned as the model's buffers are.
            assert!(w[1].start.is_multiple_of(64));
        }
        // W1's rows and nothing else but in the last.
        assert_eq!(ranges[0], 0..128 * 784);
    }
}
