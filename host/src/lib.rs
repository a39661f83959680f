//! Host side of the toolkit: loads the Rust-compiled PTX with cudarc and drives it.
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
