//! Training by the persistent kernel (`gpu::persistent`): one launch runs many steps of a
//! one-hidden-layer MLP, with a grid barrier and a barrier of each slice's blocks per step
//! instead of a dozen kernels.
use super::model::{Mlp, param_layout};
use crate::cuda::{Arena, Buf, Gpu, ParamBlock, PushKernelArg, arg, attribute, cluster_attribute};
use crate::kernels;
use anyhow::{Result, ensure};
use cudarc::driver::sys::{self, CUevent_flags, CUfunction_attribute, CUlaunchAttributeID};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchConfig};
use gpu::gemm::Accum;
use gpu::params::PersistentShuffle;
use gpu::persistent::Params;
use gpu::persistent::{
    CHUNK, EXCHANGE, LOGIT_SLOTS, MAX_BATCH, MAX_CLASSES, MAX_DIM, MAX_STAGES, MIN_STAGES, OFFCHIP,
    PAIR, Smem, THREADS, UNITS, WIDE, clustered, logits_slot, row_stride, w1_in_registers,
};
use std::sync::Arc;

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
    smem: Smem,
    /// Fixed-point logit sums, one slot per step in rotation.
    logits: Buf<i64>,
    /// Each block's shares of the gradients, for the other blocks of its slice (empty where a
    /// slice is a cluster, whose blocks write them straight into each other's shared memory).
    exchange: Buf<u32>,
    /// Arrival counts of the grid barrier, then of each slice's barrier (the grid's alone where
    /// slices are clusters); zeroed before each launch.
    counters: Buf<u32>,
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

/// Whether the persistent kernel can train a run, with how it feeds the batch, and if not, why.
#[derive(Debug, PartialEq, Eq)]
pub enum Support {
    Yes(Feed),
    No(String),
}

/// How the batch reaches a block's shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    /// Two buffers of the block's whole rows, the next batch arriving in one while the step
    /// reads the other (sm_80 PTX and newer; at MNIST's batch of 128 only Hopper has the room).
    Whole,
    /// One buffer of the block's whole rows, refilled with the next batch once dW1 has read it,
    /// the batch split over `parts` blocks a slice: 2 (sm_80 PTX and newer; at MNIST's batch of
    /// 128 an A100 has the room) or 4 (sm_75 PTX too), whose quarters fit 64 KiB but take
    /// twice the blocks, all resident at once.
    Single { parts: usize },
    /// A ring of `stages` buffers of one chunk of every row, through which the rows pass twice a
    /// step (`gpu::persistent::stream`).
    Streamed { stages: usize },
    /// One buffer of half the batch, as `Single { parts: 2 }`, and wider slices of the hidden
    /// units: `n` n-tiles of 8 a block (Hopper), so that a hidden layer too wide for slices of 8
    /// still has all its blocks resident.
    Wide { n: usize },
    /// Slices of [`OFFCHIP`] n-tiles (32 units) a block for the whole batch, streamed through
    /// a ring of `stages` chunk buffers, W1's master values and momentum in global memory
    /// (Hopper): hidden layers whose W1 state the chip cannot hold
    /// (`gpu::persistent::offchip`).
    Offchip { stages: usize },
}

impl Feed {
    /// The shared-memory layout of a block for a batch of `batch` × `dim`, with PTX of
    /// architecture `sm`.
    pub fn smem(self, sm: u32, batch: usize, dim: usize) -> Smem {
        match self {
            Feed::Whole => Smem::whole(batch, dim, 2, PAIR, false),
            Feed::Single { parts } => Smem::whole(batch, dim, 1, parts, w1_in_registers(sm, parts)),
            Feed::Streamed { stages } => Smem::streamed(batch, dim, stages),
            Feed::Wide { n } => Smem::wide(batch, dim, n),
            Feed::Offchip { stages } => Smem::offchip(batch, dim, stages),
        }
    }

    /// Hidden units a block.
    pub fn units(self) -> usize {
        match self {
            Feed::Wide { n } => n * UNITS,
            Feed::Offchip { .. } => OFFCHIP * UNITS,
            _ => UNITS,
        }
    }

    /// Blocks per slice of hidden units, each with its part of the batch.
    pub fn parts(self) -> usize {
        match self {
            Feed::Single { parts } => parts,
            Feed::Offchip { .. } => 1,
            _ => PAIR,
        }
    }

    /// Whether a slice's blocks are a cluster with PTX of architecture `sm` (the Hopper build,
    /// whose pairs exchange through shared memory).
    fn clustered(self, sm: u32) -> bool {
        clustered(sm) && self.parts() == PAIR
    }

    /// The kernel's `stages` parameter.
    fn stages(self) -> u32 {
        match self {
            Feed::Streamed { stages } | Feed::Offchip { stages } => stages as u32,
            _ => 0,
        }
    }

    /// The feed's kernel, if the gpu crate has one (one buffer in 2 or 4 parts; wide slices of
    /// 2 or 4 n-tiles and offchip ones with fp16 accumulators).
    pub fn kernel(self, acc: Accum) -> Option<&'static str> {
        use kernels::*;
        Some(match (self, acc) {
            (Feed::Whole, Accum::F16) => PERSISTENT_F16,
            (Feed::Whole, Accum::F32) => PERSISTENT_F32,
            (Feed::Single { parts: 2 }, Accum::F16) => PERSISTENT_SINGLE_F16,
            (Feed::Single { parts: 2 }, Accum::F32) => PERSISTENT_SINGLE_F32,
            (Feed::Single { parts: 4 }, Accum::F16) => PERSISTENT_SINGLE4_F16,
            (Feed::Single { parts: 4 }, Accum::F32) => PERSISTENT_SINGLE4_F32,
            (Feed::Single { .. }, _) => return None,
            (Feed::Streamed { .. }, Accum::F16) => PERSISTENT_STREAMED_F16,
            (Feed::Streamed { .. }, Accum::F32) => PERSISTENT_STREAMED_F32,
            (Feed::Wide { n: 2 }, Accum::F16) => PERSISTENT_WIDE2_F16,
            (Feed::Wide { n: 4 }, Accum::F16) => PERSISTENT_WIDE4_F16,
            (Feed::Wide { .. }, _) => return None,
            (Feed::Offchip { .. }, Accum::F16) => PERSISTENT_OFFCHIP_F16,
            (Feed::Offchip { .. }, Accum::F32) => return None,
        })
    }

    /// The kernel that runs this feed for `slices` slices with PTX of architecture `sm`:
    /// [`Feed::kernel`]'s, except that from [`BULK_SLICES`] slices the two-buffer kernel adds
    /// the partial logits by bulk reductions where the PTX has that variant.
    fn launched_kernel(self, acc: Accum, sm: u32, slices: usize) -> Option<&'static str> {
        use kernels::{PERSISTENT_BULK_F16 as BULK, PERSISTENT_F16};
        match self.kernel(acc) {
            Some(PERSISTENT_F16) if slices >= BULK_SLICES && kernels::in_ptx_of(BULK, sm) => {
                Some(BULK)
            }
            k => k,
        }
    }

    /// Whether PTX of architecture `sm` runs this feed with fp16 accumulators for a batch of
    /// `batch` × `dim` in `room` bytes of shared memory a block: its kernel is there, its
    /// layout fits, and a ring has `MIN_STAGES..=MAX_STAGES` stages, two on sm_75 (whose ring
    /// loads through registers, which hold one chunk ahead).
    pub fn runs_with(self, sm: u32, room: usize, batch: usize, dim: usize) -> bool {
        let stages_ok = match self {
            Feed::Streamed { stages } if sm < 80 => stages == MIN_STAGES,
            Feed::Streamed { stages } | Feed::Offchip { stages } => {
                (MIN_STAGES..=MAX_STAGES).contains(&stages)
            }
            _ => true,
        };
        stages_ok
            && self
                .kernel(Accum::F16)
                .is_some_and(|k| kernels::in_ptx_of(k, sm))
            && self.smem(sm, batch, dim).bytes <= room
    }

    /// How the first line of a run names the feed, after the block count.
    pub fn describe(self) -> String {
        match self {
            Feed::Whole => String::new(),
            Feed::Single { parts: PAIR } => ", one batch buffer refilled after dW1".into(),
            Feed::Single { parts } => {
                format!(", one batch buffer refilled after dW1, the batch in {parts} parts")
            }
            Feed::Streamed { stages } => {
                format!(", the batch streamed in {CHUNK}-input chunks through {stages} stages")
            }
            Feed::Wide { n } => format!(
                ", {} hidden units a block, one batch buffer refilled after dW1",
                n * UNITS
            ),
            Feed::Offchip { stages } => format!(
                ", {} hidden units a block, the whole batch streamed in {CHUNK}-input chunks \
                 through {stages} stages, W1's state in global memory",
                OFFCHIP * UNITS
            ),
        }
    }
}

/// The feeds the host tries, fastest first: two whole-batch buffers, one of half the batch,
/// of a quarter, slices of 16 and of 32 hidden units (which take fewer blocks), the offchip
/// slices of 32 units with the most stages, then the ring with the most stages.
fn feeds_by_preference() -> impl Iterator<Item = Feed> {
    let singles = [2, 4].map(|parts| Feed::Single { parts });
    let wide = WIDE.map(|n| Feed::Wide { n });
    let stage_counts = || (MIN_STAGES..=MAX_STAGES).rev();
    let offchip = stage_counts().map(|stages| Feed::Offchip { stages });
    [Feed::Whole]
        .into_iter()
        .chain(singles)
        .chain(wide)
        .chain(offchip)
        .chain(stage_counts().map(|stages| Feed::Streamed { stages }))
}

/// Whether the persistent kernel (with accumulator `acc`) can train layers `sizes` with this
/// batch and epochs of `steps` steps on this GPU.
pub fn support(
    gpu: &Gpu,
    sizes: &[usize],
    batch: usize,
    steps: usize,
    acc: Accum,
) -> Result<Support> {
    support_sliced(gpu, sizes, batch, steps, acc, None)
}

/// [`support`] with blocks of `units` hidden units ([`Feed::units`]) if given.
pub fn support_sliced(
    gpu: &Gpu,
    sizes: &[usize],
    batch: usize,
    steps: usize,
    acc: Accum,
    units: Option<usize>,
) -> Result<Support> {
    if sizes.len() != 3 {
        return Ok(Support::No(format!(
            "it trains one hidden layer, this model has {}",
            sizes.len() - 2
        )));
    }
    let (dim, hidden, classes) = (sizes[0], sizes[1], sizes[2]);
    let shuffled = 2 * steps * batch * row_stride(dim);
    let why = if !hidden.is_multiple_of(UNITS) {
        format!("the hidden width {hidden} is not a multiple of {UNITS}")
    } else if !dim.is_multiple_of(16) || dim > MAX_DIM {
        format!("the input width {dim} is not a multiple of 16 up to {MAX_DIM}")
    } else if batch > MAX_BATCH {
        format!("the batch {batch} is above {MAX_BATCH}")
    } else if classes > MAX_CLASSES {
        format!("{classes} classes are more than {MAX_CLASSES}")
    } else if shuffled > gpu.mem_info()?.0 / 2 {
        format!(
            "its two shuffled copies of the training set need {} MiB, over half the GPU's free memory",
            shuffled >> 20
        )
    } else {
        return choose_feed(gpu, (batch, dim, hidden, acc), units);
    };
    Ok(Support::No(why))
}

/// How this GPU feeds a batch of `batch` × `dim` to `hidden` units ([`pick_feed`] with its PTX,
/// shared memory and occupancy), in blocks of `units` hidden units if given.
fn choose_feed(
    gpu: &Gpu,
    (batch, dim, hidden, acc): (usize, usize, usize, Accum),
    units: Option<usize>,
) -> Result<Support> {
    let (sm, room) = (gpu.ptx.sm, gpu.max_smem_optin());
    let resident = |feed: Feed| {
        let bytes = feed.smem(sm, batch, dim).bytes;
        let f = function(gpu, acc, feed, bytes, hidden / feed.units())?;
        resident_blocks(gpu, &f, bytes, feed.clustered(sm).then_some(PAIR))
    };
    let limit = gpu.describe_smem_limit();
    if let Some(u) = units {
        let has = |f: &Feed| f.kernel(acc).is_some_and(|k| kernels::in_ptx_of(k, sm));
        if !feeds_by_preference().any(|f| f.units() == u && has(&f)) {
            let acc = acc.suffix();
            let ptx = gpu.describe_ptx();
            return Ok(Support::No(format!(
                "no kernel of it takes {u} hidden units a block with {acc} accumulators on {ptx}"
            )));
        }
        if !hidden.is_multiple_of(u) {
            let why = format!("the hidden width {hidden} is not a multiple of --slice-units {u}");
            return Ok(Support::No(why));
        }
    }
    let feeds = feeds_by_preference().filter(|f| units.is_none_or(|u| f.units() == u));
    pick_feed(
        feeds,
        (sm, room, &limit),
        (batch, dim, hidden, acc),
        resident,
    )
}

/// Slices from which the two-buffer kernel adds the partial logits by bulk reductions: the
/// reductions cost one round trip whatever the slice count, while the `red`s per value contend
/// in L2 more the more slices add into each sum, and cost more than that round trip from 24
/// slices on (measured on an H200: the table in `docs/persistent.md`, under wide hidden layers).
const BULK_SLICES: usize = 24;

/// The first of `feeds` (in [`feeds_by_preference`]'s order) that PTX `sm` runs in `room` bytes
/// of shared memory a block ([`Feed::runs_with`]) with accumulator `acc`, whose slices divide
/// the hidden width, with every block resident at once (`resident(feed)` says how many can be),
/// or why none does: the blocks of the feed that takes the fewest, or what the
/// smallest layout needs beside `limit`, the GPU's words for its room.
fn pick_feed(
    feeds: impl Iterator<Item = Feed>,
    (sm, room, limit): (u32, usize, &str),
    (batch, dim, hidden, acc): (usize, usize, usize, Accum),
    mut resident: impl FnMut(Feed) -> Result<usize>,
) -> Result<Support> {
    let least = feeds_by_preference()
        .filter(|f| f.runs_with(sm, usize::MAX, batch, dim))
        .min_by_key(|f| f.smem(sm, batch, dim).bytes)
        .expect("the streamed kernel is in every PTX");
    let mut why = format!(
        "a batch of {batch} × {dim} needs {} B of shared memory a block at the least (the \
         persistent kernel{}), {limit}",
        least.smem(sm, batch, dim).bytes,
        least.describe(),
    );
    let takes = |f: &Feed| {
        f.runs_with(sm, room, batch, dim)
            && f.kernel(acc).is_some_and(|k| kernels::in_ptx_of(k, sm))
            && hidden.is_multiple_of(f.units())
    };
    let mut fewest = usize::MAX;
    for feed in feeds.filter(takes) {
        let (parts, units) = (feed.parts(), feed.units());
        let (blocks, resident) = (parts * hidden / units, resident(feed)?);
        if blocks <= resident {
            return Ok(Support::Yes(feed));
        }
        if blocks < fewest {
            fewest = blocks;
            why = format!(
                "{blocks} blocks ({parts} per {units} hidden units) must be resident at once, this GPU holds {resident}"
            );
        }
    }
    Ok(Support::No(why))
}

/// The kernel for accumulator `acc`, `feed` and `slices` slices, allowed `smem` bytes of
/// dynamic shared memory.
fn function(gpu: &Gpu, acc: Accum, feed: Feed, smem: usize, slices: usize) -> Result<CudaFunction> {
    let name = feed.launched_kernel(acc, gpu.ptx.sm, slices);
    let f = gpu
        .function(name.ok_or_else(|| anyhow::anyhow!("no kernel feeds the batch as {feed:?}"))?)?;
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?;
    Ok(f)
}

/// How many blocks of `f` (with `smem` bytes each) can be resident at once: whole clusters of
/// `cluster` blocks, if any.
fn resident_blocks(
    gpu: &Gpu,
    f: &CudaFunction,
    smem: usize,
    cluster: Option<usize>,
) -> Result<usize> {
    let Some(cluster) = cluster else {
        let per_sm =
            f.occupancy_max_active_blocks_per_multiprocessor(THREADS as u32, smem, None)?;
        return Ok(per_sm as usize * gpu.sm_count() as usize);
    };
    let mut attrs = [cluster_attribute((cluster as u32, 1))];
    let config = gpu.launch_config(grid_config(cluster as u32, smem), &mut attrs);
    let mut clusters = 0;
    gpu.ctx.bind_to_thread()?;
    // SAFETY: `config` and its attributes outlive the call, which only reads them.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, f.cu_function(), &config) }
        .result()?;
    Ok(clusters as usize * cluster)
}

/// Blocks per cluster on Hopper: those of two slices where the slices pair up and such clusters
/// all fit, else of one (the kernel pairs ranks `r` and `r ^ 1` either way). Clusters of two
/// slices run faster than of one, four or eight (`docs/persistent.md` has the measurements).
fn cluster_size(gpu: &Gpu, f: &CudaFunction, smem: usize, blocks: usize) -> Result<u32> {
    let two = 2 * PAIR;
    Ok(
        if blocks.is_multiple_of(two) && resident_blocks(gpu, f, smem, Some(two))? >= blocks {
            two as u32
        } else {
            PAIR as u32
        },
    )
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
        let smem = feed.smem(gpu.ptx.sm, batch, sizes[0]);
        ensure!(
            feed.runs_with(gpu.ptx.sm, gpu.max_smem_optin(), batch, sizes[0]),
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
        let f = function(gpu, acc, feed, smem.bytes, slices)?;
        let blocks = feed.parts() * slices;
        let cluster = if feed.clustered(gpu.ptx.sm) {
            cluster_size(gpu, &f, smem.bytes, blocks)?
        } else {
            0
        };
        // Clusters exchange in shared memory, and the offchip kernel's blocks have the whole
        // batch: neither has an exchange area or slice counters.
        let (exchange, counters) = if cluster > 0 || matches!(feed, Feed::Offchip { .. }) {
            (0, 1)
        } else {
            (blocks * EXCHANGE, 1 + slices)
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
            smem,
            logits: arena.alloc(LOGIT_SLOTS * logits_slot(batch, sizes[2]))?,
            exchange: arena.alloc(exchange)?,
            counters: arena.alloc(counters)?,
            batches: [
                arena.alloc(epoch_rows * smem.stride)?,
                arena.alloc(epoch_rows * smem.stride)?,
            ],
            side: gpu.ctx.new_stream()?,
            shuffled: [event()?, event()?],
            queued: event()?,
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
    /// `mlp1_persistent_shuffle`). Queued on the GPU's stream, or given an `ahead` mark on a
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
        let epoch_steps = (self.epoch_rows / self.batch) as usize;
        ensure!(
            step0 + steps <= epoch_steps,
            "steps {step0}..{} are past the epoch's {epoch_steps}",
            step0 + steps
        );
        gpu.stream.wait(&self.shuffled[buf])?;
        gpu.zero(self.counters)?;
        gpu.zero(self.logits)?;
        // The parts of the batch add their loss and correct count into each step's slot.
        for p in [loss, correct] {
            gpu.zero_raw(p + 4 * step0 as u64, 4 * steps)?;
        }
        let (offs, _) = param_layout(&model.sizes);
        let size = |i: usize| model.sizes[i] as u32;
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
            dim: size(0),
            hidden: size(1),
            classes: size(2),
            batch: self.batch,
            o_w1: offs[0].0 as u32,
            o_b1: offs[0].1 as u32,
            o_w2: offs[1].0 as u32,
            o_b2: offs[1].1 as u32,
            lr,
            momentum,
            step0: step0 as u32,
            steps: steps as u32,
            stages: self.feed.stages(),
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
        let cfg = grid_config(self.blocks, self.smem.bytes);
        // SAFETY: the kernel's one parameter is a `Params` (the same `#[repr(C)]` type);
        // every buffer lives as long as `self` and `model`, which outlive the stream's work (the
        // training loop synchronises first).
        unsafe { gpu.launch_ex(&gpu.stream, &self.f, cfg, &mut attrs, &mut [arg(&args)]) }
    }

    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    pub fn feed(&self) -> Feed {
        self.feed
    }
}

/// `blocks` blocks of [`THREADS`] with `smem` bytes of dynamic shared memory each.
fn grid_config(blocks: u32, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MNIST's batch of 128 on each generation's PTX and shared memory a block, where every
    /// block is resident: Hopper's two whole-batch buffers, an A100's one of half the batch, a
    /// quarter in 99 KiB, and in Turing's 64 KiB with sm_75 PTX (W1 in registers; it has no
    /// kernel of half the batch), the ring of two stages in 64 KiB with sm_80 PTX, and nothing
    /// under 48 KiB.
    #[test]
    fn each_generation_takes_the_feed_its_shared_memory_holds() {
        let choose = |sm: u32, kib: usize| {
            feeds_by_preference().find(|f| f.runs_with(sm, kib * 1024, 128, 784))
        };
        assert_eq!(choose(90, 227), Some(Feed::Whole));
        assert_eq!(choose(80, 163), Some(Feed::Single { parts: 2 }));
        assert_eq!(choose(80, 99), Some(Feed::Single { parts: 4 }));
        assert_eq!(choose(80, 64), Some(Feed::Streamed { stages: 2 }));
        assert_eq!(choose(75, 64), Some(Feed::Single { parts: 4 }));
        assert_eq!(choose(75, 227), Some(Feed::Single { parts: 4 }));
        assert_eq!(choose(80, 48), None);
        // Only sm_75's own ring of two runs there; any stage count within bounds on sm_80.
        assert!(!Feed::Streamed { stages: 4 }.runs_with(75, 227 * 1024, 8, 48));
        assert!(
            !Feed::Streamed {
                stages: MAX_STAGES + 1
            }
            .runs_with(90, 227 * 1024, 8, 48)
        );
        assert!(!Feed::Whole.runs_with(75, 227 * 1024, 8, 48));
        assert!(!Feed::Single { parts: 2 }.runs_with(75, 227 * 1024, 8, 48));
        // The gpu crate has kernels for 2 and 4 parts.
        assert!(!Feed::Single { parts: 8 }.runs_with(90, 227 * 1024, 8, 48));
    }

    /// From 24 slices the two-buffer kernel of Hopper PTX with fp16 accumulators adds the
    /// partial logits by bulk reductions; with fewer, fp32 accumulators, another feed or sm_80
    /// PTX it is the feed's own kernel.
    #[test]
    fn many_slices_take_the_bulk_reduction_kernel() {
        use kernels::*;
        let (f16, f32) = (Accum::F16, Accum::F32);
        let cases = [
            ((Feed::Whole, f16, 90, 24), PERSISTENT_BULK_F16),
            ((Feed::Whole, f16, 90, 66), PERSISTENT_BULK_F16),
            ((Feed::Whole, f16, 90, 23), PERSISTENT_F16),
            ((Feed::Whole, f16, 80, 32), PERSISTENT_F16),
            ((Feed::Whole, f32, 90, 32), PERSISTENT_F32),
            (
                (Feed::Single { parts: 2 }, f16, 90, 32),
                PERSISTENT_SINGLE_F16,
            ),
            ((Feed::Wide { n: 2 }, f16, 90, 64), PERSISTENT_WIDE2_F16),
        ];
        for ((feed, acc, sm, slices), kernel) in cases {
            let got = feed.launched_kernel(acc, sm, slices);
            assert_eq!(
                got,
                Some(kernel),
                "{feed:?} {acc:?} sm_{sm}, {slices} slices"
            );
        }
    }

    /// The quarters take 64 blocks at hidden 128: a 99 KiB card of 58 SMs (an L4, one block
    /// each) streams instead, as do a T4 (40 SMs) against an RTX 2080 Ti's 68 with sm_75 PTX
    /// (and fp32 accumulators there), and hidden 512 (256 blocks) on 132, while hidden 256 (128
    /// blocks) keeps the quarters; on Hopper, with fp16 accumulators, wider slices take hidden
    /// layers whose slices of 8 units would be more blocks than fit (slices of 32 only where
    /// narrower ones do not fit), and past 2,112 units the offchip slices of 32 units with as
    /// many stages as fit; where not even the streamed kernel's blocks are all resident, or its
    /// stages do not fit, the reason says so.
    #[test]
    fn a_feed_whose_blocks_are_not_all_resident_gives_way() {
        let pick_with = |sm: u32, kib: usize, hidden: usize, sms: usize, acc: Accum| {
            let one_each = |_: Feed| Ok(sms);
            pick_feed(
                feeds_by_preference(),
                (sm, kib * 1024, "capped"),
                (128, 784, hidden, acc),
                one_each,
            )
            .unwrap()
        };
        let pick = |sm, kib, hidden, sms| pick_with(sm, kib, hidden, sms, Accum::F16);
        let (f16, f32) = (Accum::F16, Accum::F32);
        let (quarters, wide2) = (Feed::Single { parts: 4 }, Feed::Wide { n: 2 });
        let ring = |stages| Feed::Streamed { stages };
        // (PTX, KiB a block, hidden, SMs, accumulator) and the feed taken. sm_75 has the
        // quarters with fp16 accumulators only. On Hopper slices of 8 units up to 528 (132
        // blocks); 1024, 1040 and 2048 take the narrowest slices that fit (1024 not 64 blocks
        // of 32); past 2,112 units the offchip kernels (one block per slice).
        let takes = [
            ((80, 99, 128, 132, f16), quarters),
            ((80, 99, 128, 58, f16), ring(4)),
            ((80, 99, 256, 132, f16), quarters),
            ((80, 99, 512, 132, f16), ring(4)),
            ((75, 64, 128, 68, f16), quarters),
            ((75, 64, 128, 40, f16), ring(2)),
            ((75, 64, 128, 132, f32), ring(2)),
            ((90, 227, 256, 132, f16), Feed::Whole),
            ((90, 227, 512, 132, f16), Feed::Whole),
            ((90, 227, 528, 132, f16), Feed::Whole),
            ((90, 227, 1024, 132, f16), wide2),
            ((90, 227, 1040, 132, f16), wide2),
            ((90, 227, 2048, 132, f16), Feed::Wide { n: 4 }),
            ((90, 227, 2176, 132, f16), Feed::Offchip { stages: 4 }),
            ((90, 227, 4096, 132, f16), Feed::Offchip { stages: 4 }),
            ((90, 227, 512, 132, f32), Feed::Whole),
        ];
        for ((sm, kib, hidden, sms, acc), feed) in takes {
            assert_eq!(
                pick_with(sm, kib, hidden, sms, acc),
                Support::Yes(feed),
                "sm_{sm}, {kib} KiB, hidden {hidden}, {sms} SMs, {acc:?}"
            );
        }
        // 1032 is no multiple of 16: the slices of 8 are too many, and no wider slice divides it.
        let Support::No(why) = pick(90, 227, 1032, 132) else {
            panic!("258 blocks taken on 132 SMs");
        };
        assert!(why.contains("258 blocks (2 per 8 hidden units)"), "{why}");
        let Support::No(why) = pick(90, 227, 4352, 132) else {
            panic!("136 blocks taken on 132 SMs");
        };
        assert!(why.contains("136 blocks (1 per 32 hidden units)"), "{why}");
        assert!(why.ends_with("this GPU holds 132"), "{why}");
        // Slices of 32 units asked for at 512: 32 blocks.
        let wide = feeds_by_preference().filter(|f| f.units() == 32);
        let picked = pick_feed(
            wide,
            (90, 227 * 1024, ""),
            (128, 784, 512, Accum::F16),
            |_| Ok(132),
        );
        assert_eq!(picked.unwrap(), Support::Yes(Feed::Wide { n: 4 }));
        // No wide or offchip kernel has fp32 accumulators, nor sm_80 PTX.
        let Support::No(why) = pick_with(90, 227, 1024, 132, Accum::F32) else {
            panic!("a wide slice taken with fp32 accumulators");
        };
        assert!(why.contains("256 blocks (2 per 8 hidden units)"), "{why}");
        assert!(matches!(pick(80, 227, 1024, 132), Support::No(_)));
        assert!(matches!(pick(80, 227, 4096, 132), Support::No(_)));
        assert!(matches!(pick_with(90, 227, 4096, 132, f32), Support::No(_)));
        let Support::No(why) = pick(80, 48, 128, 132) else {
            panic!("a 48 KiB block taken");
        };
        assert!(
            why.contains("needs 63648 B of shared memory a block at the least"),
            "{why}"
        );
        assert!(why.ends_with("capped"), "{why}");
    }
}
