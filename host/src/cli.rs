//! The `host` binary's command line (a module of `main.rs`, not of the library): its commands
//! and flags, each data set's training defaults set on them, numbers taken as values even when
//! negative, and the help under headings, with examples, in short lines.
use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{CommandFactory, Parser, Subcommand};
use gpu::gemm::Accum;
use host::gemm::Version;
use host::mlp::Options;
use host::mlp::options::Parallel;
use host::ptx;
use std::path::PathBuf;

/// The heading of the flags that choose the GPUs and how they are presented to the host.
const GPU: &str = "GPU options";
/// The heading of the flags that choose how a training run drives the GPU: its engine and
/// its kernels.
const ENGINE: &str = "Engine options";

const EXAMPLES: &str = "\
Examples:
  host info                     the GPU, the PTX chosen for it, its kernels
  host mnist                    MLP 784-128-10 on data/mnist, 10 epochs
  host mnist --hidden 512,256 --epochs 3 --save w.safetensors
  host mnist --epochs 0 --load w.safetensors    evaluate saved weights
  host iris --quiet             train on Iris; print only the last line
  host --ptx sm_75 --max-smem-kb 64 mnist       Turing's path on a newer GPU
  host gemm --sizes square4096,mlp128.fwd1 --csv gemm.csv";

const TRAIN_EXAMPLES: &str = "\
Examples:
  host mnist --data DIR --hidden 256 --batch 64 --lr 0.1
  host mnist --metrics m.csv --save w.safetensors
  host mnist --epochs 0 --load w.safetensors    evaluate saved weights
  host mnist --gpus 2 --batch 256               on GPUs 0 and 1 (see --parallel)
  host iris --epochs 300 --quiet";

const INFO_EXAMPLES: &str = "\
Examples:
  host info
  host --ptx sm_80 info         the sm_80 PTX and its kernels, on a newer GPU";

const GEMM_EXAMPLES: &str = "\
Examples:
  host gemm --sizes 4096x4096x4096 --time-ms 1000
  host gemm --config regblock,tc80_128x128x32_64x64_s4 --sizes mlp4096.fwd1
  host gemm --sizes mlp8192.dw2+dw1 --split-k 8,16 --csv gemm.csv";

const ALLREDUCE_EXAMPLES: &str = "\
Examples:
  host allreduce                every GPU; hidden 4096, 8192; 1, 2, 4, 8 pieces
  host allreduce --gpus 2 --hidden 4096 --pieces 1,4 --csv allreduce.csv";

const REGRESSION_EXAMPLES: &str = "\
Examples:
  host regression --points 1000000 --variant graph
  host regression --sweep --csv regression.csv
  host regression --variant fused --trace fused.json    open in Perfetto";

#[derive(Parser)]
#[command(
    version,
    about = "Neural-network training with GPU kernels written in Rust",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// GPU to use (CUDA ordinal).
    #[arg(long, global = true, default_value_t = 0, value_name = "N", help_heading = GPU)]
    pub device: usize,
    /// Load this embedded PTX instead of the newest the GPU runs.
    ///
    /// For example sm_75, or sm_90 for Hopper without its sm_90a-only kernels: an older
    /// architecture's kernels and engine choices on a newer GPU. Its cubin is used only where
    /// that SASS runs on the GPU; otherwise the driver compiles the PTX.
    #[arg(long, global = true, value_name = "SM_XX", value_parser = ptx::parse_arch, help_heading = GPU)]
    pub ptx: Option<ptx::Target>,
    /// Take this many KiB as the shared memory a block may use.
    ///
    /// At most the GPU's own opt-in limit: the persistent kernel's check and the GEMM
    /// configuration choice then behave as on a GPU with that much.
    #[arg(long, global = true, value_name = "N", help_heading = GPU)]
    pub max_smem_kb: Option<u32>,
    /// Have the driver compile the PTX even where an embedded cubin runs.
    ///
    /// Its compiler may be newer than the build's ptxas (and its code faster); the compile
    /// takes seconds on a first run, after which the driver caches it.
    #[arg(long, global = true, help_heading = GPU)]
    pub jit: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Describe the GPU, the embedded PTX chosen for it and its kernels.
    #[command(after_help = INFO_EXAMPLES)]
    Info,
    /// Benchmark the GEMM ladder against cuBLAS, checking every result.
    #[command(after_help = GEMM_EXAMPLES)]
    Gemm(GemmArgs),
    /// Fit y = w·x + b by full-batch gradient descent: four variants, timed.
    #[command(after_help = REGRESSION_EXAMPLES)]
    Regression(RegressionArgs),
    /// Train an MLP on MNIST (or any IDX data set of its form).
    #[command(after_help = TRAIN_EXAMPLES)]
    Mnist(MnistArgs),
    /// Train an MLP (4-5-3 by default) on Iris, embedded in the binary.
    #[command(after_help = TRAIN_EXAMPLES)]
    Iris(IrisArgs),
    /// Time a data-parallel step's gradient sum alone through NCCL, on several GPUs.
    #[command(after_help = ALLREDUCE_EXAMPLES)]
    Allreduce(AllreduceArgs),
}

#[derive(clap::Args)]
pub struct AllreduceArgs {
    /// GPUs to sum over, from 0 (default: every GPU present).
    #[arg(long, value_name = "N")]
    pub gpus: Option<usize>,
    /// Hidden widths of the 784-H-10 MLPs whose fp16 gradients are summed, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "H,…",
        default_value = "4096,8192"
    )]
    pub hidden: Vec<usize>,
    /// Pieces the sum is split into, comma-separated (as `mnist --reduce-pieces` splits it).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N,…",
        default_value = "1,2,4,8"
    )]
    pub pieces: Vec<usize>,
    /// Timed replays of each row.
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub reps: usize,
    /// Also write the rows to this CSV file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct RegressionArgs {
    /// Data points (80% train, 20% test).
    #[arg(long, default_value_t = 5_000_000, value_name = "N")]
    pub points: usize,
    /// Full-batch gradient steps.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub epochs: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f32,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u32,
    /// Standard deviation of the Gaussian noise added to y.
    #[arg(long, default_value_t = 1.0)]
    pub noise: f32,
    /// True slope of the generated data.
    #[arg(long, default_value_t = 2.0)]
    pub w: f32,
    /// True intercept of the generated data.
    #[arg(long, default_value_t = 1.0)]
    pub b: f32,
    /// Run only this variant (default: all four).
    #[arg(long, value_enum)]
    pub variant: Option<host::regression::Variant>,
    /// Streams of the `streams` variant.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub streams: usize,
    /// Write a Chrome trace (Perfetto) of one run of the chosen variant (default: unfused).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Time every variant at 1M, 5M, 10M, 50M and 100M points (or --sweep-points).
    #[arg(long)]
    pub sweep: bool,
    /// Point counts of --sweep, comma-separated (default: 1M, 5M, 10M, 50M, 100M).
    #[arg(long, value_delimiter = ',', value_name = "N,…")]
    pub sweep_points: Vec<usize>,
    /// Write the results as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct MnistArgs {
    /// Directory of the train-/t10k- images and labels (IDX, raw or .gz).
    ///
    /// Default: the repository's data/mnist, found from its root or from host/.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub train: TrainFlags,
}

#[derive(clap::Args)]
pub struct IrisArgs {
    #[command(flatten)]
    pub train: TrainFlags,
}

/// Training flags shared by `mnist` and `iris`. Their defaults are the data set's own
/// [`Options`] (`Options::mnist`, `Options::iris`), which [`command`] gives each subcommand,
/// and so its help.
#[derive(clap::Args)]
pub struct TrainFlags {
    /// Hidden layer widths, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "N,…")]
    pub hidden: Vec<usize>,
    /// Passes over the training set (0: only evaluate the weights of --load).
    #[arg(long, value_name = "N")]
    pub epochs: Option<usize>,
    /// Examples per step (over every GPU of --gpus).
    #[arg(long, value_name = "N")]
    pub batch: Option<usize>,
    /// Learning rate of SGD.
    #[arg(long)]
    pub lr: Option<f32>,
    /// Momentum of SGD.
    #[arg(long)]
    pub momentum: Option<f32>,
    /// Initialisation of the weights.
    #[arg(long, value_enum)]
    pub init: Option<host::mlp::params::Init>,
    /// Seed of the initial weights, the shuffles and (Iris) the split.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Accumulator of the tensor-core GEMMs.
    #[arg(long, value_parser = accum_parser())]
    pub accum: Option<Accum>,
    /// Write per-step loss and per-epoch accuracy as CSV.
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Write the weights (safetensors, PyTorch-loadable) after every epoch.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Start from saved weights (with --epochs 0: only evaluate them).
    #[arg(long, value_name = "FILE")]
    pub load: Option<PathBuf>,
    /// Print one line every this many epochs.
    #[arg(long, value_name = "N")]
    pub print_every: Option<usize>,
    /// Print only the last line, for scripts.
    ///
    /// That line is the summary of the run (its time and final test accuracy), or with
    /// --epochs 0 the evaluation; no first line, progress bar or epoch lines. Errors still go
    /// to stderr, as one line, with exit status 1.
    #[arg(long)]
    pub quiet: bool,
    /// Launch each kernel of a step instead of replaying a captured CUDA graph.
    #[arg(long, help_heading = ENGINE)]
    pub no_graph: bool,
    /// Train with one kernel per operation, even where the persistent kernel applies.
    ///
    /// The layered step: GEMMs, loss and bias gradients (on one GPU the gradients' kernels take
    /// the SGD step), replayed as a CUDA graph. The persistent kernel applies to one hidden
    /// layer from Turing (sm_75) on, two from sm_80 on and up to four on Hopper, at batches up
    /// to 128 (256 in four parts).
    #[arg(long, help_heading = ENGINE)]
    pub layered: bool,
    /// After training, print the persistent kernel's time in each phase of a step.
    ///
    /// The median over the last epoch's steps, for block 0 and the slowest block. Needs a build
    /// with the phase trace: GPU_PHASE_TRACE=1 cargo build --release.
    #[arg(long, help_heading = ENGINE)]
    pub phases: bool,
    /// Hidden units a block of the persistent kernel takes: 8, 16 or 32.
    ///
    /// 16 and 32 on Hopper with fp16 accumulators; past 2,112 units 32 for the whole batch,
    /// W1's state in global memory. By default the first kernel, in the host's order of
    /// preference, whose blocks are all resident at once.
    #[arg(long, value_name = "N", value_parser = parse_slice_units, help_heading = ENGINE)]
    pub slice_units: Option<usize>,
    /// Force one GEMM configuration (see `host gemm`) instead of the per-shape choice.
    #[arg(long, value_name = "NAME", help_heading = ENGINE)]
    pub config: Option<String>,
    /// Train on this many GPUs (from --device on), through NCCL.
    ///
    /// --batch stays the step's examples over every GPU; --parallel says how they share it.
    #[arg(long, value_name = "N", help_heading = GPU)]
    pub gpus: Option<usize>,
    /// With several GPUs, sum the gradients in this many pieces, each as soon as it is made.
    ///
    /// The first layer's weight gradient is split along its units; the sums overlap the GEMMs
    /// of later pieces and the updates of earlier ones. Data parallel only; by default one.
    #[arg(long, value_name = "N", help_heading = GPU)]
    pub reduce_pieces: Option<usize>,
    /// How the GPUs of --gpus share a step: data (each a share of the batch) or tensor (each a
    /// block of the hidden layer's units).
    ///
    /// By default tensor, where the model has one hidden layer that splits evenly.
    #[arg(long, value_enum, help_heading = GPU)]
    pub parallel: Option<Parallel>,
}

#[derive(clap::Args)]
pub struct GemmArgs {
    /// Versions or configs to run, comma-separated (default: all this GPU runs).
    ///
    /// naive, smem, regblock, direct, or a config name such as tc80_128x128x32_64x64_s4,
    /// optionally with _f16 or _f32.
    #[arg(long, value_delimiter = ',', value_name = "NAME,…")]
    pub config: Vec<String>,
    /// Accumulator for config names given without a suffix.
    #[arg(long, default_value = "f16", value_parser = accum_parser())]
    pub accum: Accum,
    /// Problem sizes, comma-separated: MxNxK (NN layout) or names.
    ///
    /// Names: square256 … square8192; the MNIST MLP's products at hidden width H, mlpH.fwd1,
    /// .fwd2, .dx2, .dw2, .dw1 (batch 128; mlpHbB.fwd1 and so on at batch B); its weight
    /// gradients run together as the step runs them, mlpH.dw2+dw1 (cuBLAS's pair against the
    /// host's own tiles, whatever --config says). Default: the squares, and the MLP's products
    /// and pairs at H = 128, 4096, 8192.
    #[arg(long, value_delimiter = ',', value_name = "SIZE,…")]
    pub sizes: Vec<String>,
    /// Also run every `mma.sync` version with K split over each of these numbers of slices.
    ///
    /// Comma-separated; the slices are summed by the split-K reduction.
    #[arg(long, value_delimiter = ',', value_name = "N,…", value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub split_k: Vec<u32>,
    /// Largest dimension the SIMT versions run at.
    #[arg(long, default_value_t = 2048, value_name = "N")]
    pub simt_max: usize,
    /// Time each row for about this long (ms), in at most one replay per ms.
    ///
    /// Rows faster than that take less. Longer runs hold the GPU at the clock and power it
    /// settles to under sustained load.
    #[arg(long, default_value_t = 200, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..=60_000))]
    pub time_ms: u32,
    /// Also write the table as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// After the table, rank the rows of each size that computed it correctly, say how far the
    /// host's choice is from the winner, and print the preference lines to paste.
    #[arg(long)]
    pub tune: bool,
    /// Run only cuBLAS and the host's own choice for each size: what training on this GPU (or
    /// on the one --ptx and --max-smem-kb emulate) would run.
    #[arg(long, conflicts_with_all = ["config", "split_k", "tune"])]
    pub choice: bool,
    /// Print every row of the tile table, the GPUs it fits and the GPUs that prefer it; no GPU
    /// needed.
    #[arg(long, conflicts_with_all = ["explain", "tune"])]
    pub list: bool,
    /// Print one row's block tile, warps, instructions, registers, shared memory and swizzle;
    /// no GPU needed.
    #[arg(long, value_name = "ROW", conflicts_with = "tune")]
    pub explain: Option<String>,
    /// With --explain: also draw the row's block, warp and instruction tiles as an SVG file.
    #[arg(long, value_name = "FILE", requires = "explain")]
    pub svg: Option<PathBuf>,
}

/// `--accum`'s values, which the help lists.
fn accum_parser() -> impl TypedValueParser<Value = Accum> {
    PossibleValuesParser::new([
        PossibleValue::new("f16").help("half-precision sums"),
        PossibleValue::new("f32").help("single-precision sums"),
    ])
    .map(|s| match s.as_str() {
        "f32" => Accum::F32,
        _ => Accum::F16,
    })
}

fn parse_slice_units(s: &str) -> Result<usize, String> {
    match s.parse() {
        Ok(u @ (8 | 16 | 32)) => Ok(u),
        _ => Err(format!("a block takes 8, 16 or 32 hidden units, not {s:?}")),
    }
}

/// The options of a training run: each flag given, else the data set's default in `d`.
pub fn train_options(a: &TrainFlags, d: Options) -> Result<Options> {
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
        phases: a.phases,
        slice_units: a.slice_units,
        config: a
            .config
            .as_ref()
            .map(|c| Version::parse(c, accum))
            .transpose()?,
        metrics: a.metrics.clone(),
        save: a.save.clone(),
        load: a.load.clone(),
        quiet: a.quiet,
        print_every: a.print_every.unwrap_or(d.print_every),
        gpus: a.gpus.unwrap_or(d.gpus),
        reduce_pieces: a.reduce_pieces,
        parallel: a.parallel,
    })
}

/// The command line: the derived one, with each data set's training defaults set (and so shown
/// in its help) on its subcommand, numbers taken as values even when negative, and the help's
/// text in short lines, each flag's below it (in `-h` too, which would otherwise put it beside
/// the flag, and the default and values after it, past any width).
pub fn command() -> clap::Command {
    let c = Cli::command()
        .mut_subcommand("mnist", |c| with_defaults(c, &Options::mnist()))
        .mut_subcommand("iris", |c| with_defaults(c, &Options::iris()));
    wrap_help(numbers_take_negatives(c)).next_line_help(true)
}

/// The training flags' defaults as `d` has them, each in the form its flag takes.
pub fn default_flags(d: &Options) -> [(&'static str, String); 10] {
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

/// Every flag whose value is a number takes a negative one as that value (`--lr -1`), for the
/// checks to refuse with their reason (or clap, where the type has no sign, as an invalid
/// value), instead of clap's "unexpected argument '-1'".
fn numbers_take_negatives(c: clap::Command) -> clap::Command {
    use std::any::TypeId;
    let numbers = [
        TypeId::of::<f32>(),
        TypeId::of::<usize>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
    ];
    c.mut_args(|a| {
        let parsed = a.get_value_parser().type_id();
        let number = numbers.iter().any(|&t| parsed == t);
        a.allow_negative_numbers(number)
    })
    .mut_subcommands(numbers_take_negatives)
}

/// Columns of a flag's help text: clap indents it by 10, and, built without a terminal's width,
/// does not break it itself.
const HELP_WIDTH: usize = 70;

fn wrap_help(c: clap::Command) -> clap::Command {
    c.mut_args(|a| {
        let Some(help) = a.get_help().map(|h| wrap(&h.to_string(), HELP_WIDTH)) else {
            return a;
        };
        // `--help` shows the long text, or the short one where there is none.
        let long = a.get_long_help().map(|h| wrap(&h.to_string(), HELP_WIDTH));
        let a = a.long_help(long.unwrap_or_else(|| help.clone()));
        // `-h` appends the default and the values to the short text's last line: where they
        // would pass the width, they start the next.
        let last = help.rsplit('\n').next().unwrap_or_default().chars().count();
        match specs_len(&a) {
            n if n > 0 && last + 1 + n > HELP_WIDTH => a.help(help + "\n"),
            _ => a.help(help),
        }
    })
    .mut_subcommands(wrap_help)
}

/// The length of what `-h` appends to a flag's help: `[default: …]` and
/// `[possible values: …]`, each where clap shows it (never for a flag without a value).
fn specs_len(a: &clap::Arg) -> usize {
    if !a.get_action().takes_values() {
        return 0;
    }
    let mut specs = Vec::new();
    let defaults: Vec<_> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy())
        .collect();
    if !defaults.is_empty() && !a.is_hide_default_value_set() {
        specs.push(format!("[default: {}]", defaults.join(",")));
    }
    let values: Vec<_> = a
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .collect();
    if !values.is_empty() && !a.is_hide_possible_values_set() {
        let names: Vec<_> = values.iter().map(|v| v.get_name()).collect();
        specs.push(format!("[possible values: {}]", names.join(", ")));
    }
    specs.join(" ").chars().count()
}

/// `text` with each of its lines broken at spaces into lines of at most `width` characters
/// (a longer word keeps a line of its own).
fn wrap(text: &str, width: usize) -> String {
    let lines = text.split('\n').map(|line| {
        let mut out = String::new();
        let mut len = 0;
        for word in line.split(' ') {
            let n = word.chars().count();
            if len > 0 && len + 1 + n > width {
                out.push('\n');
                len = 0;
            } else if len > 0 {
                out.push(' ');
                len += 1;
            }
            out.push_str(word);
            len += n;
        }
        out
    });
    lines.collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    /// The help of `host <args>`, as clap prints it.
    fn help(args: &[&str]) -> String {
        let Err(err) = command().try_get_matches_from(args) else {
            panic!("--help stops parsing")
        };
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        err.to_string()
    }

    /// The parsed command line of `args`.
    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let m = command().try_get_matches_from(args)?;
        Ok(Cli::from_arg_matches(&m).unwrap())
    }

    /// The training options of `host mnist <args>` or `host iris <args>`.
    fn training(args: &[&str]) -> Options {
        match parse(args).unwrap().command {
            Command::Mnist(a) => train_options(&a.train, Options::mnist()).unwrap(),
            Command::Iris(a) => train_options(&a.train, Options::iris()).unwrap(),
            _ => unreachable!("{args:?} is no training command"),
        }
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
        for name in ["info", "gemm", "regression", "mnist", "iris", "allreduce"] {
            assert!(c.find_subcommand(name).is_some(), "{name}");
        }
    }

    /// A newcomer's help: short lines, the GPU's flags under their own heading, files and
    /// directories named as such, the accumulators listed, and examples to start from.
    #[test]
    fn help_is_short_lines_under_headings_with_examples() {
        for sub in ["info", "gemm", "regression", "mnist", "iris", "allreduce"] {
            for h in ["-h", "--help"] {
                let text = help(&["host", sub, h]);
                for line in text.lines() {
                    assert!(line.chars().count() <= 80, "{sub} {h}: {line:?}");
                }
                let gpu = text.split("GPU options:").nth(1).unwrap_or_default();
                for flag in [
                    "--device <N>",
                    "--ptx <SM_XX>",
                    "--max-smem-kb <N>",
                    "--jit",
                ] {
                    assert!(
                        gpu.contains(flag),
                        "{sub} {h}: {flag} not under GPU options"
                    );
                }
                assert!(text.contains("Examples:"), "{sub} {h}");
            }
        }
        let mnist = help(&["host", "mnist", "--help"]);
        let gpu = mnist.split("GPU options:").nth(1).unwrap();
        assert!(gpu.contains("--gpus <N>"), "{mnist}");
        let engine = mnist.split("Engine options:").nth(1).unwrap();
        assert!(engine.contains("--layered") && engine.contains("--config <NAME>"));
        for named in [
            "--data <DIR>",
            "--save <FILE>",
            "--load <FILE>",
            "--metrics <FILE>",
        ] {
            assert!(mnist.contains(named), "{named} in\n{mnist}");
        }
        assert!(mnist.contains("f16: half-precision sums"), "{mnist}");
        assert!(mnist.contains("from Turing (sm_75) on"), "{mnist}");
        assert!(!mnist.contains("sm_80+"), "{mnist}");
        let short = help(&["host", "mnist", "-h"]);
        assert!(short.contains("[possible values: f16, f32]"), "{short}");
        let top = help(&["host", "--help"]);
        assert!(
            top.contains("Examples:") && top.contains("host mnist"),
            "{top}"
        );
        for sub in ["gemm", "regression"] {
            let text = help(&["host", sub, "--help"]);
            assert!(text.contains("--csv <FILE>"), "{sub}");
        }
        assert!(help(&["host", "regression", "--help"]).contains("--trace <FILE>"));
    }

    #[test]
    fn help_text_breaks_at_spaces_within_the_width() {
        assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc");
        assert_eq!(wrap("aa\nbb cc dd", 5), "aa\nbb cc\ndd");
        assert_eq!(wrap("a longword", 4), "a\nlongword");
    }

    #[test]
    fn unset_training_flags_take_the_data_sets_defaults() {
        for (name, d) in [("mnist", Options::mnist()), ("iris", Options::iris())] {
            let o = training(&["host", name]);
            assert_eq!(
                (o.hidden, o.epochs, o.batch, o.lr, o.print_every),
                (d.hidden, d.epochs, d.batch, d.lr, d.print_every),
                "{name}"
            );
            assert_eq!(
                (o.momentum, o.init, o.seed, o.accum, o.gpus, o.quiet),
                (d.momentum, d.init, d.seed, d.accum, d.gpus, d.quiet),
                "{name}"
            );
        }
        assert_eq!(training(&["host", "iris", "--epochs", "7"]).epochs, 7);
        assert!(training(&["host", "iris", "--quiet"]).quiet);
        let f32s = training(&["host", "mnist", "--accum", "f32"]);
        assert_eq!(f32s.accum, Accum::F32);
    }

    #[test]
    fn slice_units_are_8_16_or_32() {
        let units = |v: &str| {
            let cli = parse(&["host", "mnist", "--slice-units", v])?;
            let Command::Mnist(a) = cli.command else {
                unreachable!()
            };
            Ok::<_, clap::Error>(a.train.slice_units)
        };
        for u in [8, 16, 32] {
            assert_eq!(units(&u.to_string()).unwrap(), Some(u));
        }
        for bad in ["12", "64", "0", "x"] {
            let e = units(bad).unwrap_err().to_string();
            assert!(e.contains("8, 16 or 32 hidden units"), "{e}");
        }
    }

    /// `--lr -1` reaches the checks, which give the reason; an unsigned flag's negative value is
    /// clap's invalid value, not an unexpected argument.
    #[test]
    fn numbers_are_values_even_when_negative() {
        assert_eq!(training(&["host", "mnist", "--lr", "-1"]).lr, -1.0);
        assert_eq!(
            training(&["host", "iris", "--momentum", "-0.5"]).momentum,
            -0.5
        );
        let Command::Regression(r) = parse(&["host", "regression", "--w", "-2", "--b", "-1e3"])
            .unwrap()
            .command
        else {
            unreachable!()
        };
        assert_eq!((r.w, r.b), (-2.0, -1000.0));
        for args in [
            &["host", "mnist", "--batch", "-1"][..],
            &["host", "mnist", "--hidden", "128,-5"],
            &["host", "gemm", "--time-ms", "-5"],
            &["host", "--device", "-1", "info"],
            &["host", "info", "--max-smem-kb", "-1"],
        ] {
            let e = parse(args).err().unwrap();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{args:?}: {e}"
            );
        }
        // Not a number: still a flag clap does not know.
        let e = parse(&["host", "mnist", "--lr", "-x"]).err().unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn emulation_flags_are_global() {
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
        assert!(parse(&["host", "info", "--ptx", "75"]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }
}
