//! Host side of the toolkit: loads the PTX that `build.rs` compiles from the Rust kernels of the
//! `gpu` crate, launches it through cudarc, and trains with it. The `host` command line is a thin
//! layer over this library; the integration tests and `examples/train_mnist.rs` call it directly.
//!
//! # Two engines
//!
//! [`mlp::train`] trains an MLP on one of two engines, chosen for each run:
//!
//! - the persistent kernel ([`mlp::persistent`]) runs a whole epoch of an MLP of one hidden
//!   layer (two from sm_80 on, up to four on Hopper) in one launch, so its steps cost no
//!   launches of their own; it applies where all its blocks fit on the GPU at once (hidden
//!   width a multiple of 8, batch up to 128, or 256 in four parts, and more:
//!   [`mlp::persistent::support`]);
//! - the layered engine runs one kernel per operation (the tensor-core GEMMs of [`gemm`], the
//!   softmax, the bias gradients), captured once as a CUDA graph and replayed; it takes any depth
//!   and width, and trains on several GPUs, as threads ([`mlp::train_data_parallel`]) or as the
//!   processes a launcher such as `torchrun` starts ([`mlp::train_launched`]).
//!
//! [`mlp::header`] names the engine a run takes and, where the persistent kernel does not apply,
//! why.
//!
//! # Where to start
//!
//! - [`cuda::Gpu`] opens a device and loads the embedded module built for it;
//! - [`mnist::load`] and [`iris::load`] read a data set into an [`mlp::Dataset`];
//! - [`mlp::Options`] describes a run (its defaults are those of `host mnist`), and [`mlp::train`]
//!   runs it, returning each [`mlp::Epoch`]'s loss and accuracy;
//! - [`mlp::checkpoint`] writes and reads the weights as safetensors, which PyTorch loads.
//!
//! `examples/train_mnist.rs` puts them together (`cargo run --release -p host --example
//! train_mnist`):
//!
//! ```no_run
//! use host::cuda::Gpu;
//! use host::mlp::{Options, train};
//!
//! let gpu = Gpu::new(0)?; // an error of one sentence where there is no GPU or driver
//! let ds = host::mnist::load(&host::mnist::default_dir())?;
//! let path = std::env::temp_dir().join("train_mnist.safetensors");
//! let o = Options {
//!     epochs: 3,
//!     save: Some(path.clone()),
//!     quiet: true,
//!     ..Options::default()
//! };
//! for e in train(&gpu, &o, &ds)? {
//!     println!("epoch {}: test accuracy {:.2}%", e.epoch, 100.0 * e.test_accuracy);
//! }
//! // No epochs and weights to load: the run only evaluates them.
//! let eval = Options {
//!     epochs: 0,
//!     save: None,
//!     load: Some(path),
//!     ..o
//! };
//! let reloaded = &train(&gpu, &eval, &ds)?[0];
//! println!("reloaded: test accuracy {:.2}%", 100.0 * reloaded.test_accuracy);
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! The crate also holds the GEMM ladder's benchmark against cuBLAS ([`gemm_bench`]) and the
//! linear regression of `host regression` ([`regression`]).
//!
//! [`mlp::train`]: fn@mlp::train
pub mod allreduce_bench;
pub mod cuda;
pub mod gemm;
pub mod gemm_bench;
pub mod info;
pub mod iris;
pub mod kernels;
pub mod mlp;
pub mod mnist;
pub mod nccl;
pub mod ptx;
pub mod regression;
pub mod tma;

use anyhow::{Context, Result, ensure};
use std::path::Path;

/// Refuses an output file that could not be written once the work is done: one in a directory
/// that does not exist, or a path that is a directory. Checked before any work, so that a long
/// run does not fail at its end; `flag` names the file in the error.
pub fn ensure_output_path(flag: &str, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        ensure!(
            dir.is_dir(),
            "{flag} {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    ensure!(
        !path.is_dir(),
        "{flag} {} is a directory: give the file to write",
        path.display()
    );
    Ok(())
}

/// Refuses a real-valued flag that is infinite or not a number, which no check of its range
/// would catch (NaN compares false with everything).
pub fn ensure_finite(flag: &str, value: f32) -> Result<()> {
    ensure!(
        value.is_finite(),
        "{flag} must be a finite number, not {value}"
    );
    Ok(())
}

/// Writes a file so that it is either wholly old or wholly new: a temporary file in the same
/// directory, then a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().context("output path has no file name")?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::write(&tmp, bytes)
        .with_context(|| format!("could not write {}", path.display()))
        .and_then(|()| {
            std::fs::rename(&tmp, path)
                .with_context(|| format!("could not move {} into place", path.display()))
        });
    if written.is_err() {
        // Nothing half-written is left behind; the old file, if any, is untouched.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_paths_need_an_existing_directory_and_a_file_name() {
        let missing = std::env::temp_dir().join(format!("no-such-dir-{}", std::process::id()));
        let e = ensure_output_path("--csv", &missing.join("t.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--csv ") && e.contains("does not exist"),
            "{e}"
        );
        let e = ensure_output_path("--trace", &std::env::temp_dir())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--trace") && e.contains("is a directory"), "{e}");
        // A bare file name writes to the working directory, which exists.
        assert!(ensure_output_path("--csv", Path::new("t.csv")).is_ok());
    }

    #[test]
    fn only_finite_numbers_pass() {
        assert!(ensure_finite("--lr", 0.5).is_ok());
        for (bad, shown) in [(f32::INFINITY, "inf"), (f32::NAN, "NaN")] {
            let e = ensure_finite("--lr", bad).unwrap_err().to_string();
            assert_eq!(e, format!("--lr must be a finite number, not {shown}"));
        }
    }

    #[test]
    fn write_atomic_replaces_whole_files_and_leaves_nothing_on_failure() {
        let dir = std::env::temp_dir().join(format!("atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("out.bin");
        write_atomic(&f, b"first").unwrap();
        write_atomic(&f, b"second").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"second");
        // A directory in the way: the rename fails, the error names the path, no temp file.
        let d = dir.join("taken");
        std::fs::create_dir_all(d.join("inside")).unwrap();
        let err = write_atomic(&d, b"x").unwrap_err().to_string();
        assert!(err.contains("taken"), "{err}");
        // A missing directory: the write fails, naming the user's path.
        let err = write_atomic(&dir.join("no/such/dir.bin"), b"x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no/such/dir.bin"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
