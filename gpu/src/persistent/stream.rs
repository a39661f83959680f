//! The streamed kernels' batch: no whole batch in shared memory, but a ring of `stages` chunk
//! buffers ([`Smem::streamed`]) through which the block's rows pass in [`CHUNK`]-input chunks,
//! twice a step: in order for the forward, then again for dW1 (which reads the inputs once
//! more). Each chunk is one run of `rows × CHUNK` fp16 values, at [`CHUNK_STRIDE`] bytes a row
//! (the forward reads it row by row, dW1 transposed, both conflict-free).
//!
//! A step's sequence is the forward's chunks `0..n`, then dW1's `0..n` (n = ⌈dim / CHUNK⌉), and
//! the launch's is its steps' in turn. Every thread loads its pieces (16 bytes) of the chunk
//! `stages − 1` places ahead of the one the warps read:
//! - sm_80 and later: `cp.async`, one group per chunk, so that waiting for all but the newest
//!   `stages − 2` groups is waiting for the chunk about to be read;
//! - sm_75 (no `cp.async`, two stages): through registers, loaded before the warps read a chunk
//!   and stored into the next stage after it.
//!
//! [`Ring::next`] is the one place a chunk changes hands: every thread of the block calls it
//! for every chunk, in the same order, and it holds the block barrier after which the chunk is
//! readable and the stage read before it is free. The chunks of the next step load during this
//! step's dW1 and update, those of dW1 during the forward's last chunks and the grid barrier.
use super::context::Block;
use super::*;
use crate::arch::*;

/// 16-byte pieces per thread and chunk, at most: a chunk's rows hold `CHUNK / 8` pieces each,
/// and a block streams half the batch or (the offchip kernel) the whole.
const PIECES: usize = MAX_BATCH * (CHUNK / 8) / THREADS;
/// Rows apart of a thread's pieces: thread `t` loads piece `t % 16` of rows `t / 16 + ROWS_APART·j`.
const ROWS_APART: usize = THREADS / (CHUNK / 8);
const _: () = assert!(PIECES * ROWS_APART == MAX_BATCH);
/// sm_75's pieces staged in registers: its streamed kernel holds half the batch.
#[cfg(not(target_feature = "sm_80"))]
const STAGED: usize = PIECES / PAIR;

/// Where the stream stands: the next chunk to load and the stages of the next load and read.
pub struct Ring {
    /// The launch's step of the next chunk to load, and its place in that step's sequence
    /// (`0..2n`: the forward's chunks, then dW1's).
    step: u32,
    place: u32,
    /// The stage the next [`Ring::next`] returns.
    read: u32,
    /// sm_80+: the stage the next chunk loads into (on sm_75 the staged chunk is stored into
    /// the stage read next).
    #[cfg(target_feature = "sm_80")]
    load: u32,
    /// sm_75: the next chunk's pieces, loaded and not yet stored.
    #[cfg(not(target_feature = "sm_80"))]
    staged: [[u32; 4]; STAGED],
}

/// Chunks per pass over a row.
#[inline(always)]
pub fn chunks(b: &Block) -> usize {
    b.ktiles.div_ceil(CHUNK / 16)
}

impl Ring {
    /// The ring at the launch's first chunk, the chunks ahead of it already loading. In the
    /// whole-batch kernels (`fed` false) an idle ring that no phase calls.
    #[inline(always)]
    pub fn start(b: &Block, fed: bool) -> Ring {
        let mut ring = Ring {
            step: 0,
            place: 0,
            read: 0,
            #[cfg(target_feature = "sm_80")]
            load: 0,
            #[cfg(not(target_feature = "sm_80"))]
            staged: [[0; 4]; STAGED],
        };
        if fed {
            for _ in 0..ring.ahead(b) {
                ring.load_next(b);
            }
        }
        ring
    }

    /// Chunks loading ahead of the one read: `stages − 1`.
    #[inline(always)]
    fn ahead(&self, b: &Block) -> u32 {
        b.args.stages - 1
    }

    /// The `.shared` address of the next chunk in sequence, once every thread's pieces of it
    /// have landed; then the load of the chunk `stages − 1` places further into the stage the
    /// previous chunk was read from. Every thread of the block calls it, for every chunk.
    #[inline(always)]
    pub fn next(&mut self, b: &Block) -> u32 {
        #[cfg(target_feature = "sm_80")]
        wait_all_but(self.ahead(b) - 1);
        #[cfg(not(target_feature = "sm_80"))]
        self.store_staged(b);
        sync_threads();
        let at = b.batch_buffer(self.read as usize);
        self.read = self.advance(b, self.read);
        self.load_next(b);
        at
    }

    #[inline(always)]
    fn advance(&self, b: &Block, stage: u32) -> u32 {
        if stage + 1 == b.args.stages {
            0
        } else {
            stage + 1
        }
    }

    /// Starts loading the next chunk of the sequence (on sm_80+ always closing a group, empty
    /// past the launch's last step, so that each chunk is one group), and moves past it.
    #[inline(always)]
    fn load_next(&mut self, b: &Block) {
        let n = chunks(b) as u32;
        if self.step < b.args.steps {
            let c = (if self.place < n {
                self.place
            } else {
                self.place - n
            }) as usize;
            self.load_chunk(b, c);
        }
        #[cfg(target_feature = "sm_80")]
        {
            cp_async_commit();
            self.load = self.advance(b, self.load);
        }
        self.place += 1;
        if self.place == 2 * n {
            (self.step, self.place) = (self.step + 1, 0);
        }
    }

    /// The thread's pieces of chunk `c` of step `self.step`: 16-byte piece `p` of each of its
    /// rows, where the chunk has that piece (the last chunk of a row may be partial; `dim` is a
    /// multiple of 16).
    #[inline(always)]
    fn load_chunk(&mut self, b: &Block, c: usize) {
        let (p, first) = (b.tid % (CHUNK / 8), b.tid / (CHUNK / 8));
        let index = (b.args.step0 + self.step) as usize;
        let row0 = index * b.args.batch as usize + b.r0;
        let src = unsafe { (b.args.batches as *const u8).add(row0 * b.lay.stride + 2 * CHUNK * c) };
        let pieces = (b.layer.dim as usize - CHUNK * c).min(CHUNK) / 8;
        #[cfg(target_feature = "sm_80")]
        const LOADS: usize = PIECES;
        #[cfg(not(target_feature = "sm_80"))]
        const LOADS: usize = STAGED;
        for j in 0..LOADS {
            let r = first + ROWS_APART * j;
            // The kernel's most rows are a constant, so no code is generated for the loads a
            // block of half the batch never makes (inlined at each of the ring's call sites,
            // they would cost the streamed kernel 5% of its epoch).
            if ROWS_APART * j < b.max_rows() && r < b.mine && p < pieces {
                let from = unsafe { src.add(r * b.lay.stride + 16 * p) };
                #[cfg(target_feature = "sm_80")]
                cp_async_16_whole(piece(b, self.load, r, p), from);
                #[cfg(not(target_feature = "sm_80"))]
                {
                    self.staged[j] = ld_global_v4(from);
                }
            }
        }
    }

    /// sm_75: stores the staged pieces of the chunk about to be read into its stage, last read
    /// two chunks ago (before the previous [`Ring::next`]'s block barrier). Pieces past a
    /// partial chunk's end store stale values there, which no product reads.
    #[cfg(not(target_feature = "sm_80"))]
    #[inline(always)]
    fn store_staged(&self, b: &Block) {
        let (p, first) = (b.tid % (CHUNK / 8), b.tid / (CHUNK / 8));
        for j in 0..STAGED {
            let r = first + ROWS_APART * j;
            if r < b.mine {
                st_shared_v4(piece(b, self.read, r, p), self.staged[j]);
            }
        }
    }
}

/// The `.shared` address of piece `p` of row `r` in stage `stage`.
#[inline(always)]
fn piece(b: &Block, stage: u32, r: usize, p: usize) -> u32 {
    b.batch_buffer(stage as usize) + (r * CHUNK_STRIDE + 16 * p) as u32
}

/// Waits until at most `n` of the thread's `cp.async` groups are in flight (`n` <
/// [`MAX_STAGES`] − 1); the instruction takes the count as an immediate.
#[cfg(target_feature = "sm_80")]
#[inline(always)]
fn wait_all_but(n: u32) {
    match n {
        0 => cp_async_wait::<0>(),
        1 => cp_async_wait::<1>(),
        2 => cp_async_wait::<2>(),
        3 => cp_async_wait::<3>(),
        _ => cp_async_wait::<4>(),
    }
}
