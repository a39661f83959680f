//! An epoch's rows in the order its steps take them, shuffled on the GPU before the epoch: what
//! the one-launch engines (the persistent and the phased kernels) read their batches from.
use crate::cuda::{Arena, Buf, Gpu, ParamBlock, PushKernelArg};
use crate::kernels;
use anyhow::{Result, ensure};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchConfig};
use gpu::params::PersistentShuffle;
use gpu::persistent::{THREADS, row_stride};
use std::sync::Arc;

/// Two epochs' rows in shuffled order (see [`EpochRows::shuffle`]): one trains while the next
/// epoch's are written.
pub struct EpochRows {
    shuffle: CudaFunction,
    /// Rows a step, input width, rows of an epoch (steps × batch).
    batch: u32,
    dim: u32,
    epoch_rows: u32,
    batches: [Buf<u8>; 2],
    /// The stream that shuffles ahead (of the lowest priority; the GPU's stream has the
    /// highest, so where both have blocks waiting its launches take SMs first); an event per
    /// buffer recorded after a shuffle into it, and one recorded on the GPU's stream where a
    /// shuffle ahead may start.
    side: Arc<CudaStream>,
    shuffled: [CudaEvent; 2],
    queued: CudaEvent,
}

/// Where on the GPU's stream a shuffle ahead may start ([`EpochRows::mark_shuffle_ahead`]).
#[must_use = "a shuffle ahead takes the mark"]
pub struct AheadMark(());

impl Drop for EpochRows {
    /// A shuffle ahead may still run (an epoch that failed returns early): it writes buffers
    /// of the arena, which outlives `self`, so it must end first.
    fn drop(&mut self) {
        let _ = self.side.synchronize();
    }
}

impl EpochRows {
    /// Carves two epochs' rows of `steps` steps of `batch` rows of `dim` inputs from `arena`.
    pub fn new(
        gpu: &Gpu,
        arena: &mut Arena,
        (batch, steps): (usize, usize),
        dim: usize,
    ) -> Result<EpochRows> {
        let epoch_rows = steps * batch;
        let event = || {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        };
        let bytes = epoch_rows * row_stride(dim);
        Ok(EpochRows {
            shuffle: gpu.function(kernels::PERSISTENT_SHUFFLE)?,
            batch: batch as u32,
            dim: dim as u32,
            epoch_rows: epoch_rows as u32,
            batches: [arena.alloc(bytes)?, arena.alloc(bytes)?],
            side: gpu.ctx.new_stream()?,
            shuffled: [event()?, event()?],
            queued: event()?,
        })
    }

    /// Rows a step.
    pub fn batch(&self) -> usize {
        self.batch as usize
    }

    /// Bytes of a row: [`row_stride`] of the input width, the label after the features.
    pub fn row_bytes(&self) -> usize {
        row_stride(self.dim as usize)
    }

    /// Marks where on the GPU's stream a shuffle ahead may start writing: after the work
    /// queued so far, the last launch that reads its buffer and the uploads of the set among
    /// it. Called before the training launch that the shuffle is to run beside is queued.
    pub fn mark_shuffle_ahead(&self, gpu: &Gpu) -> Result<AheadMark> {
        self.queued.record(&gpu.stream)?;
        Ok(AheadMark(()))
    }

    /// Queues the shuffle of an epoch (keyed by `seed`) of the training set `x`/`y` (`n`
    /// examples) into buffer `buf`: its rows in the order the steps take them, each with its
    /// label, so that a block's rows of a step are one run of memory (the kernel
    /// `mlp1_persistent_shuffle`). Queued on the GPU's stream, or given an `ahead` mark on a
    /// stream of its own, after the point the mark was taken at. A shuffle ahead is queued
    /// after the training launch it runs beside: queued before it on an idle GPU, its blocks
    /// take SMs first, and a launch that needs nearly every SM waits for the whole shuffle. It
    /// is held to a quarter of the SMs because it shares the memory system with that launch:
    /// spread over every SM the launch leaves idle it slows the epoch, while a grid too small
    /// outlasts the epoch (`docs/persistent.md` has the measurements).
    /// [`EpochRows::ready`] waits for the shuffle of its buffer either way. Refuses a set of
    /// fewer examples than an epoch's rows: the permutation is of the whole set.
    pub fn shuffle(
        &self,
        gpu: &Gpu,
        (x, y, n): (u64, u64, usize),
        seed: u32,
        buf: usize,
        ahead: Option<AheadMark>,
    ) -> Result<()> {
        ensure!(
            n >= self.epoch_rows as usize,
            "an epoch takes {} rows, the training set has {n}",
            self.epoch_rows
        );
        let (rows, threads) = (self.epoch_rows, THREADS as u32);
        let sms = gpu.sm_count();
        let ahead = ahead.is_some();
        let (stream, blocks) = if ahead {
            self.side.wait(&self.queued)?;
            (&self.side, sms.div_ceil(4))
        } else {
            // After any shuffle ahead into the same buffer.
            gpu.stream.wait(&self.shuffled[buf])?;
            (&gpu.stream, 4 * sms)
        };
        let p = ParamBlock(PersistentShuffle {
            x,
            y,
            out: self.batches[buf].ptr,
            n: n as u32,
            dim: self.dim,
            seed,
            count: rows,
        });
        let mut l = stream.launch_builder(&self.shuffle);
        l.arg(&p);
        let cfg = LaunchConfig {
            grid_dim: (blocks.min(rows.div_ceil(threads / 32)).max(1), 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel's one parameter is a `PersistentShuffle`; the buffers live as long
        // as `self` and the caller's training set, which outlive the queued work.
        unsafe { l.launch(cfg) }?;
        if ahead {
            self.shuffled[buf].record(stream)?;
        }
        Ok(())
    }

    /// Makes the GPU's stream wait for the shuffle into buffer `buf` and returns its address,
    /// for a launch of steps `step0..step0 + steps`; refuses steps past the epoch's rows.
    pub fn ready(&self, gpu: &Gpu, buf: usize, (step0, steps): (usize, usize)) -> Result<u64> {
        let epoch_steps = (self.epoch_rows / self.batch) as usize;
        ensure!(
            step0 + steps <= epoch_steps,
            "steps {step0}..{} are past the epoch's {epoch_steps}",
            step0 + steps
        );
        gpu.stream.wait(&self.shuffled[buf])?;
        Ok(self.batches[buf].ptr)
    }
}
