//! Fetching the batch. A block's rows of a step are one run of the shuffled set (rows, labels
//! and stride as the buffer holds them), copied whole into a buffer:
//! - with two buffers (Hopper), while the step before reads the other: by one bulk copy of the
//!   copy engine, which reports its bytes at the buffer's `mbarrier`, issued by one thread for
//!   the batch after next as soon as the update frees its buffer;
//! - with one buffer (where two do not fit, as on an A100 at MNIST's size), into it once dW1 has
//!   read it, during the exchange and the update: by the bulk copy on Hopper, elsewhere by every
//!   thread's `cp.async` pieces; on sm_75, which has no `cp.async`, every thread loads its
//!   pieces into registers ([`Copies`]) then and stores them before the next step's forward.
use super::context::{Block, Step};
use super::*;
use crate::arch::*;

/// The thread that issues the bulk copies: warp 1, which has a W1 tile fewer to update than
/// warp 0 when it issues the copy after the update's barrier.
const COPY_ISSUER: usize = 32;

/// The step's batch buffer.
#[inline(always)]
fn buffer(b: &Block, s: &Step) -> usize {
    b.step_buffer(s.k)
}

/// Bytes of the block's rows of a step.
#[inline(always)]
fn batch_bytes(b: &Block) -> usize {
    b.mine * b.lay.stride
}

/// Where the block's rows of step `index` of the epoch start in the shuffled set.
#[inline(always)]
fn batch_src(b: &Block, index: u32) -> *const u8 {
    let batches = b.args.batches as *const u8;
    unsafe { batches.add((index as usize * b.args.batch as usize + b.r0) * b.lay.stride) }
}

/// 16-byte pieces a thread copies through registers at most (sm_75): every thread's share of
/// a quarter of the batch at [`MAX_DIM`], the one buffer of the kernel sm_75 has.
#[cfg(not(target_feature = "sm_80"))]
const STAGED: usize = (tiles(MAX_PARTS) * 16 * row_stride(MAX_DIM) / 16).div_ceil(THREADS);

/// A thread's pieces of a batch between their issue and the step that reads them (one buffer,
/// not on Hopper): `cp.async` groups on sm_80 and later, which land in shared memory by themselves;
/// on sm_75, which has no `cp.async`, the pieces loaded into registers, stored into the buffer
/// when the step waits for them (the one-buffer kernel: its buffer is free from dW1 on).
pub struct Copies {
    #[cfg(not(target_feature = "sm_80"))]
    staged: [[u32; 4]; STAGED],
}

impl Copies {
    /// No copies issued yet (and none ever in the streamed kernels, whose ring loads the
    /// batch).
    #[inline(always)]
    pub fn idle() -> Copies {
        Copies {
            #[cfg(not(target_feature = "sm_80"))]
            staged: [[0; 4]; STAGED],
        }
    }

    /// The thread's pieces of step `index`'s rows, for the one buffer: every [`THREADS`]th
    /// 16-byte piece, by `cp.async`.
    #[cfg(target_feature = "sm_80")]
    #[inline(always)]
    fn issue(&mut self, b: &Block, index: u32) {
        let (from, to) = (batch_src(b, index), b.batch_buffer(0));
        let mut i = 16 * b.tid;
        while i < batch_bytes(b) {
            cp_async_16(to + i as u32, unsafe { from.add(i) }, 16);
            i += 16 * THREADS;
        }
        cp_async_commit();
    }

    /// The thread's pieces of step `index`'s rows, for the one buffer: every [`THREADS`]th
    /// piece, loaded into registers.
    #[cfg(not(target_feature = "sm_80"))]
    #[inline(always)]
    fn issue(&mut self, b: &Block, index: u32) {
        let from = batch_src(b, index);
        for j in 0..STAGED {
            let i = 16 * (b.tid + THREADS * j);
            // Every piece is written (zeros past the rows), so no piece of the batch before
            // stays live in these registers from its store to here.
            self.staged[j] = if i < batch_bytes(b) {
                ld_global_v4(unsafe { from.add(i) })
            } else {
                [0; 4]
            };
        }
    }

    /// Waits until the thread's pieces are in shared memory.
    #[cfg(target_feature = "sm_80")]
    #[inline(always)]
    fn land(&self, _b: &Block) {
        cp_async_wait::<0>();
    }

    /// Stores the staged pieces into the one buffer, which dW1 has done with and no warp reads
    /// until the block barrier after this.
    #[cfg(not(target_feature = "sm_80"))]
    #[inline(always)]
    fn land(&self, b: &Block) {
        const { assert!(tiles(MAX_PARTS) * 16 * row_stride(MAX_DIM) <= 16 * THREADS * STAGED) };
        let to = b.batch_buffer(0);
        for j in 0..STAGED {
            let i = 16 * (b.tid + THREADS * j);
            if i < batch_bytes(b) {
                st_shared_v4(to + i as u32, self.staged[j]);
            }
        }
    }
}

/// One bulk copy of step `index`'s rows into buffer `buf`, announced at the buffer's mbarrier
/// (a block without rows announces nothing), so its phase completes once the rows have landed.
#[inline(always)]
fn bulk_batch(b: &Block, buf: usize, index: u32) {
    let bytes = batch_bytes(b) as u32;
    mbar_expect(b.mbar(buf), bytes);
    if bytes > 0 {
        bulk_copy(b.batch_buffer(buf), batch_src(b, index), bytes, b.mbar(buf));
    }
}

/// Before the first step: the first batch (on Hopper with two buffers the first two, after
/// the buffers' mbarriers are initialised).
#[inline(always)]
pub fn start(b: &Block) -> Copies {
    let (step0, steps) = (b.args.step0, b.args.steps);
    let mut copies = Copies::idle();
    if HOPPER {
        if b.tid == 0 {
            for i in 0..2 {
                mbar_init(b.mbar(i), 1);
            }
        }
        // Issued after the block barrier, not straight after the inits (see `exchange::open`).
        sync_threads();
        if b.tid == COPY_ISSUER {
            bulk_batch(b, 0, step0);
            if steps > 1 && !b.single() {
                bulk_batch(b, 1, step0 + 1);
            }
        }
    } else {
        copies.issue(b, step0);
    }
    copies
}

/// Waits until the step's rows have landed. On Hopper the buffer's mbarrier suffices, whose
/// phase turns each time the buffer fills (every other step with two buffers, every step with
/// one): the next fill is issued only after a block barrier that every thread reaches past
/// this wait, so no thread waits more than a phase behind.
#[inline(always)]
pub fn wait(b: &Block, s: &Step, copies: &Copies) {
    if HOPPER {
        let fills = if b.single() { s.k } else { s.k / 2 };
        mbar_wait::<false>(b.mbar(buffer(b, s)), fills % 2);
    } else {
        copies.land(b);
        sync_threads();
    }
}

/// After `exchange::receive`'s block barrier, which frees the step's buffer (dW1 was its last
/// reader): on Hopper the bulk copy of the batch after next into it (of the next batch with one
/// buffer); elsewhere, with one buffer, every thread's copies of the next batch.
#[inline(always)]
pub fn after_dw1(b: &Block, s: &Step, copies: &mut Copies) {
    let ahead = if b.single() { 1 } else { 2 };
    let more = s.k + ahead < b.args.steps;
    if HOPPER {
        if b.tid == COPY_ISSUER && more {
            bulk_batch(b, buffer(b, s), s.index + ahead);
        }
    } else if more {
        copies.issue(b, s.index + 1);
    }
}
