//! `host mnist`: an MLP trained on MNIST (or any IDX data set of the same form) with the Rust
//! kernels, every buffer allocated before the first step and each step replayed from a CUDA graph.
pub mod checkpoint;
pub mod data;
pub mod model;
pub mod reference;

use crate::cuda::{Gpu, PushKernelArg, dptr, grid_1d};
use crate::gemm::Version;
use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use gpu::gemm::Accum;
use half::f16;
use model::{Init, Mlp};
use std::path::PathBuf;
use std::time::Instant;

/// Normalisation of MNIST pixels (the usual mean and standard deviation of the training set).
const MEAN: f32 = 0.1307;
const STD: f32 = 0.3081;

pub struct Options {
    pub data: PathBuf,
    pub hidden: Vec<usize>,
    pub epochs: usize,
    pub batch: usize,
    pub lr: f32,
    pub momentum: f32,
    pub init: Init,
    pub seed: u64,
    pub accum: Accum,
    pub graph: bool,
    pub config: Option<Version>,
    pub metrics: Option<PathBuf>,
    pub save: Option<PathBuf>,
    pub load: Option<PathBuf>,
    pub quiet: bool,
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

/// Copies `u8` pixels to the GPU once and normalises them there into fp16.
fn upload_images(gpu: &Gpu, pixels: &[u8]) -> Result<cudarc::driver::CudaSlice<f16>> {
    let raw = gpu.upload(pixels)?;
    let mut out = gpu.zeros::<f16>(pixels.len())?;
    let f = gpu.function("normalize_u8")?;
    let (n, mean, inv) = (pixels.len() as u32, MEAN, 1.0 / STD);
    let mut b = gpu.stream.launch_builder(&f);
    b.arg(&raw).arg(&mut out).arg(&n).arg(&mean).arg(&inv);
    unsafe { b.launch(grid_1d(pixels.len(), 256)) }?;
    gpu.sync()?;
    Ok(out)
}

pub fn validate(o: &Options) -> Result<()> {
    ensure!(
        !o.hidden.is_empty() && o.hidden.iter().all(|&h| h > 0),
        "--hidden needs positive widths, e.g. 128 or 512,256"
    );
    ensure!(o.batch > 0, "--batch must be positive");
    ensure!(o.lr > 0.0 && o.lr.is_finite(), "--lr must be positive");
    ensure!(
        (0.0..1.0).contains(&o.momentum),
        "--momentum must be in [0, 1)"
    );
    ensure!(
        o.epochs > 0 || o.load.is_some(),
        "--epochs 0 only evaluates, which needs --load"
    );
    Ok(())
}

pub fn train(gpu: &Gpu, o: &Options) -> Result<Vec<Epoch>> {
    validate(o)?;
    let ds = data::load(&o.data)?;
    ensure!(
        o.batch <= ds.train.count,
        "--batch {} is larger than the training set ({} images)",
        o.batch,
        ds.train.count
    );
    let mut sizes = vec![ds.train.dim];
    sizes.extend(&o.hidden);
    sizes.push(ds.classes);
    let params = match &o.load {
        Some(p) => checkpoint::load(p, &sizes)?,
        None => model::init_params(&sizes, o.init, o.seed),
    };
    let steps = ds.train.count / o.batch; // the last partial batch is dropped
    let eval_rows = ds.test.count.min(8192);
    let (free_before, _) = gpu.mem_info()?;

    // Everything the run touches, allocated once.
    let x_train = upload_images(gpu, &ds.train.images)?;
    let y_train = gpu.upload(&ds.train.labels)?;
    let x_test = upload_images(gpu, &ds.test.images)?;
    let y_test = gpu.upload(&ds.test.labels)?;
    let mut model = Mlp::new(
        gpu,
        &sizes,
        &params,
        o.batch.max(eval_rows),
        o.accum,
        o.config,
    )?;
    let mut xb = gpu.zeros::<f16>(o.batch * ds.train.dim)?;
    let mut yb = gpu.zeros::<u8>(o.batch)?;
    let loss_steps = gpu.zeros::<f32>(steps)?;
    let correct_steps = gpu.zeros::<f32>(steps)?;
    let eval_chunks = ds.test.count.div_ceil(eval_rows);
    let eval_loss = gpu.zeros::<f32>(eval_chunks)?;
    let eval_correct = gpu.zeros::<f32>(eval_chunks)?;
    let mut step_ctr = gpu.zeros::<u32>(1)?;
    let mut seed_buf = gpu.zeros::<u32>(1)?;
    gpu.sync()?;
    let (free_after, _) = gpu.mem_info()?;
    let s = &gpu.stream;
    let (xb_p, yb_p) = (dptr(&xb, s), dptr(&yb, s));
    let (ls_p, cs_p, step_p) = (
        dptr(&loss_steps, s),
        dptr(&correct_steps, s),
        dptr(&step_ctr, s),
    );

    if !o.quiet {
        println!(
            "MNIST MLP {} on {} ({} PTX): {} train / {} test images, batch {}, {} steps/epoch, lr {} momentum {}, init {:?}, {} accumulation, {}",
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
            if o.graph {
                "CUDA graph"
            } else {
                "eager launches"
            },
        );
        println!(
            "device memory allocated for the run: {:.1} MiB",
            (free_before.saturating_sub(free_after)) as f64 / 1048576.0
        );
    }

    // One training step, as a sequence of launches on the stream.
    let gather = gpu.function("gather_batch")?;
    let advance = gpu.function("advance_step")?;
    let (n_train, dim, batch) = (ds.train.count as u32, ds.train.dim as u32, o.batch as u32);
    let step = |model: &mut Mlp,
                xb: &mut cudarc::driver::CudaSlice<f16>,
                yb: &mut cudarc::driver::CudaSlice<u8>,
                ctr: &mut cudarc::driver::CudaSlice<u32>,
                seed: &cudarc::driver::CudaSlice<u32>|
     -> Result<()> {
        let mut b = s.launch_builder(&gather);
        b.arg(&x_train)
            .arg(&y_train)
            .arg(&n_train)
            .arg(&dim)
            .arg(&mut *xb)
            .arg(&mut *yb)
            .arg(&batch)
            .arg(&*ctr)
            .arg(seed);
        unsafe { b.launch(grid_1d(o.batch * ds.train.dim, 256)) }?;
        model.forward(xb_p, o.batch)?;
        model.loss(yb_p, o.batch, true, ls_p, cs_p, step_p)?;
        model.backward(xb_p, o.batch)?;
        model.update(o.lr, o.momentum)?;
        let mut b = s.launch_builder(&advance);
        b.arg(&mut *ctr);
        unsafe { b.launch(grid_1d(1, 32)) }?;
        Ok(())
    };

    let evaluate = |model: &Mlp| -> Result<(f32, f32)> {
        for c in 0..eval_chunks {
            let start = c * eval_rows;
            let rows = eval_rows.min(ds.test.count - start);
            let x = dptr(&x_test, s) + (start * ds.test.dim * 2) as u64;
            model.forward(x, rows)?;
            let y = dptr(&y_test, s) + start as u64;
            model.loss(
                y,
                rows,
                false,
                dptr(&eval_loss, s) + 4 * c as u64,
                dptr(&eval_correct, s) + 4 * c as u64,
                0,
            )?;
        }
        let l = gpu.download(&eval_loss)?;
        let c = gpu.download(&eval_correct)?;
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
        let (tl, ta) = evaluate(&model)?;
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
    if o.graph {
        s.memcpy_htod(&[0u32], &mut seed_buf)?;
        s.memcpy_htod(&[0u32], &mut step_ctr)?;
        step(&mut model, &mut xb, &mut yb, &mut step_ctr, &seed_buf)?;
        gpu.sync()?;
        model = Mlp::new(
            gpu,
            &sizes,
            &params,
            o.batch.max(eval_rows),
            o.accum,
            o.config,
        )?;
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let captured = step(&mut model, &mut xb, &mut yb, &mut step_ctr, &seed_buf);
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
    let start_all = Instant::now();
    for epoch in 1..=o.epochs {
        s.memcpy_htod(
            &[(o.seed as u32)
                .wrapping_mul(1000)
                .wrapping_add(epoch as u32)],
            &mut seed_buf,
        )?;
        s.memcpy_htod(&[0u32], &mut step_ctr)?;
        gpu.sync()?;
        bar.reset();
        bar.set_prefix(epoch.to_string());
        let t0 = Instant::now();
        for k in 0..steps {
            match &graph {
                Some(g) => g.launch()?,
                None => step(&mut model, &mut xb, &mut yb, &mut step_ctr, &seed_buf)?,
            }
            // Progress needs the GPU to have caught up; everything else stays on the device.
            if k % 64 == 63 {
                gpu.sync()?;
                bar.set_position(k as u64 + 1);
            }
        }
        gpu.sync()?;
        let seconds = t0.elapsed().as_secs_f64();
        bar.set_position(steps as u64);
        let losses = gpu.download(&loss_steps)?;
        if let Some(bad) = losses.iter().position(|l| !l.is_finite()) {
            bar.abandon();
            let kept = o
                .save
                .as_ref()
                .map(|p| format!("; the last good checkpoint is {}", p.display()))
                .unwrap_or_default();
            bail!(
                "training diverged: loss is {} at epoch {epoch}, step {bad} (try a smaller --lr){kept}",
                losses[bad]
            );
        }
        let train_loss = losses.iter().sum::<f32>() / steps as f32;
        let (test_loss, test_accuracy) = evaluate(&model)?;
        bar.finish_and_clear();
        if !o.quiet {
            println!(
                "epoch {epoch:>3}  train loss {train_loss:.4}  test loss {test_loss:.4}  test accuracy {:.2}%  {:.3} s  ({:.0} samples/s)",
                100.0 * test_accuracy,
                seconds,
                (steps * o.batch) as f64 / seconds
            );
        }
        let t = start_all.elapsed().as_secs_f64();
        for (k, l) in losses.iter().enumerate() {
            metrics += &format!("{epoch},{},{l},,{t:.4}\n", (epoch - 1) * steps + k + 1);
        }
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
            "done: {} epochs in {train_s:.2} s of training ({:.3} s/epoch), final test accuracy {:.2}%{}",
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
