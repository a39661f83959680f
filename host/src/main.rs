//! `host`: train and benchmark with Rust GPU kernels. `host --help` lists the commands.
mod cli;

use anyhow::{Result, ensure};
use clap::FromArgMatches;
use cli::{Cli, Command, GemmArgs};
use host::allreduce_bench::{self, Sweep};
use host::cuda::{Gpu, GpuOptions};
use host::gemm::Version;
use host::gemm_bench::{self, Entry, Versions};
use host::mlp::{Dataset, Launched, Options};
use host::regression::report::Report;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A command with every flag checked that can be without a GPU: what runs once one is open.
enum Job {
    Info,
    Gemm(GemmTable),
    /// `host gemm --list` or `--explain`: what the tile table says, printed without a GPU.
    Tiles(String),
    Regression(Report),
    /// A training run and the data set it loads.
    Train(Options, Data),
    /// `host allreduce`'s sweep and its CSV file.
    Allreduce(Sweep, Option<PathBuf>),
}

/// `host gemm`'s flags, parsed.
struct GemmTable {
    versions: Versions,
    entries: Vec<Entry>,
    splits: Vec<usize>,
    simt_max: usize,
    time_ms: u32,
    csv: Option<PathBuf>,
    tune: bool,
}

/// Where a training run's data set comes from.
enum Data {
    /// MNIST's IDX files in this directory.
    Mnist(PathBuf),
    /// Iris, embedded in the binary.
    Iris,
}

/// The GPU's options and the command's job, checked: a bad flag is one error line here, before
/// any GPU is touched or any work done.
fn check(cli: &Cli) -> Result<(GpuOptions, Job)> {
    let opts = GpuOptions {
        ptx: cli.ptx,
        max_smem: cli.max_smem_kb.map(|kb| kb as usize * 1024),
        jit: cli.jit,
    };
    opts.validate()?;
    if let Some(target) = opts.ptx {
        host::ptx::ensure_embedded(target)?;
    }
    let job = match &cli.command {
        Command::Info => Job::Info,
        Command::Gemm(a) if a.list => Job::Tiles(host::gemm::anatomy::list()),
        Command::Gemm(a) => match &a.explain {
            Some(name) => Job::Tiles(explain(name, a.svg.as_deref())?),
            None => Job::Gemm(gemm_table(a)?),
        },
        Command::Regression(a) => {
            let report = regression_report(a);
            report.validate()?;
            Job::Regression(report)
        }
        Command::Mnist(a) => {
            let o = training(&a.train, Options::mnist())?;
            let dir = host::mnist::data_dir(a.data.as_deref())?;
            Job::Train(o, Data::Mnist(dir))
        }
        Command::Iris(a) => Job::Train(training(&a.train, Options::iris())?, Data::Iris),
        Command::Allreduce(a) => Job::Allreduce(allreduce_sweep(a)?, a.csv.clone()),
    };
    Ok((opts, job))
}

/// A training run's options from its flags and the data set's defaults, checked.
fn training(flags: &cli::TrainFlags, defaults: Options) -> Result<Options> {
    let o = cli::train_options(flags, defaults)?;
    host::mlp::validate(&o)?;
    Ok(o)
}

fn gemm_table(a: &GemmArgs) -> Result<GemmTable> {
    let versions = if a.choice {
        Versions::Choice
    } else if a.config.is_empty() {
        Versions::All
    } else {
        Versions::These(
            a.config
                .iter()
                .map(|c| Version::parse(c, a.accum))
                .collect::<Result<_>>()?,
        )
    };
    let entries = if a.sizes.is_empty() {
        gemm_bench::default_entries()
    } else {
        a.sizes
            .iter()
            .map(|s| Entry::parse(s))
            .collect::<Result<_>>()?
    };
    if let Some(path) = &a.csv {
        host::ensure_output_path("--csv", path)?;
    }
    Ok(GemmTable {
        versions,
        entries,
        splits: a.split_k.iter().map(|&s| s as usize).collect(),
        simt_max: a.simt_max,
        time_ms: a.time_ms,
        csv: a.csv.clone(),
        tune: a.tune,
    })
}

/// `host gemm --explain ROW`'s text, after writing its drawing to `svg` if asked.
fn explain(name: &str, svg: Option<&Path>) -> Result<String> {
    let c = host::gemm::anatomy::row(name)?;
    let mut text = host::gemm::anatomy::explain(c);
    if let Some(path) = svg {
        host::ensure_output_path("--svg", path)?;
        std::fs::write(path, host::gemm::drawing::svg(c))?;
        text.push_str(&format!("wrote {}\n", path.display()));
    }
    Ok(text)
}

fn allreduce_sweep(a: &cli::AllreduceArgs) -> Result<Sweep> {
    use host::mlp::options::MAX_PIECES;
    ensure!(
        a.gpus.is_none_or(|g| g >= 2),
        "--gpus: a sum needs at least 2 GPUs"
    );
    ensure!(
        a.hidden.iter().all(|&h| h > 0),
        "--hidden: widths must be positive"
    );
    ensure!(
        a.pieces.iter().all(|p| (1..=MAX_PIECES).contains(p)),
        "--pieces: give 1 to {MAX_PIECES}"
    );
    ensure!(a.reps > 0, "--reps must be at least 1");
    if let Some(path) = &a.csv {
        host::ensure_output_path("--csv", path)?;
    }
    Ok(Sweep {
        gpus: a.gpus.unwrap_or(0),
        hidden: a.hidden.clone(),
        pieces: a.pieces.clone(),
        reps: a.reps,
    })
}

/// Runs `s` (on every GPU present where it names none) and prints its table.
fn allreduce(opts: &GpuOptions, mut s: Sweep, csv: Option<&Path>) -> Result<()> {
    if s.gpus == 0 {
        s.gpus = Gpu::count()?;
    }
    println!(
        "gradient sums of a data-parallel step over {} GPUs through NCCL {}; time = median \
         over replays of a CUDA graph of {} sums",
        s.gpus,
        host::nccl::describe()?,
        allreduce_bench::CALLS
    );
    let rows = allreduce_bench::run(&s, opts)?;
    println!("| memory | collective | hidden | pieces | MB | µs | bus GB/s |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.1} | {:.0} |",
            r.memory,
            r.collective,
            r.hidden,
            r.pieces,
            r.bytes as f64 / 1e6,
            r.us,
            r.bus_gb_s(s.gpus)
        );
    }
    if let Some(path) = csv {
        allreduce_bench::write_csv(path, &rows, s.gpus)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn regression_report(a: &cli::RegressionArgs) -> Report {
    Report {
        options: host::regression::Options {
            points: a.points,
            epochs: a.epochs,
            lr: a.lr,
            seed: a.seed,
            noise: a.noise,
            w: a.w,
            b: a.b,
            streams: a.streams,
        },
        variant: a.variant,
        sweep: a.sweep,
        sweep_points: a.sweep_points.clone(),
        trace: a.trace.clone(),
        csv: a.csv.clone(),
    }
}

fn gemm(gpu: &Gpu, t: &GemmTable) -> Result<()> {
    if let Versions::These(versions) = &t.versions {
        for v in versions {
            v.ensure_runs_on(gpu)?;
        }
    }
    println!(
        "GEMM ladder on {} ({}); fp16 in/out, time = median over replays of a CUDA graph \
         of 10 calls",
        gpu.name()?,
        gpu.describe_ptx()
    );
    let budget = f64::from(t.time_ms);
    gemm_bench::roof(gpu, budget, &mut std::io::stdout())?;
    let rows = gemm_bench::run(
        gpu,
        (&t.versions, &t.splits),
        &t.entries,
        t.simt_max,
        gemm_bench::Timing {
            budget_ms: budget,
            alternate: t.tune,
        },
        &mut std::io::stdout(),
    )?;
    if let Some(path) = &t.csv {
        gemm_bench::write_csv(path, &rows, &gpu.name()?)?;
        println!("wrote {}", path.display());
    }
    if t.tune {
        print!("{}", gemm_bench::tune::report(gpu, &rows));
    }
    gemm_bench::ensure_correct(&rows)
}

fn run(cli: Cli) -> Result<()> {
    // Bad flags are reported before the GPU is touched.
    let (opts, job) = check(&cli)?;
    let device = cli.device;
    let open = || Gpu::with_options(device, &opts);
    match job {
        Job::Info => host::info::print(&open()?),
        Job::Tiles(text) => {
            print!("{text}");
            Ok(())
        }
        Job::Gemm(t) => gemm(&open()?, &t),
        Job::Regression(report) => report.run(&open()?),
        Job::Allreduce(s, csv) => allreduce(&opts, s, csv.as_deref()),
        Job::Train(o, data) => {
            let launched = Launched::from_env()?;
            if let Some(l) = &launched {
                // SAFETY: no other thread exists yet to read the environment while it changes.
                unsafe { std::env::set_var("NCCL_COMM_ID", &l.root) };
            }
            let ds = match data {
                Data::Mnist(dir) => host::mnist::load(&dir)?,
                Data::Iris => host::iris::load(host::iris::CSV, o.seed)?,
            };
            train((device, &opts), launched.as_ref(), &o, &ds)
        }
    }
}

/// Trains on GPU `device` (ordinal, options), data parallel on `o.gpus` GPUs from it on, or as
/// one rank of a world a launcher started, each GPU opened with the same options. A quiet run
/// prints its last line alone, here (rank 0's).
fn train(
    (device, opts): (usize, &GpuOptions),
    launched: Option<&Launched>,
    o: &Options,
    ds: &Dataset,
) -> Result<()> {
    let results = match launched {
        Some(l) => host::mlp::train_launched(l, opts, o, ds)?,
        None if o.gpus > 1 => host::mlp::train_data_parallel(device, opts, o, ds)?,
        None => host::mlp::train(&Gpu::with_options(device, opts)?, o, ds)?,
    };
    let rank0 = launched.is_none_or(|l| l.rank == 0);
    // With --epochs 0 the evaluation's line is the last, printed however quiet.
    if o.quiet && o.epochs > 0 && rank0 {
        println!("{}", host::mlp::summary(o, &results));
    }
    Ok(())
}

fn main() -> ExitCode {
    // Output piped into `head` and the like ends quietly, as in other command-line tools, rather
    // than with Rust's panic on a broken pipe.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::from_arg_matches(&cli::command().get_matches()).unwrap_or_else(|e| e.exit());
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

    /// The error `host <args>` stops with, which must come from the checks before any GPU
    /// work: on a machine without one, a check that came later would give the driver's error.
    fn error(args: &[&str]) -> String {
        let m = cli::command().try_get_matches_from(args).unwrap();
        let e = run(Cli::from_arg_matches(&m).unwrap()).unwrap_err();
        let line = format!("{e:#}");
        assert!(!line.contains('\n'), "{args:?}: {line}");
        line
    }

    #[test]
    fn bad_values_are_one_line_errors_before_the_gpu() {
        let missing = std::env::temp_dir().join(format!("no-such-dir-{}", std::process::id()));
        let missing = missing.to_str().unwrap();
        let not_embedded = (30..=120)
            .map(host::ptx::Target::portable)
            .find(|t| host::ptx::EMBEDDED.iter().all(|p| p.target() != *t))
            .unwrap()
            .to_string();
        let (weights, table, trace) = (
            format!("{missing}/w.safetensors"),
            format!("{missing}/gemm.csv"),
            format!("{missing}/t.json"),
        );
        let here = std::env::temp_dir();
        let here = here.to_str().unwrap();
        for (args, says) in [
            (
                vec!["info", "--max-smem-kb", "0"],
                "--max-smem-kb must be positive".to_string(),
            ),
            (
                vec!["--ptx", not_embedded.as_str(), "info"],
                format!("--ptx {not_embedded} is not embedded"),
            ),
            (
                vec!["mnist", "--lr", "-1"],
                "--lr must be positive, not -1".into(),
            ),
            (
                vec!["mnist", "--lr", "inf"],
                "--lr must be a finite number, not inf".into(),
            ),
            (
                vec!["iris", "--lr", "NaN"],
                "--lr must be a finite number, not NaN".into(),
            ),
            (
                vec!["iris", "--momentum", "-0.5"],
                "--momentum must be in [0, 1), not -0.5".into(),
            ),
            (vec!["mnist", "--config", "nope"], "\"nope\"".into()),
            (vec!["mnist", "--data", missing], "--data".into()),
            (
                vec!["mnist", "--save", weights.as_str()],
                "does not exist".into(),
            ),
            (
                vec!["mnist", "--reduce-pieces", "0"],
                "--reduce-pieces 0: give 1 to 16".into(),
            ),
            (
                vec!["allreduce", "--pieces", "1,17"],
                "--pieces: give 1 to 16".into(),
            ),
            (
                vec!["allreduce", "--gpus", "1"],
                "--gpus: a sum needs at least 2 GPUs".into(),
            ),
            (
                vec!["allreduce", "--csv", table.as_str()],
                format!("--csv {missing}/gemm.csv: directory {missing} does not exist"),
            ),
            (vec!["gemm", "--sizes", "64x32"], "size \"64x32\"".into()),
            (
                vec!["gemm", "--config", "nope"],
                "unknown GEMM version".into(),
            ),
            (
                vec!["gemm", "--csv", table.as_str()],
                format!("--csv {missing}/gemm.csv: directory {missing} does not exist"),
            ),
            (
                vec!["regression", "--csv", here],
                format!("--csv {here} is a directory"),
            ),
            (
                vec!["regression", "--trace", trace.as_str()],
                "--trace".into(),
            ),
            (
                vec!["regression", "--lr", "-0.1"],
                "--lr must be positive, not -0.1".into(),
            ),
            (
                vec!["regression", "--w", "inf"],
                "--w must be a finite number, not inf".into(),
            ),
            (
                vec!["regression", "--sweep", "--sweep-points", "3"],
                "--sweep-points 3: --points must be at least 5".into(),
            ),
        ] {
            let args: Vec<&str> = std::iter::once("host").chain(args).collect();
            let e = error(&args);
            assert!(e.contains(&says), "{args:?}: {e}");
        }
    }

    #[test]
    fn phase_and_tile_flags_are_one_line_errors_before_the_gpu() {
        let phases = if host::ptx::PHASE_TRACE {
            "--phases traces the persistent kernel training on one GPU"
        } else {
            "--phases needs the phase trace compiled in: build with GPU_PHASE_TRACE=1"
        };
        for (args, says) in [
            (vec!["host", "mnist", "--phases", "--gpus", "2"], phases),
            (
                vec!["host", "gemm", "--explain", "tc99"],
                "no tile row \"tc99\"; the rows are tc75_128x128x32_64x32",
            ),
        ] {
            let e = error(&args);
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }
}
