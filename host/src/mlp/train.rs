//! The training loop: an MLP trained with the Rust kernels, every buffer carved from one arena
//! before the first step, and each step replayed from a CUDA graph.
use super::model::{self, Init, Mlp};
use super::persistent::{self, Persistent};
use super::{Dataset, Features, checkpoint};
use crate::cuda::{Arena, Buf, Gpu, PushKernelArg, grid_1d};
use crate::gemm::Version;
use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use gpu::gemm::Accum;
use half::f16;
use std::path::PathBuf;
use std::time::Instant;

pub struct Options {
    pub hidden: Vec<usize>,
    pub epochs: usize,
    pub batch: usize,
    pub lr: f32,
    pub momentum: f32,
    pub init: Init,
    pub seed: u64,
    pub accum: Accum,
    pub graph: bool,
    /// Run each step as separate kernels even where the persistent kernel applies.
    pub layered: bool,
    pub config: Option<Version>,
    pub metrics: Option<PathBuf>,
    pub save: Option<PathBuf>,
    pub load: Option<PathBuf>,
    pub quiet: bool,
    /// Print one line every this many epochs (and after the last).
    pub print_every: usize,
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
            config: None,
            metrics: None,
            save: None,
            load: None,
            quiet: false,
            print_every: 1,
        }
    }
}

/// Per-epoch results.
pub struct Epoch {
    pub epoch: usize,
    pub train_loss: f32,
    pub test_loss: f32,
    pub test_accuracy: f32,
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
            let f = gpu.function("normalize_u8")?;
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

pub fn train(gpu: &Gpu, o: &Options, ds: &Dataset) -> Result<Vec<Epoch>> {
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
    // Before any host buffer that size: the parameters alone (fp32 value and momentum, fp16
    // copy and gradient, 12 bytes each) must fit the GPU.
    let total = gpu.mem_info()?.1;
    let count = parameter_count(&sizes);
    ensure!(
        count.is_some_and(|c| c.saturating_mul(12) <= total),
        "layers {sizes:?} have {} parameters, which at 12 bytes each do not fit the GPU's {} MiB",
        count.map_or("too many".into(), |c| c.to_string()),
        total >> 20
    );
    let params = match &o.load {
        Some(p) => checkpoint::load(p, &sizes)?,
        None => model::init_params(&sizes, o.init, o.seed),
    };
    let steps = ds.train.count / o.batch; // the last partial batch is dropped
    // The persistent kernel trains whatever it supports, unless the run asks for the layered
    // path (or for what only it has: a forced GEMM configuration, eager launches).
    let opted_out = o.layered || o.config.is_some() || !o.graph;
    let not_applicable = if opted_out {
        None
    } else {
        persistent::unsupported(gpu, &sizes, o.batch, steps, o.accum)?
    };
    let use_persistent = !opted_out && not_applicable.is_none();
    let eval_rows = ds.test.count.min(8192);
    let eval_chunks = ds.test.count.div_ceil(eval_rows);

    // Everything the run touches comes from one arena, sized by carving it once without memory.
    let carve_all = |arena: &mut Arena| -> Result<(Buffers, Mlp, Option<Persistent>)> {
        let b = Buffers {
            x_train: arena.alloc(ds.train.features.len())?,
            y_train: arena.alloc(ds.train.count)?,
            x_test: arena.alloc(ds.test.features.len())?,
            y_test: arena.alloc(ds.test.count)?,
            xb: arena.alloc(o.batch * ds.train.dim)?,
            yb: arena.alloc(o.batch)?,
            loss_steps: arena.alloc(steps)?,
            correct_steps: arena.alloc(steps)?,
            eval_loss: arena.alloc(eval_chunks)?,
            eval_correct: arena.alloc(eval_chunks)?,
            step: arena.alloc(1)?,
            seed: arena.alloc(1)?,
        };
        let model = Mlp::new(gpu, arena, &sizes, o.batch, eval_rows, o.accum, o.config)?;
        let p = use_persistent
            .then(|| Persistent::new(gpu, arena, &sizes, o.batch, o.accum, steps))
            .transpose()?;
        Ok((b, model, p))
    };
    let mut measure = Arena::measuring();
    carve_all(&mut measure)?;
    let (free_before, _) = gpu.mem_info()?;
    let mut arena = Arena::new(gpu, measure.used())?;
    let (b, model, fused) = carve_all(&mut arena)?;
    let (free_after, _) = gpu.mem_info()?;
    upload_features(gpu, &ds.train.features, b.x_train)?;
    gpu.upload_to(b.y_train, &ds.train.labels)?;
    upload_features(gpu, &ds.test.features, b.x_test)?;
    gpu.upload_to(b.y_test, &ds.test.labels)?;
    model.set_params(&params)?;
    let s = &gpu.stream;

    if !o.quiet {
        println!(
            "{} MLP {} on {} ({} PTX): {} train / {} test examples, batch {}, {} steps/epoch, lr {} momentum {}, init {:?}, {} accumulation, {}",
            ds.name,
            sizes
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join("-"),
            gpu.name()?,
            gpu.ptx.arch,
            ds.train.count,
            ds.test.count,
            o.batch,
            steps,
            o.lr,
            o.momentum,
            o.init,
            o.accum.suffix(),
            match (&fused, &not_applicable) {
                (Some(p), _) => format!("persistent kernel ({} blocks)", p.blocks()),
                (None, Some(why)) =>
                    format!("CUDA graph (the persistent kernel does not apply: {why})"),
                (None, None) if o.graph => "CUDA graph".into(),
                (None, None) => "eager launches".into(),
            },
        );
        println!(
            "device memory: one arena of {:.3} MiB for the whole run (driver's free memory fell by {:.1} MiB)",
            measure.used() as f64 / 1048576.0,
            free_before.saturating_sub(free_after) as f64 / 1048576.0
        );
    }

    // One training step, as a sequence of launches on the stream: nothing is allocated, copied
    // or synchronised inside it, so it can be captured as a graph.
    let gather = gpu.function("gather_batch")?;
    let advance = gpu.function("advance_step")?;
    let (n_train, dim, batch) = (ds.train.count as u32, ds.train.dim as u32, o.batch as u32);
    let step = || -> Result<()> {
        let mut l = s.launch_builder(&gather);
        l.arg(&b.x_train.ptr)
            .arg(&b.y_train.ptr)
            .arg(&n_train)
            .arg(&dim)
            .arg(&b.xb.ptr)
            .arg(&b.yb.ptr);
        l.arg(&batch).arg(&b.step.ptr).arg(&b.seed.ptr);
        unsafe { l.launch(grid_1d(o.batch * ds.train.dim, 256)) }?;
        model.forward(b.xb.ptr, o.batch)?;
        model.loss(
            b.yb.ptr,
            o.batch,
            true,
            b.loss_steps.ptr,
            b.correct_steps.ptr,
            b.step.ptr,
        )?;
        model.backward(b.xb.ptr, o.batch)?;
        model.update(o.lr, o.momentum)?;
        let mut l = s.launch_builder(&advance);
        l.arg(&b.step.ptr);
        unsafe { l.launch(grid_1d(1, 32)) }?;
        Ok(())
    };

    let evaluate = || -> Result<(f32, f32)> {
        for c in 0..eval_chunks {
            let start = c * eval_rows;
            let rows = eval_rows.min(ds.test.count - start);
            model.forward(b.x_test.at(start * ds.test.dim), rows)?;
            model.loss(
                b.y_test.at(start),
                rows,
                false,
                b.eval_loss.at(c),
                b.eval_correct.at(c),
                0,
            )?;
        }
        let l = gpu.download_buf(b.eval_loss)?;
        let c = gpu.download_buf(b.eval_correct)?;
        let mut loss = 0.0;
        for (k, v) in l.iter().enumerate() {
            loss += v * (eval_rows.min(ds.test.count - k * eval_rows)) as f32;
        }
        Ok((
            loss / ds.test.count as f32,
            c.iter().sum::<f32>() / ds.test.count as f32,
        ))
    };

    let mut results = Vec::new();
    if o.epochs == 0 {
        let (tl, ta) = evaluate()?;
        println!(
            "evaluation of {}: test loss {tl:.4}, test accuracy {:.2}%",
            o.load.as_ref().unwrap().display(),
            100.0 * ta
        );
        results.push(Epoch {
            epoch: 0,
            train_loss: f32::NAN,
            test_loss: tl,
            test_accuracy: ta,
            seconds: 0.0,
            step_losses: vec![],
        });
        return Ok(results);
    }

    // Warm-up step outside the graph (sets kernel attributes, loads modules), then undo it by
    // restoring the initial weights, so the graph and eager runs train identically.
    let mut graph = None;
    if o.graph && fused.is_none() {
        gpu.upload_to(b.seed, &[0])?;
        gpu.upload_to(b.step, &[0])?;
        step()?;
        model.set_params(&params)?;
        gpu.sync()?;
        // Global capture mode: the driver rejects any allocation, free or synchronisation made
        // while the step is captured, so a successful capture proves the step has none.
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)?;
        let captured = step();
        let g = s.end_capture(CUgraphInstantiate_flags(0))?;
        captured?;
        graph = Some(g.context("stream capture produced no graph")?);
    }

    let bar = if o.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(steps as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "epoch {prefix:>3} [{bar:30}] {pos}/{len} {per_sec} {msg}",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    let mut metrics = String::from("epoch,step,loss,accuracy,time_s\n");
    // A CSV line for each of an epoch's step losses, at `t` seconds into the run.
    let add_steps = |metrics: &mut String, epoch: usize, losses: &[f32], t: f64| {
        for (k, l) in losses.iter().enumerate() {
            let step = (epoch - 1) * steps + k + 1;
            metrics.push_str(&format!("{epoch},{step},{l},,{t:.4}\n"));
        }
    };
    let start_all = Instant::now();
    for epoch in 1..=o.epochs {
        bar.reset();
        bar.set_prefix(epoch.to_string());
        let t0 = Instant::now();
        if let Some(p) = &fused {
            // The whole epoch in one launch (a few milliseconds: no progress to show inside),
            // over rows shuffled before it: the first epoch's here, each next one's while the
            // epoch before it trains, beside the launch (queued first, after the previous
            // epoch, which read its buffer).
            let train_set = (b.x_train.ptr, b.y_train.ptr, ds.train.count);
            let buf = epoch % 2;
            if epoch == 1 {
                p.shuffle(gpu, train_set, epoch_seed(o.seed, epoch), buf, false)?;
            }
            if epoch < o.epochs {
                p.shuffle(gpu, train_set, epoch_seed(o.seed, epoch + 1), 1 - buf, true)?;
            }
            p.run(
                gpu,
                &model,
                buf,
                (b.loss_steps.ptr, b.correct_steps.ptr),
                (0, steps),
                o.lr,
                o.momentum,
            )?;
        } else {
            gpu.upload_to(b.seed, &[epoch_seed(o.seed, epoch)])?;
            gpu.upload_to(b.step, &[0])?;
            for k in 0..steps {
                match &graph {
                    Some(g) => g.launch()?,
                    None => step()?,
                }
                // Progress needs the GPU to have caught up; everything else stays on the device.
                if k % 64 == 63 {
                    gpu.sync()?;
                    bar.set_position(k as u64 + 1);
                }
            }
        }
        gpu.sync()?;
        let seconds = t0.elapsed().as_secs_f64();
        bar.set_position(steps as u64);
        let losses = gpu.download_buf(b.loss_steps)?;
        if let Some(bad) = losses.iter().position(|l| !l.is_finite()) {
            bar.abandon();
            // The metrics so far, through the step that diverged.
            if let Some(p) = &o.metrics {
                let t = start_all.elapsed().as_secs_f64();
                add_steps(&mut metrics, epoch, &losses[..=bad], t);
                crate::write_atomic(p, metrics.as_bytes())?;
            }
            let kept = match &o.save {
                Some(p) if epoch > 1 => {
                    format!("; the last good checkpoint is {}", p.display())
                }
                Some(p) => format!("; nothing was saved to {}", p.display()),
                None => String::new(),
            };
            bail!(
                "training diverged: loss is {} at epoch {epoch}, step {bad} (try a smaller --lr){kept}",
                losses[bad]
            );
        }
        let train_loss = losses.iter().sum::<f32>() / steps as f32;
        let (test_loss, test_accuracy) = evaluate()?;
        bar.finish_and_clear();
        if !o.quiet && (epoch % o.print_every == 0 || epoch == o.epochs) {
            println!(
                "epoch {epoch:>3}  train loss {train_loss:.4}  test loss {test_loss:.4}  test accuracy {:.2}%  {:.6} s  ({:.0} samples/s)",
                100.0 * test_accuracy,
                seconds,
                (steps * o.batch) as f64 / seconds
            );
        }
        let t = start_all.elapsed().as_secs_f64();
        add_steps(&mut metrics, epoch, &losses, t);
        metrics += &format!("{epoch},{},,{test_accuracy},{t:.4}\n", epoch * steps);
        if let Some(p) = &o.save {
            checkpoint::save(p, &sizes, &model.params()?)?;
        }
        results.push(Epoch {
            epoch,
            train_loss,
            test_loss,
            test_accuracy,
            seconds,
            step_losses: losses,
        });
    }
    if let Some(p) = &o.metrics {
        crate::write_atomic(p, metrics.as_bytes())?;
    }
    if !o.quiet {
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
    Ok(results)
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
