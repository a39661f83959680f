//! The training loop: an MLP trained with the Rust kernels, every buffer carved from one arena
//! before the first step, and the steps replayed from a CUDA graph of several.
use super::model::{self, Init, Mlp};
use super::persistent::{self, Feed, Persistent, Support};
use super::{Dataset, Features, checkpoint};
use crate::cuda::{Arena, Buf, Gpu, PushKernelArg, grid_1d};
use crate::gemm::{SgdStep, Version};
use crate::kernels;
use crate::nccl::Comm;
use anyhow::{Context, Result, anyhow, ensure};
use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use gpu::gemm::Accum;
use gpu::params::GatherBatch;
use half::f16;
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A training run: the model's hidden layers, SGD's hyperparameters, the engine, and the files
/// it reads and writes. The command line's flags fill it; [`validate`] checks it.
#[derive(Clone)]
pub struct Options {
    /// Hidden layer widths; the data set gives the input and output widths.
    pub hidden: Vec<usize>,
    /// Passes over the training set; 0 only evaluates the weights of `load`.
    pub epochs: usize,
    /// Examples per step.
    pub batch: usize,
    /// Learning rate of SGD.
    pub lr: f32,
    /// Momentum of SGD, in [0, 1).
    pub momentum: f32,
    pub init: Init,
    /// Seed of the initial weights and of each epoch's shuffle.
    pub seed: u64,
    /// Accumulator of the tensor-core products.
    pub accum: Accum,
    /// Replay the layered engine's steps from a CUDA graph rather than launch each kernel.
    pub graph: bool,
    /// Train with the layered engine (a kernel per operation) even where the persistent kernel
    /// applies.
    pub layered: bool,
    /// Hidden units a block of the persistent kernel takes (8, 16 or 32); `None`: as
    /// `persistent::support` chooses.
    pub slice_units: Option<usize>,
    /// One GEMM configuration for every product of the layered engine, instead of the choice
    /// for each shape.
    pub config: Option<Version>,
    /// A CSV file for each step's loss and each epoch's accuracy.
    pub metrics: Option<PathBuf>,
    /// A safetensors file ([`checkpoint`]) for the weights, written after every epoch.
    pub save: Option<PathBuf>,
    /// A safetensors file to start from instead of initial weights.
    pub load: Option<PathBuf>,
    /// Print nothing while training (an evaluation of `load` alone still prints its result).
    pub quiet: bool,
    /// Print one line every this many epochs (and after the last).
    pub print_every: usize,
    /// GPUs to train on, data parallel: each takes `batch / gpus` rows of every step.
    pub gpus: usize,
}

impl Default for Options {
    /// What `host mnist` runs with no flags.
    fn default() -> Options {
        Options {
            hidden: vec![128],
            epochs: 10,
            batch: 128,
            lr: 0.05,
            momentum: 0.9,
            init: Init::Kaiming,
            seed: 0,
            accum: Accum::F16,
            graph: true,
            layered: false,
            slice_units: None,
            config: None,
            metrics: None,
            save: None,
            load: None,
            quiet: false,
            print_every: 1,
            gpus: 1,
        }
    }
}

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

/// Everything a run touches besides the model, carved from the run's arena.
struct Buffers {
    x_train: Buf<f16>,
    y_train: Buf<u8>,
    x_test: Buf<f16>,
    y_test: Buf<u8>,
    /// The current batch, gathered in this epoch's shuffled order.
    xb: Buf<f16>,
    yb: Buf<u8>,
    /// Mean loss and correct count of each step of the epoch.
    loss_steps: Buf<f32>,
    correct_steps: Buf<f32>,
    eval_loss: Buf<f32>,
    eval_correct: Buf<f32>,
    /// Step within the epoch and the epoch's shuffle seed, read by the captured step.
    step: Buf<u32>,
    seed: Buf<u32>,
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

/// Refuses options no run can take, naming the flag to change. It needs neither the data nor the
/// GPU, so the command line calls it before either.
pub fn validate(o: &Options) -> Result<()> {
    ensure!(
        !o.hidden.is_empty() && o.hidden.iter().all(|&h| h > 0),
        "--hidden needs positive widths, e.g. 128 or 512,256"
    );
    ensure!(o.batch > 0, "--batch must be positive");
    ensure!(
        o.lr > 0.0 && o.lr.is_finite(),
        "--lr must be a positive finite number"
    );
    ensure!(
        (0.0..1.0).contains(&o.momentum),
        "--momentum must be in [0, 1)"
    );
    ensure!(
        o.epochs > 0 || o.load.is_some(),
        "--epochs 0 only evaluates, which needs --load"
    );
    ensure!(
        o.epochs > 0 || (o.save.is_none() && o.metrics.is_none()),
        "--epochs 0 only evaluates: it writes no --save or --metrics file"
    );
    ensure!(o.print_every > 0, "--print-every must be positive");
    ensure!(o.gpus > 0, "--gpus must be at least 1");
    ensure!(
        o.batch.is_multiple_of(o.gpus),
        "--batch {} does not split evenly over --gpus {}",
        o.batch,
        o.gpus
    );
    ensure!(
        o.gpus == 1 || o.epochs > 0,
        "--epochs 0 evaluates on one GPU: drop --gpus"
    );
    // Files written during or after training go to directories that exist: found out now, not
    // after the last epoch.
    for (flag, path) in [("--metrics", &o.metrics), ("--save", &o.save)] {
        if let Some(path) = path
            && let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            ensure!(
                dir.is_dir(),
                "{flag} {}: directory {} does not exist",
                path.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// Parameters of an MLP with layer widths `sizes` (weights and biases), if the count fits a
/// usize.
fn parameter_count(sizes: &[usize]) -> Option<usize> {
    sizes.windows(2).try_fold(0usize, |a, w| {
        a.checked_add(w[0].checked_mul(w[1])?.checked_add(w[1])?)
    })
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

/// How a run trains each epoch.
enum Engine {
    /// One launch of the persistent kernel runs the whole epoch.
    Persistent(Box<Persistent>),
    /// One kernel per operation of each step.
    Layered(Layered),
}

struct Layered {
    /// Why the persistent kernel does not train this run; `None` where the run asked for the
    /// layered engine.
    why_not_persistent: Option<String>,
    /// [`graph_steps`] steps captured in one graph, replayed until the epoch is done; `None`
    /// for eager launches.
    graph: Option<CudaGraph>,
}

/// Steps one graph holds at most. Replaying several steps a launch saves the GPU the gap between
/// two graph launches at each step; the gain levels off well before 16 (`docs/gemm.md`, "Fewer
/// launches in the layered step").
const GRAPH_STEPS: usize = 16;

/// Steps captured in the layered engine's graph: the largest divisor of the epoch's `steps` up
/// to [`GRAPH_STEPS`], so that whole replays make the epoch.
fn graph_steps(steps: usize) -> usize {
    (1..=GRAPH_STEPS)
        .rev()
        .find(|k| steps.is_multiple_of(*k))
        .unwrap_or(1)
}

/// The engine a run asks for and the GPU allows, decided before anything is carved.
enum Choice {
    Persistent(Feed),
    /// With why the persistent kernel does not apply, where the run did not ask for this.
    Layered(Option<String>),
}

impl Choice {
    /// The persistent kernel trains whatever it supports on one GPU, unless the run asks for the
    /// layered engine (or for what only it has: a forced GEMM configuration, eager launches).
    fn new(gpu: &Gpu, o: &Options, sizes: &[usize], steps: usize, replica: bool) -> Result<Choice> {
        if o.layered || o.config.is_some() || !o.graph {
            return Ok(Choice::Layered(None));
        }
        if replica {
            let why = "it trains on one GPU, and this run is data parallel";
            return Ok(Choice::Layered(Some(why.into())));
        }
        Ok(
            match persistent::support_sliced(gpu, sizes, o.batch, steps, o.accum, o.slice_units)? {
                Support::Yes(feed) => Choice::Persistent(feed),
                Support::No(why) => Choice::Layered(Some(why)),
            },
        )
    }
}

/// One training run: its GPU, options and data, and everything carved for it from one arena.
/// A data-parallel run has a trainer per GPU, each a replica with its rank's communicator.
pub(super) struct Trainer<'a> {
    gpu: &'a Gpu,
    o: &'a Options,
    ds: &'a Dataset,
    comm: Option<&'a Comm>,
    /// Rows of each step on this GPU: the batch, or a replica's share of it.
    rows: usize,
    /// Layer widths, input first.
    sizes: Vec<usize>,
    /// The parameters training starts from.
    params: Vec<f32>,
    /// Steps of an epoch: the last partial batch is dropped.
    steps: usize,
    /// Test rows of one evaluation forward pass, and the passes that cover the test set.
    eval_rows: usize,
    eval_chunks: usize,
    // Dropped in this order: the engine (whose drop waits for a shuffle ahead) before the arena
    // its buffers come from.
    engine: Engine,
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
            None => model::init_params(&sizes, o.init, o.seed),
        };
        let steps = ds.train.count / o.batch;
        let rows = o.batch / comm.map_or(1, |c| c.world());
        let choice = Choice::new(gpu, o, &sizes, steps, comm.is_some())?;
        let eval_rows = ds.test.count.min(8192);
        let eval_chunks = ds.test.count.div_ceil(eval_rows);
        let footprint = Footprint {
            sizes: &sizes,
            rows,
            steps,
            eval_rows,
            eval_chunks,
        };
        let carve = |arena: &mut Arena| carve(gpu, o, ds, &footprint, &choice, arena);
        // Everything the run touches comes from one arena, sized by carving it once without
        // memory.
        let mut measure = Arena::measuring();
        carve(&mut measure)?;
        let (free_before, _) = gpu.mem_info()?;
        let mut arena = Arena::new(gpu, measure.used())?;
        let (b, model, engine) = carve(&mut arena)?;
        let (free_after, _) = gpu.mem_info()?;
        let t = Trainer {
            gpu,
            o,
            ds,
            comm,
            rows,
            sizes,
            params,
            steps,
            eval_rows,
            eval_chunks,
            engine,
            model,
            b,
            _arena: arena,
        };
        t.upload()?;
        if !o.quiet {
            t.print_header()?;
            println!(
                "device memory: one arena of {:.3} MiB for the whole run (driver's free memory fell by {:.1} MiB)",
                measure.used() as f64 / 1048576.0,
                free_before.saturating_sub(free_after) as f64 / 1048576.0
            );
        }
        Ok(t)
    }

    /// The data set and the starting parameters, onto the GPU.
    fn upload(&self) -> Result<()> {
        let (gpu, b, ds) = (self.gpu, &self.b, self.ds);
        upload_features(gpu, &ds.train.features, b.x_train)?;
        gpu.upload_to(b.y_train, &ds.train.labels)?;
        upload_features(gpu, &ds.test.features, b.x_test)?;
        gpu.upload_to(b.y_test, &ds.test.labels)?;
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
            o.batch,
            self.steps,
            o.lr,
            o.momentum,
            o.init,
            o.accum.suffix(),
            self.engine_description(),
        ))
    }

    fn engine_description(&self) -> String {
        match &self.engine {
            Engine::Persistent(p) => format!(
                "persistent kernel ({} blocks{})",
                p.blocks(),
                p.feed().describe()
            ),
            Engine::Layered(Layered {
                why_not_persistent: Some(why),
                ..
            }) => format!("CUDA graph (the persistent kernel does not apply: {why})"),
            Engine::Layered(_) if self.o.graph => "CUDA graph".into(),
            Engine::Layered(_) => "eager launches".into(),
        }
    }

    /// Every epoch, or with `--epochs 0` one evaluation of the loaded weights.
    pub(super) fn run(mut self) -> Result<Vec<Epoch>> {
        if self.o.epochs == 0 {
            return self.evaluate_only();
        }
        self.capture_step()?;
        let bar = progress_bar(self.o.quiet, self.steps);
        let mut metrics = Metrics::new(self.steps);
        let start = Instant::now();
        let mut results = Vec::new();
        for epoch in 1..=self.o.epochs {
            results.push(self.epoch(epoch, &bar, &mut metrics, start)?);
        }
        if let Some(p) = &self.o.metrics {
            metrics.write(p)?;
        }
        if !self.o.quiet {
            self.print_summary(&results);
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
        let captured = (0..graph_steps(self.steps)).try_for_each(|_| self.step());
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
        let (o, b, model, rows) = (self.o, &self.b, &self.model, self.rows);
        self.gather()?;
        model.forward(b.xb.ptr, rows)?;
        let sums = (b.loss_steps.ptr, b.correct_steps.ptr);
        let grad_scale = Some(1.0 / o.batch as f32);
        let step = SgdStep {
            lr: o.lr,
            momentum: o.momentum,
        };
        // On one GPU every parameter takes its step in the kernel that makes its gradient
        // (unless a forced `wgmma` configuration keeps the update apart); replicas store their
        // gradients, sum them, then step.
        let fused = (self.comm.is_none() && model.steps_in_backward()).then_some(step);
        model.loss(b.yb.ptr, rows, grad_scale, sums, b.step.ptr, fused)?;
        model.backward(b.xb.ptr, rows, fused)?;
        if let Some(comm) = self.comm {
            comm.sum_in_place::<f16>(model.g16.ptr, model.n_params, &self.gpu.stream)?;
        }
        match fused {
            Some(_) => Ok(()),
            None => model.update(step),
        }
    }

    /// Gathers this GPU's rows of the batch of step `*step` of the epoch keyed `*seed` into
    /// `xb`/`yb`: replica `r` takes the `r`-th share.
    fn gather(&self) -> Result<()> {
        let (b, train) = (&self.b, &self.ds.train);
        let rank = self.comm.map_or(0, |c| c.rank());
        let p = GatherBatch {
            x: b.x_train.ptr,
            y: b.y_train.ptr,
            n: train.count as u32,
            dim: train.dim as u32,
            xb: b.xb.ptr,
            yb: b.yb.ptr,
            rows: self.rows as u32,
            step_rows: self.o.batch as u32,
            first: (rank * self.rows) as u32,
            step: b.step.ptr,
            seed: b.seed.ptr,
        };
        model::gather_batch(self.gpu, p)
    }

    /// Test loss and accuracy of the current weights; not a number on replicas but rank 0's.
    fn evaluate(&self) -> Result<(f32, f32)> {
        if self.comm.is_some_and(|c| c.rank() != 0) {
            return Ok((f32::NAN, f32::NAN));
        }
        let (b, test, rows_per) = (&self.b, &self.ds.test, self.eval_rows);
        for c in 0..self.eval_chunks {
            let start = c * rows_per;
            let rows = rows_per.min(test.count - start);
            self.model.forward(b.x_test.at(start * test.dim), rows)?;
            let sums = (b.eval_loss.at(c), b.eval_correct.at(c));
            self.model
                .loss(b.y_test.at(start), rows, None, sums, 0, None)?;
        }
        let l = self.gpu.download_buf(b.eval_loss)?;
        let c = self.gpu.download_buf(b.eval_correct)?;
        let mut loss = 0.0;
        for (k, v) in l.iter().enumerate() {
            loss += v * (rows_per.min(test.count - k * rows_per)) as f32;
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
        let (gpu, o, steps) = (self.gpu, self.o, self.steps);
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
                (steps * o.batch) as f64 / seconds
            );
        }
        let t = start.elapsed().as_secs_f64();
        metrics.add_steps(epoch, &losses, t);
        metrics.add_epoch(epoch, test_accuracy, t);
        if let Some(p) = &o.save {
            checkpoint::save(p, &self.sizes, &self.model.params()?)?;
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
            (0, self.steps),
            o.lr,
            o.momentum,
        )?;
        if let Some(mark) = ahead {
            let seed = epoch_seed(o.seed, epoch + 1);
            p.shuffle(gpu, train_set, seed, 1 - buf, Some(mark))?;
        }
        Ok(())
    }

    /// The mean loss of each step of the epoch: over every replica's rows, the same on each.
    fn step_losses(&self) -> Result<Vec<f32>> {
        let (gpu, losses) = (self.gpu, self.b.loss_steps);
        let Some(comm) = self.comm else {
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
        let per_launch = graph.map_or(1, |_| graph_steps(self.steps));
        for k in (0..self.steps).step_by(per_launch) {
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

    fn print_summary(&self, results: &[Epoch]) {
        let o = self.o;
        let train_s: f64 = results.iter().map(|e| e.seconds).sum();
        let last = results.last().unwrap();
        println!(
            "done: {} epochs in {train_s:.3} s of training ({:.6} s/epoch), final test accuracy {:.2}%{}",
            o.epochs,
            train_s / o.epochs as f64,
            100.0 * last.test_accuracy,
            o.save
                .as_ref()
                .map(|p| format!(", weights in {}", p.display()))
                .unwrap_or_default()
        );
    }
}

/// Before any host buffer that size: the parameters alone (fp32 value and momentum, fp16 copy
/// and gradient, 12 bytes each) must fit the GPU.
fn ensure_parameters_fit(gpu: &Gpu, sizes: &[usize]) -> Result<()> {
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
struct Footprint<'s> {
    sizes: &'s [usize],
    /// Rows of a step on this GPU.
    rows: usize,
    steps: usize,
    eval_rows: usize,
    eval_chunks: usize,
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
    let (steps, batch) = (footprint.steps, footprint.rows);
    let b = Buffers {
        x_train: arena.alloc(ds.train.features.len())?,
        y_train: arena.alloc(ds.train.count)?,
        x_test: arena.alloc(ds.test.features.len())?,
        y_test: arena.alloc(ds.test.count)?,
        xb: arena.alloc(batch * ds.train.dim)?,
        yb: arena.alloc(batch)?,
        loss_steps: arena.alloc(steps)?,
        correct_steps: arena.alloc(steps)?,
        eval_loss: arena.alloc(footprint.eval_chunks)?,
        eval_correct: arena.alloc(footprint.eval_chunks)?,
        step: arena.alloc(1)?,
        seed: arena.alloc(1)?,
    };
    let (sizes, rows) = (footprint.sizes, footprint.eval_rows);
    let model = Mlp::new(gpu, arena, sizes, batch, rows, o.accum, o.config)?;
    let engine = match choice {
        Choice::Persistent(feed) => Engine::Persistent(Box::new(Persistent::new(
            gpu,
            arena,
            sizes,
            (o.batch, steps),
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

fn progress_bar(quiet: bool, steps: usize) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(steps as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "epoch {prefix:>3} [{bar:30}] {pos}/{len} {per_sec} {msg}",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    bar
}

/// The `--metrics` CSV: a line per step's loss and one per epoch's test accuracy.
struct Metrics {
    csv: String,
    steps: usize,
}

impl Metrics {
    fn new(steps: usize) -> Metrics {
        Metrics {
            csv: String::from("epoch,step,loss,accuracy,time_s\n"),
            steps,
        }
    }

    /// A line for each of an epoch's step losses, at `t` seconds into the run.
    fn add_steps(&mut self, epoch: usize, losses: &[f32], t: f64) {
        for (k, l) in losses.iter().enumerate() {
            let step = (epoch - 1) * self.steps + k + 1;
            self.csv.push_str(&format!("{epoch},{step},{l},,{t:.4}\n"));
        }
    }

    fn add_epoch(&mut self, epoch: usize, test_accuracy: f32, t: f64) {
        let step = epoch * self.steps;
        self.csv += &format!("{epoch},{step},,{test_accuracy},{t:.4}\n");
    }

    fn write(&self, path: &Path) -> Result<()> {
        crate::write_atomic(path, self.csv.as_bytes())
    }
}

/// The key of epoch `epoch`'s shuffle.
fn epoch_seed(seed: u64, epoch: usize) -> u32 {
    (seed as u32).wrapping_mul(1000).wrapping_add(epoch as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            epochs: 1,
            quiet: true,
            ..Options::default()
        }
    }

    #[test]
    fn a_graph_holds_the_largest_divisor_of_the_epoch_up_to_16_steps() {
        // MNIST at batch 128: 468 steps, 36 replays of 13.
        assert_eq!(graph_steps(468), 13);
        assert_eq!(graph_steps(469), 7);
        assert_eq!(graph_steps(480), 16);
        assert_eq!(graph_steps(467), 1);
        assert_eq!(graph_steps(3), 3);
        assert_eq!(graph_steps(1), 1);
    }

    #[test]
    fn bad_options_are_refused_before_training() {
        assert!(validate(&options()).is_ok());
        let err = |o: Options| validate(&o).unwrap_err().to_string();
        assert!(
            err(Options {
                lr: f32::INFINITY,
                ..options()
            })
            .contains("finite")
        );
        assert!(
            err(Options {
                hidden: vec![128, 0],
                ..options()
            })
            .contains("--hidden")
        );
        assert!(
            err(Options {
                print_every: 0,
                ..options()
            })
            .contains("--print-every")
        );
        assert!(
            err(Options {
                gpus: 3,
                ..options()
            })
            .contains("split evenly")
        );
        assert!(
            err(Options {
                gpus: 0,
                ..options()
            })
            .contains("--gpus")
        );
        let e = err(Options {
            epochs: 0,
            load: Some("w.safetensors".into()),
            metrics: Some("m.csv".into()),
            ..options()
        });
        assert!(e.contains("only evaluates"), "{e}");
        let missing = std::env::temp_dir().join(format!("no-such-dir-{}", std::process::id()));
        let e = err(Options {
            metrics: Some(missing.join("m.csv")),
            ..options()
        });
        assert!(
            e.contains("--metrics") && e.contains("does not exist"),
            "{e}"
        );
        let e = err(Options {
            save: Some(missing.join("w.safetensors")),
            ..options()
        });
        assert!(e.contains("--save"), "{e}");
        // A bare file name writes to the working directory, which exists.
        let here = Options {
            save: Some("w.safetensors".into()),
            ..options()
        };
        assert!(validate(&here).is_ok());
    }

    #[test]
    fn parameter_counts_overflow_to_none() {
        assert_eq!(
            parameter_count(&[784, 128, 10]),
            Some(784 * 128 + 128 + 128 * 10 + 10)
        );
        assert_eq!(parameter_count(&[784, usize::MAX / 2, 10]), None);
    }
}
