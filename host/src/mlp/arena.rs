//! A run's device memory: every buffer it touches, the model and the engine's, carved from one
//! arena before the first step, and the data set uploaded into it.
use super::data::{Dataset, Features};
use super::engine::{Choice, Engine, Layered};
use super::model::Mlp;
use super::options::Options;
use super::persistent::Persistent;
use super::shape::{EvalShape, StepShape};
use crate::cuda::{Arena, Buf, Gpu, PushKernelArg, grid_1d};
use crate::kernels;
use crate::nccl::Comm;
use anyhow::{Result, ensure};
use half::f16;

/// Everything a run touches besides the model, carved from the run's arena.
pub(super) struct Buffers {
    pub x_train: Buf<f16>,
    pub y_train: Buf<u8>,
    pub x_test: Buf<f16>,
    pub y_test: Buf<u8>,
    /// The current batch, gathered in this epoch's shuffled order.
    pub xb: Buf<f16>,
    pub yb: Buf<u8>,
    /// Mean loss and correct count of each step of the epoch.
    pub loss_steps: Buf<f32>,
    pub correct_steps: Buf<f32>,
    pub eval_loss: Buf<f32>,
    pub eval_correct: Buf<f32>,
    /// Step within the epoch and the epoch's shuffle seed, read by the captured step.
    pub step: Buf<u32>,
    pub seed: Buf<u32>,
}

impl Buffers {
    /// The data set's features and labels, onto the GPU.
    pub fn upload(&self, gpu: &Gpu, ds: &Dataset) -> Result<()> {
        upload_features(gpu, &ds.train.features, self.x_train)?;
        gpu.upload_to(self.y_train, &ds.train.labels)?;
        upload_features(gpu, &ds.test.features, self.x_test)?;
        gpu.upload_to(self.y_test, &ds.test.labels)
    }
}

/// The features of a split into fp16 on the GPU: pixels are normalised there (the raw bytes
/// pass through a temporary buffer, freed before training starts), values are converted here.
fn upload_features(gpu: &Gpu, features: &Features, dst: Buf<f16>) -> Result<()> {
    match features {
        Features::Pixels { data, mean, std } => {
            let raw = gpu.upload(data)?;
            let f = gpu.function(kernels::NORMALIZE_U8)?;
            let (n, inv) = (data.len() as u32, 1.0 / std);
            let mut b = gpu.stream.launch_builder(&f);
            b.arg(&raw).arg(&dst.ptr).arg(&n).arg(mean).arg(&inv);
            unsafe { b.launch(grid_1d(data.len(), 256)) }?;
            gpu.sync()
        }
        Features::Values(v) => gpu.upload_to(
            dst,
            &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
        ),
    }
}

/// Parameters of an MLP with layer widths `sizes` (weights and biases), if the count fits a
/// usize.
fn parameter_count(sizes: &[usize]) -> Option<usize> {
    sizes.windows(2).try_fold(0usize, |a, w| {
        a.checked_add(w[0].checked_mul(w[1])?.checked_add(w[1])?)
    })
}

/// Before any host buffer that size: the parameters alone (fp32 value and momentum, fp16 copy
/// and gradient, 12 bytes each) must fit the GPU.
pub(super) fn ensure_parameters_fit(gpu: &Gpu, sizes: &[usize]) -> Result<()> {
    let total = gpu.mem_info()?.1;
    let count = parameter_count(sizes);
    ensure!(
        count.is_some_and(|c| c.saturating_mul(12) <= total),
        "layers {sizes:?} have {} parameters, which at 12 bytes each do not fit the GPU's {} MiB",
        count.map_or("too many".into(), |c| c.to_string()),
        total >> 20
    );
    Ok(())
}

/// What the carving of a run's arena depends on besides its options, data and engine.
pub(super) struct Footprint<'s> {
    pub sizes: &'s [usize],
    pub step: StepShape,
    pub eval: EvalShape,
}

/// A run's arena and what was carved from it, in the order a run drops them: the engine (whose
/// drop waits for a shuffle ahead) before the arena its buffers come from.
pub(super) struct Carved<'g> {
    pub engine: Engine,
    pub model: Mlp<'g>,
    pub buffers: Buffers,
    pub arena: Arena,
    /// Bytes of the arena, and how far the driver's free memory fell when it was allocated.
    pub bytes: usize,
    pub freed: usize,
}

/// Everything the run touches comes from one arena, sized by carving it once without memory;
/// a replica's (with `comm`) is in NCCL's symmetric memory where NCCL has it.
pub(super) fn carve_run<'g>(
    gpu: &'g Gpu,
    o: &Options,
    ds: &Dataset,
    footprint: &Footprint,
    (choice, comm): (&Choice, Option<&Comm>),
) -> Result<Carved<'g>> {
    let carve = |arena: &mut Arena| carve(gpu, o, ds, footprint, choice, arena);
    let mut measure = Arena::measuring();
    carve(&mut measure)?;
    let (free_before, _) = gpu.mem_info()?;
    let mut arena = match comm {
        Some(comm) => replica_arena(gpu, comm, measure.used())?,
        None => Arena::new(gpu, measure.used())?,
    };
    let (buffers, model, engine) = carve(&mut arena)?;
    let (free_after, _) = gpu.mem_info()?;
    Ok(Carved {
        engine,
        model,
        buffers,
        arena,
        bytes: measure.used(),
        freed: free_before.saturating_sub(free_after),
    })
}

/// A replica's arena of `bytes`: in symmetric memory registered with `comm` where NCCL has it,
/// so that the all-reduce of the gradients (carved from it) runs NCCL's symmetric kernels; else
/// plain device memory. Every replica's arena has the same size, as registration asks.
fn replica_arena(gpu: &Gpu, comm: &Comm, bytes: usize) -> Result<Arena> {
    Arena::ensure_free(gpu, bytes)?;
    match comm.symmetric_memory(bytes)? {
        Some(mem) => {
            let (base, bytes) = (mem.ptr(), mem.bytes());
            // SAFETY: the arena owns `mem`, which NCCL allocated on this GPU.
            unsafe { Arena::over(gpu, mem, base, bytes) }
        }
        None => Arena::new(gpu, bytes),
    }
}

/// Carves every buffer of a run from `arena`: the same calls size the arena (on a measuring
/// one) and then fill it.
fn carve<'g>(
    gpu: &'g Gpu,
    o: &Options,
    ds: &Dataset,
    footprint: &Footprint,
    choice: &Choice,
    arena: &mut Arena,
) -> Result<(Buffers, Mlp<'g>, Engine)> {
    let (step, eval) = (&footprint.step, &footprint.eval);
    let b = Buffers {
        x_train: arena.alloc(ds.train.features.len())?,
        y_train: arena.alloc(ds.train.count)?,
        x_test: arena.alloc(ds.test.features.len())?,
        y_test: arena.alloc(ds.test.count)?,
        xb: arena.alloc(step.rows * ds.train.dim)?,
        yb: arena.alloc(step.rows)?,
        loss_steps: arena.alloc(step.steps)?,
        correct_steps: arena.alloc(step.steps)?,
        eval_loss: arena.alloc(eval.chunks)?,
        eval_correct: arena.alloc(eval.chunks)?,
        step: arena.alloc(1)?,
        seed: arena.alloc(1)?,
    };
    let sizes = footprint.sizes;
    let model = Mlp::new(gpu, arena, sizes, step, eval.rows, o.accum, o.config)?;
    let engine = match choice {
        Choice::Persistent(feed) => Engine::Persistent(Box::new(Persistent::new(
            gpu,
            arena,
            sizes,
            (step.batch, step.steps),
            o.accum,
            *feed,
        )?)),
        Choice::Layered(why) => Engine::Layered(Layered {
            why_not_persistent: why.clone(),
            graph: None,
        }),
    };
    Ok((b, model, engine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_overflow_to_none() {
        assert_eq!(
            parameter_count(&[784, 128, 10]),
            Some(784 * 128 + 128 + 128 * 10 + 10)
        );
        assert_eq!(parameter_count(&[784, usize::MAX / 2, 10]), None);
    }
}
