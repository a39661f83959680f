//! Host side of the GEMM ladder: its versions, problems and their validation, configuration
//! choice, launch geometry. The CPU reference and cuBLAS that `host gemm` compares it with are
//! the bench's, beside it in `gemm_bench`.
mod choose;
mod launch;
mod problem;
mod version;

pub use choose::{Usage, choose_config, choose_split, choose_version};
pub use launch::{
    Ptrs, launch, launch_on, launch_roof, refuses, roof_kernels, split_slices, workspace_len,
};
pub use problem::{Problem, SgdStep};
pub use version::Version;
