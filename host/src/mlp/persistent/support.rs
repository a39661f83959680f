//! Which variant of the persistent kernel trains a run on this GPU ([`support`]), or why none
//! does: the PTX's variants, the shared memory a block may have, and how many blocks stay
//! resident at once.
use crate::cuda::{Gpu, cluster_attribute};
use anyhow::Result;
use cudarc::driver::sys::{self, CUfunction_attribute};
use cudarc::driver::{CudaFunction, LaunchConfig};
use gpu::gemm::Accum;
use gpu::persistent::{
    MAX_CLASSES, MAX_DIM, MAX_LAYERS, PAIR, Plan, Smem, THREADS, UNITS, VARIANTS, Variant,
    most_batch, row_stride, variant,
};
use gpu::target::Target;

/// Whether the persistent kernel can train a run, with how it feeds the batch, and if not, why.
#[derive(Debug, PartialEq, Eq)]
pub enum Support {
    Yes(Feed),
    No(String),
}

/// A variant of the persistent kernel ([`VARIANTS`]) with the ring stages it runs with (0
/// where it has no ring): how the batch reaches a block's shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feed {
    pub variant: &'static Variant,
    pub stages: usize,
}

impl Feed {
    /// The variant named `name`, without a ring.
    pub const fn of(name: &str) -> Feed {
        Feed {
            variant: variant(name),
            stages: 0,
        }
    }

    /// The variant named `name` with a ring of `stages` stages.
    pub const fn ring(name: &str, stages: usize) -> Feed {
        Feed {
            variant: variant(name),
            stages,
        }
    }

    /// The shared-memory layout of a block for a batch of `batch` × `dim` (of the first layer,
    /// with several hidden layers: [`Feed::smem_bytes`] gives the whole plan's).
    pub fn smem(self, batch: usize, dim: usize) -> Smem {
        self.variant.smem(batch, dim, self.stages)
    }

    /// Bytes of shared memory a block for a batch of `batch` and layers `sizes` (the layer
    /// engine's [`Plan`] where the variant has several hidden layers).
    pub fn smem_bytes(self, batch: usize, sizes: &[usize]) -> usize {
        match self.variant.layers {
            1 => self.smem(batch, sizes[0]).bytes,
            layers => Plan::of(batch, layers, super::hidden_widths(sizes), self.parts()).bytes,
        }
    }

    /// Hidden units a block.
    pub fn units(self) -> usize {
        self.variant.units()
    }

    /// Blocks per slice of hidden units, each with its part of the batch.
    pub fn parts(self) -> usize {
        self.variant.parts
    }

    /// The kernel with accumulator `acc`, if the variant has one.
    pub fn kernel(self, acc: Accum) -> Option<String> {
        self.variant.kernel(acc)
    }

    /// Whether PTX built for `target` runs this feed with fp16 accumulators for a batch of
    /// `batch` × `dim` in `room` bytes of shared memory a block: it exports the variant, the
    /// variant takes the batch and the stages, and the layout fits.
    pub fn runs_with(self, target: Target, room: usize, batch: usize, dim: usize) -> bool {
        let v = self.variant;
        v.exists_in(target)
            && v.has(Accum::F16)
            && v.takes_batch(batch)
            && v.takes_stages(self.stages)
            && self.smem(batch, dim).bytes <= room
    }

    /// How the first line of a run names the feed, after the block count.
    pub fn describe(self) -> String {
        self.variant.describe(self.stages)
    }
}

/// The feeds the host tries for one hidden layer: the rows of [`VARIANTS`] in order, each ring
/// with the most stages first.
fn feeds_by_preference() -> impl Iterator<Item = Feed> {
    VARIANTS
        .iter()
        .filter(|v| v.layers == 1)
        .flat_map(|variant| {
            let (fewest, most) = if variant.ring() {
                variant.stages
            } else {
                (0, 0)
            };
            (fewest..=most)
                .rev()
                .map(move |stages| Feed { variant, stages })
        })
}

/// One line per row of [`VARIANTS`], for `host info`: whether this GPU, with the PTX it loaded
/// and its shared memory a block, runs the variant for MNIST's 784 inputs at the row's largest
/// batch (a ring with the most stages that fit), or why not. Whether all
/// its blocks are resident depends on the hidden width; a run's first line says which variant
/// it takes.
pub fn describe_variants(gpu: &Gpu) -> Vec<String> {
    let (target, room, dim) = (gpu.ptx.target(), gpu.max_smem_optin(), 784);
    let line = |v: &'static Variant| {
        let batch = v.most_batch;
        let feeds = || feeds_by_preference().filter(move |f| f.variant == v);
        let fits = feeds().find(|f| f.smem(batch, dim).bytes <= room);
        let verdict = match fits {
            _ if !v.exists_in(target) => format!("not in {target} PTX ({})", v.archs),
            _ if v.layers > 1 => describe_layers(v, batch, dim, room, gpu),
            Some(f) if v.ring() => {
                let bytes = f.smem(batch, dim).bytes;
                format!("runs: {bytes} B a block, {} stages", f.stages)
            }
            Some(f) if v.min_slices > 1 => format!(
                "runs: {} B a block, from {} slices of {} units",
                f.smem(batch, dim).bytes,
                v.min_slices,
                v.units()
            ),
            Some(f) => format!("runs: {} B a block", f.smem(batch, dim).bytes),
            None => {
                let least = feeds().map(|f| f.smem(batch, dim).bytes).min().unwrap_or(0);
                format!("needs {least} B a block; {}", gpu.describe_smem_limit())
            }
        };
        let accums: Vec<_> = v.accums.iter().map(|a| a.suffix()).collect();
        format!("  {:<14} {:<8} {verdict}", v.name, accums.join(" "))
    };
    VARIANTS.iter().map(line).collect()
}

/// The widest first hidden layer of the layer engine's slices of 8 units on 132 SMs, where
/// `host info` starts looking for the widest model of equal layers that fits.
const DEEP_SHOWN: usize = 528;

/// `host info`'s verdict on a row of the layer engine: the widest model of `v.layers` equal
/// hidden layers (a multiple of 16, up to [`DEEP_SHOWN`]) whose layout fits `room`.
fn describe_layers(v: &Variant, batch: usize, dim: usize, room: usize, gpu: &Gpu) -> String {
    let bytes = |w: usize| {
        let mut sizes = vec![dim];
        sizes.extend(std::iter::repeat_n(w, v.layers));
        sizes.push(10);
        Plan::of(batch, v.layers, super::hidden_widths(&sizes), v.parts).bytes
    };
    let widest = DEEP_SHOWN.min(v.inner);
    match (16..=widest).rev().step_by(16).find(|&w| bytes(w) <= room) {
        Some(w) => format!(
            "runs: {} hidden layers up to {w} units, {} B a block",
            v.layers,
            bytes(w)
        ),
        None => format!(
            "needs {} B a block at 16 units a layer; {}",
            bytes(16),
            gpu.describe_smem_limit()
        ),
    }
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
    if sizes.len() > MAX_LAYERS + 2 {
        return Ok(Support::No(format!(
            "it trains one to {MAX_LAYERS} hidden layers, this model has {}",
            sizes.len() - 2
        )));
    }
    let (dim, hidden, classes) = (sizes[0], sizes[1], sizes[sizes.len() - 1]);
    let shuffled = 2 * steps * batch * row_stride(dim);
    let why = if !hidden.is_multiple_of(UNITS) {
        format!("the hidden width {hidden} is not a multiple of {UNITS}")
    } else if !dim.is_multiple_of(16) || dim > MAX_DIM {
        format!("the input width {dim} is not a multiple of 16 up to {MAX_DIM}")
    } else if classes > MAX_CLASSES {
        format!("{classes} classes are more than {MAX_CLASSES}")
    } else if shuffled > gpu.mem_info()?.0 / 2 {
        format!(
            "its two shuffled copies of the training set need {} MiB, over half the GPU's free memory",
            shuffled >> 20
        )
    } else if sizes.len() > 3 {
        return choose_layers(gpu, sizes, batch, (acc, units));
    } else {
        return choose_feed(gpu, (batch, dim, hidden, acc), units);
    };
    Ok(Support::No(why))
}

/// Whether the layer engine trains layers `sizes` (two or more hidden) with this batch and
/// accumulator on this GPU: the first row of this depth in the PTX that takes the batch, fits
/// the block's shared memory and has every block resident; else why the first such row that
/// takes the batch does not.
fn choose_layers(
    gpu: &Gpu,
    sizes: &[usize],
    batch: usize,
    (acc, units): (Accum, Option<usize>),
) -> Result<Support> {
    let (layers, target) = (sizes.len() - 2, gpu.ptx.target());
    let kernel = format!("its {layers}-layer kernel");
    let rows = || VARIANTS.iter().filter(|v| v.layers == layers);
    let in_ptx = || rows().filter(|v| v.exists_in(target));
    let Some(most) = in_ptx().map(|v| v.most_batch).max() else {
        let archs = rows().next().expect("a row for every depth").archs;
        let why = format!("{kernel} is in {archs}, not in {}", gpu.describe_ptx());
        return Ok(Support::No(why));
    };
    let mut first_refusal = None;
    for v in in_ptx().filter(|v| v.takes_batch(batch)) {
        let feed = Feed {
            variant: v,
            stages: 0,
        };
        match layer_row_refused(gpu, feed, sizes, batch, (acc, units))? {
            None => return Ok(Support::Yes(feed)),
            Some(why) => {
                first_refusal.get_or_insert(why);
            }
        }
    }
    let why = first_refusal.unwrap_or_else(|| {
        format!(
            "the batch {batch} is above {most}, the most of {kernel}s in {}",
            gpu.describe_ptx()
        )
    });
    Ok(Support::No(why))
}

/// Why the layer engine's row `feed` does not train layers `sizes` at this batch with this
/// accumulator on this GPU, if it does not.
fn layer_row_refused(
    gpu: &Gpu,
    feed: Feed,
    sizes: &[usize],
    batch: usize,
    (acc, units): (Accum, Option<usize>),
) -> Result<Option<String>> {
    let v = feed.variant;
    let (hidden, bytes) = (&sizes[1..sizes.len() - 1], feed.smem_bytes(batch, sizes));
    let kernel = format!("its {}-layer kernel", v.layers);
    let why = if !v.has(acc) {
        format!("{kernel} has no {} accumulators", acc.suffix())
    } else if units.is_some_and(|u| u != v.units()) {
        format!("{kernel} takes {} hidden units a block", v.units())
    } else if let Some(why) = layer_widths_refused(hidden, v.inner) {
        why
    } else if bytes > gpu.max_smem_optin() {
        format!(
            "hidden layers of {hidden:?} need {bytes} B of shared memory a block, {}",
            gpu.describe_smem_limit()
        )
    } else {
        let resident = resident(gpu, acc, feed, bytes)?;
        let blocks = v.parts * hidden[0] / UNITS;
        if blocks <= resident {
            return Ok(None);
        }
        format!(
            "{blocks} blocks ({} per 8 units of the first hidden layer) must be resident at once, this GPU holds {resident}",
            v.parts
        )
    };
    Ok(Some(why))
}

/// Why the layer engine does not take `hidden` widths, if it does not: each but the last is a
/// later layer's input (a multiple of 16, the k-step, and at most `inner`), none is wider than
/// the one before (each layer's n-tiles are dealt one a slice of the first's, and its gradient
/// fills the batch buffer of its input), and the last is a multiple of 8.
pub fn layer_widths_refused(hidden: &[usize], inner: usize) -> Option<String> {
    let last = hidden.len() - 1;
    for (i, &w) in hidden.iter().enumerate() {
        let n = i + 1;
        if i < last && !w.is_multiple_of(16) {
            return Some(format!(
                "hidden layer {n} ({w}) is not a multiple of 16, the next layer's k-step"
            ));
        }
        if !w.is_multiple_of(UNITS) {
            return Some(format!(
                "hidden layer {n} ({w}) is not a multiple of {UNITS}"
            ));
        }
        if i > 0 && w > hidden[i - 1] {
            return Some(format!(
                "hidden layer {n} ({w}) is wider than the one before ({})",
                hidden[i - 1]
            ));
        }
        if i < last && w > inner {
            return Some(format!(
                "hidden layer {n} ({w}) is above {inner}, the widest input of a later layer in this kernel"
            ));
        }
    }
    None
}

/// How many blocks of `feed`'s kernel accumulating in `acc`, with `bytes` of shared memory
/// each, this GPU holds at once.
fn resident(gpu: &Gpu, acc: Accum, feed: Feed, bytes: usize) -> Result<usize> {
    let f = function(gpu, acc, feed, bytes)?;
    let cluster = feed.variant.clustered(gpu.ptx.target()).then_some(PAIR);
    resident_blocks(gpu, &f, bytes, cluster)
}

/// How this GPU feeds a batch of `batch` × `dim` to `hidden` units ([`pick_feed`] with its PTX,
/// shared memory and occupancy), in blocks of `units` hidden units if given.
fn choose_feed(
    gpu: &Gpu,
    (batch, dim, hidden, acc): (usize, usize, usize, Accum),
    units: Option<usize>,
) -> Result<Support> {
    let (target, room) = (gpu.ptx.target(), gpu.max_smem_optin());
    let most = most_batch(target);
    if batch > most {
        let ptx = gpu.describe_ptx();
        let why = format!("the batch {batch} is above {most}, the most of its kernels in {ptx}");
        return Ok(Support::No(why));
    }
    let resident = |feed: Feed| resident(gpu, acc, feed, feed.smem(batch, dim).bytes);
    let limit = gpu.describe_smem_limit();
    if let Some(u) = units {
        let has = |f: &Feed| f.variant.exists_in(target) && f.variant.has(acc);
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
        (target, room, &limit),
        (batch, dim, hidden, acc),
        resident,
    )
}

/// The first of `feeds` (in [`feeds_by_preference`]'s order) that PTX built for `target` runs
/// in `room` bytes of shared memory a block ([`Feed::runs_with`]) with accumulator `acc`, whose
/// slices divide the hidden width and are at least its variant's fewest, with every block
/// resident at once (`resident(feed)` says how many can be),
/// or why none does: the blocks of the feed that takes the fewest, or what the
/// smallest layout needs beside `limit`, the GPU's words for its room.
fn pick_feed(
    feeds: impl Iterator<Item = Feed>,
    (target, room, limit): (Target, usize, &str),
    (batch, dim, hidden, acc): (usize, usize, usize, Accum),
    mut resident: impl FnMut(Feed) -> Result<usize>,
) -> Result<Support> {
    let least = feeds_by_preference()
        .filter(|f| f.runs_with(target, usize::MAX, batch, dim))
        .min_by_key(|f| f.smem(batch, dim).bytes)
        .expect("the streamed kernel is in every PTX");
    let mut why = format!(
        "a batch of {batch} × {dim} needs {} B of shared memory a block at the least (the \
         persistent kernel{}), {limit}",
        least.smem(batch, dim).bytes,
        least.describe(),
    );
    let takes = |f: &Feed| {
        f.runs_with(target, room, batch, dim)
            && f.variant.has(acc)
            && hidden.is_multiple_of(f.units())
            && hidden / f.units() >= f.variant.min_slices
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

/// The kernel for accumulator `acc` and `feed`, allowed `smem` bytes of dynamic shared memory.
pub(super) fn function(gpu: &Gpu, acc: Accum, feed: Feed, smem: usize) -> Result<CudaFunction> {
    let name = feed.kernel(acc).ok_or_else(|| {
        let (name, acc) = (feed.variant.name, acc.suffix());
        anyhow::anyhow!("the persistent variant {name} has no kernel with {acc} accumulators")
    })?;
    let f = gpu.function(&name)?;
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?;
    Ok(f)
}

/// How many blocks of `f` (with `smem` bytes each) can be resident at once: whole clusters of
/// `cluster` blocks, if any.
pub(super) fn resident_blocks(
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
pub(super) fn cluster_size(gpu: &Gpu, f: &CudaFunction, smem: usize, blocks: usize) -> Result<u32> {
    let two = 2 * PAIR;
    Ok(
        if blocks.is_multiple_of(two) && resident_blocks(gpu, f, smem, Some(two))? >= blocks {
            two as u32
        } else {
            PAIR as u32
        },
    )
}

/// `blocks` blocks of [`THREADS`] with `smem` bytes of dynamic shared memory each.
pub(super) fn grid_config(blocks: u32, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu::target::HOPPER_SMEM;

    /// The layer engine's widths are refused with the first rule they break, in layer order;
    /// a widening layer is named as one even where it is also past the row's inputs.
    #[test]
    fn layer_widths_are_refused_by_the_first_rule_they_break() {
        let why = |hidden: &[usize], inner| layer_widths_refused(hidden, inner).unwrap_or_default();
        assert!(why(&[256, 512, 128], 256).contains("hidden layer 2 (512) is wider than"));
        assert!(why(&[512, 256, 128], 256).contains("hidden layer 1 (512) is above 256"));
        assert!(why(&[64, 40, 40], 256).contains("hidden layer 2 (40) is not a multiple of 16"));
        assert!(why(&[64, 48, 20], 256).contains("hidden layer 3 (20) is not a multiple of 8"));
        assert_eq!(layer_widths_refused(&[256, 256, 256], 256), None);
        assert_eq!(layer_widths_refused(&[64, 48, 40], 128), None);
    }

    /// MNIST's batch of 128 on each generation's PTX and shared memory a block, where every
    /// block is resident: Hopper's two whole-batch buffers (sm_80 PTX has one at most, even
    /// with the room for two), an A100's one of half the batch, a
    /// quarter in 99 KiB, and in Turing's 64 KiB with sm_75 PTX (W1 in registers; it has no
    /// kernel of half the batch), the ring of two stages in 64 KiB with sm_80 PTX, and nothing
    /// under 48 KiB.
    #[test]
    fn each_generation_takes_the_feed_its_shared_memory_holds() {
        let choose = |target: Target, kib: usize| {
            feeds_by_preference().find(|f| f.runs_with(target, kib * 1024, 128, 784))
        };
        // The bulk variant runs with as little room as the two-buffer one (and is taken only
        // for many slices).
        assert_eq!(choose(Target::SM90, 227), Some(Feed::of("bulk")));
        assert_eq!(choose(Target::SM80, 227), Some(Feed::of("single")));
        assert_eq!(choose(Target::SM80, 163), Some(Feed::of("single")));
        assert_eq!(choose(Target::SM80, 99), Some(Feed::of("quarters")));
        assert_eq!(choose(Target::SM80, 64), Some(Feed::ring("streamed", 2)));
        assert_eq!(choose(Target::SM75, 64), Some(Feed::of("quarters_regs")));
        assert_eq!(choose(Target::SM75, 227), Some(Feed::of("quarters_regs")));
        assert_eq!(choose(Target::SM80, 48), None);
        // Only sm_75's own ring of two runs there; any stage count within bounds on sm_80.
        assert!(!Feed::ring("streamed_regs", 4).runs_with(Target::SM75, HOPPER_SMEM, 8, 48));
        assert!(!Feed::ring("streamed", 2).runs_with(Target::SM75, HOPPER_SMEM, 8, 48));
        assert!(Feed::ring("streamed", 5).runs_with(Target::SM80, HOPPER_SMEM, 8, 48));
        assert!(!Feed::ring("streamed", 7).runs_with(Target::SM90, HOPPER_SMEM, 8, 48));
        assert!(!Feed::of("whole").runs_with(Target::SM75, HOPPER_SMEM, 8, 48));
        assert!(!Feed::of("single").runs_with(Target::SM75, HOPPER_SMEM, 8, 48));
        assert!(!Feed::of("quarters_regs").runs_with(Target::SM80, HOPPER_SMEM, 8, 48));
    }

    /// [`pick_feed`] on a GPU of `sms` SMs that holds one block of any kernel an SM.
    fn pick_with(target: Target, kib: usize, hidden: usize, sms: usize, acc: Accum) -> Support {
        let one_each = |_: Feed| Ok(sms);
        pick_feed(
            feeds_by_preference(),
            (target, kib * 1024, "capped"),
            (128, 784, hidden, acc),
            one_each,
        )
        .unwrap()
    }

    /// From 24 slices the two-buffer variant of Hopper PTX with fp16 accumulators adds the
    /// partial logits by bulk reductions; with fewer, or fp32 accumulators, it adds them by
    /// `red`; sm_80 PTX has one buffer at most.
    #[test]
    fn many_slices_take_the_bulk_reduction_variant() {
        let (f16, f32) = (Accum::F16, Accum::F32);
        let cases = [
            ((Target::SM90, 192, f16), "bulk"),
            ((Target::SM90, 528, f16), "bulk"),
            ((Target::SM90, 184, f16), "whole"),
            ((Target::SM80, 256, f16), "single"),
            ((Target::SM90, 256, f32), "whole"),
        ];
        for ((target, hidden, acc), name) in cases {
            let got = pick_with(target, 227, hidden, 132, acc);
            assert_eq!(
                got,
                Support::Yes(Feed::of(name)),
                "{target} {hidden} {acc:?}"
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
        let pick = |target, kib, hidden, sms| pick_with(target, kib, hidden, sms, Accum::F16);
        let (f16, f32) = (Accum::F16, Accum::F32);
        let quarters = Feed::of("quarters");
        let (wide2, bulk) = (Feed::of("wide2"), Feed::of("bulk"));
        let (ring, ring75) = (
            |stages| Feed::ring("streamed", stages),
            Feed::ring("streamed_regs", 2),
        );
        // (PTX, KiB a block, hidden, SMs, accumulator) and the feed taken. sm_75 has the
        // quarters with fp16 accumulators only. On Hopper slices of 8 units up to 528 (132
        // blocks); 1024, 1040 and 2048 take the narrowest slices that fit (1024 not 64 blocks
        // of 32); past 2,112 units the offchip kernels (one block per slice).
        let takes = [
            ((Target::SM80, 99, 128, 132, f16), quarters),
            ((Target::SM80, 99, 128, 58, f16), ring(4)),
            ((Target::SM80, 99, 256, 132, f16), quarters),
            ((Target::SM80, 99, 512, 132, f16), ring(4)),
            ((Target::SM75, 64, 128, 68, f16), Feed::of("quarters_regs")),
            ((Target::SM75, 64, 128, 40, f16), ring75),
            ((Target::SM75, 64, 128, 132, f32), ring75),
            ((Target::SM90, 227, 128, 132, f16), Feed::of("whole")),
            ((Target::SM90, 227, 256, 132, f16), bulk),
            ((Target::SM90, 227, 512, 132, f16), bulk),
            ((Target::SM90, 227, 528, 132, f16), bulk),
            ((Target::SM90, 227, 1024, 132, f16), wide2),
            ((Target::SM90, 227, 1040, 132, f16), wide2),
            ((Target::SM90, 227, 2048, 132, f16), Feed::of("wide4")),
            (
                (Target::SM90, 227, 2176, 132, f16),
                Feed::ring("offchip", 4),
            ),
            (
                (Target::SM90, 227, 4096, 132, f16),
                Feed::ring("offchip", 4),
            ),
            ((Target::SM90, 227, 512, 132, f32), Feed::of("whole")),
        ];
        for ((target, kib, hidden, sms, acc), feed) in takes {
            assert_eq!(
                pick_with(target, kib, hidden, sms, acc),
                Support::Yes(feed),
                "{target}, {kib} KiB, hidden {hidden}, {sms} SMs, {acc:?}"
            );
        }
        // 1032 is no multiple of 16: the slices of 8 are too many, and no wider slice divides it.
        let Support::No(why) = pick(Target::SM90, 227, 1032, 132) else {
            panic!("258 blocks taken on 132 SMs");
        };
        assert!(why.contains("258 blocks (2 per 8 hidden units)"), "{why}");
        let Support::No(why) = pick(Target::SM90, 227, 4352, 132) else {
            panic!("136 blocks taken on 132 SMs");
        };
        assert!(why.contains("136 blocks (1 per 32 hidden units)"), "{why}");
        assert!(why.ends_with("this GPU holds 132"), "{why}");
        // Slices of 32 units asked for at 512: 32 blocks.
        let wide = feeds_by_preference().filter(|f| f.units() == 32);
        let picked = pick_feed(
            wide,
            (Target::SM90, HOPPER_SMEM, ""),
            (128, 784, 512, Accum::F16),
            |_| Ok(132),
        );
        assert_eq!(picked.unwrap(), Support::Yes(Feed::of("wide4")));
        // No wide or offchip kernel has fp32 accumulators, nor sm_80 PTX.
        let Support::No(why) = pick_with(Target::SM90, 227, 1024, 132, Accum::F32) else {
            panic!("a wide slice taken with fp32 accumulators");
        };
        assert!(why.contains("256 blocks (2 per 8 hidden units)"), "{why}");
        assert!(matches!(pick(Target::SM80, 227, 1024, 132), Support::No(_)));
        assert!(matches!(pick(Target::SM80, 227, 4096, 132), Support::No(_)));
        assert!(matches!(
            pick_with(Target::SM90, 227, 4096, 132, f32),
            Support::No(_)
        ));
        let Support::No(why) = pick(Target::SM80, 48, 128, 132) else {
            panic!("a 48 KiB block taken");
        };
        assert!(
            why.contains("needs 63648 B of shared memory a block at the least"),
            "{why}"
        );
        assert!(why.ends_with("capped"), "{why}");
    }

    /// Batches past 128 take Hopper's four parts of up to 64 rows in two buffers each (the
    /// layout of two halves of 128); other PTX has no one-layer kernel for them.
    #[test]
    fn batches_past_128_take_four_parts_on_hopper() {
        let room = HOPPER_SMEM;
        let quartered = Feed::of("quartered");
        assert!(quartered.runs_with(Target::SM90, room, 256, 784));
        assert!(!quartered.runs_with(Target::SM90, room, 257, 784));
        assert!(!Feed::of("whole").runs_with(Target::SM90, room, 129, 784));
        assert_eq!(most_batch(Target::SM90), 256);
        assert_eq!(most_batch(Target::SM80), 128);
        let pick = |batch| {
            pick_feed(
                feeds_by_preference(),
                (Target::SM90, room, ""),
                (batch, 784, 128, Accum::F16),
                |_| Ok(132),
            )
            .unwrap()
        };
        assert_eq!(pick(256), Support::Yes(quartered));
        assert_eq!(pick(200), Support::Yes(quartered));
        assert_eq!(pick(128), Support::Yes(Feed::of("whole")));
        assert_eq!(
            quartered.describe(),
            ", the batch in 4 parts",
            "named by its parts"
        );
    }

    /// The names the first line of a run gives each feed.
    #[test]
    fn each_feed_describes_itself() {
        assert_eq!(Feed::of("whole").describe(), "");
        assert_eq!(Feed::of("bulk").describe(), "");
        assert_eq!(
            Feed::of("quarters").describe(),
            ", one batch buffer refilled after dW1, the batch in 4 parts"
        );
        assert_eq!(
            Feed::ring("streamed", 4).describe(),
            ", the batch streamed in 128-input chunks through 4 stages"
        );
        assert_eq!(
            Feed::of("wide2").describe(),
            ", 16 hidden units a block, one batch buffer refilled after dW1"
        );
        assert!(
            Feed::ring("offchip", 4)
                .describe()
                .ends_with("through 4 stages, W1's state in global memory")
        );
    }
}
