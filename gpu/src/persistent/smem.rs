//! Where the persistent kernel keeps what it holds in shared memory. The host sizes the launch
//! from [`Smem`], the kernel finds its buffers with it, and the CPU tests check it.
use super::*;

/// The slice's parameters other than W1 and the per-warp partial sums, f32, in shared memory
/// at [`Smem::params`]: W2 and b2 padded with zeros to [`MAX_CLASSES`]. Each parameter has its
/// master value and momentum; b1 and b2 also the value rounded to fp16 that the forward adds.
#[repr(C)]
pub struct SmallParams {
    pub w2_master: [[f32; UNITS]; MAX_CLASSES],
    pub w2_momentum: [[f32; UNITS]; MAX_CLASSES],
    pub b1_master: [f32; UNITS],
    pub b1_momentum: [f32; UNITS],
    pub b1_half: [f32; UNITS],
    pub b2_master: [f32; MAX_CLASSES],
    pub b2_momentum: [f32; MAX_CLASSES],
    pub b2_half: [f32; MAX_CLASSES],
    /// Each warp's share of db1.
    pub db1: [[f32; UNITS]; WARPS],
    /// Each warp's sums of the loss and of the correct count.
    pub loss: [f32; WARPS],
    pub correct: [f32; WARPS],
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
    /// The slice's rows of W1, fp16 `[dim][UNITS]`: one 16-byte row per input, so the
    /// forward's B fragments are `ldmatrix.trans` loads and an update stores a unit pair in
    /// one word. Within a Hopper cluster the partner's dW1 share (16·dim bytes) arrives here too.
    pub w1: usize,
    /// `H[:, s]` and `dH[:, s]`, fp16 `[rows rounded to 32][UNITS]` each.
    pub h: usize,
    pub dh: usize,
    /// Gradient of the logits, fp16 `[rows][MAX_CLASSES]`.
    pub dl: usize,
    /// The slice's W2 columns in fp16, as `[class][unit]` and as `[unit][class]`.
    pub w2_cu: usize,
    pub w2_uc: usize,
    /// The slice's parameters other than W1 and the per-warp partial sums: [`SmallParams`].
    pub params: usize,
    /// Within a Hopper cluster, where the partner block writes its shares of dW2, db2 and db1
    /// (f32, [`SMALL_SHARES`]; its dW1 share goes in place of the fp16 W1).
    pub xch: usize,
    /// This block's shares of dW2 and db2 (f32, in the layout of the others'), where the
    /// threads that update W2 and b2 find them.
    pub own: usize,
    /// The forward's partial sums of H ([`PARTIALS`] bytes): each warp's over its part of the
    /// input, for every tile.
    pub partials: usize,
    /// Three `mbarrier` objects (u64; the region is padded to 16 bytes): one per batch buffer,
    /// where Hopper's bulk copies report their bytes, and one where the partner's shares report
    /// theirs.
    pub mbar: usize,
    pub bytes: usize,
}

/// Bytes per row of a chunk buffer: an odd number of 16-byte pieces, as [`Smem::stride`].
pub const CHUNK_STRIDE: usize = 2 * CHUNK + 16;

impl Smem {
    /// The layout with `buffers` buffers of whole rows of one of `parts` parts of the batch:
    /// two (the next batch arrives in one while the step reads the other), or one (refilled
    /// after dW1).
    pub const fn whole(batch: usize, dim: usize, buffers: usize, parts: usize) -> Smem {
        Smem::with_buffers(batch.div_ceil(parts), dim, buffers, row_stride(dim), false)
    }

    /// The streamed kernels' layout, with a ring of `stages` chunk buffers (the batch in two
    /// parts).
    pub const fn streamed(batch: usize, dim: usize, stages: usize) -> Smem {
        Smem::with_buffers(batch.div_ceil(PAIR), dim, stages, CHUNK_STRIDE, true)
    }

    /// The layout for a block's `part` rows of the batch.
    const fn with_buffers(
        part: usize,
        dim: usize,
        buffers: usize,
        buffer_row: usize,
        streamed: bool,
    ) -> Smem {
        let rows = part.div_ceil(16) * 16;
        let rows32 = rows.div_ceil(32) * 32;
        let stride = row_stride(dim);
        let x = 0;
        let w1 = x + buffers * rows * buffer_row;
        let h = w1 + dim * UNITS * 2;
        let dh = h + rows32 * UNITS * 2;
        let dl = dh + rows32 * UNITS * 2;
        let w2_cu = dl + rows * MAX_CLASSES * 2;
        let w2_uc = w2_cu + MAX_CLASSES * UNITS * 2;
        let params = w2_uc + MAX_CLASSES * UNITS * 2;
        let xch = (params + size_of::<SmallParams>()).div_ceil(16) * 16;
        let own = (xch + SMALL_SHARES * 4).div_ceil(16) * 16;
        let partials = own + OWN_SHARES * 4;
        let mbar = partials + PARTIALS;
        Smem {
            rows,
            stride,
            streamed,
            buffers,
            buffer_row,
            x,
            w1,
            h,
            dh,
            dl,
            w2_cu,
            w2_uc,
            params,
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
            for (m, parts) in [
                (Smem::whole(batch, dim, 2, PAIR), PAIR),
                (Smem::whole(batch, dim, 1, PAIR), PAIR),
                (Smem::whole(batch, dim, 1, 4), 4),
                (Smem::streamed(batch, dim, MAX_STAGES), PAIR),
            ] {
                let regions = [
                    m.x, m.w1, m.h, m.dh, m.dl, m.w2_cu, m.w2_uc, m.params, m.xch, m.own,
                    m.partials, m.mbar, m.bytes,
                ];
                for r in regions {
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
                // The partner's dW1 share (fp16 pairs of every input tile's fragment) fits W1's place.
                assert!(m.h - m.w1 >= dim.div_ceil(16) * 32 * 2 * 4);
            }
        }
    }

    /// The streamed layout of MNIST's batch of 128 fits each GPU generation's shared memory
    /// per block with the stages the host gives it: Turing's 64 KiB two, the 99 KiB of sm_86
    /// and sm_89 four, an A100's 163 KiB the most; the whole batch fits only Hopper's 227 KiB,
    /// one buffer of half of it an A100's, of a quarter 99 KiB.
    #[test]
    fn mnist_streams_through_every_generation() {
        for (kib, stages) in [(64, 2), (99, 4), (163, MAX_STAGES)] {
            assert!(
                Smem::streamed(128, 784, stages).bytes <= kib * 1024,
                "{kib} KiB"
            );
        }
        assert!(Smem::streamed(128, 784, 5).bytes > 99 * 1024);
        assert!(Smem::whole(128, 784, 2, PAIR).bytes > 163 * 1024);
        for (parts, kib) in [(2, 163), (4, 99)] {
            let single = Smem::whole(128, 784, 1, parts).bytes;
            assert!(single <= kib * 1024, "{parts} parts in {kib} KiB");
            if parts > PAIR {
                assert!(Smem::whole(128, 784, 1, parts / 2).bytes > kib * 1024);
            }
        }
    }

    /// The default MNIST model fits an H100's 227 KB per block.
    #[test]
    fn mnist_fits_an_h100() {
        let m = Smem::whole(128, 784, 2, PAIR);
        assert_eq!(m.rows, 64);
        assert!(m.bytes <= 232_448, "{} bytes", m.bytes);
    }
}
