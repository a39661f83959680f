//! Data-parallel training through NCCL against training on one GPU (GPU tests).
#[path = "common/binary.rs"]
mod binary;
mod common;

use binary::host_binary;
use common::{mnist, one_epoch};
use host::cuda::{Gpu, GpuOptions};
use host::gemm::Version;
use host::mlp::layer::Product;
use host::mlp::options::Parallel;
use host::mlp::params::init_params;
use host::mlp::{Epoch, Options, checkpoint, train, train_data_parallel};
use std::process::Command;

/// Whether two GPUs are present; a test that needs them and finds fewer says so and skips.
fn two_gpus_present() -> bool {
    let present = Gpu::count().expect("this test needs a CUDA GPU");
    if present < 2 {
        eprintln!("skipped: it needs two GPUs, and {present} is present");
    }
    present >= 2
}

fn layered() -> Options {
    Options {
        layered: true,
        ..one_epoch()
    }
}

/// Both ways of sharing a step, forced.
const MODES: [Parallel; 2] = [Parallel::Data, Parallel::Tensor];

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_replica_through_nccl_trains_exactly_as_one_gpu() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let ds = mnist();
    let alone = train(&g, &layered(), &ds).unwrap();
    for parallel in MODES {
        let one = Options {
            gpus: 1,
            parallel: Some(parallel),
            ..layered()
        };
        let replica = train_data_parallel(0, &GpuOptions::default(), &one, &ds).unwrap();
        // A sum over one rank changes nothing: the same steps, bit for bit (and the replica's
        // separate update takes the same steps as one GPU's, taken in the gradients' kernels).
        assert_eq!(alone[0].step_losses, replica[0].step_losses, "{parallel:?}");
        assert_eq!(alone[0].test_accuracy, replica[0].test_accuracy);
    }
    let many = Options {
        gpus: 64,
        batch: 128,
        ..layered()
    };
    let e = train_data_parallel(0, &GpuOptions::default(), &many, &ds)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("--gpus 64") && e.contains("present"), "{e}");
}

/// From 1024 rows a weight gradient on Hopper takes a `wgmma` product and then an update of its
/// layer alone, on its stream: the steps must still be a replica's to the bit, which updates
/// every parameter at once from the same gradients. 1024 × 784 is an output whose 64×64
/// `wgmma` tiles fill the GPU, so the first layer's takes that path.
#[test]
#[ignore = "needs a CUDA GPU"]
fn weight_gradients_stepped_apart_train_as_a_replica_does() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let wgmma = Version::all_for(&g)
        .into_iter()
        .any(|v| matches!(v, Version::Tensor(c, _) if c.is_wgmma()));
    if !wgmma {
        eprintln!("skipped: no `wgmma` GEMM here, so every weight gradient steps in its GEMM");
        return;
    }
    let ds = mnist();
    let o = Options {
        hidden: vec![1024],
        batch: 1024,
        ..layered()
    };
    let alone = train(&g, &o, &ds).unwrap();
    let one = Options {
        gpus: 1,
        parallel: Some(Parallel::Data),
        ..o
    };
    let replica = train_data_parallel(0, &GpuOptions::default(), &one, &ds).unwrap();
    assert_eq!(alone[0].step_losses, replica[0].step_losses);
    assert_eq!(alone[0].test_accuracy, replica[0].test_accuracy);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_gpus_follow_the_loss_curve_of_one() {
    if !two_gpus_present() {
        return;
    }
    let g = Gpu::new(0).unwrap();
    let ds = mnist();
    let one = train(&g, &layered(), &ds).unwrap();
    for parallel in MODES {
        let two = Options {
            gpus: 2,
            parallel: Some(parallel),
            ..layered()
        };
        let two = train_data_parallel(0, &GpuOptions::default(), &two, &ds).unwrap();
        follows(&one[0], &two[0], parallel);
    }
}

/// Where a forced GEMM configuration keeps the update apart from the kernels that make the
/// gradients (the direct rung's), a split hidden layer still steps the logits' bias once: on
/// rank 0.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_split_layer_whose_update_runs_apart_follows_one_gpu() {
    if !two_gpus_present() {
        return;
    }
    let g = Gpu::new(0).unwrap();
    let apart = Version::all_for(&g)
        .into_iter()
        .find(|v| !v.takes_sgd_step(Product::WeightGradient.layout()));
    let Some(config) = apart else {
        eprintln!("skipped: every GEMM configuration here takes the SGD step");
        return;
    };
    let ds = mnist();
    let o = Options {
        config: Some(config),
        ..layered()
    };
    let one = train(&g, &o, &ds).unwrap();
    let path = std::env::temp_dir().join(format!("dp-apart-{}.safetensors", std::process::id()));
    let two = Options {
        gpus: 2,
        parallel: Some(Parallel::Tensor),
        save: Some(path.clone()),
        ..o
    };
    let two = train_data_parallel(0, &GpuOptions::default(), &two, &ds).unwrap();
    follows(&one[0], &two[0], Parallel::Tensor);
    scores_as_trained(&g, &path, &two[0], Parallel::Tensor);
    std::fs::remove_file(&path).unwrap();
}

/// Asserts that `b`, an epoch of two GPUs sharing steps by `parallel`, follows `a`, one GPU's.
fn follows(a: &Epoch, b: &Epoch, parallel: Parallel) {
    assert_eq!(a.step_losses.len(), b.step_losses.len());
    // The first step starts from the same weights on the same 128 rows: only rounding differs
    // (two GEMMs of 64 rows and two fp16 gradients summed, or two fp16 halves of each logit).
    let (first_a, first_b) = (a.step_losses[0], b.step_losses[0]);
    assert!(
        (first_a - first_b).abs() < 0.01 * first_a,
        "{parallel:?}, first step: one GPU {first_a}, two {first_b}"
    );
    assert!(
        (a.train_loss - b.train_loss).abs() < 0.02 * a.train_loss,
        "{parallel:?}, mean train loss of the epoch: one GPU {}, two {}",
        a.train_loss,
        b.train_loss
    );
    assert!(
        (a.test_accuracy - b.test_accuracy).abs() < 0.005,
        "{parallel:?}, test accuracy: one GPU {}, two {}",
        a.test_accuracy,
        b.test_accuracy
    );
}

/// A replica that makes and sums its gradients in pieces (W1's rows in blocks, each summed and
/// stepped as soon as it is made) takes the steps of one sum of all, bit for bit: each piece's
/// GEMM runs the whole product's plan, and a sum of two ranks' values is the same in any call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sums_in_pieces_train_exactly_as_one_sum() {
    let ds = mnist();
    let gpus = Gpu::count().expect("this test needs a CUDA GPU").min(2);
    let run = |pieces| {
        let o = Options {
            hidden: vec![200],
            gpus,
            reduce_pieces: Some(pieces),
            parallel: Some(Parallel::Data),
            ..layered()
        };
        train_data_parallel(0, &GpuOptions::default(), &o, &ds).unwrap()
    };
    // 200 units: pieces of 64, 64, 64 and 8.
    let (whole, pieces) = (run(1), run(4));
    assert_eq!(whole[0].step_losses, pieces[0].step_losses);
    assert_eq!(whole[0].test_accuracy, pieces[0].test_accuracy);
}

/// Rank 0 writes a data-parallel run's checkpoint: the weights the replicas trained, which stand
/// as near one GPU's as rounding lets two runs stay, not the weights they started from.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_gpus_save_the_weights_they_trained() {
    if !two_gpus_present() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dp-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (one_path, two_path) = (dir.join("one.safetensors"), dir.join("two.safetensors"));
    let ds = mnist();
    let one = Options {
        save: Some(one_path.clone()),
        ..layered()
    };
    let g = Gpu::new(0).unwrap();
    train(&g, &one, &ds).unwrap();
    let sizes = [784, one.hidden[0], 10];
    let start = init_params(&sizes, one.init, one.seed);
    let a = checkpoint::load(&one_path, &sizes).unwrap();
    for parallel in MODES {
        let two = Options {
            gpus: 2,
            save: Some(two_path.clone()),
            parallel: Some(parallel),
            ..layered()
        };
        let trained = train_data_parallel(0, &GpuOptions::default(), &two, &ds).unwrap();
        let b = checkpoint::load(&two_path, &sizes).unwrap();
        near(&a, &b, &start, parallel);
        scores_as_trained(&g, &two_path, &trained[0], parallel);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Asserts that the checkpoint at `path`, loaded on one GPU, scores what the run that wrote it
/// scored (`trained`, rank 0's), up to the rounding of the logits' partial sums: the same
/// parameters, the logits' bias counted once.
fn scores_as_trained(g: &Gpu, path: &std::path::Path, trained: &Epoch, parallel: Parallel) {
    let load = Options {
        epochs: 0,
        load: Some(path.to_path_buf()),
        ..layered()
    };
    let scored = &train(g, &load, &mnist()).unwrap()[0];
    let (a, b) = (scored.test_accuracy, trained.test_accuracy);
    assert!(
        (a - b).abs() <= 0.001,
        "{parallel:?}: accuracy {a} against {b}"
    );
    let (a, b) = (scored.test_loss, trained.test_loss);
    assert!(
        (a - b).abs() <= 0.01 * b,
        "{parallel:?}: test loss {a} against {b}"
    );
}

/// Asserts that `b`, weights two GPUs trained from `start`, stand near `a`, one GPU's.
fn near(a: &[f32], b: &[f32], start: &[f32], parallel: Parallel) {
    // Rounding apart, two GPUs take other steps: after an epoch they stand about a fifth of the
    // move away from one GPU's weights. Weights left as they started would stand the whole move
    // away.
    let (mut moved, mut apart) = (0.0f64, 0.0f64);
    for ((&a, &b), &s) in a.iter().zip(b).zip(start) {
        moved += f64::from(a - s).powi(2);
        apart += f64::from(a - b).powi(2);
    }
    assert!(moved > 0.0, "training moved no weight");
    assert!(
        apart < 0.25 * moved,
        "{parallel:?}: two GPUs' checkpoint is {:.3} of one GPU's move away",
        (apart / moved).sqrt()
    );
}

/// Each replica opens its GPU with the run's options: one replica with an older embedded PTX
/// trains exactly as one GPU opened with it, and not as the newest PTX does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn replicas_open_their_gpus_with_the_runs_options() {
    let newest = Gpu::new(0).expect("this test needs a CUDA GPU");
    let Some(older) = host::ptx::EMBEDDED
        .iter()
        .filter(|p| p.sm < newest.ptx.sm)
        .min_by_key(|p| p.sm)
    else {
        eprintln!(
            "skipped: it needs an embedded PTX older than {}, this build has only that",
            newest.ptx.arch
        );
        return;
    };
    let opts = GpuOptions {
        ptx: Some(older.target()),
        ..GpuOptions::default()
    };
    let g = Gpu::with_options(0, &opts).unwrap();
    let ds = mnist();
    let alone = train(&g, &layered(), &ds).unwrap();
    let one = Options {
        gpus: 1,
        ..layered()
    };
    let replica = train_data_parallel(0, &opts, &one, &ds).unwrap();
    assert_eq!(
        alone[0].step_losses, replica[0].step_losses,
        "{}",
        older.arch
    );
    let default = train_data_parallel(0, &GpuOptions::default(), &one, &ds).unwrap();
    assert_ne!(
        default[0].step_losses, replica[0].step_losses,
        "{} and {} kernels computed the same steps to the bit",
        older.arch, newest.ptx.arch
    );
}

/// The `--metrics` of `host mnist <args>` (one layered epoch, seed 3) run by `launcher` (empty:
/// run directly), without the time column, or `None` if the launcher is missing.
fn metrics_of(launcher: &[&str], args: &[&str], name: &str) -> Option<String> {
    let csv = std::env::temp_dir().join(format!("dp-{name}-{}.csv", std::process::id()));
    let mut run = match launcher.split_first() {
        Some((program, rest)) => {
            let mut run = Command::new(program);
            run.args(rest).arg(host_binary());
            run
        }
        None => Command::new(host_binary()),
    };
    run.args([
        "mnist",
        "--layered",
        "--epochs",
        "1",
        "--seed",
        "3",
        "--quiet",
    ])
    .args(args)
    .arg("--data")
    .arg(host::mnist::default_dir())
    .arg("--metrics")
    .arg(&csv);
    let out = match run.output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: {run:?} could not be started ({e})");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{run:?} failed: {stderr}");
    let text = std::fs::read_to_string(&csv).unwrap();
    std::fs::remove_file(&csv).unwrap();
    let untimed = text.lines().map(|l| l.rsplit_once(',').unwrap().0);
    Some(untimed.collect::<Vec<_>>().join("\n"))
}

/// Two processes under `torchrun`, one a GPU, train as the two threads of `--gpus 2` do: the
/// same replicas and the same sums of two ranks' gradients, so the same losses bit for bit.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_processes_under_torchrun_train_as_two_threads() {
    if !two_gpus_present() {
        return;
    }
    let port = format!("{}", 20000 + std::process::id() % 20000);
    let torchrun = ["torchrun", "--no-python", "--nproc-per-node", "2"];
    let torchrun = [&torchrun[..], &["--master-port", &port]].concat();
    for how in ["data", "tensor"] {
        let Some(processes) = metrics_of(&torchrun, &["--parallel", how], "processes") else {
            return;
        };
        let threads = metrics_of(&[], &["--gpus", "2", "--parallel", how], "threads").unwrap();
        assert!(processes.lines().count() > 400, "{processes}");
        assert_eq!(processes, threads, "{how}");
    }
}
