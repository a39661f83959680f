//! `host gemm`: every version × configuration × size, checked against the CPU reference
//! (`reference`) and timed against cuBLAS (`cublas`).
mod cublas;
mod operands;
mod pair;
pub mod reference;
mod shapes;
pub mod tune;

pub use shapes::{Entry, Epilogue, Pair, Shape, default_entries, default_pairs, default_shapes};

use crate::cuda::{Gpu, dptr};
use crate::gemm::{self, Problem, Ptrs, Usage, Version};
use anyhow::{Context, Result, ensure};
use cublas::Cublas;
use cudarc::driver::CudaSlice;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use gpu::gemm::{Accum, ROOF_CHAINS};
use half::f16;
use operands::Operands;
use rand::{Rng, SeedableRng, rngs::StdRng};
use reference::{Check, accum_of};
use std::io::Write;

/// One measured row of the table. A pair's row has the dimensions of its `main` product and
/// the FLOPs of both.
pub struct Row {
    pub version: String,
    pub shape: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ms: f64,
    pub tflops: f64,
    pub vs_cublas: f64,
    pub max_err: f64,
    pub ok: bool,
    /// The host's own choice for this shape (`gemm::choose_version`).
    pub chosen: bool,
    /// Timed again in alternation with the shape's other close rows and cuBLAS (`--tune`): its
    /// time is the median of those rounds, comparable with theirs and not with a single pass.
    pub alternated: bool,
}

fn random(n: usize, rng: &mut StdRng) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect()
}

/// How long each row is timed, and whether the close rows of each shape are timed again in
/// alternation (`--tune`, whose ranking a single pass would leave to noise).
#[derive(Clone, Copy)]
pub struct Timing {
    pub budget_ms: f64,
    pub alternate: bool,
}

/// Calls captured in the CUDA graph that one sample replays (see [`time_ms`]).
const GRAPH_BATCH: usize = 10;

/// Median time in ms of one call of `f`, over enough samples for ~`budget_ms` after warm-up: at
/// least 3, and at most one per ms of the budget (or 200): each sample waits for the GPU, and
/// at the few-µs shapes thousands of those waits would cost more than the GPU time they
/// measure. Each sample replays a CUDA graph of [`GRAPH_BATCH`] captured calls, so the GPU
/// runs them back to back as in a training step's graph. Timed one launch at a time, the events
/// would also measure the host's launch cost whenever the GPU waits for it: several µs per
/// call (cuBLAS picks its kernel on every call), which at the MLP shapes is most of the time.
fn time_ms(gpu: &Gpu, budget_ms: f64, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let s = &gpu.stream;
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)?;
    let captured = (0..GRAPH_BATCH).try_for_each(|_| f());
    // A failed call explains a failed capture better than the capture's own error does.
    let graph = s.end_capture(CUgraphInstantiate_flags(0));
    captured.context("capturing the timed calls in a CUDA graph")?;
    let graph = graph?.context("stream capture produced no graph")?;
    let t = gpu.timer()?;
    graph.launch()?;
    t.start()?;
    graph.launch()?;
    let once = t.stop_ms()? as f64;
    let samples = ((budget_ms / once.max(1e-3)) as usize).clamp(3, (budget_ms as usize).max(200));
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        t.start()?;
        graph.launch()?;
        times.push(t.stop_ms()? as f64 / GRAPH_BATCH as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Operand of the roof kernels: 2^-4, so every product and sum stays a normal fp16 number
/// (a chain reaches 2^-8 · 16 · 1024 = 64).
const ROOF_OPERAND: f16 = f16::from_bits(0x2c00);

/// The roof: `mma.sync` throughput with operands in registers, per instruction shape and
/// accumulator; what no `mma.sync` GEMM on this GPU can exceed. Prints one line each.
pub fn roof(gpu: &Gpu, budget_ms: f64, out: &mut dyn Write) -> Result<()> {
    // Four blocks of 256 threads per SM (all resident: ~50 registers a thread): 8 warps per
    // scheduler, each with ROOF_CHAINS independent accumulators. Then one block per SM: the 2
    // warps per scheduler that the register file leaves a GEMM with 64×64 warp tiles.
    let threads = 256u32;
    let iters = 1024u32;
    let sms = gpu.sm_count();
    let sums = gpu.zeros::<f32>((4 * sms * threads) as usize)?;
    let ptr = dptr(&sums, &gpu.stream);
    for (per_sm, note) in [(4, ""), (1, ", 2 warps per scheduler")] {
        let blocks = per_sm * sms;
        for (name, k, acc) in gemm::roof_kernels(gpu) {
            let ms = time_ms(gpu, budget_ms, || {
                gemm::launch_roof(gpu, name, (blocks, threads), ROOF_OPERAND, iters, ptr)
            })?;
            let flops = (blocks * threads / 32) as f64
                * (iters as usize * ROOF_CHAINS) as f64
                * (2 * 16 * 8 * k) as f64;
            let tflops = flops / (ms * 1e-3) / 1e12;
            writeln!(
                out,
                "roof: mma.sync m16n8k{k}, {} accumulators, operands in registers{note}: \
                 {tflops:.1} TFLOP/s",
                acc.suffix()
            )?;
        }
    }
    Ok(())
}

/// The versions a table runs beside cuBLAS and the host's own choice, which runs in every case.
#[derive(Clone, Debug, PartialEq)]
pub enum Versions {
    /// Every version the GPU runs.
    All,
    These(Vec<Version>),
    /// None: the choice alone.
    Choice,
}

/// Runs the table, timing each row as `timing` says. SIMT versions skip squares above
/// `simt_max` (they would take minutes and teach nothing more). Every `mma.sync` version also
/// runs with K split over each of `splits`.
pub fn run(
    gpu: &Gpu,
    (versions, splits): (&Versions, &[usize]),
    entries: &[Entry],
    simt_max: usize,
    timing: Timing,
    out: &mut dyn Write,
) -> Result<Vec<Row>> {
    let bench = Bench {
        blas: Cublas::new(gpu)?,
        versions: match versions {
            Versions::All => Version::all_for(gpu),
            Versions::These(v) => v.clone(),
            Versions::Choice => Vec::new(),
        },
        simt_max,
        budget_ms: timing.budget_ms,
        alternate: timing.alternate,
        splits: splits.to_vec(),
    };
    let mut rng = StdRng::seed_from_u64(7);
    let mut rows = Vec::new();
    writeln!(
        out,
        "{:<40} {:<14} {:>5} {:>5} {:>5} {:>9} {:>8} {:>8} {:>9}",
        "version", "shape", "M", "N", "K", "time_ms", "TFLOP/s", "%cuBLAS", "max_err"
    )?;
    for entry in entries {
        match entry {
            Entry::One(shape) => shape_rows(gpu, &bench, shape, &mut rng, out, &mut rows)?,
            Entry::Pair(pair) => pair::rows(gpu, &bench, pair, &mut rng, out, &mut rows)?,
        }
    }
    Ok(rows)
}

/// What every row of a run shares.
struct Bench {
    blas: Cublas,
    versions: Vec<Version>,
    simt_max: usize,
    budget_ms: f64,
    /// Whether each shape's close tile rows are timed again in alternation.
    alternate: bool,
    /// K splits each `mma.sync` version also runs with.
    splits: Vec<usize>,
}

/// The rows of one shape: cuBLAS, every version, and the host's own choice where it splits K
/// or the versions leave it out.
fn shape_rows(
    gpu: &Gpu,
    bench: &Bench,
    shape: &Shape,
    rng: &mut StdRng,
    out: &mut dyn Write,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let label = &shape.name;
    let ops = Operands::new(gpu, shape, rng)?;
    let (p, ptrs) = (ops.p, ops.ptrs(gpu));
    // Checks what one call of `f` leaves (`gated`: whether it applied the gate), then times it.
    let measure = |acc: Accum, gated: bool, f: &mut dyn FnMut() -> Result<()>| {
        ops.reset(gpu)?;
        f()?;
        let c = ops.check(gpu, acc, gated)?;
        Ok::<_, anyhow::Error>((time_ms(gpu, bench.budget_ms, f)?, c))
    };

    // cuBLAS with fp16 and with fp32 compute, plus the separate epilogue if any.
    let mut cublas_ms = f64::NAN;
    for compute in [Accum::F16, Accum::F32] {
        let (ms, c) = measure(compute, false, &mut || {
            ops.cublas(gpu, &bench.blas, compute)
        })?;
        if compute == Accum::F16 {
            cublas_ms = ms;
        }
        let then = match shape.epilogue {
            Epilogue::BiasRelu => "+bias_relu",
            Epilogue::Step => "+sgd_update",
            Epilogue::None | Epilogue::Gate => "",
        };
        let name = format!("cublas_{}{then}", compute.suffix());
        rows.push(row(out, (name, label), (&p).into(), (ms, cublas_ms), &c)?);
    }

    // `v` over `split` K slices (1: unsplit; more only on tensor-core `mma.sync` versions):
    // its problem, pointers and split-K workspace (held while they are used).
    let prepare = |v: Version, split: usize| {
        let sp = Problem {
            split_k: split,
            ..p
        };
        let ws = gpu.zeros::<f32>(gemm::workspace_len(v, &sp).max(1))?;
        let ptrs = Ptrs {
            ws: dptr(&ws, &gpu.stream),
            ..ptrs
        };
        Ok::<_, anyhow::Error>((sp, ptrs, ws))
    };
    // The row's name, time and check.
    let run = |v: Version, split: usize| -> Result<(String, f64, Check)> {
        let (sp, ptrs, _ws) = prepare(v, split)?;
        let (ms, c) = measure(accum_of(v), true, &mut || gemm::launch(gpu, v, &sp, ptrs))?;
        Ok((row_name(v, split), ms, c))
    };
    let push = |rows: &mut Vec<Row>, out: &mut dyn Write, (name, ms, c): (String, f64, Check)| {
        rows.push(row(out, (name, label), (&p).into(), (ms, cublas_ms), &c)?);
        Ok::<_, anyhow::Error>(())
    };
    let mut launched: Vec<Launched> = Vec::new();
    for &v in &bench.versions {
        if matches!(v, Version::Simt(_)) && p.m.max(p.n).max(p.k) > bench.simt_max {
            continue;
        }
        if let Some(why) = gemm::refuses(v, &p, ptrs) {
            writeln!(out, "# {} on {label}: skipped, {why}", v.label())?;
            continue;
        }
        push(rows, out, run(v, 1)?)?;
        launched.push((rows.len() - 1, (v, 1)));
        if matches!(v, Version::Tensor(c, _) if !c.is_wgmma()) {
            for &split in &bench.splits {
                push(rows, out, run(v, split)?)?;
                launched.push((rows.len() - 1, (v, split)));
            }
        }
    }

    // What the host would pick for this shape alone (the operands' addresses are aligned),
    // split-K included, run unless a row above ran it.
    let usage = Usage {
        steps: p.sgd.is_some(),
        ..Usage::aligned(p.lda, p.ldb)
    };
    let (v, split) = gemm::choose_version(gpu, (p.m, p.n, p.k), usage, Accum::F16)?;
    let name = row_name(v, split);
    if !rows.iter().any(|r| r.shape == *label && r.version == name) {
        push(rows, out, run(v, split)?)?;
        launched.push((rows.len() - 1, (v, split)));
    }
    writeln!(out, "# {label}: the host's choice is {name}")?;
    mark_chosen(rows, label, &name);
    if bench.alternate {
        retime_close((gpu, bench, &ops), (label, rows, &launched), prepare, out)?;
    }
    Ok(())
}

/// A launched row: its index in the table's rows, with the version and K split it ran.
type Launched = (usize, (Version, usize));

/// `--tune`: the shape's close tile rows (`tune::close_rows` of `launched`) timed again in
/// alternation with cuBLAS's fp16 row, each launched with what `prepare` gives it; those rows
/// take the medians.
fn retime_close(
    (gpu, bench, ops): (&Gpu, &Bench, &Operands),
    (label, rows, launched): (&str, &mut [Row], &[Launched]),
    prepare: impl Fn(Version, usize) -> Result<(Problem, Ptrs, CudaSlice<f32>)>,
    out: &mut dyn Write,
) -> Result<()> {
    let close = tune::close_rows(rows, launched);
    let Some(cublas) = rows
        .iter()
        .position(|r| r.shape == label && r.version == "cublas_f16")
    else {
        return Ok(());
    };
    if close.is_empty() {
        return Ok(());
    }
    // cuBLAS last in each round: `close.len()`.
    let times = tune::alternate(close.len() + 1, |j| match close.get(j) {
        Some(&(_, (v, split))) => {
            let (sp, ptrs, _ws) = prepare(v, split)?;
            time_ms(gpu, bench.budget_ms, || gemm::launch(gpu, v, &sp, ptrs))
        }
        None => time_ms(gpu, bench.budget_ms, || {
            ops.cublas(gpu, &bench.blas, Accum::F16)
        }),
    })?;
    let cublas_ms = times[close.len()];
    tune::retimed(&mut rows[cublas], cublas_ms, cublas_ms);
    for (&(i, _), &ms) in close.iter().zip(&times) {
        tune::retimed(&mut rows[i], ms, cublas_ms);
        let r = &rows[i];
        writeln!(
            out,
            "# {label}: {} timed again in alternation: {:.4} ms, {:.0}% of cuBLAS ({cublas_ms:.4} ms)",
            r.version, r.ms, r.vs_cublas
        )?;
    }
    Ok(())
}

/// The name of `v`'s row with K split over `split` slices.
fn row_name(v: Version, split: usize) -> String {
    match split {
        1 => v.label(),
        _ => format!("{}_splitk{split}", v.label()),
    }
}

/// Marks the row of `shape` run with `version` as the host's choice.
fn mark_chosen(rows: &mut [Row], shape: &str, version: &str) {
    if let Some(r) = rows
        .iter_mut()
        .rev()
        .find(|r| r.shape == shape && r.version == version)
    {
        r.chosen = true;
    }
}

/// What a row computes: the dimensions it shows and the FLOPs its time covers.
#[derive(Clone, Copy)]
struct Work {
    dims: (usize, usize, usize),
    flops: f64,
}

impl From<&Problem> for Work {
    fn from(p: &Problem) -> Work {
        Work {
            dims: (p.m, p.n, p.k),
            flops: p.flops(),
        }
    }
}

fn row(
    out: &mut dyn Write,
    (version, shape): (String, &str),
    work: Work,
    (ms, cublas_ms): (f64, f64),
    c: &Check,
) -> Result<Row> {
    let (m, n, k) = work.dims;
    let r = Row {
        version,
        shape: shape.to_string(),
        m,
        n,
        k,
        ms,
        tflops: work.flops / ms / 1e9,
        vs_cublas: 100.0 * cublas_ms / ms,
        max_err: c.max_err,
        ok: c.failures == 0,
        chosen: false,
        alternated: false,
    };
    writeln!(
        out,
        "{:<40} {:<14} {:>5} {:>5} {:>5} {:>9.4} {:>8.1} {:>7.0}% {:>9.2e}{}",
        r.version,
        r.shape,
        r.m,
        r.n,
        r.k,
        r.ms,
        r.tflops,
        r.vs_cublas,
        r.max_err,
        if r.ok { "" } else { "  WRONG" }
    )?;
    out.flush()?;
    Ok(r)
}

pub fn write_csv(path: &std::path::Path, rows: &[Row], gpu_name: &str) -> Result<()> {
    let mut s = String::from(
        "gpu,version,shape,m,n,k,time_ms,tflops,pct_cublas_f16,max_err,correct,chosen\n",
    );
    for r in rows {
        s += &format!(
            "{gpu_name},{},{},{},{},{},{:.6},{:.3},{:.1},{:.3e},{},{}\n",
            r.version,
            r.shape,
            r.m,
            r.n,
            r.k,
            r.ms,
            r.tflops,
            r.vs_cublas,
            r.max_err,
            r.ok,
            r.chosen
        );
    }
    crate::write_atomic(path, s.as_bytes())
}

/// All rows correct, or an error naming the wrong ones.
pub fn ensure_correct(rows: &[Row]) -> Result<()> {
    let wrong: Vec<_> = rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| format!("{} {}", r.version, r.shape))
        .collect();
    ensure!(
        wrong.is_empty(),
        "results over tolerance: {}",
        wrong.join(", ")
    );
    Ok(())
}
