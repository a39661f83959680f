//! The training loop: an MLP trained with the Rust kernels, every buffer carved from one arena
//! before the first step, and the steps replayed from a CUDA graph of several.
use super::arena::{Buffers, Footprint, carve_run, ensure_parameters_fit};
use super::checkpoint;
use super::data::Dataset;
use super::engine::{Choice, Engine, graph_steps};
use super::launchers;
use super::layer;
use super::metrics::{Metrics, progress_bar};
use super::model::Mlp;
use super::options::{Options, Parallel, validate};
use super::params;
use super::persistent::Persistent;
use super::reduce::{Reduction, pieces};
use super::shape::{EvalShape, StepShape};
use super::split::{self, Split};
use crate::cuda::{Arena, Gpu, dptr};
use crate::gemm::SgdStep;
use crate::nccl::Comm;
use anyhow::{Context, Result, anyhow, ensure};
use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use gpu::params::GatherBatch;
use half::f16;
use indicatif::ProgressBar;
use std::time::Instant;

/// Per-epoch results.
pub struct Epoch {
    /// Counted from 1; 0 for the evaluation of loaded weights.
    pub epoch: usize,
    /// Mean of the steps' losses (NaN where nothing trained).
    pub train_loss: f32,
    /// Mean cross-entropy over the test set after the epoch.
    pub test_loss: f32,
    /// Fraction of the test set classified correctly, 0 to 1.
    pub test_accuracy: f32,
    /// Training time of the epoch, evaluation excluded.
    pub seconds: f64,
    /// Mean loss of each step of the epoch.
    pub step_losses: Vec<f32>,
}

/// Trains an MLP on `ds` as `o` asks, returning each epoch's results (one evaluation with
/// `--epochs 0`).
pub fn train(gpu: &Gpu, o: &Options, ds: &Dataset) -> Result<Vec<Epoch>> {
    ensure!(
        o.gpus == 1,
        "training on several GPUs goes through train_data_parallel"
    );
    Trainer::new(gpu, o, ds, None)?.run()
}

/// The first line a run of `o` on `ds` prints (the model, the GPU and its PTX, the engine and,
/// where the persistent kernel does not apply, why), from the run set up but not trained.
pub fn header(gpu: &Gpu, o: &Options, ds: &Dataset) -> Result<String> {
    let o = Options {
        quiet: true,
        ..o.clone()
    };
    ensure!(o.gpus == 1, "a data-parallel run's header is rank 0's");
    Trainer::new(gpu, &o, ds, None)?.header()
}

/// One training run: its GPU, options and data, and everything carved for it from one arena.
/// A data-parallel run has a trainer per GPU, each a replica with its rank's communicator.
pub(super) struct Trainer<'a> {
    gpu: &'a Gpu,
    o: &'a Options,
    ds: &'a Dataset,
    comm: Option<&'a Comm>,
    /// The step on this GPU: the batch, this GPU's rows of it, the steps of an epoch.
    shape: StepShape,
    /// Layer widths, input first (of the whole model, where the hidden layer is split).
    sizes: Vec<usize>,
    /// This GPU's block of the hidden layer, where it is split over GPUs.
    split: Option<Split>,
    /// The parameters this GPU's model starts from.
    params: Vec<f32>,
    /// Test rows of one evaluation forward pass, and the passes that cover the test set.
    eval: EvalShape,
    // Dropped in this order: the engine (whose drop waits for a shuffle ahead) before the arena
    // its buffers come from.
    engine: Engine,
    /// A replica's gradient sum; `None` on one GPU.
    reduction: Option<Reduction>,
    model: Mlp<'a>,
    b: Buffers,
    _arena: Arena,
}

impl<'a> Trainer<'a> {
    /// Checks the run, chooses its engine, carves and fills its arena.
    pub(super) fn new(
        gpu: &'a Gpu,
        o: &'a Options,
        ds: &'a Dataset,
        comm: Option<&'a Comm>,
    ) -> Result<Trainer<'a>> {
        validate(o)?;
        ensure!(
            o.batch <= ds.train.count,
            "--batch {} is larger than the training set ({} examples)",
            o.batch,
            ds.train.count
        );
        let mut sizes = vec![ds.train.dim];
        sizes.extend(&o.hidden);
        sizes.push(ds.classes);
        ensure_parameters_fit(gpu, &sizes)?;
        let params = match &o.load {
            Some(p) => checkpoint::load(p, &sizes)?,
            None => params::init_params(&sizes, o.init, o.seed),
        };
        let split = comm
            .filter(|_| o.sharing() == Parallel::Tensor)
            .map(|c| Split {
                rank: c.rank(),
                world: c.world(),
            });
        // This GPU's model: the whole one, or its block of the hidden layer.
        let (local, params) = match split {
            Some(s) => (s.local_sizes(&sizes), s.local_params(&sizes, &params)),
            None => (sizes.clone(), params),
        };
        let replicas = comm.filter(|_| split.is_none()).map_or(1, |c| c.world());
        let shape = StepShape::new(o.batch, ds.train.count, replicas);
        let choice = Choice::new(gpu, o, &local, &shape, comm.is_some())?;
        if let (true, Choice::Layered(why)) = (o.phases, &choice) {
            anyhow::bail!(
                "--phases traces the persistent kernel, and this run takes the layered step{}",
                why.as_ref().map_or(String::new(), |why| format!(": {why}"))
            );
        }
        let eval = EvalShape::new(ds.test.count);
        let footprint = Footprint {
            sizes: &local,
            step: shape,
            eval,
        };
        let carved = carve_run(gpu, o, ds, &footprint, (&choice, comm))?;
        let (bytes, freed) = (carved.bytes, carved.freed);
        let reduction = match (comm, split) {
            (Some(_), None) => Some(Reduction::new(gpu, &local, pieces(o))?),
            _ => None,
        };
        let mut engine = carved.engine;
        if let (true, Engine::Persistent(p)) = (o.phases, &mut engine) {
            p.record_phases(gpu)?;
        }
        let t = Trainer {
            gpu,
            o,
            ds,
            comm,
            shape,
            sizes,
            split,
            params,
            eval,
            engine,
            reduction,
            model: carved.model,
            b: carved.buffers,
            _arena: carved.arena,
        };
        t.upload()?;
        if !o.quiet {
            t.print_header()?;
            println!(
                "device memory: one arena of {:.3} MiB for the whole run (driver's free memory fell by {:.1} MiB)",
                bytes as f64 / 1048576.0,
                freed as f64 / 1048576.0
            );
        }
        Ok(t)
    }

    /// The data set and the starting parameters, onto the GPU.
    fn upload(&self) -> Result<()> {
        self.b.upload(self.gpu, self.ds)?;
        self.model.set_params(&self.params)
    }

    fn print_header(&self) -> Result<()> {
        println!("{}", self.header()?);
        Ok(())
    }

    /// The first line of a run: the model and data, the GPU as the host sees it (its PTX, a
    /// shared-memory cap), the hyperparameters and the engine.
    fn header(&self) -> Result<String> {
        let (o, ds) = (self.o, self.ds);
        let sizes: Vec<_> = self.sizes.iter().map(|s| s.to_string()).collect();
        Ok(format!(
            "{} MLP {} on {} ({}): {} train / {} test examples, batch {}, {} steps/epoch, lr {} momentum {}, init {:?}, {} accumulation, {}",
            ds.name,
            sizes.join("-"),
            self.gpu.name()?,
            self.gpu.describe_ptx(),
            ds.train.count,
            ds.test.count,
            self.shape.batch,
            self.shape.steps,
            o.lr,
            o.momentum,
            o.init,
            o.accum.suffix(),
            self.engine.describe(o.graph),
        ) + &self.reduction.as_ref().map_or(String::new(), |r| {
            format!(", gradients summed in {} pieces", r.pieces())
        }))
    }

    /// Every epoch, or with `--epochs 0` one evaluation of the loaded weights.
    pub(super) fn run(mut self) -> Result<Vec<Epoch>> {
        if self.o.epochs == 0 {
            return self.evaluate_only();
        }
        self.capture_step()?;
        let bar = progress_bar(self.o.quiet, self.shape.steps);
        let mut metrics = Metrics::new(self.shape.steps);
        let start = Instant::now();
        let mut results = Vec::new();
        for epoch in 1..=self.o.epochs {
            results.push(self.epoch(epoch, &bar, &mut metrics, start)?);
        }
        if let Some(p) = &self.o.metrics {
            metrics.write(p)?;
        }
        if !self.o.quiet {
            println!("{}", summary(self.o, &results));
        }
        if let Engine::Persistent(p) = &self.engine
            && let Some(table) = p.phase_table(self.gpu)?
        {
            print!("{table}");
        }
        Ok(results)
    }

    fn evaluate_only(&self) -> Result<Vec<Epoch>> {
        let (test_loss, test_accuracy) = self.evaluate()?;
        println!(
            "evaluation of {}: test loss {test_loss:.4}, test accuracy {:.2}%",
            self.o.load.as_ref().unwrap().display(),
            100.0 * test_accuracy
        );
        Ok(vec![Epoch {
            epoch: 0,
            train_loss: f32::NAN,
            test_loss,
            test_accuracy,
            seconds: 0.0,
            step_losses: vec![],
        }])
    }

    /// For the layered engine replaying a graph: one warm-up step outside the graph (sets
    /// kernel attributes, loads modules), undone by restoring the initial weights so that the
    /// graph and eager runs train identically; then [`graph_steps`] steps captured.
    fn capture_step(&mut self) -> Result<()> {
        if !self.o.graph || !matches!(self.engine, Engine::Layered(_)) {
            return Ok(());
        }
        let gpu = self.gpu;
        gpu.upload_to(self.b.seed, &[0])?;
        gpu.upload_to(self.b.step, &[0])?;
        self.step()?;
        self.model.set_params(&self.params)?;
        gpu.sync()?;
        // The driver rejects any allocation, free or synchronisation this thread makes while the
        // step is captured, so a successful capture proves the step has none. (Thread-local
        // mode: each data-parallel replica captures on its own thread while others may still
        // be allocating.)
        let s = &gpu.stream;
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let captured = (0..graph_steps(self.shape.steps)).try_for_each(|_| self.step());
        let g = s.end_capture(CUgraphInstantiate_flags(0))?;
        captured?;
        let graph = Some(g.context("stream capture produced no graph")?);
        if let Engine::Layered(l) = &mut self.engine {
            l.graph = graph;
        }
        Ok(())
    }

    /// One training step, as a sequence of launches on the stream: nothing is allocated, copied
    /// or synchronised inside it, so it can be captured as a graph. A replica's gradients are
    /// of its rows over the whole batch's count, so that their sum over replicas is the batch's.
    fn step(&self) -> Result<()> {
        let (o, b, model, rows) = (self.o, &self.b, &self.model, self.shape.rows);
        self.gather()?;
        self.forward(b.xb.ptr, rows)?;
        let sums = (b.loss_steps.ptr, b.correct_steps.ptr);
        let grad_scale = Some(1.0 / self.shape.batch as f32);
        let step = SgdStep {
            lr: o.lr,
            momentum: o.momentum,
        };
        // On one GPU every parameter takes its step in the kernel that makes its gradient, or
        // (a weight gradient whose step runs apart, `plans::steps_apart`, or on a version that
        // takes none) a launch right after it; replicas store their gradients, sum them, then
        // step.
        if let (Some(comm), Some(reduction)) = (self.comm, &self.reduction) {
            model.loss(b.yb.ptr, rows, grad_scale, sums, b.step.ptr, None)?;
            return reduction.backward_and_step(model, comm, (b.xb.ptr, rows), step);
        }
        // Of a split hidden layer, rank 0 alone holds and steps the logits' bias, the last
        // parameters of the flat buffer.
        let steps_bias = self.split.is_none_or(|s| s.rank == 0);
        let bias_step = steps_bias.then_some(step);
        model.loss(b.yb.ptr, rows, grad_scale, sums, b.step.ptr, bias_step)?;
        model.backward(b.xb.ptr, rows, Some(step))
    }

    /// The forward pass over `rows` rows of `x`; of a split hidden layer, the logits then summed
    /// over the ranks' blocks.
    fn forward(&self, x: u64, rows: usize) -> Result<()> {
        self.model.forward(x, rows)?;
        match (self.split, self.comm) {
            (Some(_), Some(comm)) => {
                let classes = *self.sizes.last().unwrap();
                let logits = rows * layer::stride(classes);
                comm.sum_in_place::<f16>(self.model.logits(), logits, &self.gpu.stream)
            }
            _ => Ok(()),
        }
    }

    /// This GPU's share of the batch: replica `r`'s of a data-parallel run, else the whole.
    fn replica_rank(&self) -> usize {
        match self.split {
            Some(_) => 0,
            None => self.comm.map_or(0, |c| c.rank()),
        }
    }

    /// Gathers this GPU's rows of the batch of step `*step` of the epoch keyed `*seed` into
    /// `xb`/`yb`: replica `r` takes the `r`-th share.
    fn gather(&self) -> Result<()> {
        let (b, train) = (&self.b, &self.ds.train);
        let rank = self.replica_rank();
        let p = GatherBatch {
            x: b.x_train.ptr,
            y: b.y_train.ptr,
            n: train.count as u32,
            dim: train.dim as u32,
            xb: b.xb.ptr,
            yb: b.yb.ptr,
            rows: self.shape.rows as u32,
            // The kernel's rows of a whole step: the batch over every replica.
            step_rows: self.shape.batch as u32,
            first: self.shape.first_row(rank) as u32,
            step: b.step.ptr,
            seed: b.seed.ptr,
        };
        launchers::gather_batch(self.gpu, p)
    }

    /// Test loss and accuracy of the current weights; not a number on replicas but rank 0's
    /// (every rank of a split hidden layer takes part, and has them).
    fn evaluate(&self) -> Result<(f32, f32)> {
        if self.split.is_none() && self.comm.is_some_and(|c| c.rank() != 0) {
            return Ok((f32::NAN, f32::NAN));
        }
        let (b, test, eval) = (&self.b, &self.ds.test, self.eval);
        for c in 0..eval.chunks {
            let start = c * eval.rows;
            let rows = eval.rows_of(c, test.count);
            self.forward(b.x_test.at(start * test.dim), rows)?;
            let sums = (b.eval_loss.at(c), b.eval_correct.at(c));
            self.model
                .loss(b.y_test.at(start), rows, None, sums, 0, None)?;
        }
        let l = self.gpu.download_buf(b.eval_loss)?;
        let c = self.gpu.download_buf(b.eval_correct)?;
        let mut loss = 0.0;
        for (k, v) in l.iter().enumerate() {
            loss += v * eval.rows_of(k, test.count) as f32;
        }
        Ok((
            loss / test.count as f32,
            c.iter().sum::<f32>() / test.count as f32,
        ))
    }

    /// Trains epoch `epoch` (counted from 1), evaluates it and records it.
    fn epoch(
        &self,
        epoch: usize,
        bar: &ProgressBar,
        metrics: &mut Metrics,
        start: Instant,
    ) -> Result<Epoch> {
        let (gpu, o, steps) = (self.gpu, self.o, self.shape.steps);
        bar.reset();
        bar.set_prefix(epoch.to_string());
        let t0 = Instant::now();
        match &self.engine {
            Engine::Persistent(p) => self.persistent_epoch(p, epoch)?,
            Engine::Layered(l) => self.layered_epoch(l.graph.as_ref(), epoch, bar)?,
        }
        gpu.sync()?;
        let seconds = t0.elapsed().as_secs_f64();
        bar.set_position(steps as u64);
        let losses = self.step_losses()?;
        if let Some(bad) = losses.iter().position(|l| !l.is_finite()) {
            bar.abandon();
            return Err(self.diverged(epoch, &losses, bad, metrics, start));
        }
        let train_loss = losses.iter().sum::<f32>() / steps as f32;
        let (test_loss, test_accuracy) = self.evaluate()?;
        bar.finish_and_clear();
        if !o.quiet && (epoch.is_multiple_of(o.print_every) || epoch == o.epochs) {
            println!(
                "epoch {epoch:>3}  train loss {train_loss:.4}  test loss {test_loss:.4}  test accuracy {:.2}%  {:.6} s  ({:.0} samples/s)",
                100.0 * test_accuracy,
                seconds,
                self.shape.epoch_examples() as f64 / seconds
            );
        }
        let t = start.elapsed().as_secs_f64();
        metrics.add_steps(epoch, &losses, t);
        metrics.add_epoch(epoch, test_accuracy, t);
        if let Some(p) = &o.save {
            let params = self.full_params()?;
            if self.comm.is_none_or(|c| c.rank() == 0) {
                checkpoint::save(p, &self.sizes, &params)?;
            }
        }
        Ok(Epoch {
            epoch,
            train_loss,
            test_loss,
            test_accuracy,
            seconds,
            step_losses: losses,
        })
    }

    /// The whole epoch in one launch (a few milliseconds: no progress to show inside), over
    /// rows shuffled before it: the first epoch's here, each next one's while the epoch before
    /// it trains, beside the launch (queued after it, to start after the previous epoch, which
    /// read its buffer).
    fn persistent_epoch(&self, p: &Persistent, epoch: usize) -> Result<()> {
        let (gpu, o, b) = (self.gpu, self.o, &self.b);
        let train_set = (b.x_train.ptr, b.y_train.ptr, self.ds.train.count);
        let buf = epoch % 2;
        if epoch == 1 {
            p.shuffle(gpu, train_set, epoch_seed(o.seed, epoch), buf, None)?;
        }
        let ahead = if epoch < o.epochs {
            Some(p.mark_shuffle_ahead(gpu)?)
        } else {
            None
        };
        let sums = (b.loss_steps.ptr, b.correct_steps.ptr);
        p.run(
            gpu,
            &self.model,
            buf,
            sums,
            (0, self.shape.steps),
            o.lr,
            o.momentum,
        )?;
        if let Some(mark) = ahead {
            let seed = epoch_seed(o.seed, epoch + 1);
            p.shuffle(gpu, train_set, seed, 1 - buf, Some(mark))?;
        }
        Ok(())
    }

    /// The whole model's fp32 parameters: this GPU's, or of a split hidden layer every rank's
    /// blocks, gathered (every rank takes part).
    fn full_params(&self) -> Result<Vec<f32>> {
        let (Some(s), Some(comm)) = (self.split, self.comm) else {
            return self.model.params();
        };
        let (gpu, own) = (self.gpu, self.model.w32);
        let all = gpu.zeros::<f32>(s.world * own.len)?;
        let send_recv = (own.ptr, dptr(&all, &gpu.stream));
        comm.all_gather::<f32>(send_recv, own.len, &gpu.stream)?;
        Ok(split::join(&self.sizes, s.world, &gpu.download(&all)?))
    }

    /// The mean loss of each step of the epoch: over every replica's rows, the same on each.
    fn step_losses(&self) -> Result<Vec<f32>> {
        let (gpu, losses) = (self.gpu, self.b.loss_steps);
        let Some(comm) = self.comm.filter(|_| self.split.is_none()) else {
            return gpu.download_buf(losses);
        };
        comm.sum_in_place::<f32>(losses.ptr, losses.len, &gpu.stream)?;
        let world = comm.world() as f32;
        Ok(gpu
            .download_buf(losses)?
            .iter()
            .map(|l| l / world)
            .collect())
    }

    /// Every step of the epoch, replayed from `graph` or launched eagerly.
    fn layered_epoch(
        &self,
        graph: Option<&CudaGraph>,
        epoch: usize,
        bar: &ProgressBar,
    ) -> Result<()> {
        let gpu = self.gpu;
        gpu.upload_to(self.b.seed, &[epoch_seed(self.o.seed, epoch)])?;
        gpu.upload_to(self.b.step, &[0])?;
        let per_launch = graph.map_or(1, |_| graph_steps(self.shape.steps));
        for k in (0..self.shape.steps).step_by(per_launch) {
            match graph {
                Some(g) => g.launch()?,
                None => self.step()?,
            }
            // Progress needs the GPU to have caught up; everything else stays on the device.
            let done = k + per_launch;
            if done / 64 > k / 64 {
                gpu.sync()?;
                bar.set_position(done as u64);
            }
        }
        Ok(())
    }

    /// The error of an epoch whose step `bad` has a loss that is not finite, after writing the
    /// metrics so far, through that step.
    fn diverged(
        &self,
        epoch: usize,
        losses: &[f32],
        bad: usize,
        metrics: &mut Metrics,
        start: Instant,
    ) -> anyhow::Error {
        if let Some(p) = &self.o.metrics {
            metrics.add_steps(epoch, &losses[..=bad], start.elapsed().as_secs_f64());
            if let Err(e) = metrics.write(p) {
                return e;
            }
        }
        let kept = match &self.o.save {
            Some(p) if epoch > 1 => format!("; the last good checkpoint is {}", p.display()),
            Some(p) => format!("; nothing was saved to {}", p.display()),
            None => String::new(),
        };
        anyhow!(
            "training diverged: loss is {} at epoch {epoch}, step {bad} (try a smaller --lr){kept}",
            losses[bad]
        )
    }
}

/// The last line of a run of `o` that trained `results` (one per epoch): its time, the final
/// accuracy and where the weights are. A quiet run's caller prints it where it wants that line
/// alone.
pub fn summary(o: &Options, results: &[Epoch]) -> String {
    let train_s: f64 = results.iter().map(|e| e.seconds).sum();
    let accuracy = results.last().map_or(f32::NAN, |e| e.test_accuracy);
    format!(
        "done: {} epochs in {train_s:.3} s of training ({:.6} s/epoch), final test accuracy {:.2}%{}",
        o.epochs,
        train_s / o.epochs as f64,
        100.0 * accuracy,
        o.save
            .as_ref()
            .map(|p| format!(", weights in {}", p.display()))
            .unwrap_or_default()
    )
}

/// The key of epoch `epoch`'s shuffle.
fn epoch_seed(seed: u64, epoch: usize) -> u32 {
    (seed as u32).wrapping_mul(1000).wrapping_add(epoch as u32)
}
