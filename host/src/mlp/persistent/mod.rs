//! Training by the persistent kernel (`gpu::persistent`): one launch runs many steps of an MLP
//! of one hidden layer (or two to four: the layer engine's `deep` rows), with a grid barrier
//! and a barrier of each slice's blocks per step instead of a dozen kernels.
use crate::cuda::{
    Arena, Buf, Gpu, ParamBlock, PushKernelArg, arg, attribute, cluster_attribute, dptr,
};
use crate::kernels;
use crate::mlp::model::Mlp;
use crate::mlp::params::param_layout;
use anyhow::{Result, ensure};
use cudarc::driver::sys::{CUevent_flags, CUlaunchAttributeID};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig};
use gpu::gemm::Accum;
use gpu::params::PersistentShuffle;
use gpu::persistent::{EXCHANGE, LOGIT_SLOTS, MAX_LAYERS, Scratch, THREADS, logits_slot};
use gpu::persistent::{Params, Widths, counters, trace};
use std::sync::Arc;

pub mod phases;
mod support;
use support::layer_widths_refused;
pub use support::{Feed, Support, describe_variants, support, support_sliced};
use support::{cluster_size, function, grid_config};

pub struct Persistent {
    f: CudaFunction,
    feed: Feed,
    shuffle: CudaFunction,
    blocks: u32,
    /// Blocks per cluster (the Hopper build; 0 elsewhere: no clusters).
    cluster: u32,
    batch: u32,
    /// Input width; rows of an epoch (steps × batch).
    dim: u32,
    epoch_rows: u32,
    /// Bytes of shared memory a block.
    smem_bytes: usize,
    /// Fixed-point logit sums, one slot per step in rotation.
    logits: Buf<i64>,
    /// Each block's shares of each hidden layer's gradients, for the other blocks of its slice
    /// (empty where a slice is a cluster, whose blocks write them straight into each other's
    /// shared memory).
    exchange: Buf<u32>,
    /// Arrival counts of the grid barrier, of each layer's slice barriers (unused where slices
    /// are clusters) and of the layer engine's meetings of each part's blocks ([`counters`]);
    /// zeroed before each launch.
    counters: Buf<u32>,
    /// What the blocks of the layer engine share ([`Scratch`]; empty with one layer): each
    /// later layer's input and output gradient (flagged lines up to 128 units) and its W's two
    /// copies; zeroed before each launch.
    scratch: Buf<u32>,
    /// Two epochs' rows in shuffled order (see [`Persistent::shuffle`]): one trains while the
    /// next epoch's are written.
    batches: [Buf<u8>; 2],
    /// The stream that shuffles ahead (of the lowest priority; the GPU's stream has the
    /// highest, so where both have blocks waiting its launches take SMs first); an event per
    /// buffer recorded after a shuffle into it, and one recorded on the GPU's stream where a
    /// shuffle ahead may start.
    side: Arc<CudaStream>,
    shuffled: [CudaEvent; 2],
    queued: CudaEvent,
    /// The phase trace of an epoch ([`Persistent::record_phases`]), where asked for.
    trace: Option<CudaSlice<u64>>,
}

/// Where on the GPU's stream a shuffle ahead may start ([`Persistent::mark_shuffle_ahead`]).
#[must_use = "a shuffle ahead takes the mark"]
pub struct AheadMark(());

impl Drop for Persistent {
    /// A shuffle ahead may still run (an epoch that failed returns early): it writes buffers
    /// of the arena, which outlives `self`, so it must end first.
    fn drop(&mut self) {
        let _ = self.side.synchronize();
    }
}

impl Persistent {
    /// Carves the kernel's buffers from `arena`, for epochs of `steps` steps, the batch fed as
    /// `feed`; check [`support`] first (it says which feed this GPU takes; another that the PTX
    /// has and the shared memory holds runs too, if the GPU keeps all its blocks resident: else
    /// the launch fails).
    pub fn new(
        gpu: &Gpu,
        arena: &mut Arena,
        sizes: &[usize],
        (batch, steps): (usize, usize),
        acc: Accum,
        feed: Feed,
    ) -> Result<Persistent> {
        let target = gpu.ptx.target();
        let layers = feed.variant.layers;
        ensure!(
            sizes.len() == layers + 2,
            "{feed:?} trains {layers} hidden layers, not {}",
            sizes.len() - 2
        );
        // The kernel assumes what the layer engine's refusals check.
        if layers > 1
            && let Some(why) = layer_widths_refused(&sizes[1..=layers], feed.variant.inner)
        {
            anyhow::bail!("{feed:?} does not train {sizes:?}: {why}");
        }
        let (smem, smem_bytes) = (feed.smem(batch, sizes[0]), feed.smem_bytes(batch, sizes));
        ensure!(
            feed.runs_with(target, gpu.max_smem_optin(), batch, sizes[0])
                && smem_bytes <= gpu.max_smem_optin(),
            "{feed:?} does not run on {} with {}",
            gpu.describe_ptx(),
            gpu.describe_smem_limit()
        );
        ensure!(
            sizes[1].is_multiple_of(feed.units()),
            "{feed:?} takes hidden widths that are multiples of {}",
            feed.units()
        );
        let slices = sizes[1] / feed.units();
        let f = function(gpu, acc, feed, smem_bytes)?;
        let blocks = feed.parts() * slices;
        let cluster = if feed.variant.clustered(target) {
            cluster_size(gpu, &f, smem_bytes, blocks)?
        } else {
            0
        };
        // Clusters exchange in shared memory, and the offchip kernel's blocks have the whole
        // batch: neither has exchange areas.
        let exchange = if cluster > 0 || feed.variant.offchip() {
            0
        } else {
            layers * blocks * EXCHANGE
        };
        let counts = counters(layers, slices);
        let scratch = if layers > 1 {
            Scratch::of(batch, layers, hidden_widths(sizes)).len
        } else {
            0
        };
        let epoch_rows = steps * batch;
        let event = || {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        };
        Ok(Persistent {
            f,
            feed,
            shuffle: gpu.function(kernels::PERSISTENT_SHUFFLE)?,
            blocks: blocks as u32,
            cluster,
            batch: batch as u32,
            dim: sizes[0] as u32,
            epoch_rows: epoch_rows as u32,
            smem_bytes,
            logits: arena.alloc(LOGIT_SLOTS * logits_slot(batch, sizes[sizes.len() - 1]))?,
            exchange: arena.alloc(exchange)?,
            counters: arena.alloc(counts)?,
            scratch: arena.alloc(scratch)?,
            batches: [
                arena.alloc(epoch_rows * smem.stride)?,
                arena.alloc(epoch_rows * smem.stride)?,
            ],
            side: gpu.ctx.new_stream()?,
            shuffled: [event()?, event()?],
            queued: event()?,
            trace: None,
        })
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
    /// `mlp_persistent_shuffle`). Queued on the GPU's stream, or given an `ahead` mark on a
    /// stream of its own, after the point the mark was taken at. A shuffle ahead is queued
    /// after the training launch it runs beside: queued before it on an idle GPU, its blocks
    /// take SMs first, and a launch that needs nearly every SM waits for the whole shuffle. It
    /// is held to a quarter of the SMs because it shares the memory system with that launch:
    /// spread over every SM the launch leaves idle it slows the epoch, while a grid too small
    /// outlasts the epoch (`docs/persistent.md` has the measurements).
    /// [`Persistent::run`] waits for the shuffle of its buffer either way. Refuses a set of
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

    /// Runs steps `step0..step0 + steps` of the epoch shuffled into buffer `buf`
    /// ([`Persistent::shuffle`]), writing each step's mean loss and correct count to
    /// `loss[step]`/`correct[step]`. Queued on the stream; nothing is copied to the host.
    /// Refuses steps past the epoch's rows.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        gpu: &Gpu,
        model: &Mlp,
        buf: usize,
        (loss, correct): (u64, u64),
        (step0, steps): (usize, usize),
        lr: f32,
        momentum: f32,
    ) -> Result<()> {
        let epoch_steps = self.epoch_steps();
        ensure!(
            step0 + steps <= epoch_steps,
            "steps {step0}..{} are past the epoch's {epoch_steps}",
            step0 + steps
        );
        gpu.stream.wait(&self.shuffled[buf])?;
        gpu.zero(self.counters)?;
        // The layer engine's flagged planes: no line carries a step's flag before it is
        // written in that launch.
        if self.scratch.len > 0 {
            gpu.zero(self.scratch)?;
        }
        gpu.zero(self.logits)?;
        // The parts of the batch add their loss and correct count into each step's slot.
        for p in [loss, correct] {
            gpu.zero_raw(p + 4 * step0 as u64, 4 * steps)?;
        }
        let (offs, _) = param_layout(&model.sizes);
        let sizes = &model.sizes;
        let (mut widths, mut o_w, mut o_b) = (
            [0; MAX_LAYERS + 2],
            [0; MAX_LAYERS + 1],
            [0; MAX_LAYERS + 1],
        );
        for (i, &w) in sizes.iter().enumerate() {
            widths[i] = w as u32;
        }
        for (i, &(w, b)) in offs.iter().enumerate() {
            (o_w[i], o_b[i]) = (w as u32, b as u32);
        }
        let args = Params {
            batches: self.batches[buf].ptr,
            w32: model.w32.ptr,
            w16: model.w16.ptr,
            vel: model.vel.ptr,
            loss,
            correct,
            logits: self.logits.ptr,
            exchange: self.exchange.ptr,
            counters: self.counters.ptr,
            scratch: self.scratch.ptr,
            layers: (sizes.len() - 2) as u32,
            widths,
            o_w,
            o_b,
            batch: self.batch,
            lr,
            momentum,
            step0: step0 as u32,
            steps: steps as u32,
            stages: self.feed.stages as u32,
            trace: self.trace.as_ref().map_or(0, |t| dptr(t, &gpu.stream)),
        };
        // Cooperative: the driver refuses the launch unless every block can be resident at
        // once, which the grid barrier needs. On Hopper the pair of each slice (or two pairs)
        // is also a cluster, which shares their shared memory.
        let mut attrs = vec![attribute(
            CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            |v| v.cooperative = 1,
        )];
        if self.cluster > 0 {
            attrs.push(cluster_attribute((self.cluster, 1)));
        }
        let cfg = grid_config(self.blocks, self.smem_bytes);
        // SAFETY: the kernel's one parameter is a `Params` (the same `#[repr(C)]` type);
        // every buffer lives as long as `self` and `model`, which outlive the stream's work (the
        // training loop synchronises first).
        unsafe { gpu.launch_ex(&gpu.stream, &self.f, cfg, &mut attrs, &mut [arg(&args)]) }
    }

    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// Steps of an epoch.
    fn epoch_steps(&self) -> usize {
        (self.epoch_rows / self.batch) as usize
    }

    /// Has every later epoch record the phase trace, which a PTX built with
    /// `GPU_PHASE_TRACE=1` writes (`Options::phases`' check refuses it elsewhere).
    pub fn record_phases(&mut self, gpu: &Gpu) -> Result<()> {
        let steps = self.epoch_steps();
        self.trace = Some(gpu.zeros(steps * self.blocks as usize * trace::MARKS)?);
        Ok(())
    }

    /// The last epoch's phase trace as a table ([`phases::table`]), if it was recorded.
    pub fn phase_table(&self, gpu: &Gpu) -> Result<Option<String>> {
        let Some(t) = &self.trace else {
            return Ok(None);
        };
        let marks = gpu.download(t)?;
        let m = phases::Marks {
            marks: &marks,
            steps: self.epoch_steps(),
            blocks: self.blocks as usize,
        };
        Ok(Some(phases::table(trace::phases_of(self.feed.variant), &m)))
    }

    pub fn feed(&self) -> Feed {
        self.feed
    }
}

/// The input and hidden widths of layers `sizes` (input, hidden…, classes), as the layer
/// engine's layout takes them.
pub fn hidden_widths(sizes: &[usize]) -> Widths {
    let mut w = [0; MAX_LAYERS + 1];
    w[..sizes.len() - 1].copy_from_slice(&sizes[..sizes.len() - 1]);
    w
}
