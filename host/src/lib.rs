//! Host side of the toolkit: loads the Rust-compiled PTX with cudarc and drives it.
pub mod cuda;
pub mod gemm;
pub mod gemm_bench;
pub mod iris;
pub mod mlp;
pub mod mnist;
pub mod ptx;
pub mod regression;

use anyhow::{Context, Result};
use std::path::Path;

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
    std::fs::write(&tmp, bytes).with_context(|| format!("could not write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("could not move {} into place", path.display()))
}
