//! `host gemm`: every version × configuration × size, checked and timed against cuBLAS.
use crate::cuda::{Gpu, dptr};
use crate::gemm::{self, Check, Cublas, EpilogueInputs, Problem, Ptrs, Version, accum_of};
use anyhow::{Context, Result, anyhow, bail, ensure};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use gpu::gemm::{Accum, Layout, ROOF_CHAINS};
use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::io::Write;

/// One measured row of the table.
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
}

/// One problem of the table: its name, M×N×K, operand layout, and whether the bias-and-ReLU
/// epilogue runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub name: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub layout: Layout,
    pub epilogue: bool,
}

impl Shape {
    fn new(
        name: String,
        (m, n, k): (usize, usize, usize),
        layout: Layout,
        epilogue: bool,
    ) -> Shape {
        Shape {
            name,
            m,
            n,
            k,
            layout,
            epilogue,
        }
    }

    /// A default shape by name, or `MxNxK` (NN layout, no epilogue).
    pub fn parse(s: &str) -> Result<Shape> {
        if let Some(shape) = default_shapes().into_iter().find(|d| d.name == s) {
            return Ok(shape);
        }
        let d: Vec<usize> = s
            .split('x')
            .map(|x| x.trim().parse())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                anyhow!(
                    "size {s:?} is not MxNxK nor a default shape's name (see `host gemm --help`)"
                )
            })?;
        match d[..] {
            [m, n, k] if m > 0 && n > 0 && k > 0 => {
                Ok(Shape::new(s.to_string(), (m, n, k), Layout::NN, false))
            }
            _ => bail!(
                "size {s:?} is not MxNxK with positive dimensions, nor a default shape's name"
            ),
        }
    }
}

/// Default sizes: squares 256…8192 and the MNIST MLP's GEMMs (batch 128, 784-128-10 and the
/// wide 784-4096-10 and 784-8192-10), forward and both backward products.
pub fn default_shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for s in [256, 512, 1024, 2048, 4096, 8192] {
        v.push(Shape::new(
            format!("square{s}"),
            (s, s, s),
            Layout::NN,
            false,
        ));
    }
    for (b, h) in [(128, 128), (128, 4096), (128, 8192)] {
        for (product, dims, layout, epilogue) in [
            ("fwd1", (b, h, 784), Layout::NT, true),
            ("fwd2", (b, 10, h), Layout::NT, false),
            ("dx2", (b, h, 10), Layout::NN, false),
            ("dw1", (h, 784, b), Layout::TN, false),
        ] {
            let name = format!("mlp{h}.{product}");
            v.push(Shape::new(name, dims, layout, epilogue));
        }
    }
    v
}

fn random(n: usize, rng: &mut StdRng) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect()
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

/// Runs the table, timing each row for about `budget_ms`. `versions` empty means every version
/// the GPU runs; SIMT versions skip squares above `simt_max` (they would take minutes and teach
/// nothing more). Every `mma.sync` version also runs with K split over each of `splits`.
pub fn run(
    gpu: &Gpu,
    (versions, splits): (&[Version], &[usize]),
    shapes: &[Shape],
    simt_max: usize,
    budget_ms: f64,
    out: &mut dyn Write,
) -> Result<Vec<Row>> {
    let bench = Bench {
        blas: Cublas::new(gpu)?,
        versions: if versions.is_empty() {
            Version::all_for(gpu)
        } else {
            versions.to_vec()
        },
        simt_max,
        budget_ms,
        splits: splits.to_vec(),
    };
    let mut rng = StdRng::seed_from_u64(7);
    let mut rows = Vec::new();
    writeln!(
        out,
        "{:<40} {:<14} {:>5} {:>5} {:>5} {:>9} {:>8} {:>8} {:>9}",
        "version", "shape", "M", "N", "K", "time_ms", "TFLOP/s", "%cuBLAS", "max_err"
    )?;
    for shape in shapes {
        shape_rows(gpu, &bench, shape, &mut rng, out, &mut rows)?;
    }
    Ok(rows)
}

/// What every row of a run shares.
struct Bench {
    blas: Cublas,
    versions: Vec<Version>,
    simt_max: usize,
    budget_ms: f64,
    /// K splits each `mma.sync` version also runs with.
    splits: Vec<usize>,
}

/// The rows of one shape: cuBLAS, every version, and the host's own choice where it splits K.
fn shape_rows(
    gpu: &Gpu,
    bench: &Bench,
    shape: &Shape,
    rng: &mut StdRng,
    out: &mut dyn Write,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let &Shape {
        name: ref label,
        m,
        n,
        k,
        layout,
        epilogue,
    } = shape;
    let mut p = Problem::new(m, n, k, layout);
    p.relu = epilogue;
    let a = random(p.a_len(), rng);
    let b = random(p.b_len(), rng);
    let bias = random(n, rng);
    let (da, db, dbias) = (gpu.upload(&a)?, gpu.upload(&b)?, gpu.upload(&bias)?);
    let dc = gpu.zeros::<f16>(p.c_len())?;
    let s = &gpu.stream;
    let ptrs = Ptrs {
        a: dptr(&da, s),
        b: dptr(&db, s),
        c: dptr(&dc, s),
        bias: if epilogue { dptr(&dbias, s) } else { 0 },
        ..Ptrs::default()
    };
    let inputs = EpilogueInputs {
        bias: epilogue.then_some(&bias[..]),
        ..EpilogueInputs::default()
    };
    let samples: Option<Vec<(usize, usize)>> = (m * n * k > 1 << 27).then(|| {
        (0..512)
            .map(|_| (rng.random_range(0..m), rng.random_range(0..n)))
            .collect()
    });

    // Times `f`, then checks what it left in C, which is poisoned with NaN (all-ones fp16)
    // first so that an element the kernel never writes cannot pass.
    let c_bytes = dc.num_bytes();
    let measure = |acc: Accum, f: &mut dyn FnMut() -> Result<()>| -> Result<(f64, Check)> {
        unsafe {
            cudarc::driver::result::memset_d8_async(ptrs.c, 0xff, c_bytes, gpu.stream.cu_stream())
        }?;
        let ms = time_ms(gpu, bench.budget_ms, f)?;
        let got = gpu.download(&dc)?;
        Ok((
            ms,
            gemm::check(&p, acc, &a, &b, inputs, &got, samples.as_deref()),
        ))
    };

    // cuBLAS with fp16 and with fp32 compute, plus the separate epilogue if any.
    let mut cublas_ms = f64::NAN;
    for compute in [Accum::F16, Accum::F32] {
        let (ms, c) = measure(compute, &mut || {
            bench.blas.gemm(&p, ptrs, compute)?;
            if epilogue {
                gemm::launch_bias_act(gpu, &p, ptrs.c, ptrs.bias)?;
            }
            Ok(())
        })?;
        if compute == Accum::F16 {
            cublas_ms = ms;
        }
        let name = format!(
            "cublas_{}{}",
            compute.suffix(),
            if epilogue { "+bias_relu" } else { "" }
        );
        rows.push(row(out, name, label, &p, ms, cublas_ms, &c)?);
    }

    // `v` with K split over `split` slices (tensor-core `mma.sync` versions only): the row's
    // name, time and check.
    let split_run = |v: Version, split: usize| -> Result<(String, f64, Check)> {
        let sp = Problem {
            split_k: split,
            ..p
        };
        let ws = gpu.zeros::<f32>(gemm::workspace_len(v, &sp))?;
        let ptrs = Ptrs {
            ws: dptr(&ws, s),
            ..ptrs
        };
        let (ms, c) = measure(accum_of(v), &mut || gemm::launch(gpu, v, &sp, ptrs))?;
        Ok((format!("{}_splitk{split}", v.label()), ms, c))
    };
    for &v in &bench.versions {
        if matches!(v, Version::Simt(_)) && m.max(n).max(k) > bench.simt_max {
            continue;
        }
        if let Some(why) = gemm::refuses(v, &p, ptrs) {
            writeln!(out, "# {} on {label}: skipped, {why}", v.label())?;
            continue;
        }
        let (ms, c) = measure(accum_of(v), &mut || gemm::launch(gpu, v, &p, ptrs))?;
        rows.push(row(out, v.label(), label, &p, ms, cublas_ms, &c)?);
        if matches!(v, Version::Tensor(c, _) if !c.is_wgmma()) {
            for &split in &bench.splits {
                let (name, ms, c) = split_run(v, split)?;
                rows.push(row(out, name, label, &p, ms, cublas_ms, &c)?);
            }
        }
    }

    // What the host would pick for this shape, split-K included, when that splits.
    let cfg = gemm::choose_config(gpu, (m, n, k), false)?;
    let split = gemm::choose_split(gpu, cfg, m, n, k)?;
    if split > 1 {
        let (name, ms, c) = split_run(Version::Tensor(cfg, Accum::F16), split)?;
        rows.push(row(out, name, label, &p, ms, cublas_ms, &c)?);
    }
    Ok(())
}

fn row(
    out: &mut dyn Write,
    version: String,
    shape: &str,
    p: &Problem,
    ms: f64,
    cublas_ms: f64,
    c: &Check,
) -> Result<Row> {
    let r = Row {
        version,
        shape: shape.to_string(),
        m: p.m,
        n: p.n,
        k: p.k,
        ms,
        tflops: p.flops() / ms / 1e9,
        vs_cublas: 100.0 * cublas_ms / ms,
        max_err: c.max_err,
        ok: c.failures == 0,
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
    let mut s =
        String::from("gpu,version,shape,m,n,k,time_ms,tflops,pct_cublas_f16,max_err,correct\n");
    for r in rows {
        s += &format!(
            "{gpu_name},{},{},{},{},{},{:.6},{:.3},{:.1},{:.3e},{}\n",
            r.version, r.shape, r.m, r.n, r.k, r.ms, r.tflops, r.vs_cublas, r.max_err, r.ok
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_from_names_and_dimensions() {
        let fwd = Shape::parse("mlp128.fwd1").unwrap();
        assert_eq!(
            (fwd.m, fwd.n, fwd.k, fwd.layout),
            (128, 128, 784, Layout::NT)
        );
        assert!(fwd.epilogue);
        let s = Shape::parse("64x32x16").unwrap();
        assert_eq!(
            s,
            Shape::new("64x32x16".into(), (64, 32, 16), Layout::NN, false)
        );
        for bad in ["64x32", "64x0x16", "big", "1x2x3x4"] {
            let e = Shape::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
