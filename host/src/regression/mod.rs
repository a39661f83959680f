//! `host regression`: the seed study's linear regression, `y = w·x + b` by full-batch gradient
//! descent on MSE, in four variants that compute identical results at different speeds.
pub mod report;

use crate::cuda::{Arena, Buf, Gpu, ParamBlock, PushKernelArg};
use crate::kernels;
use anyhow::{Context, Result, ensure};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchConfig};
use gpu::REGRESSION_THREADS as THREADS;
use gpu::params::{
    RegressionFused, RegressionGenerate, RegressionReduceUpdate, RegressionStep, RegressionUpdate,
};
use std::path::Path;
use std::sync::Arc;

/// The study's starting point and defaults.
pub const W0: f32 = 0.83;
pub const B0: f32 = 0.7645;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// Separate forward, loss, gradient, reduce and update kernels.
    Unfused,
    /// One pass sums loss and gradients; one kernel updates.
    Fused,
    /// The fused pass split over several CUDA streams.
    Streams,
    /// Every epoch of the fused variant in one CUDA graph.
    Graph,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Unfused,
        Variant::Fused,
        Variant::Streams,
        Variant::Graph,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Variant::Unfused => "unfused",
            Variant::Fused => "fused",
            Variant::Streams => "streams",
            Variant::Graph => "graph",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub points: usize,
    pub epochs: usize,
    pub lr: f32,
    pub seed: u32,
    pub noise: f32,
    pub w: f32,
    pub b: f32,
    pub streams: usize,
}

pub fn validate(o: &Options) -> Result<()> {
    ensure!(
        o.points >= 5,
        "--points must be at least 5 (an 80/20 split needs a test point)"
    );
    ensure!(
        o.points <= u32::MAX as usize / 2,
        "--points above {} is not supported (32-bit indices)",
        u32::MAX / 2
    );
    ensure!(o.epochs > 0, "--epochs must be positive");
    for (flag, value) in [
        ("--lr", o.lr),
        ("--noise", o.noise),
        ("--w", o.w),
        ("--b", o.b),
    ] {
        crate::ensure_finite(flag, value)?;
    }
    ensure!(o.lr > 0.0, "--lr must be positive, not {}", o.lr);
    ensure!(
        o.noise >= 0.0,
        "--noise must be zero or positive, not {}",
        o.noise
    );
    ensure!(o.streams > 0, "--streams must be positive");
    Ok(())
}

/// The clear error for a data set larger than the free device memory, before any allocation.
pub fn fits(points: usize, need: usize, free: usize) -> Result<()> {
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    ensure!(
        need <= free,
        "{points} points need {:.2} GiB of device memory (x, y, predictions and residuals); this GPU has {:.2} GiB free",
        gib(need),
        gib(free)
    );
    Ok(())
}

/// What one variant's run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub variant: Variant,
    pub w: f32,
    pub b: f32,
    pub train_loss: f64,
    pub test_loss: f64,
    /// Training time (all epochs), from CUDA events.
    pub ms: f64,
    /// Train loss at the start of each epoch.
    pub history: Vec<f32>,
}

/// Device buffers of one data set, from one arena.
pub struct Regression<'g> {
    gpu: &'g Gpu,
    pub n_train: usize,
    pub n_test: usize,
    /// Train points first, then test points.
    pub x: Buf<f32>,
    pub y: Buf<f32>,
    pred: Buf<f32>,
    resid: Buf<f32>,
    partials: Buf<f64>,
    sums: Buf<f64>,
    params: Buf<f32>,
    history: Buf<f32>,
    epoch: Buf<u32>,
    /// Blocks of every partial-sum pass (a whole number of waves, capped by the data).
    pub blocks: usize,
    o: Options,
    streams: Vec<Arc<CudaStream>>,
    _arena: Arena,
}

fn block_cfg(blocks: usize, smem_f64: bool) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: if smem_f64 { THREADS / 32 * 8 } else { 0 },
    }
}

impl<'g> Regression<'g> {
    /// Checks the footprint against free memory, allocates it once and generates the data.
    pub fn new(gpu: &'g Gpu, o: &Options) -> Result<Regression<'g>> {
        validate(o)?;
        let n = o.points;
        let n_train = n * 4 / 5;
        let blocks = n_train
            .div_ceil(THREADS as usize)
            .clamp(1, gpu.sm_count() as usize * 8);
        let carve = |a: &mut Arena| -> Result<_> {
            Ok((
                a.alloc::<f32>(n)?,
                a.alloc::<f32>(n)?,
                a.alloc::<f32>(n_train)?,
                a.alloc::<f32>(n_train)?,
                a.alloc::<f64>(3 * blocks)?,
                a.alloc::<f64>(3)?,
                a.alloc::<f32>(2)?,
                a.alloc::<f32>(o.epochs)?,
                a.alloc::<u32>(1)?,
            ))
        };
        let mut measure = Arena::measuring();
        carve(&mut measure)?;
        let need = measure.used();
        fits(n, need, gpu.mem_info()?.0)?;
        let mut arena = Arena::new(gpu, need)?;
        let (x, y, pred, resid, partials, sums, params, history, epoch) = carve(&mut arena)?;
        let p = ParamBlock(RegressionGenerate {
            x: x.ptr,
            y: y.ptr,
            n: n as u32,
            w: o.w,
            b: o.b,
            noise: o.noise,
            seed: o.seed,
        });
        let f = gpu.function(kernels::REGRESSION_GENERATE)?;
        let mut l = gpu.stream.launch_builder(&f);
        l.arg(&p);
        unsafe { l.launch(crate::cuda::grid_1d(n, THREADS)) }?;
        let streams = (0..o.streams)
            .map(|_| gpu.ctx.new_stream())
            .collect::<Result<Vec<_>, _>>()?;
        gpu.sync()?;
        Ok(Regression {
            gpu,
            n_train,
            n_test: n - n_train,
            x,
            y,
            pred,
            resid,
            partials,
            sums,
            params,
            history,
            epoch,
            blocks,
            o: o.clone(),
            streams,
            _arena: arena,
        })
    }

    fn f(&self, name: &str) -> Result<CudaFunction> {
        self.gpu.function(name)
    }

    /// Queues one epoch of the unfused variant; `mark` is called after each op (for timing).
    fn epoch_unfused(&self, mark: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
        let s = &self.gpu.stream;
        let n = self.n_train as u32;
        let grid = crate::cuda::grid_1d(self.n_train, THREADS);
        let f = self.f(kernels::REGRESSION_FORWARD)?;
        let mut l = s.launch_builder(&f);
        l.arg(&self.x.ptr)
            .arg(&self.pred.ptr)
            .arg(&n)
            .arg(&self.params.ptr);
        unsafe { l.launch(grid) }?;
        mark("forward")?;
        let f = self.f(kernels::REGRESSION_RESIDUAL)?;
        let mut l = s.launch_builder(&f);
        l.arg(&self.pred.ptr)
            .arg(&self.y.ptr)
            .arg(&self.resid.ptr)
            .arg(&n);
        unsafe { l.launch(grid) }?;
        mark("loss")?;
        let f = self.f(kernels::REGRESSION_GRAD_PARTIALS)?;
        let mut l = s.launch_builder(&f);
        l.arg(&self.resid.ptr)
            .arg(&self.x.ptr)
            .arg(&n)
            .arg(&self.partials.ptr);
        unsafe { l.launch(block_cfg(self.blocks, true)) }?;
        self.reduce_into_sums()?;
        mark("backward")?;
        let p = ParamBlock(RegressionUpdate {
            sums: self.sums.ptr,
            step: self.gradient_step(),
        });
        let f = self.f(kernels::REGRESSION_UPDATE)?;
        let mut l = s.launch_builder(&f);
        l.arg(&p);
        unsafe { l.launch(block_cfg(1, false)) }?;
        mark("update")
    }

    fn reduce_into_sums(&self) -> Result<()> {
        let f = self.f(kernels::REGRESSION_REDUCE)?;
        let blocks = self.blocks as u32;
        let mut l = self.gpu.stream.launch_builder(&f);
        l.arg(&self.partials.ptr).arg(&blocks).arg(&self.sums.ptr);
        unsafe { l.launch(block_cfg(1, true)) }?;
        Ok(())
    }

    /// The fused partial-sum pass over `n` points from `x_off`, on `stream`, for blocks
    /// `first..first+count` of the full grid.
    fn fused_pass(
        &self,
        stream: &CudaStream,
        off: usize,
        n: usize,
        first: usize,
        count: usize,
    ) -> Result<()> {
        let p = ParamBlock(RegressionFused {
            x: self.x.at(off),
            y: self.y.at(off),
            params: self.params.ptr,
            partials: self.partials.ptr,
            n: n as u32,
            block_offset: first as u32,
            blocks: self.blocks as u32,
        });
        let f = self.f(kernels::REGRESSION_FUSED)?;
        let mut l = stream.launch_builder(&f);
        l.arg(&p);
        unsafe { l.launch(block_cfg(count, true)) }?;
        Ok(())
    }

    fn reduce_update(&self) -> Result<()> {
        let p = ParamBlock(RegressionReduceUpdate {
            partials: self.partials.ptr,
            blocks: self.blocks as u32,
            step: self.gradient_step(),
        });
        let f = self.f(kernels::REGRESSION_REDUCE_UPDATE)?;
        let mut l = self.gpu.stream.launch_builder(&f);
        l.arg(&p);
        unsafe { l.launch(block_cfg(1, true)) }?;
        Ok(())
    }

    /// The gradient step that ends an epoch: over the training points, into `params`,
    /// recording the loss in `history`.
    fn gradient_step(&self) -> RegressionStep {
        RegressionStep {
            params: self.params.ptr,
            history: self.history.ptr,
            epoch: self.epoch.ptr,
            n: self.n_train as u32,
            lr: self.o.lr,
        }
    }

    /// One fused epoch with the pass split over the extra streams: each takes a contiguous range
    /// of the grid's blocks, and the main stream waits for all before reducing.
    fn epoch_streams(&self, events: &[CudaEvent], start: &CudaEvent) -> Result<()> {
        let main = &self.gpu.stream;
        start.record(main)?;
        let per = self.blocks.div_ceil(self.streams.len());
        for (i, (s, ev)) in self.streams.iter().zip(events).enumerate() {
            let first = i * per;
            if first >= self.blocks {
                break;
            }
            s.wait(start)?;
            self.fused_pass(s, 0, self.n_train, first, per.min(self.blocks - first))?;
            ev.record(s)?;
            main.wait(ev)?;
        }
        self.reduce_update()
    }

    fn reset(&self) -> Result<()> {
        self.gpu.upload_to(self.params, &[W0, B0])?;
        self.gpu.upload_to(self.epoch, &[0])?;
        Ok(())
    }

    /// Trains from the study's initial point with `variant`; `trace` receives one span per op.
    pub fn run(&self, variant: Variant, mut trace: Option<&mut Trace>) -> Result<Outcome> {
        self.reset()?;
        let epochs = self.o.epochs;
        let ev = || self.gpu.ctx.new_event(None);
        let events: Vec<CudaEvent> = (0..self.streams.len())
            .map(|_| ev())
            .collect::<Result<_, _>>()?;
        let start_ev = ev()?;
        let graph = if variant == Variant::Graph {
            let s = &self.gpu.stream;
            s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            let mut captured = Ok(());
            for _ in 0..epochs {
                captured = captured
                    .and_then(|_| self.fused_pass(s, 0, self.n_train, 0, self.blocks))
                    .and_then(|_| self.reduce_update());
            }
            let g = s.end_capture(CUgraphInstantiate_flags(0))?;
            captured?;
            let g = g.context("stream capture produced no graph")?;
            g.upload()?;
            Some(g)
        } else {
            None
        };
        let timer = self.gpu.timer()?;
        timer.start()?;
        if let Some(t) = trace.as_deref_mut() {
            t.begin(self.gpu)?;
        }
        match variant {
            Variant::Graph => {
                graph.as_ref().unwrap().launch()?;
                if let Some(t) = trace.as_deref_mut() {
                    t.mark(self.gpu, "graph (all epochs)")?;
                }
            }
            _ => {
                for _ in 0..epochs {
                    match variant {
                        Variant::Unfused => {
                            self.epoch_unfused(&mut |op| match trace.as_deref_mut() {
                                Some(t) => t.mark(self.gpu, op),
                                None => Ok(()),
                            })?
                        }
                        Variant::Fused => {
                            self.fused_pass(&self.gpu.stream, 0, self.n_train, 0, self.blocks)?;
                            self.reduce_update()?;
                        }
                        Variant::Streams => self.epoch_streams(&events, &start_ev)?,
                        Variant::Graph => unreachable!(),
                    }
                    if variant != Variant::Unfused
                        && let Some(t) = trace.as_deref_mut()
                    {
                        t.mark(self.gpu, "epoch")?;
                    }
                }
            }
        }
        let ms = timer.stop_ms()? as f64;
        let p = self.gpu.download_buf(self.params)?;
        let history = self.gpu.download_buf(self.history)?;
        let train_loss = self.loss(0, self.n_train)?;
        let test_loss = self.loss(self.n_train, self.n_test)?;
        Ok(Outcome {
            variant,
            w: p[0],
            b: p[1],
            train_loss,
            test_loss,
            ms,
            history,
        })
    }

    /// MSE of the current parameters over `n` points from `off`.
    pub fn loss(&self, off: usize, n: usize) -> Result<f64> {
        self.fused_pass(&self.gpu.stream, off, n, 0, self.blocks)?;
        self.reduce_into_sums()?;
        let s = self.gpu.download_buf(self.sums)?;
        Ok(s[0] / n as f64)
    }

    /// Milliseconds of each op of one unfused epoch (forward, loss, backward, update).
    pub fn op_times(&self) -> Result<Vec<(String, f64)>> {
        self.reset()?;
        let mut t = Trace::default();
        // Warm, then measure the second epoch.
        self.epoch_unfused(&mut |_| Ok(()))?;
        t.begin(self.gpu)?;
        self.epoch_unfused(&mut |op| t.mark(self.gpu, op))?;
        self.gpu.sync()?;
        t.spans()
    }
}

/// CUDA events between ops, turned into named spans (for per-op timing and Chrome traces).
#[derive(Default)]
pub struct Trace {
    events: Vec<(String, CudaEvent)>,
}

impl Trace {
    pub fn begin(&mut self, gpu: &Gpu) -> Result<()> {
        self.mark(gpu, "")
    }
    /// Ends the span named `op` (started at the previous mark).
    pub fn mark(&mut self, gpu: &Gpu, op: &str) -> Result<()> {
        let e = gpu
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        e.record(&gpu.stream)?;
        self.events.push((op.to_string(), e));
        Ok(())
    }
    /// (name, duration in ms) of every span.
    pub fn spans(&self) -> Result<Vec<(String, f64)>> {
        let mut out = Vec::new();
        for w in self.events.windows(2) {
            w[1].1.synchronize()?;
            out.push((w[1].0.clone(), w[0].1.elapsed_ms(&w[1].1)? as f64));
        }
        Ok(out)
    }
    /// A Chrome trace (opens in Perfetto): one complete event per span, on one track.
    pub fn write_chrome(&self, path: &Path, label: &str) -> Result<()> {
        let mut ts = 0.0;
        let mut items = Vec::new();
        for (name, ms) in self.spans()? {
            let us = ms * 1000.0;
            items.push(format!(r#"{{"name":"{name}","cat":"{label}","ph":"X","ts":{ts:.3},"dur":{us:.3},"pid":0,"tid":0}}"#));
            ts += us;
        }
        let json = format!(
            "{{\"traceEvents\":[\n{}\n],\"displayTimeUnit\":\"ms\"}}\n",
            items.join(",\n")
        );
        crate::write_atomic(path, json.as_bytes())
    }
}

/// CPU f64 reference: gradient descent from the study's initial point on the given data.
pub fn reference(x: &[f32], y: &[f32], epochs: usize, lr: f32) -> (f64, f64, Vec<f64>) {
    let (mut w, mut b) = (W0 as f64, B0 as f64);
    let n = x.len() as f64;
    let mut hist = Vec::new();
    for _ in 0..epochs {
        let (mut s2, mut sx, mut s1) = (0.0, 0.0, 0.0);
        for (&xv, &yv) in x.iter().zip(y) {
            let r = w * xv as f64 + b - yv as f64;
            s2 += r * r;
            sx += r * xv as f64;
            s1 += r;
        }
        hist.push(s2 / n);
        w -= lr as f64 * 2.0 * sx / n;
        b -= lr as f64 * 2.0 * s1 / n;
    }
    (w, b, hist)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            points: 100,
            epochs: 10,
            lr: 0.01,
            seed: 1,
            noise: 1.0,
            w: 2.0,
            b: 1.0,
            streams: 4,
        }
    }

    #[test]
    fn bad_options_are_errors() {
        assert!(validate(&opts()).is_ok());
        assert!(
            validate(&Options {
                points: 0,
                ..opts()
            })
            .is_err()
        );
        assert!(
            validate(&Options {
                epochs: 0,
                ..opts()
            })
            .is_err()
        );
        assert!(validate(&Options { lr: -1.0, ..opts() }).is_err());
        let e = |o: Options| validate(&o).unwrap_err().to_string();
        assert_eq!(
            e(Options {
                lr: f32::INFINITY,
                ..opts()
            }),
            "--lr must be a finite number, not inf"
        );
        assert_eq!(
            e(Options {
                w: f32::NAN,
                ..opts()
            }),
            "--w must be a finite number, not NaN"
        );
        // A negative slope is a line like any other.
        assert!(validate(&Options { w: -3.0, ..opts() }).is_ok());
        assert!(validate(&Options { lr: 0.0, ..opts() }).is_err());
        assert!(
            validate(&Options {
                streams: 0,
                ..opts()
            })
            .is_err()
        );
    }

    #[test]
    fn reference_recovers_a_noiseless_line() {
        let x: Vec<f32> = (0..100).map(|i| i as f32 / 10.0).collect();
        let y: Vec<f32> = x.iter().map(|v| 2.0 * v + 1.0).collect();
        let (w, b, h) = reference(&x, &y, 5000, 0.01);
        assert!((w - 2.0).abs() < 1e-6 && (b - 1.0).abs() < 1e-5, "{w} {b}");
        assert!(
            h[..1000].windows(2).all(|p| p[1] <= p[0]),
            "loss falls until rounding dominates"
        );
    }

    #[test]
    fn too_many_points_for_the_gpu_is_a_clear_error() {
        assert!(fits(10, 100, 100).is_ok());
        let e = fits(2_000_000_000, 30 << 30, 16 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2000000000 points need 30.00 GiB") && e.contains("16.00 GiB free"),
            "{e}"
        );
    }
}
