//! `host`: train and benchmark with Rust GPU kernels. `host --help` lists the commands.
use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use gpu::gemm::{Accum, Layout};
use host::cuda::Gpu;
use host::gemm::Version;
use host::{gemm_bench, ptx};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    version,
    about = "Neural-network training with GPU kernels written in Rust"
)]
struct Cli {
    /// GPU to use (CUDA ordinal).
    #[arg(long, global = true, default_value_t = 0)]
    device: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe the GPU, the embedded PTX chosen for it and the kernels it holds.
    Info,
    /// Benchmark the GEMM ladder against cuBLAS, checking every result.
    Gemm(GemmArgs),
    /// Train an MLP on MNIST (or any IDX data set of the same form) with the Rust kernels.
    Mnist(MnistArgs),
}

#[derive(clap::Args)]
struct MnistArgs {
    /// Directory with train-/t10k- images and labels (IDX, raw or .gz).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Hidden layer widths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    hidden: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    #[arg(long, value_enum, default_value = "kaiming")]
    init: host::mnist::model::Init,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Accumulator of the tensor-core GEMMs.
    #[arg(long, default_value = "f16", value_parser = parse_accum)]
    accum: Accum,
    /// Launch each kernel of a step instead of replaying a captured CUDA graph.
    #[arg(long)]
    no_graph: bool,
    /// Force one GEMM configuration (see `host gemm`) instead of the per-shape choice.
    #[arg(long)]
    config: Option<String>,
    /// Write per-step loss and per-epoch accuracy as CSV.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Write the weights (safetensors, PyTorch-loadable) after every epoch.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Start from saved weights (with --epochs 0: only evaluate them).
    #[arg(long)]
    load: Option<PathBuf>,
}

#[derive(clap::Args)]
struct GemmArgs {
    /// Versions or configs to run (comma-separated: naive, smem, regblock, a config name such as
    /// tc80_128x128x32_64x64_s4, optionally with _f16/_f32). Default: all this GPU runs.
    #[arg(long, value_delimiter = ',')]
    config: Vec<String>,
    /// Accumulator for config names given without a suffix.
    #[arg(long, default_value = "f16", value_parser = parse_accum)]
    accum: Accum,
    /// Problem sizes as MxNxK (comma-separated; NN layout). Default: squares 256…8192 and the
    /// MNIST MLP shapes.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Largest dimension the SIMT versions run at.
    #[arg(long, default_value_t = 2048)]
    simt_max: usize,
    /// Also write the table as CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
}

fn parse_accum(s: &str) -> Result<Accum, String> {
    match s {
        "f16" => Ok(Accum::F16),
        "f32" => Ok(Accum::F32),
        _ => Err(format!("accumulator must be f16 or f32, not {s:?}")),
    }
}

fn parse_size(s: &str) -> Result<(String, usize, usize, usize, Layout, bool)> {
    let d: Vec<usize> = s
        .split('x')
        .map(|x| x.trim().parse())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("size {s:?} is not MxNxK"))?;
    match d[..] {
        [m, n, k] if m > 0 && n > 0 && k > 0 => Ok((s.to_string(), m, n, k, Layout::NN, false)),
        _ => bail!("size {s:?} is not MxNxK with positive dimensions"),
    }
}

fn info(gpu: &Gpu) -> Result<()> {
    let (free, total) = gpu.mem_info()?;
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    println!("GPU:                {}", gpu.name()?);
    println!("compute capability: sm_{}", gpu.sm);
    println!("multiprocessors:    {}", gpu.sm_count()?);
    println!(
        "memory:             {:.1} GiB total, {:.1} GiB free",
        gib(total),
        gib(free)
    );
    println!(
        "shared memory:      {} KiB per block (opt-in)",
        gpu.max_smem_optin()? / 1024
    );
    let built: Vec<_> = ptx::EMBEDDED.iter().map(|p| p.arch).collect();
    println!("embedded PTX:       {}", built.join(", "));
    println!(
        "PTX chosen:         {} (newest not above sm_{})",
        gpu.ptx.arch, gpu.sm
    );
    let kernels = ptx::kernels(gpu.ptx.source);
    println!("kernels ({}):", kernels.len());
    for k in kernels {
        println!("  {k}");
    }
    Ok(())
}

fn gemm(gpu: &Gpu, a: &GemmArgs) -> Result<()> {
    let versions = a
        .config
        .iter()
        .map(|c| Version::parse(c, a.accum))
        .collect::<Result<Vec<_>>>()?;
    let shapes = if a.sizes.is_empty() {
        gemm_bench::default_shapes()
    } else {
        a.sizes
            .iter()
            .map(|s| parse_size(s))
            .collect::<Result<_>>()?
    };
    println!(
        "GEMM ladder on {} ({} PTX); fp16 in/out, time = median of CUDA-event timings",
        gpu.name()?,
        gpu.ptx.arch
    );
    let rows = gemm_bench::run(gpu, &versions, &shapes, a.simt_max, &mut std::io::stdout())?;
    if let Some(path) = &a.csv {
        gemm_bench::write_csv(path, &rows, &gpu.name()?)?;
        println!("wrote {}", path.display());
    }
    gemm_bench::ensure_correct(&rows)
}

fn run(cli: Cli) -> Result<()> {
    if let Command::Mnist(a) = &cli.command {
        // Bad flags are reported before the GPU is touched.
        host::mnist::validate(&mnist_options(a)?)?;
    }
    let gpu = Gpu::new(cli.device)?;
    match cli.command {
        Command::Info => info(&gpu),
        Command::Gemm(a) => gemm(&gpu, &a),
        Command::Mnist(a) => host::mnist::train(&gpu, &mnist_options(&a)?).map(|_| ()),
    }
}

fn mnist_options(a: &MnistArgs) -> Result<host::mnist::Options> {
    Ok(host::mnist::Options {
        data: a
            .data
            .clone()
            .unwrap_or_else(host::mnist::data::default_dir),
        hidden: a.hidden.clone(),
        epochs: a.epochs,
        batch: a.batch,
        lr: a.lr,
        momentum: a.momentum,
        init: a.init,
        seed: a.seed,
        accum: a.accum,
        graph: !a.no_graph,
        config: a
            .config
            .as_ref()
            .map(|c| Version::parse(c, a.accum))
            .transpose()?,
        metrics: a.metrics.clone(),
        save: a.save.clone(),
        load: a.load.clone(),
        quiet: false,
    })
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
