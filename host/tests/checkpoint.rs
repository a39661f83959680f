//! A checkpoint of a model with several hidden layers, evaluated in PyTorch by
//! `bench/pytorch/eval_checkpoint.py`, scores what ours scored (GPU test; skipped where
//! `python3` has no PyTorch).
mod common;

use common::{mnist, one_epoch};
use host::cuda::Gpu;
use host::mlp::{Options, train};
use std::path::Path;
use std::process::Command;

/// `python3 bench/pytorch/eval_checkpoint.py`, from the repository's root or the host's folder,
/// where `cargo test` runs.
fn eval_checkpoint() -> Command {
    let script = ["bench", "../bench"]
        .map(|d| Path::new(d).join("pytorch/eval_checkpoint.py"))
        .into_iter()
        .find(|p| p.is_file())
        .expect("bench/pytorch/eval_checkpoint.py is in the repository");
    let mut c = Command::new("python3");
    c.arg(script);
    c
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_deep_checkpoint_scores_the_same_in_pytorch() {
    let has_torch = Command::new("python3")
        .args(["-c", "import torch"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_torch {
        eprintln!("skipped: python3 has no PyTorch");
        return;
    }
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let path = std::env::temp_dir().join(format!("deep-{}.safetensors", std::process::id()));
    // Three hidden layers (the layer engine on Hopper), the last narrower than any tile.
    let o = Options {
        hidden: vec![96, 48, 40],
        save: Some(path.clone()),
        ..one_epoch()
    };
    let ours = 100.0 * train(&g, &o, &mnist()).unwrap()[0].test_accuracy;
    let out = eval_checkpoint()
        .arg(&path)
        .args(["--hidden", "96,48,40", "--expect", &format!("{ours:.2}")])
        .arg("--data")
        .arg(host::mnist::default_dir())
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ours {ours:.2}%, PyTorch: {said}");
    assert!(said.contains("test accuracy"), "{said}");
    // A checkpoint of another model is refused, not evaluated.
    let o = Options {
        hidden: vec![32],
        save: Some(path.clone()),
        ..one_epoch()
    };
    train(&g, &o, &mnist()).unwrap();
    let wrong = eval_checkpoint()
        .arg(&path)
        .args(["--hidden", "96,48,40"])
        .arg("--data")
        .arg(host::mnist::default_dir())
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success());
    // PyTorch's strict load names what does not match: fc3 and fc4 are missing, fc1 and fc2
    // are of other shapes.
    assert!(
        said.contains("Missing key") || said.contains("size mismatch"),
        "{said}"
    );
}
