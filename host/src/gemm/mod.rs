//! Host side of the GEMM ladder: its versions, problems and their validation, configuration
//! choice, launch geometry. The CPU reference and cuBLAS that `host gemm` compares it with are
//! the bench's, beside it in `gemm_bench`.
pub mod anatomy;
mod choose;
pub mod drawing;
mod launch;
mod prefer;
mod problem;
mod usage;
mod version;

pub use choose::{choose_config, choose_split, choose_version};
pub use launch::{
    Ptrs, launch, launch_on, launch_roof, refuses, roof_kernels, split_slices, workspace_len,
};
pub use prefer::{PREFERENCES, Preference, Size};
pub use problem::{Problem, SgdStep};
pub use usage::Usage;
pub use version::Version;
