//! A one-hidden-layer MLP trained by one persistent kernel: batch fetch, forward, softmax
//! cross-entropy, backward and the SGD update of many consecutive steps run inside one launch.
//!
//! Why: at MNIST size (784-128-10, batch 128) a step is about 50 MFLOP, a few microseconds of
//! tensor-core work, while a step of a dozen dependent kernels spends most of its time launching
//! and draining them. Here blocks meet twice a step: all of them at a grid barrier, and each
//! pair of blocks at the exchange of their gradients.
//!
//! Decomposition: the hidden units are cut in slices of 8 (one n = 8 `mma` tile) and the batch
//! in two halves; block `2s + h` owns slice `s` for half `h`. Each block holds its slice's
//! rows of W1, entries of b1 and columns of W2 (the two blocks of a slice hold identical
//! copies) and its half of the batch (fp16, in shared memory, the next batch's copy arriving
//! during the step). A step:
//! - forward, `H = relu(X·W1[s]ᵀ + b1[s])` for the block's rows: block-local;
//! - logits `H·W2ᵀ`: a sum over slices. Each block adds its partial product into one buffer in
//!   64-bit fixed point, whose adds are associative, so the sums do not depend on the order of
//!   arrival: runs repeat bit for bit and every block sees the same logits. Grid barrier;
//! - softmax cross-entropy and the gradients of the block's rows: dlogits, dH, and the
//!   block's share (its half of the batch) of dW1[s], db1[s], dW2[:, s], db2;
//! - the two blocks of a slice exchange their shares, add them (IEEE addition is commutative:
//!   both get the same sums) and apply the same SGD update to their copies. On Hopper the pair
//!   is a thread-block cluster: the shares go straight into the partner's shared memory as
//!   `st.async` messages, which its `mbarrier` counts until all have arrived; elsewhere they go
//!   through global memory and the pair meets at a counter there.
//!
//! Splitting the batch halves the shared memory a block needs for it, which leaves room for a
//! second buffer: the copy of the next batch (the step's largest transfer) overlaps the step
//! instead of preceding its forward. The epoch's rows are shuffled before it by a kernel of
//! their own, in step order and each with its label, so a block's rows of a step are one run of
//! memory. Within a block, the forward's product splits the input over the warps (all eight on
//! Hopper, else warps 0-3 while warps 4-7 fetch the next batch with `cp.async`; on Hopper one
//! bulk copy of the copy engine fetches it). Warps 0-3 then own the 16-row tiles of the batch
//! through H, the partial logits and dH, so those stay in registers as `mma` fragments (an
//! accumulator fragment of one product is the A fragment of the next); all eight share the
//! softmax (on Hopper) and dW1. W1's fp32 master values and momentum live in registers for the
//! whole launch.
//! `docs/persistent.md` has the measurements.

/// Hidden units per slice: one n = 8 `mma` tile.
pub const UNITS: usize = 8;
/// Threads per block: 8 warps.
pub const THREADS: usize = 256;
const WARPS: usize = THREADS / 32;
/// Limits of the kernel: four 16-row tiles per half batch (each warp of the forward takes all
/// four), seven 16-wide tiles of dW1ᵀ along the input per warp, the classes within one k = 16
/// step.
pub const MAX_BATCH: usize = 128;
pub const MAX_DIM: usize = 896;
pub const MAX_CLASSES: usize = 16;
/// 16-wide tiles of dW1ᵀ (along the input) per warp.
const TILES_PER_WARP: usize = MAX_DIM / 16 / WARPS;
/// 16-row tiles of a block's rows of the batch, at most.
const TILES: usize = MAX_BATCH / PARTS / 16;
/// Bytes of the forward's partial sums: a fragment of fp16 accumulators per warp, tile and
/// lane (fp32 ones take twice the bytes: half the warps then split the forward).
const PARTIALS: usize = WARPS * TILES * 32 * 8;
const _: () = assert!(
    WARPS * TILES_PER_WARP * 16 == MAX_DIM,
    "the warps' tiles cover MAX_DIM"
);

/// Blocks per slice of hidden units: the batch is split in this many parts.
pub const PARTS: usize = 2;

/// Whether the kernel built for `sm` is launched with each slice's blocks as a cluster (the
/// Hopper build: `build.rs` compiles sm_90 with PTX 8.1).
pub const fn clustered(sm: u32) -> bool {
    sm >= 90
}

/// The kernel's parameters, passed by value as one `.param` block: `#[repr(C)]` gives the
/// host and the device the same layout, so the parameter list is written once. Device
/// addresses are `u64`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TrainArgs {
    /// The epoch's examples in shuffled order as the kernel `mlp1_persistent_shuffle` writes
    /// them: [`row_stride`] bytes a row, the features, then the label.
    pub batches: u64,
    /// Every parameter: fp32 master values, their fp16 copy, SGD momentum.
    pub w32: u64,
    pub w16: u64,
    pub vel: u64,
    /// Each step's mean loss and correct count, added at `[step]` (zeroed by the host).
    pub loss: u64,
    pub correct: u64,
    /// Fixed-point logit sums ([`LOGIT_SLOTS`] slots), the blocks' [`EXCHANGE`] areas and the
    /// barrier counters (grid, then one per slice; zeroed by the host before each launch).
    pub logits: u64,
    pub exchange: u64,
    pub counters: u64,
    /// Layer widths, batch rows.
    pub dim: u32,
    pub hidden: u32,
    pub classes: u32,
    pub batch: u32,
    /// Offsets of W1, b1, W2, b2 in the parameter buffers.
    pub o_w1: u32,
    pub o_b1: u32,
    pub o_w2: u32,
    pub o_b2: u32,
    pub lr: f32,
    pub momentum: f32,
    /// This launch runs steps `step0..step0 + steps` of the epoch: step `k` reads rows
    /// `k·batch..(k + 1)·batch` of `batches`.
    pub step0: u32,
    pub steps: u32,
}

/// Byte offsets of the kernel's dynamic shared memory for one (batch, input width). The host
/// sizes the launch with it, the kernel finds its buffers with it.
#[derive(Clone, Copy, Debug)]
pub struct Smem {
    /// Rows of the batch per block (half the batch, rounded up to the 16 of an `mma` tile);
    /// the rows a block does not fill hold zeros.
    pub rows: usize,
    /// Bytes per row of the batch: an odd number of 16-byte chunks, so the eight rows one
    /// `ldmatrix` phase reads fall in eight different bank groups. That is always the features
    /// and one chunk more, which carries the row's label ([`label_offset`]): a row arrives
    /// with its label.
    pub stride: usize,
    /// Two buffers of the block's rows of the batch, fp16 `[2][rows][stride]`.
    pub x: usize,
    /// The slice's rows of W1, fp16 `[dim][UNITS]`: one 16-byte row per input, so the
    /// forward's B fragments are `ldmatrix.trans` loads and an update stores a unit pair in
    /// one word. On Hopper the partner's dW1 share (16·dim bytes) arrives here too.
    pub w1: usize,
    /// `H[:, s]` and `dH[:, s]`, fp16 `[rows rounded to 32][UNITS]` each.
    pub h: usize,
    pub dh: usize,
    /// Gradient of the logits, fp16 `[rows][MAX_CLASSES]`.
    pub dl: usize,
    /// The slice's W2 columns in fp16, as `[class][unit]` and as `[unit][class]`.
    pub w2_cu: usize,
    pub w2_uc: usize,
    /// f32: W2 columns (master and momentum, `[MAX_CLASSES][UNITS]` each), b1 (master,
    /// momentum, fp16 value), b2 (the same, `[MAX_CLASSES]`), per-warp partial sums of db1
    /// (`[warps][UNITS]`) and of the loss and correct count (`[2][warps]`).
    pub params: usize,
    /// On Hopper, where the partner block writes its shares of dW2, db2 and db1 (f32,
    /// [`SMALL_SHARES`]; its dW1 share goes in place of the fp16 W1).
    pub xch: usize,
    /// This block's shares of dW2 and db2 (f32, in the layout of the partner's), where the
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

impl Smem {
    pub const fn new(batch: usize, dim: usize) -> Smem {
        let rows = batch.div_ceil(PARTS).div_ceil(16) * 16;
        let rows32 = rows.div_ceil(32) * 32;
        let stride = row_stride(dim);
        let x = 0;
        let w1 = x + 2 * rows * stride;
        let h = w1 + dim * UNITS * 2;
        let dh = h + rows32 * UNITS * 2;
        let dl = dh + rows32 * UNITS * 2;
        let w2_cu = dl + rows * MAX_CLASSES * 2;
        let w2_uc = w2_cu + MAX_CLASSES * UNITS * 2;
        let params = w2_uc + MAX_CLASSES * UNITS * 2;
        let floats =
            2 * MAX_CLASSES * UNITS + 3 * UNITS + 3 * MAX_CLASSES + WARPS * UNITS + 2 * WARPS;
        let xch = (params + floats * 4).div_ceil(16) * 16;
        let own = (xch + SMALL_SHARES * 4).div_ceil(16) * 16;
        let partials = own + OWN_SHARES * 4;
        let mbar = partials + PARTIALS;
        Smem {
            rows,
            stride,
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

/// Elements of the global logits buffer per step: the sums ([`logits_row`] to a row), then a
/// count of partial values that were not finite (or too large for the fixed point), which
/// turns the loss into NaN, and one element of padding (every slot starts on 16 bytes).
pub const fn logits_slot(batch: usize, classes: usize) -> usize {
    batch * logits_row(classes) + 2
}

/// Elements of a row of logit sums: an even number, so that each row starts on 16 bytes and
/// the softmax loads the sums in pairs.
pub const fn logits_row(classes: usize) -> usize {
    classes.next_multiple_of(2)
}

/// Bytes per row of the batch ([`Smem::stride`]) for inputs of width `dim`.
pub const fn row_stride(dim: usize) -> usize {
    ((dim * 2).div_ceil(16) | 1) * 16
}

/// Byte offset of a row's label (u32) in its row of `batches` and of the shared batch buffers:
/// the 16 bytes after the features, which a row's stride leaves free.
pub const fn label_offset(dim: usize) -> usize {
    2 * dim
}

/// The logits buffer rotates over three slots: step k adds into slot k % 3 while block 0
/// clears slot (k + 1) % 3, which every block finished reading before step k began.
pub const LOGIT_SLOTS: usize = 3;

/// Words a block leaves for its partner each step, in fragment order (so both the writes and
/// the reads are coalesced): its share of dW1 as fp16 pairs (`[tile][pair][lane]`; the
/// layered path keeps weight gradients in fp16 too), then f32 shares of dW2 and db2
/// (`[element][lane]` each) and of db1. (On Hopper they go to the partner's shared memory.)
pub const EXCHANGE: usize = WARPS * TILES_PER_WARP * 2 * 32 + SMALL_SHARES;
/// Words of the shares of dW2 and db2 (one `mma` fragment each) and of db1.
pub const SMALL_SHARES: usize = OWN_SHARES + UNITS;
/// Words of the shares of dW2 and db2.
const OWN_SHARES: usize = 2 * 4 * 32;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every buffer starts on a 16-byte boundary (`ldmatrix` rows, `cp.async` and 16-byte
    /// stores need it), the buffers follow each other without overlap, and a batch row spans
    /// an odd number of 16-byte chunks (conflict-free `ldmatrix`).
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
            let m = Smem::new(batch, dim);
            let regions = [
                m.x, m.w1, m.h, m.dh, m.dl, m.w2_cu, m.w2_uc, m.params, m.xch, m.own, m.partials,
                m.mbar, m.bytes,
            ];
            for r in regions {
                assert_eq!(r % 16, 0, "batch {batch} dim {dim}: {m:?}");
            }
            assert!(regions.windows(2).all(|w| w[0] < w[1]), "{m:?}");
            assert_eq!((m.stride / 16) % 2, 1);
            // The features, then one chunk for the label.
            assert_eq!(m.stride, label_offset(dim) + 16);
            assert!(
                m.rows.is_multiple_of(16) && m.rows * PARTS >= batch && m.rows <= MAX_BATCH / PARTS
            );
            assert_eq!(m.w1 - m.x, 2 * m.rows * m.stride);
            // The partner's dW1 share (fp16 pairs of every input tile's fragment) fits W1's place.
            assert!(m.h - m.w1 >= dim.div_ceil(16) * 32 * 2 * 4);
        }
    }

    /// The default MNIST model fits an H100's 227 KB per block.
    #[test]
    fn mnist_fits_an_h100() {
        let m = Smem::new(128, 784);
        assert_eq!(m.rows, 64);
        assert!(m.bytes <= 232_448, "{} bytes", m.bytes);
    }
}

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
mod kernel {
    use super::*;
    use crate::arch::*;
    use crate::layout::{Operand, ldmatrix_lane, mma_c};
    use crate::shuffle::permute;
    use core::intrinsics::fmaf32;

    /// Fixed point of the logit sums: 32 fractional bits. Partial values beyond ±2^20 count as
    /// divergence, which keeps any sum of up to 2^11 slices inside an i64.
    const FIX: f32 = 4294967296.0;
    const FIX_LIMIT: f32 = 1048576.0;
    /// `f16x2` (1, 1): the B fragment that turns a product into column sums (db2).
    const ONES: [u32; 2] = [0x3c00_3c00; 2];

    /// One SGD-with-momentum step of one parameter; returns the new weight.
    #[inline(always)]
    fn sgd(w: &mut f32, v: &mut f32, g: f32, lr: f32, momentum: f32) -> f32 {
        *v = fmaf32(momentum, *v, g);
        *w = fmaf32(-lr, *v, *w);
        *w
    }

    /// B fragments of `k`-steps 0..rows/16 of an fp16 `[rows][UNITS]` tile in shared memory
    /// (k = row, n = unit): one `ldmatrix.x4.trans` covers two steps, lane l naming row l.
    #[inline(always)]
    fn unit_frags(tile: u32, rows: usize) -> [[u32; 2]; TILES] {
        let mut bf = [[0u32; 2]; TILES];
        for pair in 0..TILES / 2 {
            if 32 * pair < rows {
                let r =
                    ldmatrix_x4_trans(tile + ((32 * pair + lane() as usize) * UNITS * 2) as u32);
                bf[2 * pair] = [r[0], r[1]];
                bf[2 * pair + 1] = [r[2], r[3]];
            }
        }
        bf
    }

    /// The warp's shares of the dW1ᵀ tiles `w, w + WARPS, …`: `Xᵀ·dH` over the block's
    /// `ksteps` k-steps of 16 rows, the A fragment of k-step `ks` and tile `mt` loaded by
    /// `ldmatrix.trans` from `a_at(ks, mt)`. `N` tiles (the rest of the array stays zero): the
    /// caller passes `TILES_PER_WARP` only to warps that have that many, so with MNIST's 49
    /// tiles warps 1-7 compute six, not a seventh they would discard (2.645-2.668 against
    /// 2.661-2.695 ms/epoch). Within the `N` a warp past the last tile repeats it, branch-free:
    /// a branch per tile serialises each load and its `mma` (a build that skipped tiles so ran
    /// 2.85-2.90 against 2.69-2.71 ms/epoch).
    #[inline(always)]
    fn dw1_tiles<A: Acc, const N: usize>(
        a_at: impl Fn(usize, usize) -> u32,
        w: usize,
        ktiles: usize,
        ksteps: usize,
        bf: &[[u32; 2]; TILES],
    ) -> [A; TILES_PER_WARP] {
        let mut acc = [A::ZERO; TILES_PER_WARP];
        for ks in 0..TILES {
            if ks < ksteps {
                for i in 0..N {
                    let mt = (w + WARPS * i).min(ktiles - 1);
                    acc[i].mma_k16(ldmatrix_x4_trans(a_at(ks, mt)), bf[ks]);
                }
            }
        }
        acc
    }

    /// Warps that split the forward's K. On Hopper all eight (the copy engine fetches the next
    /// batch) where their partials fit [`PARTIALS`], which fp32 ones fit four of; elsewhere the
    /// four tile warps (the loader warps issue `cp.async` meanwhile).
    const fn forward_warps<A: Acc>() -> usize {
        if HOPPER && size_of::<A>() == 8 {
            WARPS
        } else {
            4
        }
    }

    /// The training loop of one block.
    #[inline(always)]
    unsafe fn train<A: Acc>(args: TrainArgs) {
        let TrainArgs {
            batches,
            dim,
            hidden,
            classes,
            batch,
            o_w1,
            o_b1,
            o_w2,
            o_b2,
            lr,
            momentum,
            step0,
            steps,
            ..
        } = args;
        let batches = batches as *const u8;
        let (w32, w16, vel) = (
            args.w32 as *mut f32,
            args.w16 as *mut u16,
            args.vel as *mut f32,
        );
        let (loss, correct) = (args.loss as *mut f32, args.correct as *mut f32);
        let logits = args.logits as *mut i64;
        let (exchange, counters) = (args.exchange as *mut u32, args.counters as *mut u32);
        let lay = Smem::new(batch as usize, dim as usize);
        let base = dynamic_shared::<u8>();
        let s0 = shared_addr(base);
        let (sw1, sh, sdh, sdl) = (
            s0 + lay.w1 as u32,
            s0 + lay.h as u32,
            s0 + lay.dh as u32,
            s0 + lay.dl as u32,
        );
        let (sw2_cu, sw2_uc) = (s0 + lay.w2_cu as u32, s0 + lay.w2_uc as u32);
        let sxch = s0 + lay.xch as u32;
        let own = unsafe { base.add(lay.own) as *mut f32 };
        let p = unsafe { base.add(lay.params) as *mut f32 };
        let (w2m, w2v) = unsafe { (p, p.add(MAX_CLASSES * UNITS)) };
        let b1m = unsafe { p.add(2 * MAX_CLASSES * UNITS) };
        let (b1v, b1h) = unsafe { (b1m.add(UNITS), b1m.add(2 * UNITS)) };
        let b2m = unsafe { b1m.add(3 * UNITS) };
        let (b2v, b2h) = unsafe { (b2m.add(MAX_CLASSES), b2m.add(2 * MAX_CLASSES)) };
        let db1_part = unsafe { b2m.add(3 * MAX_CLASSES) };
        let loss_part = unsafe { db1_part.add(WARPS * UNITS) };

        let tid = thread_x() as usize;
        let (w, l) = (warp_id() as usize, lane() as usize);
        let (g, t) = (l / 4, l % 4);
        let (blk, blocks) = (block_x(), grid_dim_x());
        let (slice, part) = (blk / PARTS as u32, blk as usize % PARTS);
        let j0 = slice * UNITS as u32;
        let (rows, cn) = (lay.rows, classes as usize);
        // This block's rows of the batch: r0..r0 + mine (possibly none).
        let r0 = part * rows;
        let mine = (batch as usize).saturating_sub(r0).min(rows);
        let rows32 = rows.div_ceil(32) * 32;
        let ktiles = (dim / 16) as usize;
        let slot = logits_slot(batch as usize, cn);
        // The pair counters and exchange areas exist only off Hopper (the host allocates none
        // there): wrapping arithmetic, since these addresses are formed but never used there.
        let pair_count = counters.wrapping_add(1 + slice as usize);
        let (my_xch, partner_xch) = (
            exchange.wrapping_add(blk as usize * EXCHANGE),
            exchange.wrapping_add((blk ^ 1) as usize * EXCHANGE),
        );
        let grid_count = counters;
        // On Hopper the two blocks of a slice are in one cluster (with those of another slice,
        // where the host launches clusters of four): the partner's rank in it.
        let peer = if HOPPER { cluster_rank() ^ 1 } else { 0 };
        // Roles: warps 0-3 own the 16-row tiles of the batch (H, partial logits, dH); elsewhere
        // than on Hopper warps 4-7 fetch the next batch during the forward (all of them, since
        // a warp issuing `cp.async` stalls until the memory system takes the copies).
        let tile_rows = w < 4 && 16 * w < mine;
        let loader = w >= 4;

        // Parameters in: W1 master and momentum into registers (each thread keeps the elements
        // of the dW1ᵀ fragments it computes), their fp16 copy into shared memory; the small
        // ones into shared memory, padded with zeros to MAX_CLASSES.
        // Element (input 16·mt + r, unit c) of the slice's W1: its flat index in the parameter
        // buffers and its shared-memory address (fp16, `[unit][input]`).
        let w1_index =
            |mt: usize, r: usize, c: usize| (o_w1 + (j0 + c as u32) * dim) as usize + 16 * mt + r;
        let w1_shared =
            |mt: usize, r: usize, c: usize| sw1 + (((16 * mt + r) * UNITS + c) * 2) as u32;
        let mut wm = [[0.0f32; 4]; TILES_PER_WARP];
        let mut wv = [[0.0f32; 4]; TILES_PER_WARP];
        for i in 0..TILES_PER_WARP {
            let mt = w + WARPS * i;
            if mt < ktiles {
                for e in 0..4 {
                    let (r, c) = mma_c(l, e);
                    let k = w1_index(mt, r, c);
                    unsafe {
                        wm[i][e] = *w32.add(k);
                        wv[i][e] = *vel.add(k);
                    }
                    st_shared_u16(w1_shared(mt, r, c), f2h(wm[i][e]));
                }
            }
        }
        let set_w2h = |c: usize, j: usize, v: f32| {
            st_shared_u16(sw2_cu + ((c * UNITS + j) * 2) as u32, f2h(v));
            st_shared_u16(sw2_uc + ((j * MAX_CLASSES + c) * 2) as u32, f2h(v));
        };
        if tid < MAX_CLASSES * UNITS {
            let (c, j) = (tid / UNITS, tid % UNITS);
            let (mut m, mut v) = (0.0, 0.0);
            if c < cn {
                let k = (o_w2 + c as u32 * hidden + j0) as usize + j;
                unsafe { (m, v) = (*w32.add(k), *vel.add(k)) };
            }
            unsafe { (*w2m.add(tid), *w2v.add(tid)) = (m, v) };
            set_w2h(c, j, m);
        }
        if tid < UNITS {
            let k = (o_b1 + j0) as usize + tid;
            unsafe {
                *b1m.add(tid) = *w32.add(k);
                *b1v.add(tid) = *vel.add(k);
                *b1h.add(tid) = round_h(*b1m.add(tid));
            }
        }
        if tid < MAX_CLASSES {
            let (mut m, mut v) = (0.0, 0.0);
            if tid < cn {
                let k = o_b2 as usize + tid;
                unsafe { (m, v) = (*w32.add(k), *vel.add(k)) };
            }
            unsafe {
                *b2m.add(tid) = m;
                *b2v.add(tid) = v;
                *b2h.add(tid) = round_h(m);
            }
        }
        // Rows the block does not fill stay zero for the whole launch: in both batch buffers
        // (dW1 reads them), and in H and dH up to the 32 rows one ldmatrix pair covers.
        let zero = |from: usize, to: usize| {
            let mut i = from + 4 * tid;
            while i < to {
                unsafe { *(base.add(i) as *mut u32) = 0 };
                i += 4 * THREADS;
            }
        };
        for b in 0..2 {
            let buf = lay.x + b * rows * lay.stride;
            zero(buf + mine * lay.stride, buf + rows * lay.stride);
        }
        zero(lay.h + mine * UNITS * 2, lay.h + rows32 * UNITS * 2);
        zero(lay.dh + mine * UNITS * 2, lay.dh + rows32 * UNITS * 2);
        // The partner writes into this block's shared memory only after a grid barrier, by
        // which this block has long started; the cluster barrier says so where a checker can
        // see it (compute-sanitizer cannot follow a barrier polled in global memory). It is
        // the only cluster barrier: each step's shares are counted at an mbarrier.
        if HOPPER {
            cluster_sync();
        }

        // Batches: the block's rows of step `step` are one run of `batches`, rows, labels and
        // stride as the buffer holds them, copied whole into buffer `buf`.
        let batch_bytes = mine * lay.stride;
        let batch_src =
            |step: u32| unsafe { batches.add((step as usize * batch as usize + r0) * lay.stride) };
        let buffer = |buf: usize| s0 + (lay.x + buf * rows * lay.stride) as u32;
        // Elsewhere: 16-byte `cp.async` pieces over the loader threads.
        let load_batch = |buf: usize, step: u32| {
            let (from, to) = (batch_src(step), buffer(buf));
            let mut i = 16 * (tid - 128);
            while i < batch_bytes {
                cp_async_16(to + i as u32, unsafe { from.add(i) }, 16);
                i += 16 * 128;
            }
            cp_async_commit();
        };
        // On Hopper: one bulk copy, issued by one thread, which announces its bytes at the
        // buffer's mbarrier (a block without rows: nothing), so the phase completes once the
        // rows have landed.
        let mbar = |buf: usize| s0 + (lay.mbar + 8 * buf) as u32;
        // Bytes of the partner's shares each step (Hopper): dW1, then dW2 and db2, then db1.
        let share_bytes = ((ktiles * 2 * 32 + SMALL_SHARES) * 4) as u32;
        let bulk_batch = |buf: usize, step: u32| {
            mbar_expect(mbar(buf), batch_bytes as u32);
            if batch_bytes > 0 {
                bulk_copy(buffer(buf), batch_src(step), batch_bytes as u32, mbar(buf));
            }
        };
        if HOPPER {
            if tid == 0 {
                for b in 0..3 {
                    mbar_init(mbar(b), 1);
                }
            }
            // Announced after the block barrier, not straight after the inits: there the JIT
            // made the inits uniform (warp-wide) instructions, and racecheck reported them
            // against thread 0's arrive on the same mbarrier (16 warnings on the persistent tests).
            sync_threads();
            if tid == 0 {
                // The partner's shares of the first step (the next ones are announced as each
                // step's arrive): it sends them only after the grid barrier, which this block
                // reaches after these lines.
                mbar_expect(mbar(2), share_bytes);
            } else if tid == 32 {
                // The first two batches; each later one as its buffer is freed (the update).
                bulk_batch(0, step0);
                if steps > 1 {
                    bulk_batch(1, step0 + 1);
                }
            }
        } else if loader {
            load_batch(0, step0);
        }

        for k in 0..steps {
            let step = step0 + k;
            let cur = (k % 2) as usize;
            let sums = unsafe { logits.add((k as usize % LOGIT_SLOTS) * slot) };
            // On Hopper the block barrier that ended the previous step suffices: the batch's
            // mbarrier says when its rows have landed.
            if HOPPER {
                mbar_wait::<false>(mbar(cur), (k / 2) % 2);
            } else {
                if loader {
                    cp_async_wait::<0>();
                }
                sync_threads();
            }
            // Index arithmetic is redone each step from values the optimiser cannot see through:
            // hoisted out of the loop, its dozens of invariant offsets would each hold a
            // register for the whole launch, and push W1's registers into local memory.
            let v = opaque(0) as usize;
            let (tid, w, l, g, t) = (tid + v, w + v, l + v, g + v, t + v);
            let (cn, ktiles, mine) = (cn + v, ktiles + v, mine + v);
            let sx = opaque(s0 + (lay.x + cur * rows * lay.stride) as u32);
            let (my_xch, partner_xch) = (opaque_ptr(my_xch), opaque_ptr(partner_xch));

            // Forward: H = relu(X·W1[s]ᵀ + b1[s]). The forward warps split K (the input): each
            // takes k-steps w, w + fwd, … for every 16-row tile of the block, so each element of
            // W1's slice is read from shared memory once, not once per tile, and a warp's tiles
            // are independent accumulator chains. Warp t then sums tile t's partials and keeps H
            // as an accumulator fragment (rows g, g+8; units 2t, 2t+1), stored fp16 for dW2.
            let fwd = forward_warps::<A>();
            const { assert!(forward_warps::<A>() * TILES * 32 * size_of::<A>() <= PARTIALS) };
            let tiles = rows / 16;
            let mut acc = [A::ZERO; TILES];
            if mine > 0 && w < fwd {
                let (mm, kk) = ldmatrix_lane(l, Operand::A, true);
                let a0 = sx + (mm * lay.stride + 2 * kk) as u32;
                // Tiles past the block's last repeat it, branch-free (their sums are not used).
                let a_at: [u32; TILES] =
                    core::array::from_fn(|m| a0 + (16 * m.min(tiles - 1) * lay.stride) as u32);
                let b0 = sw1 + ((l % 16) * UNITS * 2) as u32;
                let frag = |ks: usize| {
                    (
                        a_at.map(|a| ldmatrix_x4(a + 32 * ks as u32)),
                        ldmatrix_x2_trans(b0 + (16 * UNITS * 2 * ks) as u32),
                    )
                };
                // The next k-step's fragments are loaded before this one's mma are issued.
                let mut ks = w;
                if ks < ktiles {
                    let mut next = frag(ks);
                    while ks < ktiles {
                        let (a, b) = next;
                        ks += fwd;
                        if ks < ktiles {
                            next = frag(ks);
                        }
                        for m in 0..TILES {
                            acc[m].mma_k16(a[m], b);
                        }
                    }
                }
            }
            // Every forward warp's partials of every tile (zeros from a warp with no k-steps),
            // `[warp][tile][lane]`, so the sums below load them unconditionally: a first build
            // that loaded only other warps' partials, each under its branch and waited for
            // before the next, took ~600 cycles for them and lost what the split saves.
            let partial = |from: usize, m: usize| {
                s0 + (lay.partials + ((from * TILES + m) * 32 + l) * size_of::<A>()) as u32
            };
            if mine > 0 {
                if w < fwd {
                    for m in 0..TILES {
                        st_shared_acc(partial(w, m), acc[m]);
                    }
                }
                // Elsewhere the loader warps must not arrive: the named barrier counts warps
                // 0-3's 128 threads, and with the loaders' a generation would release early.
                if HOPPER {
                    sync_threads()
                } else if w < fwd {
                    bar_sync::<2, 128>()
                };
            }
            let mut hf = [0.0f32; 4];
            if tile_rows {
                // Summed pairwise in warp order: runs repeat bit for bit.
                let mut p: [A; WARPS] = core::array::from_fn(|from| {
                    if from < fwd {
                        ld_shared_acc(partial(from, w))
                    } else {
                        A::ZERO
                    }
                });
                let mut span = 1;
                while span < WARPS {
                    for c in (0..WARPS).step_by(2 * span) {
                        let other = p[c + span];
                        p[c].add(&other);
                    }
                    span *= 2;
                }
                let sum = p[0];
                for e in 0..4 {
                    let v = unsafe { *b1h.add(2 * t + (e & 1)) } + sum.get(e);
                    // A ReLU that lets NaN through, so a diverged run shows in the loss.
                    hf[e] = round_h(if v < 0.0 { 0.0 } else { v });
                }
                let row = (16 * w + g) as u32;
                st_shared_u32(
                    sh + (row * UNITS as u32 + 2 * t as u32) * 2,
                    pack_h2(hf[0], hf[1]),
                );
                st_shared_u32(
                    sh + ((row + 8) * UNITS as u32 + 2 * t as u32) * 2,
                    pack_h2(hf[2], hf[3]),
                );

                // Partial logits H·W2[:, s]ᵀ: the H fragment is the A fragment of an m16n8k8
                // product over the 8 units; fixed-point adds into this step's sums.
                let a = [pack_h2(hf[0], hf[1]), pack_h2(hf[2], hf[3])];
                // The sums of the thread's rows (g and g + 8 of the tile), and the count of
                // values that were not finite or too large for the fixed point.
                let row_sums =
                    [0, 8].map(|h| sums.wrapping_add((r0 + 16 * w + g + h) * logits_row(cn)));
                let poison = sums.wrapping_add(slot - 2);
                for nt in 0..MAX_CLASSES / 8 {
                    if 8 * nt < cn {
                        let b = ld_shared_u32(sw2_cu + (((8 * nt + g) * UNITS + 2 * t) * 2) as u32);
                        let mut d = [0.0f32; 4];
                        mma_m16n8k8_f32(&mut d, a, b);
                        for e in 0..4 {
                            let (r, c) = mma_c(l, e);
                            let (row, class) = ((16 * w + r) as u32, (8 * nt + c) as u32);
                            if row < mine as u32 && class < cn as u32 {
                                let v = d[e];
                                let (at, add) = if v.abs() < FIX_LIMIT {
                                    // In range: the conversion needs no saturation.
                                    let fixed = unsafe { (v * FIX).to_int_unchecked::<i64>() };
                                    (row_sums[e / 2].wrapping_add(class as usize), fixed)
                                } else {
                                    (poison, 1)
                                };
                                red_global_add_i64(at, add);
                            }
                        }
                    }
                }
            }
            // Elsewhere the loader warps fetch the next batch into the other buffer (last read
            // by the previous step's dW1) while the tile warps finish the forward.
            if !HOPPER && loader && k + 1 < steps {
                load_batch(1 - cur, step + 1);
            }
            // The tile warps meet the grid at the barrier and take the softmax. Elsewhere the
            // loader warps, once their copies are issued, skip to the block barrier after it;
            // on Hopper, whose loaders are free by then, the whole block meets the grid, so the
            // kernel needs no named barrier (with them, compute-sanitizer's racecheck reported
            // hazards across block-wide barriers; without them it reports none).
            let (mut l_sum, mut c_sum) = (0.0f32, 0.0f32);
            if !loader || HOPPER {
                // While the barrier waits, block 0 clears the slot of the next step's sums.
                if blk == 0 && !loader {
                    let next = unsafe { logits.add(((k as usize + 1) % LOGIT_SLOTS) * slot) };
                    let mut i = tid;
                    while i < slot {
                        unsafe { *next.add(i) = 0 };
                        i += THREADS / 2;
                    }
                }
                let sync = if HOPPER {
                    sync_threads
                } else {
                    bar_sync::<2, 128>
                };
                grid_barrier(grid_count, blocks * (k + 1), sync);
            }
            // Softmax cross-entropy, SPLIT threads per row (adjacent lanes), MAX_CLASSES / SPLIT
            // classes each; the gradient of the logits, scaled by 1/batch, goes to shared memory
            // in fp16. On Hopper all eight warps take part (none has a copy to issue there),
            // elsewhere the tile warps. Every such thread runs it (the
            // shuffles need whole warps); threads past the block's rows compute on the batch's
            // row 0 and store zeros. (Not on this block's row 0: a block with no rows has it
            // past the batch.)
            const SPLIT: usize = if HOPPER { 4 } else { 2 };
            const PER: usize = MAX_CLASSES / SPLIT;
            if HOPPER || !loader {
                let (r, side) = (tid / SPLIT, tid % SPLIT);
                let valid = r < mine;
                let row = unsafe { sums.add(if valid { r0 + r } else { 0 } * logits_row(cn)) };
                let c0 = PER * side;
                let mut q = [0i64; PER];
                // In pairs, 16 bytes a load: one load per sum took ~1,000 cycles to issue after
                // the grid barrier (3.24-3.27 against 3.18-3.20 ms/epoch). Pairs past the last
                // class are not loaded.
                for i in 0..PER / 2 {
                    let c = 2 * i;
                    if c0 + c < cn {
                        [q[c], q[c + 1]] = ld_global_cg_v2_i64(unsafe { row.add(c0 + c) });
                    }
                }
                let poisoned = ld_global_cg_i64(unsafe { sums.add(slot - 2) }) != 0;
                let label = if valid {
                    ld_shared_u32(sx + (r * lay.stride + label_offset(dim as usize)) as u32)
                        as usize
                } else {
                    0
                };
                let mut z = [f32::NEG_INFINITY; PER];
                for c in 0..PER {
                    if c0 + c < cn {
                        let v = q[c] as f32 / FIX + unsafe { *b2h.add(c0 + c) };
                        z[c] = if poisoned { f32::NAN } else { v };
                    }
                }
                // Arg-max: the first maximum, as a sequential scan would find it.
                let (mut max, mut arg) = (z[0], c0);
                for c in 1..PER {
                    if z[c] > max {
                        (max, arg) = (z[c], c0 + c);
                    }
                }
                let mut m = 1;
                while m < SPLIT {
                    let o_max = shfl_xor_f32(max, m as u32);
                    let o_arg = shfl_xor_u32(arg as u32, m as u32) as usize;
                    if o_max > max || (o_max == max && o_arg < arg) {
                        (max, arg) = (o_max, o_arg);
                    }
                    m *= 2;
                }
                let mut e = [0.0f32; PER];
                let (mut sum, mut zl) = (0.0, 0.0);
                for c in 0..PER {
                    if c0 + c < cn {
                        e[c] = ex2_approx_ftz((z[c] - max) * LOG2_E);
                        sum += e[c];
                    }
                    if c0 + c == label {
                        zl = z[c];
                    }
                }
                // The row's threads all get the same totals: IEEE addition is commutative.
                let mut m = 1;
                while m < SPLIT {
                    sum += shfl_xor_f32(sum, m as u32);
                    zl += shfl_xor_f32(zl, m as u32);
                    m *= 2;
                }
                if valid && side == 0 {
                    l_sum = lg2_approx_ftz(sum) * LN_2 - (zl - max);
                    c_sum = (arg == label) as u32 as f32;
                }
                let (inv, scale) = (1.0 / sum, 1.0 / batch as f32);
                let grad = |c: usize| {
                    if valid && c0 + c < cn {
                        (e[c] * inv - (c0 + c == label) as u32 as f32) * scale
                    } else {
                        0.0
                    }
                };
                if r < rows {
                    for c2 in 0..PER / 2 {
                        let c = 2 * c2;
                        st_shared_u32(
                            sdl + ((r * MAX_CLASSES + c0 + c) * 2) as u32,
                            pack_h2(grad(c), grad(c + 1)),
                        );
                    }
                }
            }
            let (l_w, c_w) = (warp_sum(l_sum), warp_sum(c_sum));
            if l == 0 {
                unsafe {
                    *loss_part.add(w) = l_w;
                    *loss_part.add(WARPS + w) = c_w;
                }
            }
            sync_threads();

            // dH = dlogits·W2[:, s] for the warp's tile (one k16 step over the classes), through
            // the ReLU: the H fragment has the same layout. db1's per-warp share by shuffles.
            let mut db1 = [0.0f32; 2];
            if tile_rows {
                let (mm, kk) = ldmatrix_lane(l, Operand::A, true);
                let a = ldmatrix_x4(sdl + ((16 * w + mm) * MAX_CLASSES * 2 + 2 * kk) as u32);
                let b0 = sw2_uc + ((g * MAX_CLASSES + 2 * t) * 2) as u32;
                let mut d = [0.0f32; 4];
                mma_m16n8k16_f32(&mut d, a, [ld_shared_u32(b0), ld_shared_u32(b0 + 16)]);
                for e in 0..4 {
                    d[e] = if hf[e] > 0.0 { round_h(d[e]) } else { 0.0 };
                    db1[e & 1] += d[e];
                }
                let row = (16 * w + g) as u32;
                st_shared_u32(
                    sdh + (row * UNITS as u32 + 2 * t as u32) * 2,
                    pack_h2(d[0], d[1]),
                );
                st_shared_u32(
                    sdh + ((row + 8) * UNITS as u32 + 2 * t as u32) * 2,
                    pack_h2(d[2], d[3]),
                );
                for m in 0..3 {
                    db1[0] += shfl_xor_f32(db1[0], 4 << m);
                    db1[1] += shfl_xor_f32(db1[1], 4 << m);
                }
            }
            if l < 4 {
                unsafe {
                    *db1_part.add(w * UNITS + 2 * t) = db1[0];
                    *db1_part.add(w * UNITS + 2 * t + 1) = db1[1];
                }
            }
            sync_threads();

            // The step's loss and correct count (slice 0 only, into the step's slot), then the
            // block's shares of the gradients for its partner (into its exchange area in global
            // memory, or on Hopper into the partner's shared memory): db1, dW2 and db2 (last
            // warp: it has one dW1 tile fewer than warp 0), dW1 (every warp, its input tiles w,
            // w+8, …).
            if slice == 0 && tid == 0 {
                let (mut ls, mut cs) = (0.0, 0.0);
                for i in 0..WARPS {
                    unsafe {
                        ls += *loss_part.add(i);
                        cs += *loss_part.add(WARPS + i);
                    }
                }
                red_global_add_f32(unsafe { loss.add(step as usize) }, ls / batch as f32);
                red_global_add_f32(unsafe { correct.add(step as usize) }, cs);
            }
            // The small shares: word j of dW2, db2 (`[lane][element]` each: a lane's four words
            // are one message), then db1; into the partner's shared memory on Hopper, each
            // message counted at its mbarrier, else into this block's exchange area.
            let xch_b = WARPS * TILES_PER_WARP * 2 * 32;
            let partner_bar = if HOPPER { peer_addr(mbar(2), peer) } else { 0 };
            let give = |j: usize, v: f32| {
                if HOPPER {
                    st_async_u32(
                        peer_addr(sxch + 4 * j as u32, peer),
                        v.to_bits(),
                        partner_bar,
                    );
                } else {
                    unsafe { *my_xch.add(xch_b + j) = v.to_bits() };
                }
            };
            let give4 = |j: usize, v: [f32; 4]| {
                if HOPPER {
                    let to = peer_addr(sxch + 4 * j as u32, peer);
                    st_async_v4(to, v.map(f32::to_bits), partner_bar);
                } else {
                    for e in 0..4 {
                        give(j + e, v[e]);
                    }
                }
            };
            let mut db1 = 0.0;
            if tid < UNITS {
                for i in 0..WARPS {
                    db1 += unsafe { *db1_part.add(i * UNITS + tid) };
                }
                give(256 + tid, db1);
            }
            let ksteps = rows / 16;
            if w == WARPS - 1 {
                let (mut dw, mut db) = ([0.0f32; 4], [0.0f32; 4]);
                let hb = unit_frags(sh, rows);
                let (mm, kk) = ldmatrix_lane(l, Operand::A, false);
                for ks in 0..TILES {
                    if ks < ksteps {
                        let a = ldmatrix_x4_trans(
                            sdl + (((16 * ks + kk) * MAX_CLASSES + mm) * 2) as u32,
                        );
                        mma_m16n8k16_f32(&mut dw, a, hb[ks]);
                        mma_m16n8k16_f32(&mut db, a, ONES);
                    }
                }
                give4(4 * l, dw);
                give4(128 + 4 * l, db);
                unsafe {
                    *(own.add(4 * l) as *mut [f32; 4]) = dw;
                    *(own.add(128 + 4 * l) as *mut [f32; 4]) = db;
                }
            }
            let bf = unit_frags(sdh, rows);
            let (mm, kk) = ldmatrix_lane(l, Operand::A, false);
            let a_at = |ks: usize, mt: usize| {
                sx + ((16 * ks + kk) * lay.stride + (16 * mt + mm) * 2) as u32
            };
            let acc = if w + WARPS * (TILES_PER_WARP - 1) < ktiles {
                dw1_tiles::<A, TILES_PER_WARP>(a_at, w, ktiles, ksteps, &bf)
            } else {
                dw1_tiles::<A, { TILES_PER_WARP - 1 }>(a_at, w, ktiles, ksteps, &bf)
            };
            // dW1 as fp16 pairs (the layered path keeps weight gradients in fp16 too), word
            // `[tile][lane][pair]`: a lane's two pairs are one message, and each warp writes 256
            // contiguous bytes. On Hopper they go into the partner's fp16 W1 copy, which is free
            // from its forward (before the grid barrier) until its update (16·dim bytes of
            // shares, 16·dim or more of W1).
            let xch_w1 = |mt: usize, p: usize| (mt * 32 + l) * 2 + p;
            for i in 0..TILES_PER_WARP {
                let mt = w + WARPS * i;
                if mt < ktiles {
                    let pairs = acc[i].pairs();
                    if HOPPER {
                        let to = peer_addr(sw1 + 4 * xch_w1(mt, 0) as u32, peer);
                        st_async_v2(to, pairs, partner_bar);
                    } else {
                        for p in 0..2 {
                            unsafe { *my_xch.add(xch_w1(mt, p)) = pairs[p] };
                        }
                    }
                }
            }
            // On Hopper, the partner's shares have all arrived once their bytes have (no barrier
            // of the pair: the grid barrier already orders the reuse of the buffers); the next
            // step's are announced at once (they follow the next grid barrier).
            if HOPPER {
                mbar_wait::<true>(mbar(2), k % 2);
                if tid == 0 && k + 1 < steps {
                    mbar_expect(mbar(2), share_bytes);
                }
            } else {
                grid_barrier(pair_count, PARTS as u32 * (k + 1), sync_threads);
            }

            // Both blocks of the slice add the two shares (the same sums: IEEE addition is
            // commutative) and take the same SGD step. The partner's shares in global memory
            // are all requested before any is used.
            let theirs = |i: usize| ld_global_cg_u32(unsafe { partner_xch.add(i) });
            let take = |j: usize| {
                f32::from_bits(if HOPPER {
                    ld_shared_u32(sxch + 4 * j as u32)
                } else {
                    theirs(xch_b + j)
                })
            };
            let mut tw1 = [[0u32; 2]; TILES_PER_WARP];
            for i in 0..TILES_PER_WARP {
                let mt = w + WARPS * i;
                if mt < ktiles {
                    for p in 0..2 {
                        tw1[i][p] = if HOPPER {
                            ld_shared_u32(sw1 + 4 * xch_w1(mt, p) as u32)
                        } else {
                            theirs(xch_w1(mt, p))
                        };
                    }
                }
            }
            // On Hopper the new weights overwrite the shares just read, and warp 7's shares of
            // dW2 and db2 (`own`) must be visible to warps 4-6, which update W2 and b2 with them.
            // After this barrier the batch buffer is free (dW1 was its last reader): warp 1,
            // which has a W1 tile fewer to update than warp 0, fetches the batch after next
            // into it. Issued at the start of the next step instead, by a warp that then joined
            // the forward late, it made the epoch slower (2.548-2.566 against 2.532-2.550 ms).
            if HOPPER {
                sync_threads();
                if tid == 32 && k + 2 < steps {
                    bulk_batch(cur, step + 2);
                }
            }
            // W2 and b2 are updated by warps 4-7, one element of the dW2 (and db2) fragment
            // per thread, after their W1 tiles (warp 0 has one tile more). Warp 7, which
            // computes the fragments, updating all of them itself ended ~450 cycles after the
            // other warps, which waited for it at the step's last barrier (3.30-3.34 ms/epoch
            // against 3.24-3.27).
            let j = tid % 128;
            let (c2, j2) = mma_c(j / 4, j % 4);
            let w2_thread = tid >= 128 && c2 < cn;
            let (mut gw2, mut gb2, mut tdb1) = (0.0f32, 0.0f32, 0.0);
            if w2_thread {
                // Both sides add the same two shares (IEEE addition is commutative).
                unsafe {
                    gw2 = *own.add(j) + take(j);
                    gb2 = *own.add(128 + j) + take(128 + j);
                }
            }
            if tid < UNITS {
                tdb1 = take(256 + tid);
            }
            for i in 0..TILES_PER_WARP {
                let mt = w + WARPS * i;
                if mt < ktiles {
                    let share = acc[i].pairs();
                    for p in 0..2 {
                        // Elements 2p and 2p + 1: one input, two adjacent units, one word of
                        // W1. Both sides add the same fp16 shares (IEEE addition commutes).
                        let g = A::add_pairs(share[p], tw1[i][p]);
                        let mut nw = [0.0; 2];
                        for h in 0..2 {
                            let e = 2 * p + h;
                            nw[h] = sgd(&mut wm[i][e], &mut wv[i][e], g[h], lr, momentum);
                        }
                        let (r, c) = mma_c(l, 2 * p);
                        st_shared_u32(w1_shared(mt, r, c), pack_h2(nw[0], nw[1]));
                    }
                }
            }
            if tid < UNITS {
                let g = db1 + tdb1;
                unsafe {
                    *b1h.add(tid) =
                        round_h(sgd(&mut *b1m.add(tid), &mut *b1v.add(tid), g, lr, momentum))
                };
            }
            if w2_thread {
                let i = c2 * UNITS + j2;
                let nw = unsafe { sgd(&mut *w2m.add(i), &mut *w2v.add(i), gw2, lr, momentum) };
                set_w2h(c2, j2, nw);
                if j2 == 0 {
                    unsafe {
                        *b2h.add(c2) =
                            round_h(sgd(&mut *b2m.add(c2), &mut *b2v.add(c2), gb2, lr, momentum))
                    };
                }
            }
            sync_threads();
        }

        // Parameters out (one block of each slice): fp32 master, momentum and the fp16 copy
        // the layered kernels read.
        if part != 0 {
            return;
        }
        let put = |k: usize, m: f32, v: f32| unsafe {
            *w32.add(k) = m;
            *vel.add(k) = v;
            *w16.add(k) = f2h(m);
        };
        for i in 0..TILES_PER_WARP {
            let mt = w + WARPS * i;
            if mt < ktiles {
                for e in 0..4 {
                    let (r, c) = mma_c(l, e);
                    put(w1_index(mt, r, c), wm[i][e], wv[i][e]);
                }
            }
        }
        if tid < cn * UNITS {
            let (c, j) = (tid / UNITS, tid % UNITS);
            let k = (o_w2 + c as u32 * hidden + j0) as usize + j;
            put(k, unsafe { *w2m.add(tid) }, unsafe { *w2v.add(tid) });
        }
        if tid < UNITS {
            put(
                (o_b1 + j0) as usize + tid,
                unsafe { *b1m.add(tid) },
                unsafe { *b1v.add(tid) },
            );
        }
        if blk == 0 && tid < cn {
            put(o_b2 as usize + tid, unsafe { *b2m.add(tid) }, unsafe {
                *b2v.add(tid)
            });
        }
    }

    /// Writes rows `0..count` of an epoch's shuffled training set (`n` examples of `dim` fp16
    /// features, u8 labels) in the layout the training kernel copies: row `i` is example
    /// `permute(i, n, seed)`, its features, its label as a u32 at [`label_offset`] and zeros to
    /// [`row_stride`]. Each block's rows of a step are then one run of memory, which one bulk
    /// copy fetches, labels included. A warp per row (grid-stride, so any grid covers them), 16
    /// bytes a lane and access; `dim` is a multiple of 16, as the training kernel needs (then
    /// the stride is the features and one 16-byte chunk for the label).
    #[unsafe(export_name = "mlp1_persistent_shuffle")]
    unsafe extern "ptx-kernel" fn shuffle(
        x: *const u16,
        y: *const u8,
        n: u32,
        dim: u32,
        seed: u32,
        count: u32,
        out: *mut u8,
    ) {
        #[repr(C, align(16))]
        #[derive(Clone, Copy)]
        struct Chunk([u32; 4]);
        let chunks = dim as usize / 8;
        let mut row = block_x() * WARPS as u32 + warp_id();
        while row < count {
            let s = permute(row, n, seed) as usize;
            let from = unsafe { x.add(s * dim as usize) } as *const Chunk;
            let to = unsafe { out.add(row as usize * row_stride(dim as usize)) } as *mut Chunk;
            let mut c = lane() as usize;
            while c <= chunks {
                let v = if c < chunks {
                    unsafe { *from.add(c) }
                } else {
                    Chunk([unsafe { *y.add(s) } as u32, 0, 0, 0])
                };
                unsafe { *to.add(c) = v };
                c += 32;
            }
            row += grid_dim_x() * WARPS as u32;
        }
    }

    macro_rules! export {
        ($name:literal, $acc:ty) => {
            const _: () = {
                #[unsafe(export_name = $name)]
                unsafe extern "ptx-kernel" fn kernel(args: TrainArgs) {
                    unsafe { train::<$acc>(args) }
                }
            };
        };
    }
    export!("mlp1_persistent_f16", [u32; 2]);
    export!("mlp1_persistent_f32", [f32; 4]);
}
