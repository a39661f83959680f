//! `host`: train and benchmark with Rust GPU kernels. `host --help` lists the commands.
use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use gpu::gemm::Accum;
use host::cuda::{Gpu, GpuOptions};
use host::gemm::Version;
use host::gemm_bench::{self, Entry};
use host::mlp::Options;
use host::ptx;
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
    /// Load this embedded PTX (e.g. sm_75, or sm_90 for Hopper without its sm_90a-only
    /// kernels) instead of the newest the GPU runs: an older architecture's kernels and engine
    /// choices on a newer GPU. Its cubin is used only where that SASS runs on the GPU; otherwise
    /// the driver compiles the PTX.
    #[arg(long, global = true, value_name = "SM_XX", value_parser = ptx::parse_arch)]
    ptx: Option<ptx::Target>,
    /// Take this many KiB as the shared memory a block may use (at most the GPU's own opt-in
    /// limit), so the persistent kernel's check and the GEMM configuration choice behave as on
    /// a GPU with that much.
    #[arg(long, global = true, value_name = "N")]
    max_smem_kb: Option<u32>,
    /// Have the driver compile the PTX even where an embedded cubin runs: its compiler may be
    /// newer than the build's ptxas (and its code faster); the compile takes seconds on a first
    /// run, after which the driver caches it.
    #[arg(long, global = true)]
    jit: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe the GPU, the embedded PTX chosen for it, the form loaded and its kernels.
    Info,
    /// Benchmark the GEMM ladder against cuBLAS, checking every result.
    Gemm(GemmArgs),
    /// Linear regression y = w·x + b by full-batch gradient descent: the four variants, timed.
    Regression(RegressionArgs),
    /// Train an MLP on MNIST (or any IDX data set of the same form) with the Rust kernels.
    Mnist(MnistArgs),
    /// Train an MLP (4-5-3 by default) on Iris, embedded in the binary.
    Iris(IrisArgs),
}

#[derive(clap::Args)]
struct RegressionArgs {
    /// Data points (80% train, 20% test).
    #[arg(long, default_value_t = 5_000_000)]
    points: usize,
    /// Full-batch gradient steps.
    #[arg(long, default_value_t = 200)]
    epochs: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01)]
    lr: f32,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 0)]
    seed: u32,
    /// Standard deviation of the Gaussian noise added to y.
    #[arg(long, default_value_t = 1.0)]
    noise: f32,
    /// True slope of the generated data.
    #[arg(long, default_value_t = 2.0)]
    w: f32,
    /// True intercept of the generated data.
    #[arg(long, default_value_t = 1.0)]
    b: f32,
    /// Run only this variant (default: all four).
    #[arg(long, value_enum)]
    variant: Option<host::regression::Variant>,
    /// Streams of the `streams` variant.
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// Write a Chrome trace (Perfetto) of one run of the chosen variant (default: unfused).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Time every variant at 1M, 5M, 10M, 50M and 100M points (or --sweep-points).
    #[arg(long)]
    sweep: bool,
    /// Point counts of --sweep, comma-separated (default: 1M, 5M, 10M, 50M, 100M).
    #[arg(long, value_delimiter = ',')]
    sweep_points: Vec<usize>,
    /// Write the results as CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
}

#[derive(clap::Args)]
struct MnistArgs {
    /// Directory with train-/t10k- images and labels (IDX, raw or .gz). Default: data/mnist.
    #[arg(long)]
    data: Option<PathBuf>,
    #[command(flatten)]
    train: TrainFlags,
}

#[derive(clap::Args)]
struct IrisArgs {
    #[command(flatten)]
    train: TrainFlags,
}

/// Training flags shared by `mnist` and `iris`. Their defaults are the data set's own
/// [`host::mlp::Options`] (`Options::mnist`, `Options::iris`), which [`command`] gives each
/// subcommand, and so its help.
#[derive(clap::Args)]
struct TrainFlags {
    /// Hidden layer widths, comma-separated.
    #[arg(long, value_delimiter = ',')]
    hidden: Vec<usize>,
    /// Passes over the training set (0: only evaluate the weights of --load).
    #[arg(long)]
    epochs: Option<usize>,
    /// Examples per step.
    #[arg(long)]
    batch: Option<usize>,
    /// Learning rate of SGD.
    #[arg(long)]
    lr: Option<f32>,
    /// Momentum of SGD.
    #[arg(long)]
    momentum: Option<f32>,
    /// Initialisation of the weights.
    #[arg(long, value_enum)]
    init: Option<host::mlp::model::Init>,
    /// Seed of the initial weights, the shuffles and (Iris) the split.
    #[arg(long)]
    seed: Option<u64>,
    /// Accumulator of the tensor-core GEMMs.
    #[arg(long, value_parser = parse_accum)]
    accum: Option<Accum>,
    /// Launch each kernel of a step instead of replaying a captured CUDA graph.
    #[arg(long)]
    no_graph: bool,
    /// Train with one kernel per operation (GEMMs, loss, bias gradients; on one GPU the
    /// gradients' kernels take the SGD step; replayed as a CUDA graph) even
    /// where the persistent kernel applies (one hidden layer, batch ≤ 128, sm_80+).
    #[arg(long)]
    layered: bool,
    /// Hidden units a block of the persistent kernel takes: 8, or 16 or 32 (Hopper, fp16
    /// accumulators; past 2,112 units 32 for the whole batch, W1's state in global memory). By
    /// default the first kernel, in the host's order of preference, whose blocks are all
    /// resident at once.
    #[arg(long, value_parser = parse_slice_units)]
    slice_units: Option<usize>,
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
    /// Print one line every this many epochs.
    #[arg(long)]
    print_every: Option<usize>,
    /// Train data parallel on this many GPUs (from --device on), through NCCL: each takes an
    /// equal share of every batch.
    #[arg(long)]
    gpus: Option<usize>,
}

#[derive(clap::Args)]
struct GemmArgs {
    /// Versions or configs to run (comma-separated: naive, smem, regblock, direct, a config name
    /// such as tc80_128x128x32_64x64_s4, optionally with _f16/_f32). Default: all this GPU runs.
    #[arg(long, value_delimiter = ',')]
    config: Vec<String>,
    /// Accumulator for config names given without a suffix.
    #[arg(long, default_value = "f16", value_parser = parse_accum)]
    accum: Accum,
    /// Problem sizes as MxNxK (comma-separated; NN layout) or names: square256 … square8192;
    /// the MNIST MLP's products at hidden width H, mlpH.fwd1, .fwd2, .dx2, .dw2, .dw1 (batch
    /// 128; mlpHbB.fwd1 and so on at batch B); its weight gradients run together as the step
    /// runs them, mlpH.dw2+dw1 (cuBLAS's pair against the host's own tiles, whatever --config
    /// says). Default: the squares, and the MLP's products and pairs at H = 128, 4096, 8192.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Also run every tensor-core `mma.sync` version with K split over each of these numbers
    /// of slices (comma-separated), summed by the split-K reduction.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(2..=1024))]
    split_k: Vec<u32>,
    /// Largest dimension the SIMT versions run at.
    #[arg(long, default_value_t = 2048)]
    simt_max: usize,
    /// Time each row for about this long (ms), in at most one replay per ms: rows faster than
    /// that take less. Longer runs hold the GPU at the clock and power it settles to under
    /// sustained load.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    time_ms: u32,
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

fn parse_slice_units(s: &str) -> Result<usize, String> {
    match s.parse() {
        Ok(u @ (8 | 16 | 32)) => Ok(u),
        _ => Err(format!("a block takes 8, 16 or 32 hidden units, not {s:?}")),
    }
}

fn gemm(gpu: &Gpu, a: &GemmArgs) -> Result<()> {
    let versions = a
        .config
        .iter()
        .map(|c| Version::parse(c, a.accum))
        .collect::<Result<Vec<_>>>()?;
    let entries = if a.sizes.is_empty() {
        gemm_bench::default_entries()
    } else {
        a.sizes
            .iter()
            .map(|s| Entry::parse(s))
            .collect::<Result<_>>()?
    };
    for v in &versions {
        v.ensure_runs_on(gpu)?;
    }
    println!(
        "GEMM ladder on {} ({}); fp16 in/out, time = median over replays of a CUDA graph \
         of 10 calls",
        gpu.name()?,
        gpu.describe_ptx()
    );
    let budget = f64::from(a.time_ms);
    gemm_bench::roof(gpu, budget, &mut std::io::stdout())?;
    let splits: Vec<usize> = a.split_k.iter().map(|&s| s as usize).collect();
    let rows = gemm_bench::run(
        gpu,
        (&versions, &splits),
        &entries,
        a.simt_max,
        budget,
        &mut std::io::stdout(),
    )?;
    if let Some(path) = &a.csv {
        gemm_bench::write_csv(path, &rows, &gpu.name()?)?;
        println!("wrote {}", path.display());
    }
    gemm_bench::ensure_correct(&rows)
}

fn run(cli: Cli) -> Result<()> {
    let opts = GpuOptions {
        ptx: cli.ptx,
        max_smem: cli.max_smem_kb.map(|kb| kb as usize * 1024),
        jit: cli.jit,
    };
    // Bad flags are reported before the GPU is touched.
    opts.validate()?;
    match &cli.command {
        Command::Mnist(a) => host::mlp::validate(&train_options(&a.train, Options::mnist())?)?,
        Command::Iris(a) => host::mlp::validate(&train_options(&a.train, Options::iris())?)?,
        Command::Regression(a) => host::regression::validate(&regression_options(a, a.points))?,
        _ => {}
    }
    let device = cli.device;
    let open = || Gpu::with_options(device, &opts);
    match cli.command {
        Command::Info => host::info::print(&open()?),
        Command::Gemm(a) => gemm(&open()?, &a),
        Command::Regression(a) => regression(&open()?, &a),
        Command::Mnist(a) => {
            let o = train_options(&a.train, Options::mnist())?;
            let ds = host::mnist::load(&a.data.clone().unwrap_or_else(host::mnist::default_dir))?;
            train((device, &opts), &o, &ds)
        }
        Command::Iris(a) => {
            let o = train_options(&a.train, Options::iris())?;
            let ds = host::iris::load(host::iris::CSV, o.seed)?;
            train((device, &opts), &o, &ds)
        }
    }
}

/// Trains on GPU `device` (ordinal, options), or data parallel on `o.gpus` GPUs from it on,
/// each opened with the same options.
fn train((device, opts): (usize, &GpuOptions), o: &Options, ds: &host::mlp::Dataset) -> Result<()> {
    if o.gpus > 1 {
        host::mlp::train_data_parallel(device, opts, o, ds)?;
    } else {
        host::mlp::train(&Gpu::with_options(device, opts)?, o, ds)?;
    }
    Ok(())
}

fn regression_options(a: &RegressionArgs, points: usize) -> host::regression::Options {
    host::regression::Options {
        points,
        epochs: a.epochs,
        lr: a.lr,
        seed: a.seed,
        noise: a.noise,
        w: a.w,
        b: a.b,
        streams: a.streams,
    }
}

fn regression(gpu: &Gpu, a: &RegressionArgs) -> Result<()> {
    host::regression::report::Report {
        options: regression_options(a, a.points),
        variant: a.variant,
        sweep: a.sweep,
        sweep_points: a.sweep_points.clone(),
        trace: a.trace.clone(),
        csv: a.csv.clone(),
    }
    .run(gpu)
}

/// The options of a training run: each flag given, else the data set's default in `d`.
fn train_options(a: &TrainFlags, d: Options) -> Result<Options> {
    let accum = a.accum.unwrap_or(d.accum);
    Ok(Options {
        hidden: if a.hidden.is_empty() {
            d.hidden
        } else {
            a.hidden.clone()
        },
        epochs: a.epochs.unwrap_or(d.epochs),
        batch: a.batch.unwrap_or(d.batch),
        lr: a.lr.unwrap_or(d.lr),
        momentum: a.momentum.unwrap_or(d.momentum),
        init: a.init.unwrap_or(d.init),
        seed: a.seed.unwrap_or(d.seed),
        accum,
        graph: !a.no_graph,
        layered: a.layered,
        slice_units: a.slice_units,
        config: a
            .config
            .as_ref()
            .map(|c| Version::parse(c, accum))
            .transpose()?,
        metrics: a.metrics.clone(),
        save: a.save.clone(),
        load: a.load.clone(),
        quiet: false,
        print_every: a.print_every.unwrap_or(d.print_every),
        gpus: a.gpus.unwrap_or(d.gpus),
    })
}

/// The command line: the derived one, with each data set's training defaults set (and so shown
/// in its help) on its subcommand.
fn command() -> clap::Command {
    Cli::command()
        .mut_subcommand("mnist", |c| with_defaults(c, &Options::mnist()))
        .mut_subcommand("iris", |c| with_defaults(c, &Options::iris()))
}

/// The training flags' defaults as `d` has them, each in the form its flag takes.
fn default_flags(d: &Options) -> [(&'static str, String); 10] {
    let hidden: Vec<_> = d.hidden.iter().map(usize::to_string).collect();
    let init = clap::ValueEnum::to_possible_value(&d.init).expect("every Init is a value");
    [
        ("hidden", hidden.join(",")),
        ("epochs", d.epochs.to_string()),
        ("batch", d.batch.to_string()),
        ("lr", d.lr.to_string()),
        ("momentum", d.momentum.to_string()),
        ("init", init.get_name().to_string()),
        ("seed", d.seed.to_string()),
        ("accum", d.accum.suffix().to_string()),
        ("print_every", d.print_every.to_string()),
        ("gpus", d.gpus.to_string()),
    ]
}

fn with_defaults(c: clap::Command, d: &Options) -> clap::Command {
    default_flags(d).into_iter().fold(c, |c, (name, value)| {
        c.mut_arg(name, |a| a.default_value(value))
    })
}

fn main() -> ExitCode {
    // Output piped into `head` and the like ends quietly, as in other command-line tools, rather
    // than with Rust's panic on a broken pipe.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The help of `host <args>`, as clap prints it.
    fn help(args: &[&str]) -> String {
        let Err(err) = command().try_get_matches_from(args) else {
            panic!("--help stops parsing")
        };
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        err.to_string()
    }

    #[test]
    fn mnist_and_iris_help_show_their_own_training_defaults() {
        for (name, d) in [("mnist", Options::mnist()), ("iris", Options::iris())] {
            let text = help(&["host", name, "--help"]);
            // Each flag's entry: its line and those after it, up to the next line indented no
            // deeper (the next flag's, or a heading).
            let entry = |flag: &str| {
                let indent = |l: &str| l.len() - l.trim_start().len();
                let mut lines = text
                    .lines()
                    .skip_while(|l| !l.trim_start().starts_with(flag));
                let first = lines.next().unwrap_or_default();
                let rest = lines.take_while(|l| l.trim().is_empty() || indent(l) > indent(first));
                std::iter::once(first)
                    .chain(rest)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            for (id, value) in default_flags(&d) {
                let flag = format!("--{}", id.replace('_', "-"));
                let entry = entry(&format!("{flag} "));
                assert!(
                    entry.contains(&format!("[default: {value}]")),
                    "{name} {flag}: {entry:?} in\n{text}"
                );
            }
        }
        assert_ne!(Options::mnist().epochs, Options::iris().epochs);
    }

    #[test]
    fn every_argument_of_every_subcommand_has_help() {
        let c = command();
        let global = c.get_arguments().map(|a| (String::from("host"), a));
        let subs = c
            .get_subcommands()
            .flat_map(|s| s.get_arguments().map(|a| (s.get_name().to_string(), a)));
        for (cmd, arg) in global.chain(subs) {
            let text = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(
                !text.trim().is_empty(),
                "{cmd} --{} has no help",
                arg.get_id()
            );
        }
        for name in ["info", "gemm", "regression", "mnist", "iris"] {
            assert!(c.find_subcommand(name).is_some(), "{name}");
        }
    }

    #[test]
    fn unset_training_flags_take_the_data_sets_defaults() {
        for (name, d) in [("mnist", Options::mnist()), ("iris", Options::iris())] {
            let m = command().try_get_matches_from(["host", name]).unwrap();
            let o = match Cli::from_arg_matches(&m).unwrap().command {
                Command::Mnist(a) => train_options(&a.train, d.clone()).unwrap(),
                Command::Iris(a) => train_options(&a.train, d.clone()).unwrap(),
                _ => unreachable!(),
            };
            assert_eq!(
                (o.hidden, o.epochs, o.batch, o.lr, o.print_every),
                (d.hidden, d.epochs, d.batch, d.lr, d.print_every),
                "{name}"
            );
            assert_eq!(
                (o.momentum, o.init, o.seed, o.accum, o.gpus),
                (d.momentum, d.init, d.seed, d.accum, d.gpus),
                "{name}"
            );
        }
        let m = command()
            .try_get_matches_from(["host", "iris", "--epochs", "7"])
            .unwrap();
        let Command::Iris(a) = Cli::from_arg_matches(&m).unwrap().command else {
            unreachable!()
        };
        assert_eq!(train_options(&a.train, Options::iris()).unwrap().epochs, 7);
    }

    #[test]
    fn slice_units_are_8_16_or_32() {
        let units = |v: &str| {
            let m = command().try_get_matches_from(["host", "mnist", "--slice-units", v])?;
            let Command::Mnist(a) = Cli::from_arg_matches(&m).unwrap().command else {
                unreachable!()
            };
            Ok::<_, clap::Error>(
                train_options(&a.train, Options::mnist())
                    .unwrap()
                    .slice_units,
            )
        };
        for u in [8, 16, 32] {
            assert_eq!(units(&u.to_string()).unwrap(), Some(u));
        }
        for bad in ["12", "64", "0", "x"] {
            let e = units(bad).unwrap_err().to_string();
            assert!(e.contains("8, 16 or 32 hidden units"), "{e}");
        }
    }

    #[test]
    fn emulation_flags_are_global_and_bad_values_are_errors_before_the_gpu() {
        let parse = |args: &[&str]| {
            let m = command().try_get_matches_from(args)?;
            Ok::<_, clap::Error>(Cli::from_arg_matches(&m).unwrap())
        };
        for args in [
            &["host", "--ptx", "sm_75", "--max-smem-kb", "64", "mnist"][..],
            &["host", "gemm", "--max-smem-kb", "64", "--ptx", "sm_75"],
        ] {
            let cli = parse(args).unwrap();
            let sm_75 = ptx::parse_arch("sm_75").ok();
            assert_eq!((cli.ptx, cli.max_smem_kb), (sm_75, Some(64)), "{args:?}");
        }
        let cli = parse(&["host", "info"]).unwrap();
        assert_eq!((cli.ptx, cli.max_smem_kb), (None, None));
        for bad in [
            &["host", "info", "--ptx", "75"][..],
            &["host", "info", "--max-smem-kb", "-1"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let e = run(parse(&["host", "info", "--max-smem-kb", "0"]).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("--max-smem-kb must be positive"),
            "{e}"
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }
}
