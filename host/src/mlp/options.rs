//! A training run's options: each data set's defaults, which the command line shows and falls
//! back to and the library starts from, and the checks that refuse bad ones before any GPU
//! work.
use super::params::Init;
use crate::gemm::Version;
use anyhow::{Result, ensure};
use gpu::gemm::Accum;
use std::path::PathBuf;

/// A training run: the model's hidden layers, SGD's hyperparameters, the engine, and the files
/// it reads and writes. The command line's flags fill it; [`validate`] checks it.
#[derive(Clone, Debug)]
pub struct Options {
    /// Hidden layer widths; the data set gives the input and output widths.
    pub hidden: Vec<usize>,
    /// Passes over the training set; 0 only evaluates the weights of `load`.
    pub epochs: usize,
    /// Examples of each step over every GPU (see [`StepShape`](super::shape::StepShape)).
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
    /// Record the persistent kernel's phase trace and print its table after training (a build
    /// with `GPU_PHASE_TRACE=1`).
    pub phases: bool,
    /// Hidden units a block of the persistent kernel takes (8, 16 or 32); `None`: as
    /// `persistent::support` chooses.
    pub slice_units: Option<usize>,
    /// One GEMM configuration for every product of the layered engine, instead of the choice
    /// for each shape.
    pub config: Option<Version>,
    /// A CSV file for each step's loss and each epoch's accuracy.
    pub metrics: Option<PathBuf>,
    /// A safetensors file ([`checkpoint`](super::checkpoint)) for the weights, written after
    /// every epoch.
    pub save: Option<PathBuf>,
    /// A safetensors file to start from instead of initial weights.
    pub load: Option<PathBuf>,
    /// Print only the run's last line (an evaluation of `load` alone prints its result).
    pub quiet: bool,
    /// Print one line every this many epochs (and after the last).
    pub print_every: usize,
    /// GPUs to train on, sharing each step as [`parallel`](Options::parallel) says.
    pub gpus: usize,
    /// Pieces each data-parallel replica sums its gradients in, each summed as soon as it is
    /// made (`mlp::reduce`); `None`: one.
    pub reduce_pieces: Option<usize>,
    /// How several GPUs share a step; `None`: the host's choice ([`Options::sharing`]).
    pub parallel: Option<Parallel>,
}

/// Most pieces a replica's gradient sum is split into (`--reduce-pieces`).
pub const MAX_PIECES: usize = 16;

/// How `--gpus` GPUs share a step (the tensor-parallel model's blocks are `Split`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Parallel {
    /// A share of the batch a GPU; every gradient summed.
    Data,
    /// A block of hidden units a GPU; the logits summed.
    Tensor,
}

impl Options {
    /// What `host mnist` runs with no flags.
    pub fn mnist() -> Options {
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
            phases: false,
            slice_units: None,
            config: None,
            metrics: None,
            save: None,
            load: None,
            quiet: false,
            print_every: 1,
            gpus: 1,
            reduce_pieces: None,
            parallel: None,
        }
    }

    /// What `host iris` runs with no flags: 150 examples train in small batches, over many more
    /// (and much shorter) epochs.
    pub fn iris() -> Options {
        Options {
            hidden: vec![5],
            epochs: 100,
            batch: 16,
            print_every: 10,
            ..Options::mnist()
        }
    }
}

impl Options {
    /// How the run's GPUs share a step: `--parallel`, else tensor parallel wherever it applies
    /// (a summed gradient of every parameter outlasts the step it should shorten at every shape
    /// measured; `docs/parallel.md`). A run of several GPUs settles it once, at its start
    /// ([`Options::settled`]), and hands every rank the settled options.
    pub fn sharing(&self) -> Parallel {
        self.parallel.unwrap_or(if self.splits_hidden() {
            Parallel::Tensor
        } else {
            Parallel::Data
        })
    }

    /// These options with [`Options::sharing`]'s answer written into `parallel`.
    pub fn settled(&self) -> Options {
        Options {
            parallel: Some(self.sharing()),
            ..self.clone()
        }
    }

    /// Whether the hidden layers split over the run's GPUs: one layer, of a width they divide.
    fn splits_hidden(&self) -> bool {
        self.hidden.len() == 1 && self.hidden[0].is_multiple_of(self.gpus)
    }
}

impl Default for Options {
    /// What `host mnist` runs with no flags.
    fn default() -> Options {
        Options::mnist()
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
    crate::ensure_finite("--lr", o.lr)?;
    ensure!(o.lr > 0.0, "--lr must be positive, not {}", o.lr);
    crate::ensure_finite("--momentum", o.momentum)?;
    ensure!(
        (0.0..1.0).contains(&o.momentum),
        "--momentum must be in [0, 1), not {}",
        o.momentum
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
        !o.phases || crate::ptx::PHASE_TRACE,
        "--phases needs the phase trace compiled in: build with GPU_PHASE_TRACE=1 cargo build --release"
    );
    ensure!(
        !o.phases || (o.gpus == 1 && !o.layered && o.graph && o.config.is_none() && o.epochs > 0),
        "--phases traces the persistent kernel training on one GPU: drop --gpus, --layered, --no-graph, --config or --epochs 0"
    );
    ensure!(
        o.parallel != Some(Parallel::Tensor) || o.splits_hidden(),
        "--parallel tensor splits one hidden layer into equal blocks of units, one a GPU: --hidden {} over {} GPUs does not",
        o.hidden
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        o.gpus
    );
    let data_parallel = o.gpus > 1 && o.sharing() == Parallel::Data;
    if let Some(p) = o.reduce_pieces {
        ensure!(
            (1..=MAX_PIECES).contains(&p),
            "--reduce-pieces {p}: give 1 to {MAX_PIECES}"
        );
        ensure!(
            o.gpus == 1 || data_parallel,
            "--reduce-pieces splits the gradients' sum of data parallel; this run is tensor parallel (--parallel data to sum gradients)"
        );
    }
    // Tensor-parallel ranks take the whole batch.
    ensure!(
        !data_parallel || o.batch.is_multiple_of(o.gpus),
        "--batch {} does not split evenly over --gpus {}",
        o.batch,
        o.gpus
    );
    ensure!(
        o.gpus == 1 || o.epochs > 0,
        "--epochs 0 evaluates on one GPU: drop --gpus"
    );
    // Files written during or after training can be: found out now, not after the last epoch.
    for (flag, path) in [("--metrics", &o.metrics), ("--save", &o.save)] {
        if let Some(path) = path {
            crate::ensure_output_path(flag, path)?;
        }
    }
    Ok(())
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
        assert_eq!(
            err(Options {
                lr: f32::INFINITY,
                ..options()
            }),
            "--lr must be a finite number, not inf"
        );
        assert_eq!(
            err(Options {
                lr: -1.0,
                ..options()
            }),
            "--lr must be positive, not -1"
        );
        assert!(
            err(Options {
                momentum: f32::NAN,
                ..options()
            })
            .contains("--momentum must be a finite number")
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
        // A split hidden layer takes the whole batch on every GPU, and sums no gradient.
        let split = Options {
            gpus: 2,
            batch: 127,
            ..options()
        };
        assert!(validate(&split).is_ok());
        let e = err(Options {
            reduce_pieces: Some(4),
            ..split.clone()
        });
        assert!(e.contains("tensor parallel"), "{e}");
        let data = Options {
            reduce_pieces: Some(4),
            parallel: Some(Parallel::Data),
            batch: 128,
            ..split
        };
        assert!(validate(&data).is_ok());
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
    fn each_data_set_has_its_defaults() {
        let (m, i) = (Options::mnist(), Options::iris());
        assert_eq!((m.hidden, m.epochs, m.batch), (vec![128], 10, 128));
        assert_eq!((i.hidden, i.epochs, i.batch), (vec![5], 100, 16));
        assert!(validate(&Options::mnist()).is_ok() && validate(&Options::iris()).is_ok());
    }

    #[test]
    fn the_host_splits_one_hidden_layer_that_divides_and_nothing_else() {
        let o = |hidden: Vec<usize>, gpus| Options {
            hidden,
            gpus,
            ..Options::default()
        };
        assert_eq!(o(vec![4096], 2).sharing(), Parallel::Tensor);
        assert_eq!(o(vec![4096], 3).sharing(), Parallel::Data);
        assert_eq!(o(vec![512, 256], 2).sharing(), Parallel::Data);
        let forced = Options {
            parallel: Some(Parallel::Tensor),
            ..o(vec![512, 256], 2)
        };
        let e = validate(&forced).unwrap_err().to_string();
        assert!(e.contains("--hidden 512,256 over 2 GPUs"), "{e}");
        // A width the GPUs do not divide trains data parallel, its batch split evenly.
        let data = Options {
            batch: 126,
            ..o(vec![100], 3)
        };
        assert!(validate(&data).is_ok());
        // Settled once, the choice is carried: the same options give the same answer.
        assert_eq!(o(vec![4096], 2).settled().parallel, Some(Parallel::Tensor));
        assert_eq!(o(vec![4096], 3).settled().parallel, Some(Parallel::Data));
    }
}
