//! Where the persistent kernel keeps what it holds in shared memory. The host sizes the launch
//! from [`Smem`], the kernel finds its buffers with it, and the CPU tests check it.
use super::*;

/// The slice's parameters other than W1 and the per-warp sums of the loss, f32, in shared memory
/// at [`Smem::params`], for a slice of `units` hidden units: W2 and b2 padded with zeros to
/// [`MAX_CLASSES`]. Each parameter has its master value and momentum; b1 and b2 also the value
/// rounded to fp16 that the forward adds. The fields in order, as offsets in f32 elements.
#[derive(Clone, Copy, Debug)]
pub struct SmallParams {
    /// W2's columns of the slice, `[class][unit]`.
    pub w2_master: usize,
    pub w2_momentum: usize,
    pub b1_master: usize,
    pub b1_momentum: usize,
    pub b1_half: usize,
    pub b2_master: usize,
    pub b2_momentum: usize,
    pub b2_half: usize,
    /// Each warp's sums of the loss and of the correct count.
    pub loss: usize,
    pub correct: usize,
    /// Elements in all.
    pub len: usize,
}

impl SmallParams {
    pub const fn of(units: usize) -> SmallParams {
        let w2 = MAX_CLASSES * units;
        let w2_master = 0;
        let w2_momentum = w2_master + w2;
        let b1_master = w2_momentum + w2;
        let b1_momentum = b1_master + units;
        let b1_half = b1_momentum + units;
        let b2_master = b1_half + units;
        let b2_momentum = b2_master + MAX_CLASSES;
        let b2_half = b2_momentum + MAX_CLASSES;
        let loss = b2_half + MAX_CLASSES;
        let correct = loss + WARPS;
        SmallParams {
            w2_master,
            w2_momentum,
            b1_master,
            b1_momentum,
            b1_half,
            b2_master,
            b2_momentum,
            b2_half,
            loss,
            correct,
            len: correct + WARPS,
        }
    }
}

/// Byte offsets of the kernel's dynamic shared memory for one (batch, input width). The host
/// sizes the launch with it, the kernel finds its buffers with it.
#[derive(Clone, Copy, Debug)]
pub struct Smem {
    /// Rows of the batch per block (its part of the batch, rounded up to the 16 of an `mma`
    /// tile); the rows a block does not fill hold zeros.
    pub rows: usize,
    /// Bytes per row of the batch: an odd number of 16-byte pieces, so the eight rows one
    /// `ldmatrix` phase reads fall in eight different bank groups. That is always the features
    /// and one piece more, which carries the row's label ([`label_offset`]): a row arrives
    /// with its label.
    pub stride: usize,
    /// Whether the batch streams through chunk buffers ([`Smem::streamed`]).
    pub streamed: bool,
    /// Buffers of the block's rows in [`Smem::x`]: two of whole rows (the next batch arrives in
    /// one while the step reads the other) or one (refilled after dW1), or the streamed
    /// kernels' `stages` of one [`CHUNK`]-input chunk each.
    pub buffers: usize,
    /// Bytes per row in a buffer: [`Smem::stride`] for whole rows, [`CHUNK_STRIDE`] for
    /// chunks.
    pub buffer_row: usize,
    /// The batch buffers, fp16 `[buffers][rows][buffer_row]`.
    pub x: usize,
    /// n-tiles (of [`UNITS`] hidden units each) of the block's slice.
    pub n: usize,
    /// The slice's rows of W1, fp16 `[n][dim][UNITS]`: one plane per n-tile, one 16-byte row
    /// per input, so the forward's B fragments are `ldmatrix.trans` loads and an update stores
    /// a unit pair in one word. Within a Hopper cluster the partner's dW1 share of the planes
    /// this block updates (16·dim bytes each) arrives in them, and the partner's new values of
    /// the others. None where the block keeps them in registers ([`W1State::RegistersWithCopy`]).
    pub w1: usize,
    /// Planes of W1 (`n`, or none), and the bytes of one.
    pub w1_planes: usize,
    pub w1_plane: usize,
    /// `H[:, s]` and `dH[:, s]`, fp16 `[n][rows rounded to 32][UNITS]` each, of `h_plane`
    /// bytes a plane.
    pub h: usize,
    pub dh: usize,
    pub h_plane: usize,
    /// Gradient of the logits, fp16 `[rows][MAX_CLASSES]`.
    pub dl: usize,
    /// The slice's W2 columns in fp16, as `[class][unit]` and as `[unit][class]`.
    pub w2_cu: usize,
    pub w2_uc: usize,
    /// The slice's parameters other than W1 and the per-warp partial sums: [`SmallParams`],
    /// whose fields are at `small`.
    pub params: usize,
    pub small: SmallParams,
    /// Within a Hopper cluster, where the partner block writes its shares of dW2, db2 and db1
    /// (f32, [`small_shares`]; its dW1 share goes in place of the fp16 W1).
    pub xch: usize,
    /// This block's shares of dW2 and db2 (f32, in the layout of the others'), where the
    /// threads that update W2 and b2 find them.
    pub own: usize,
    /// The forward's partial sums of H ([`partials_bytes`]): each warp's over its part of the
    /// input, for every tile and n-tile. Empty in the offchip kernel, whose warps split the
    /// forward by tile.
    pub partials: usize,
    /// Four `mbarrier` objects (u64): one per batch buffer, where Hopper's bulk copies report
    /// their bytes, one where the partner's shares report theirs, and (slices of more than
    /// one n-tile) one where its new W1 values do.
    pub mbar: usize,
    pub bytes: usize,
}

/// Bytes per row of a chunk buffer: an odd number of 16-byte pieces, as [`Smem::stride`].
pub const CHUNK_STRIDE: usize = 2 * CHUNK + 16;

impl Smem {
    /// The layout with `buffers` buffers of whole rows of one of `parts` parts of the batch:
    /// two (the next batch arrives in one while the step reads the other), or one (refilled
    /// after dW1); slices of one n-tile, W1's fp16 copy in registers if `w1_in_registers`
    /// ([`W1State::RegistersWithCopy`]).
    pub const fn whole(
        batch: usize,
        dim: usize,
        buffers: usize,
        parts: usize,
        w1_in_registers: bool,
    ) -> Smem {
        let w1_planes = if w1_in_registers { 0 } else { 1 };
        Smem::with_buffers(
            batch.div_ceil(parts),
            dim,
            (buffers, row_stride(dim)),
            false,
            (1, w1_planes, partials_bytes(1)),
        )
    }

    /// The wide kernels' layout: slices of `n` n-tiles, one buffer of half the batch.
    pub const fn wide(batch: usize, dim: usize, n: usize) -> Smem {
        Smem::with_buffers(
            batch.div_ceil(PAIR),
            dim,
            (1, row_stride(dim)),
            false,
            (n, n, partials_bytes(n)),
        )
    }

    /// The streamed kernels' layout, with a ring of `stages` chunk buffers (the batch in two
    /// parts).
    pub const fn streamed(batch: usize, dim: usize, stages: usize) -> Smem {
        Smem::with_buffers(
            batch.div_ceil(PAIR),
            dim,
            (stages, CHUNK_STRIDE),
            true,
            (1, 1, partials_bytes(1)),
        )
    }

    /// The offchip kernel's layout: slices of `n` n-tiles, the whole batch streamed through a
    /// ring of `stages` chunk buffers, no partial sums.
    pub const fn offchip(batch: usize, dim: usize, n: usize, stages: usize) -> Smem {
        Smem::with_buffers(batch, dim, (stages, CHUNK_STRIDE), true, (n, n, 0))
    }

    /// The one-buffer layout of a layer past the first in the layer engine: slices of one
    /// n-tile, one of `parts` parts of the batch, and no partial sums of its own (it uses the
    /// first layer's: each layer's forward uses them in turn). Only [`Smem::placed`] makes it
    /// usable: it puts the layout where the plan has it and its partial sums at the first
    /// layer's.
    pub const fn inner(batch: usize, dim: usize, parts: usize) -> Smem {
        Smem::with_buffers(
            batch.div_ceil(parts),
            dim,
            (1, row_stride(dim)),
            false,
            (1, 1, 0),
        )
    }

    /// The layout moved `at` bytes into the block's shared memory, its partial sums at
    /// `partials`.
    pub const fn placed(self, at: usize, partials: usize) -> Smem {
        Smem {
            x: self.x + at,
            w1: self.w1 + at,
            h: self.h + at,
            dh: self.dh + at,
            dl: self.dl + at,
            w2_cu: self.w2_cu + at,
            w2_uc: self.w2_uc + at,
            params: self.params + at,
            xch: self.xch + at,
            own: self.own + at,
            partials,
            mbar: self.mbar + at,
            bytes: self.bytes + at,
            ..self
        }
    }

    /// The layout for a block's `part` rows of the batch in `buffers` buffers of `buffer_row`
    /// bytes a row, and slices of `n` n-tiles, of which `w1_planes` have their W1 in shared
    /// memory (all or none), with `partials_len` bytes of the forward's partial sums.
    const fn with_buffers(
        part: usize,
        dim: usize,
        (buffers, buffer_row): (usize, usize),
        streamed: bool,
        (n, w1_planes, partials_len): (usize, usize, usize),
    ) -> Smem {
        let units = n * UNITS;
        let rows = part.div_ceil(16) * 16;
        let rows32 = rows.div_ceil(32) * 32;
        let stride = row_stride(dim);
        let x = 0;
        let w1 = x + buffers * rows * buffer_row;
        let (w1_plane, h_plane) = (dim * UNITS * 2, rows32 * UNITS * 2);
        let h = w1 + w1_planes * w1_plane;
        let dh = h + n * h_plane;
        let dl = dh + n * h_plane;
        let w2_cu = dl + rows * MAX_CLASSES * 2;
        let w2_uc = w2_cu + MAX_CLASSES * units * 2;
        let params = w2_uc + MAX_CLASSES * units * 2;
        let small = SmallParams::of(units);
        let xch = (params + small.len * 4).div_ceil(16) * 16;
        let own = (xch + small_shares(n) * 4).div_ceil(16) * 16;
        let partials = own + own_shares(n) * 4;
        let mbar = partials + partials_len;
        Smem {
            rows,
            stride,
            streamed,
            buffers,
            buffer_row,
            x,
            n,
            w1,
            w1_planes,
            w1_plane,
            h,
            dh,
            h_plane,
            dl,
            w2_cu,
            w2_uc,
            params,
            small,
            xch,
            own,
            partials,
            mbar,
            bytes: mbar + 32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Arch, HOPPER_SMEM};

    /// Every buffer starts on a 16-byte boundary (`ldmatrix` rows, `cp.async` and 16-byte
    /// stores need it), the buffers follow each other without overlap, and a batch row spans
    /// an odd number of 16-byte pieces (conflict-free `ldmatrix`).
    #[test]
    fn shared_memory_layout() {
        for (batch, dim) in [
            (128, 784),
            (100, 48),
            (8, 48),
            (1, 16),
            (127, 896),
            (64, 32),
        ] {
            for v in VARIANTS {
                let (m, parts) = (v.smem(batch, dim, MAX_STAGES), v.parts);
                // W1's region is empty where it lives in registers, the partial sums' where
                // the warps split the forward by tile.
                let w1 = (m.w1_planes > 0).then_some(m.w1);
                let partials = (m.mbar > m.partials).then_some(m.partials);
                // Only the offchip kernel, whose blocks hold the whole batch, has none.
                assert_eq!(partials.is_none(), parts == 1, "{m:?}");
                let regions: Vec<usize> = [m.x]
                    .into_iter()
                    .chain(w1)
                    .chain([m.h, m.dh, m.dl, m.w2_cu, m.w2_uc, m.params, m.xch, m.own])
                    .chain(partials)
                    .chain([m.mbar, m.bytes])
                    .collect();
                for &r in &regions {
                    assert_eq!(r % 16, 0, "batch {batch} dim {dim}: {m:?}");
                }
                assert!(regions.windows(2).all(|w| w[0] < w[1]), "{m:?}");
                assert_eq!((m.stride / 16) % 2, 1);
                // The features, then one piece for the label.
                assert_eq!(m.stride, label_offset(dim) + 16);
                assert!(
                    m.rows.is_multiple_of(16)
                        && m.rows * parts >= batch
                        && m.rows <= MAX_BATCH / parts
                );
                assert_eq!((m.buffer_row / 16) % 2, 1);
                assert_eq!(m.w1 - m.x, m.buffers * m.rows * m.buffer_row);
                // The partner's dW1 share (fp16 pairs of every input tile's fragment) fits a
                // plane of W1; the planes of W1, H and dH follow each other.
                assert!(m.w1_plane >= dim.div_ceil(16) * 32 * 2 * 4);
                assert!(m.w1_planes == m.n || m.w1_planes == 0);
                assert_eq!(m.w1 + m.w1_planes * m.w1_plane, m.h);
                assert_eq!(m.h + m.n * m.h_plane, m.dh);
                assert_eq!(m.h_plane % 16, 0);
                assert!(m.h_plane >= m.rows * UNITS * 2);
            }
        }
    }

    /// The streamed layout of MNIST's batch of 128 fits each GPU generation's shared memory
    /// per block with the stages the host gives it: Turing's 64 KiB two, the 99 KiB of sm_86
    /// and sm_89 four, an A100's 163 KiB the most; the whole batch fits only Hopper's 227 KiB,
    /// one buffer of half of it an A100's, of a quarter 99 KiB, and Turing's 64 KiB with W1 in
    /// registers.
    #[test]
    fn mnist_streams_through_every_generation() {
        let room = |sm| Arch::of(sm).smem_per_block;
        for (sm, stages) in [(75, 2), (86, 4), (80, MAX_STAGES)] {
            assert!(
                Smem::streamed(128, 784, stages).bytes <= room(sm),
                "sm_{sm}"
            );
        }
        assert!(Smem::streamed(128, 784, 5).bytes > room(86));
        let whole = |buffers, parts, registers| Smem::whole(128, 784, buffers, parts, registers);
        assert!(whole(2, PAIR, false).bytes > room(80));
        for (parts, registers, sm) in [(2, false, 80), (4, false, 86), (4, true, 75)] {
            let single = whole(1, parts, registers).bytes;
            assert!(single <= room(sm), "{parts} parts on sm_{sm}");
            assert!(whole(1, parts / 2, false).bytes > room(sm));
        }
        assert!(whole(1, 4, false).bytes > room(75));
    }

    /// The default MNIST model fits an H100's 227 KB per block, and so do the wide variants'
    /// slices of 16 and 32 units with one buffer of half the batch (two buffers do not).
    #[test]
    fn mnist_fits_an_h100() {
        let m = variant("whole").smem(128, 784, 0);
        assert_eq!(m.rows, 64);
        assert!(m.bytes <= HOPPER_SMEM, "{} bytes", m.bytes);
        let wide = VARIANTS.iter().filter(|v| v.n > 1 && !v.ring());
        assert_eq!(wide.clone().count(), 2);
        for n in wide.map(|v| v.n) {
            let wide = Smem::wide(128, 784, n);
            assert!(
                wide.bytes <= HOPPER_SMEM,
                "{n} n-tiles: {} bytes",
                wide.bytes
            );
            let two = wide.bytes + wide.rows * wide.stride;
            assert!(two > HOPPER_SMEM, "{n} n-tiles: two buffers fit");
        }
    }

    /// The offchip kernel holds MNIST's whole batch of 128 in an H100's 227 KB a block through
    /// four stages (221,984 bytes, as `docs/persistent.md` gives), one short of what does not
    /// fit.
    #[test]
    fn mnist_offchip_layout_fits_an_h100() {
        let m = |stages| variant("offchip").smem(128, 784, stages);
        assert_eq!(m(4).rows, 128);
        assert_eq!(m(4).bytes, 221_984);
        assert!(
            m(5).bytes > HOPPER_SMEM,
            "{} bytes with five stages",
            m(5).bytes
        );
    }

    /// MNIST's layouts at batch 128 with slices of one n-tile are the ones `docs/persistent.md`
    /// gives: 231,584 bytes with two buffers (the small parameters 1,376 of them), 130,208 with
    /// one of half the batch, 77,472 of a quarter and 64,928 with W1 in registers, 63,648 for a
    /// ring of two stages.
    #[test]
    fn mnist_layout_is_the_documented_one() {
        let p = SmallParams::of(UNITS);
        assert_eq!(p.len, 2 * 16 * 8 + 3 * 8 + 3 * 16 + 2 * WARPS);
        assert_eq!((p.b1_master, p.loss, p.correct), (256, 328, 336));
        assert_eq!(p.len * 4, 1_376);
        let whole = |buffers, parts, registers| Smem::whole(128, 784, buffers, parts, registers);
        assert_eq!(whole(2, PAIR, false).bytes, 231_584);
        assert_eq!(whole(1, PAIR, false).bytes, 130_208);
        assert_eq!(whole(1, MAX_PARTS, false).bytes, 77_472);
        assert_eq!(whole(1, MAX_PARTS, true).bytes, 64_928);
        assert_eq!(Smem::streamed(128, 784, MIN_STAGES).bytes, 63_648);
    }
}
