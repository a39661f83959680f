//! The `host` binary the command-line tests run.
use std::path::PathBuf;

/// The one `HOST_BIN` names, where set (a copy run away from the build tree), else the one
/// cargo built.
pub fn host_binary() -> PathBuf {
    std::env::var_os("HOST_BIN").map_or_else(|| env!("CARGO_BIN_EXE_host").into(), PathBuf::from)
}
