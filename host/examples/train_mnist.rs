//! Trains the MLP of `host mnist` (784-128-10) through the library, saves its weights and
//! evaluates them loaded back. From the repository root, on a machine with an NVIDIA GPU:
//!
//! ```text
//! cargo run --release -p host --example train_mnist [CHECKPOINT.safetensors]
//! ```
//!
//! The checkpoint goes to the path given, else to the system's temporary directory.
use anyhow::Result;
use host::cuda::Gpu;
use host::mlp::{Options, checkpoint, header, train};
use std::path::PathBuf;
use std::process::ExitCode;

fn run() -> Result<()> {
    // Without a driver or a GPU this is an error of one sentence, which `main` prints.
    let gpu = Gpu::new(0)?;
    // `data/mnist`, found from the repository root or from `host/`.
    let ds = host::mnist::load(&host::mnist::default_dir())?;
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("train_mnist.safetensors"));

    // `host mnist`'s defaults but fewer epochs; the weights are saved after each epoch, and
    // `quiet` leaves the printing to this example.
    let o = Options {
        epochs: 3,
        save: Some(path.clone()),
        quiet: true,
        ..Options::default()
    };
    // The model, the GPU and the engine that trains (and if not the persistent kernel, why).
    println!("{}", header(&gpu, &o, &ds)?);
    let epochs = train(&gpu, &o, &ds)?;
    for e in &epochs {
        println!(
            "epoch {}  train loss {:.4}  test loss {:.4}  test accuracy {:.2}%  {:.3} s",
            e.epoch,
            e.train_loss,
            e.test_loss,
            100.0 * e.test_accuracy,
            e.seconds
        );
    }

    // The checkpoint holds fp32 tensors by the names `bench/pytorch/mnist_mlp.py` gives its
    // layers (`fc1.weight`, `fc1.bias`, …), so PyTorch loads it; read back for the model's
    // layer widths, they are one flat vector.
    let sizes = [ds.train.dim, o.hidden[0], ds.classes];
    let params = checkpoint::load(&path, &sizes)?;
    println!("{}: {} parameters", path.display(), params.len());

    // No epochs and weights to load: the run only evaluates them, and prints the result.
    let eval = Options {
        epochs: 0,
        save: None,
        load: Some(path),
        ..o
    };
    let reloaded = &train(&gpu, &eval, &ds)?[0];
    let trained = epochs.last().expect("one epoch at least");
    println!(
        "reloaded weights: test accuracy {:.2}% (after training: {:.2}%)",
        100.0 * reloaded.test_accuracy,
        100.0 * trained.test_accuracy
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
