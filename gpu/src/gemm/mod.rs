//! The GEMM ladder: `C = act(alpha·op(A)·op(B) + beta·C + bias) ⊙ [gate > 0]`, fp16 in and out,
//! or, with an [`Sgd`] step, that product taken as the gradient of the weights C holds.
//!
//! Every version has the same kernel signature (see [`Args`]) and one kernel per operand layout
//! ([`Layout`]), named `gemm_<version>_<layout>` (SIMT versions and the direct rung) or
//! `gemm_<config>_<layout>_<acc>` (tensor-core versions, one per entry of [`TILE_CONFIGS`]).
//!
//! Storage is row-major throughout: `op(A)` is M×K, stored `[M][lda]` or, transposed, `[K][lda]`;
//! `op(B)` is K×N, stored `[K][ldb]` or, transposed, `[N][ldb]`; `C` is `[M][ldc]`; `bias` has N
//! entries (one per output column, as `nn.Linear` has), or is null; `gate` is laid out as C, or
//! is null (no gate): an MLP's input gradient goes back through the ReLU in the epilogue.
//!
//! With [`Args::sgd`] set, the epilogue's output is not stored: it is the gradient (rounded to
//! fp16, as it would have been stored) of the weights whose fp16 copy C is, and the epilogue
//! takes their SGD step, writing the new fp16 copy to C. On one GPU an MLP's weights take their
//! update this way, with no gradient written and read back.

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
mod direct;
#[cfg(target_arch = "nvptx64")]
mod roof;
#[cfg(target_arch = "nvptx64")]
mod sgd;
#[cfg(target_arch = "nvptx64")]
mod simt;
#[cfg(target_arch = "nvptx64")]
pub use simt::epilogue;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod accumulator;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod pingpong;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod staging;
#[cfg(target_arch = "nvptx64")]
mod tensor;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod warpgroup;

mod config;
pub mod descriptor;
mod mainloop;
mod registers;
mod rules;
pub use config::TileConfig;
pub use mainloop::Mainloop;
pub use registers::{PING_PONG_REGISTERS, PingPongRegisters};
pub use rules::{CP_ASYNC_MAX_STAGES, MAX_ACCUMULATOR_REGISTERS, MMA_SYNC_MAX_BK};

/// fp16 elements of padding after each row of the C tile the SGD epilogue stages in shared
/// memory: 16 bytes, which puts the 8 rows one fragment store writes in distinct banks.
pub const STAGED_PAD: usize = 8;

/// Quads (four columns) of master weights and velocity each thread of a stepping tile has in
/// flight, for a warp tile of `fragments` accumulator fragments: their loads all issue before
/// the first store, which the compiler must assume could overwrite them. [`SGD_DEEP`] up to 8
/// fragments (32×32): all of a 64×64 tile's quads at 128 threads, enough bytes in flight per SM
/// for DRAM at the MLP's widths. [`SGD_SHALLOW`] for larger warp tiles: deeper, they take more
/// registers than two blocks of 256 threads an SM may have, or spill (`docs/gemm.md`).
pub const fn sgd_quads_in_flight(fragments: usize) -> usize {
    if fragments <= 8 {
        SGD_DEEP
    } else {
        SGD_SHALLOW
    }
}
pub const SGD_DEEP: usize = 8;
pub const SGD_SHALLOW: usize = 2;

/// Independent accumulators per warp in the `mma_roof_*` kernels (`roof.rs`): enough that
/// the tensor cores never wait on one chain's latency.
pub const ROOF_CHAINS: usize = 8;

/// Operand layouts an MLP needs: `Y = X·Wᵀ` (NT), `dX = dY·W` (NN), `dW = dYᵀ·X` (TN).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Layout {
    NN,
    NT,
    TN,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::NN, Layout::NT, Layout::TN];
    pub const fn suffix(self) -> &'static str {
        match self {
            Layout::NN => "nn",
            Layout::NT => "nt",
            Layout::TN => "tn",
        }
    }
    /// Whether A is stored transposed (`[K][M]`).
    pub const fn trans_a(self) -> bool {
        matches!(self, Layout::TN)
    }
    /// Whether B is stored transposed (`[N][K]`).
    pub const fn trans_b(self) -> bool {
        matches!(self, Layout::NT)
    }
}

/// Accumulator precision of the tensor-core kernels.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Accum {
    F16,
    F32,
}

impl Accum {
    /// Whether `list` (a table row's accumulator column) holds it.
    pub const fn among(self, list: &[Accum]) -> bool {
        let mut i = 0;
        while i < list.len() {
            if list[i] as u8 == self as u8 {
                return true;
            }
            i += 1;
        }
        false
    }
    pub const fn suffix(self) -> &'static str {
        match self {
            Accum::F16 => "f16",
            Accum::F32 => "f32",
        }
    }
}

/// The SIMT rungs of the ladder (fp32 accumulation on CUDA cores).
pub const SIMT_VERSIONS: [&str; 3] = ["naive", "smem", "regblock"];

/// Edge of the square tile of the shared-memory version (threads per block: its square).
pub const SMEM_TILE: usize = 16;
/// Register-blocked version: block tile, k step and per-thread micro-tile.
pub const RB_TILE: usize = 64;
pub const RB_K: usize = 16;
pub const RB_MICRO: usize = 4;
/// Threads of the register-blocked version: one per micro-tile.
pub const RB_THREADS: usize = (RB_TILE / RB_MICRO) * (RB_TILE / RB_MICRO);

/// The direct rung (`gemm_direct_<layout>`, sm_80+): the warp tile (M, N) each warp computes
/// from fragments it loads straight from global memory, and the warps of a block, stacked
/// along M.
pub const DIRECT_WARP: (usize, usize) = (16, 32);
pub const DIRECT_WARPS: usize = 4;
/// The lowest compute capability (×10) of the direct rung: `m16n8k16`.
pub const DIRECT_MIN_SM: u32 = 80;

/// The one table to edit for another GPU. Each row: name, threadblock tile M N K, warp (or
/// warpgroup) tile M N, instruction M N K, stages, blocks of a cluster along M, mainloop
/// ([`Mainloop`]: `staged`, `cp_async`, `wgmma` or `ping_pong`), the accumulators it has
/// kernels for. Each row is compiled into every PTX that has its mainloop's instructions
/// (`wgmma` rows into sm_90a PTX only); the host picks among them per shape.
#[macro_export]
macro_rules! tile_configs {
    ($then:ident) => {
        $then! {
            // Turing (sm_75): m16n8k8, register-staged double buffer.
            (tc75_128x128x32_64x32, 128, 128, 32, 64, 32, 16, 8, 8, 2, 1, staged, [f16 f32]),
            (tc75_64x64x32_32x32, 64, 64, 32, 32, 32, 16, 8, 8, 2, 1, staged, [f16 f32]),
            // Small tiles, for outputs of a few 64×64 tiles: four times the blocks.
            (tc75_32x32x32_16x16, 32, 32, 32, 16, 16, 16, 8, 8, 2, 1, staged, [f16 f32]),
            // Ampere and later: m16n8k16, cp.async multi-stage pipeline.
            (tc80_128x256x32_64x64_s3, 128, 256, 32, 64, 64, 16, 8, 16, 3, 1, cp_async, [f16 f32]),
            (tc80_128x128x32_64x64_s4, 128, 128, 32, 64, 64, 16, 8, 16, 4, 1, cp_async, [f16 f32]),
            (tc80_128x128x64_64x64_s3, 128, 128, 64, 64, 64, 16, 8, 16, 3, 1, cp_async, [f16 f32]),
            (tc80_128x128x64_64x32_s3, 128, 128, 64, 64, 32, 16, 8, 16, 3, 1, cp_async, [f16 f32]),
            (tc80_128x128x32_64x32_s4, 128, 128, 32, 64, 32, 16, 8, 16, 4, 1, cp_async, [f16 f32]),
            (tc80_64x64x32_32x32_s4, 64, 64, 32, 32, 32, 16, 8, 16, 4, 1, cp_async, [f16 f32]),
            (tc80_64x64x64_32x32_s3, 64, 64, 64, 32, 32, 16, 8, 16, 3, 1, cp_async, [f16 f32]),
            // Small tiles, as on Turing.
            (tc80_32x32x32_16x16_s4, 32, 32, 32, 16, 16, 16, 8, 16, 4, 1, cp_async, [f16 f32]),
            (tc80_32x32x64_16x16_s3, 32, 32, 64, 16, 16, 16, 8, 16, 3, 1, cp_async, [f16 f32]),
            // Hopper (sm_90a): wgmma from 128B-swizzled tiles the copy engine fills.
            // 64 wide: a batch of 128 rows over N/64 blocks, one an SM for N up to 8192.
            (wg90_128x64x64_64x64_s4, 128, 64, 64, 64, 64, 64, 64, 16, 4, 1, wgmma, [f16 f32]),
            (wg90_64x64x64_64x64_s4, 64, 64, 64, 64, 64, 64, 64, 16, 4, 1, wgmma, [f16 f32]),
            (wg90_128x128x64_128x128_s4, 128, 128, 64, 128, 128, 64, 128, 16, 4, 1, wgmma, [f16 f32]),
            (wg90_128x128x64_64x128_s4, 128, 128, 64, 64, 128, 64, 128, 16, 4, 1, wgmma, [f16 f32]),
            // Three stages of 128×128 (96 KiB) fit two blocks an SM.
            (wg90_128x128x64_64x128_s3, 128, 128, 64, 64, 128, 64, 128, 16, 3, 1, wgmma, [f16 f32]),
            (wg90_128x256x64_64x256_s3, 128, 256, 64, 64, 256, 64, 256, 16, 3, 1, wgmma, [f16 f32]),
            (wg90_128x256x64_64x256_s4, 128, 256, 64, 64, 256, 64, 256, 16, 4, 1, wgmma, [f16 f32]),
            (wg90_256x128x64_128x128_s4, 256, 128, 64, 128, 128, 64, 128, 16, 4, 1, wgmma, [f16 f32]),
            // Clusters of two blocks along M, which share each B tile (TMA multicast).
            (wg90_128x256x64_64x256_s4_c2x1, 128, 256, 64, 64, 256, 64, 256, 16, 4, 2, wgmma, [f16 f32]),
            (wg90_256x128x64_128x128_s4_c2x1, 256, 128, 64, 128, 128, 64, 128, 16, 4, 2, wgmma, [f16 f32]),
            // Ping-pong: persistent blocks, each consumer warpgroup a whole tile in turn:
            // 128×128 in five stages beside a staged C tile a consumer (160 + 64 KiB),
            // 128×256 in three beside one staged C tile they share (144 + 64 KiB), with fp16
            // sums alone (fp32 ones would take 256 registers a thread).
            (wg90_128x128x64_128x128_s5_pp, 128, 128, 64, 128, 128, 64, 128, 16, 5, 1, ping_pong, [f16 f32]),
            (wg90_128x256x64_128x256_s3_pp, 128, 256, 64, 128, 256, 64, 256, 16, 3, 1, ping_pong, [f16]),
        }
    };
}

macro_rules! config_table {
    ($(($name:ident, $bm:expr, $bn:expr, $bk:expr, $wm:expr, $wn:expr, $im:expr, $in:expr, $ik:expr,
        $st:expr, $cm:expr, $mainloop:ident, [$($acc:ident)*]),)*) => {
        /// Each row of [`tile_configs!`](crate::tile_configs) by its name, for code that names
        /// one (the host's per-GPU preferences).
        #[allow(non_upper_case_globals)]
        pub mod rows {
            use super::{Mainloop, TileConfig};
            $(pub const $name: TileConfig = TileConfig {
                name: stringify!($name),
                block: ($bm, $bn, $bk),
                warp: ($wm, $wn),
                instruction: ($im, $in, $ik),
                stages: $st,
                cluster_m: $cm,
                mainloop: mainloop!($mainloop),
                accums: &[$(accum!($acc)),*],
            };)*
        }
        /// Every tensor-core configuration, from [`tile_configs!`](crate::tile_configs).
        pub const TILE_CONFIGS: &[TileConfig] = &[$(rows::$name),*];
        // A row that breaks a rule of its kind (`rules.rs`) does not compile.
        const _: () = {
            let mut i = 0;
            while i < TILE_CONFIGS.len() {
                TILE_CONFIGS[i].assert_valid();
                i += 1;
            }
        };
    };
}
macro_rules! mainloop {
    (staged) => {
        Mainloop::Staged
    };
    (cp_async) => {
        Mainloop::CpAsync
    };
    (wgmma) => {
        Mainloop::Wgmma
    };
    (ping_pong) => {
        Mainloop::PingPong
    };
}
/// The [`Accum`] of a row's accumulator column: `f16` or `f32`, as the kernels' names end.
macro_rules! accum {
    (f16) => {
        $crate::gemm::Accum::F16
    };
    (f32) => {
        $crate::gemm::Accum::F32
    };
}
pub(crate) use accum;
tile_configs!(config_table);

/// Kernel name of a SIMT version (or of the direct rung, `"direct"`) for a layout.
#[cfg(not(target_arch = "nvptx64"))]
pub fn simt_kernel(version: &str, layout: Layout) -> String {
    format!("gemm_{version}_{}", layout.suffix())
}

/// Kernel name of a tensor-core configuration for a layout and accumulator.
#[cfg(not(target_arch = "nvptx64"))]
pub fn tensor_kernel(config: &TileConfig, layout: Layout, acc: Accum) -> String {
    format!("gemm_{}_{}_{}", config.name, layout.suffix(), acc.suffix())
}

/// The one layout a `wgmma` row's SGD step has a kernel for: a weight gradient's,
/// `dW = dYᵀ·X`. Those rows take the step in a kernel of their own
/// ([`wgmma_step_kernel`]), whose loads in flight would otherwise weigh on every product's
/// registers.
pub const WGMMA_STEP_LAYOUT: Layout = Layout::TN;

/// Kernel name of a `wgmma` configuration's SGD step ([`WGMMA_STEP_LAYOUT`]) for an
/// accumulator.
#[cfg(not(target_arch = "nvptx64"))]
pub fn wgmma_step_kernel(config: &TileConfig, acc: Accum) -> String {
    format!("{}_step", tensor_kernel(config, WGMMA_STEP_LAYOUT, acc))
}

/// The parameter every GEMM kernel takes first, by value as one `.param` block (fp16 pointers as
/// raw `u16` bits; tensor-core kernels then take the split-K workspace and slice depth, and
/// `splitk_reduce` uses its epilogue's fields): `#[repr(C)]` gives the host, which builds it,
/// and the device the same layout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Args {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub a: *const u16,
    pub lda: u32,
    pub b: *const u16,
    pub ldb: u32,
    pub c: *mut u16,
    pub ldc: u32,
    pub bias: *const u16,
    pub alpha: f32,
    pub beta: f32,
    pub relu: u32,
    /// The output of the ReLU this product goes back through, laid out as C, or null: where it
    /// is not positive the output is zero (the ReLU's backward, fused).
    pub gate: *const u16,
    /// The SGD step the output is the gradient of, or [`Sgd::NONE`]. With a step, the output
    /// is `alpha·op(A)·op(B)` alone: `beta` is 0, and there is no bias, ReLU or gate.
    pub sgd: Sgd,
}

/// SGD with momentum on weights whose fp16 copy is a GEMM's C: `v = momentum·v + g`,
/// `w -= lr·v`, C = fp16(w). `master` (fp32 weights) and `velocity` are laid out as C.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Sgd {
    pub master: *mut f32,
    pub velocity: *mut f32,
    pub lr: f32,
    pub momentum: f32,
}

impl Sgd {
    /// No step: the epilogue stores its output.
    pub const NONE: Sgd = Sgd {
        master: core::ptr::null_mut(),
        velocity: core::ptr::null_mut(),
        lr: 0.0,
        momentum: 0.0,
    };

    pub fn is_none(&self) -> bool {
        self.master.is_null()
    }

    /// The step of element `k` of the weights for gradient `g`: updates its velocity and
    /// master weight and returns the new fp16 weight.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn step(&self, k: usize, g: f32) -> u16 {
        self.step_from(k, g, self.state(k))
    }

    /// Element `k`'s master weight and velocity, loaded ahead of its step.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn state(&self, k: usize) -> (f32, f32) {
        unsafe { (*self.master.add(k), *self.velocity.add(k)) }
    }

    /// [`Sgd::step`] from element `k`'s `state` as [`Sgd::state`] loaded it.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn step_from(&self, k: usize, g: f32, (w, v): (f32, f32)) -> u16 {
        let (w, v) = self.apply(w, v, g);
        unsafe {
            *self.velocity.add(k) = v;
            *self.master.add(k) = w;
        }
        crate::arch::f2h(w)
    }

    /// What a kernel writes at element `k` of its output for the fp16 gradient `h`: `h`
    /// itself, or with a step the new fp16 weight.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn take(&self, k: usize, h: u16) -> u16 {
        if self.is_none() {
            h
        } else {
            self.step(k, crate::arch::h2f(h))
        }
    }

    /// New (weight, velocity) from weight `w`, velocity `v` and gradient `g`, by
    /// [`momentum_step`].
    #[inline(always)]
    pub fn apply(&self, w: f32, v: f32, g: f32) -> (f32, f32) {
        momentum_step(self.lr, self.momentum, w, v, g)
    }
}

/// SGD with momentum on one parameter: `v = momentum·v + g`, `w -= lr·v`; returns the new
/// (weight, velocity). The one definition of the update: the GEMM epilogue, `sgd_update` and
/// the persistent kernel all take it, so that every engine's step of a parameter agrees bit
/// for bit with the others' for the same gradient.
#[inline(always)]
pub fn momentum_step(lr: f32, momentum: f32, w: f32, v: f32, g: f32) -> (f32, f32) {
    let v = momentum * v + g;
    (w - lr * v, v)
}

impl Args {
    /// The arguments that matter to the epilogue alone (no operands): for the out-of-line
    /// pair store, which takes them as scalars (registers) rather than the whole struct.
    #[allow(clippy::too_many_arguments)]
    pub const fn epilogue_only(
        m: u32,
        n: u32,
        c: *mut u16,
        ldc: u32,
        bias: *const u16,
        alpha: f32,
        beta: f32,
        relu: u32,
        gate: *const u16,
    ) -> Args {
        let (a, b) = (core::ptr::null(), core::ptr::null());
        Args {
            m,
            n,
            k: 0,
            a,
            lda: 0,
            b,
            ldb: 0,
            c,
            ldc,
            bias,
            alpha,
            beta,
            relu,
            gate,
            sgd: Sgd::NONE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        for (i, a) in TILE_CONFIGS.iter().enumerate() {
            for b in &TILE_CONFIGS[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
    }

    fn named(name: &str) -> &'static TileConfig {
        TILE_CONFIGS.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn smem_size_counts_every_stage_and_a_step_the_staged_tile() {
        let c = named("tc80_128x128x32_64x64_s4");
        assert_eq!(c.smem_bytes(), 4 * (128 + 128) * 32 * 2);
        assert_eq!(c.threads(), 128);
        assert_eq!(c.smem_bytes_stepping(), c.smem_bytes());
        // Warp tiles of 32×32 keep the SGD step's deep quads in flight; 64×32 ones do not.
        assert_eq!(
            named("tc80_64x64x64_32x32_s3").sgd_quads_in_flight(),
            SGD_DEEP
        );
        assert_eq!(
            named("tc80_128x128x32_64x32_s4").sgd_quads_in_flight(),
            SGD_SHALLOW
        );
        // Two stages of a 32-deep slice hold less than the SGD epilogue's padded C tile.
        let c = named("tc75_128x128x32_64x32");
        assert_eq!(c.smem_bytes(), 2 * (128 + 128) * 32 * 2);
        assert_eq!(c.smem_bytes_stepping(), 128 * (128 + STAGED_PAD) * 2);
    }
}
