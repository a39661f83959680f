//! The one layer of inline PTX: every instruction the kernels use that Rust has no intrinsic
//! for, wrapped in a small `#[inline(always)]` function, grouped by hardware feature as
//! CUTLASS's `arch/` is. Kernels above this layer contain no `asm!`.
//!
//! Names follow the PTX they emit: `ld`/`st`/`red` + state space (`global`, `shared`) + cache
//! hint (`cg`) + type or vector width (`u32`, `v4`), e.g. [`ld_global_cg_i64`],
//! [`st_shared_v4`]. Addresses in the `.shared` window are `u32` ([`shared_addr`]); global
//! ones are pointers.
//!
//! What needs a newer architecture than the oldest built (sm_75) says so in its file: `cp.async`
//! and `m16n8k16` need sm_80; bulk copies, `mbarrier` transaction counts, clusters and
//! `st.async` need sm_90 with PTX 8.1 ([`HOPPER`]); `wgmma` needs the architecture-specific
//! sm_90a PTX, which runs on compute capability 9.0 alone.
pub mod cluster;
pub mod convert;
pub mod copy;
pub mod math;
pub mod memory;
pub mod mma;
pub mod sync;
pub mod thread;
pub mod tma;
pub mod warp;
pub mod wgmma;

pub use cluster::*;
pub use convert::*;
pub use copy::*;
pub use math::*;
pub use memory::*;
pub use mma::*;
pub use sync::*;
pub use thread::*;
pub use tma::*;
pub use warp::*;
pub use wgmma::*;

/// This build has Hopper's bulk copies, transaction-counting `mbarrier`s, clusters with
/// distributed shared memory and `st.async` (sm_90 PTX at ISA 8.1: `build.rs` builds sm_90 so).
pub const HOPPER: bool = crate::target::BUILT.clusters();
