//! Host side of the GEMM ladder: validation, configuration choice, launch geometry, the CPU
//! reference and cuBLAS for comparison.
use crate::cuda::{Gpu, PushKernelArg, arg, attribute, cluster_attribute};
use crate::kernels;
use crate::ptx::Target;
use crate::tma;
use anyhow::{Context, Result, bail, ensure};
use cudarc::cublas::{CudaBlas, sys as cublas_sys};
use cudarc::driver::sys::{CUfunction_attribute, CUlaunchAttributeID};
use cudarc::driver::{CudaStream, LaunchConfig};
use gpu::gemm::descriptor::{MAP_BYTES, TensorMaps, copy_engine_reaches};
use gpu::gemm::{
    Accum, DIRECT_MIN_SM, DIRECT_WARP, DIRECT_WARPS, Layout, RB_K, RB_THREADS, RB_TILE, SGD_DEEP,
    SIMT_VERSIONS, SMEM_TILE, TILE_CONFIGS, TileConfig,
};
use half::f16;
use std::sync::Arc;

/// One rung of the ladder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Version {
    Simt(&'static str),
    /// `mma.sync` from fragments loaded straight from global memory (fp32 accumulation), for
    /// products of one K step.
    Direct,
    Tensor(&'static TileConfig, Accum),
}

/// The direct rung's label and kernel name stem.
const DIRECT: &str = "direct";

impl Version {
    pub fn label(&self) -> String {
        match self {
            Version::Simt(v) => (*v).to_string(),
            Version::Direct => DIRECT.to_string(),
            Version::Tensor(c, a) => format!("{}_{}", c.name, a.suffix()),
        }
    }

    /// The lowest compute capability (×10) whose PTX holds the version.
    pub fn min_sm(&self) -> u32 {
        match self {
            Version::Simt(_) => 0,
            Version::Direct => DIRECT_MIN_SM,
            Version::Tensor(c, _) => c.min_sm,
        }
    }

    /// Whether the version's epilogue can take an SGD step: the `wgmma` rungs and the direct
    /// one take none.
    pub fn takes_sgd_step(&self) -> bool {
        match self {
            Version::Simt(_) => true,
            Version::Direct => false,
            Version::Tensor(c, _) => !c.is_wgmma(),
        }
    }

    /// Every version this GPU can run (its PTX holds it, its shared memory takes it), SIMT
    /// first.
    pub fn all_for(gpu: &Gpu) -> Vec<Version> {
        Version::all_in(gpu.ptx.target())
            .into_iter()
            .filter(|v| v.smem_bytes() <= gpu.max_smem_optin())
            .collect()
    }

    /// Dynamic shared memory a block of this version uses, in bytes.
    pub fn smem_bytes(&self) -> usize {
        match self {
            Version::Simt("smem") => 2 * SMEM_TILE * SMEM_TILE * 4,
            Version::Simt("regblock") => 2 * RB_K * RB_TILE * 4,
            Version::Simt(_) | Version::Direct => 0,
            Version::Tensor(c, _) => c.smem_bytes(),
        }
    }

    /// [`Version::smem_bytes`] for a problem: a tensor-core kernel's SGD epilogue may stage more.
    pub fn smem_bytes_for(&self, p: &Problem) -> usize {
        match self {
            Version::Tensor(c, _) if p.sgd.is_some() => c.smem_bytes_stepping(),
            _ => self.smem_bytes(),
        }
    }

    /// Whether this GPU runs the version: the loaded PTX holds it and a block's shared memory
    /// fits the limit (or the `--max-smem-kb` cap); if not, an error that says which.
    pub fn ensure_runs_on(&self, gpu: &Gpu) -> Result<()> {
        let arch = gpu.ptx.target();
        ensure!(
            self.in_ptx(arch),
            "{} needs sm_{}{} PTX, but the {} PTX is loaded",
            self.label(),
            self.min_sm(),
            if matches!(self, Version::Tensor(c, _) if c.is_wgmma()) {
                "a"
            } else {
                ""
            },
            gpu.ptx.arch
        );
        ensure!(
            self.smem_bytes() <= gpu.max_smem_optin(),
            "{} needs {} B of shared memory per block; {}",
            self.label(),
            self.smem_bytes(),
            gpu.describe_smem_limit()
        );
        Ok(())
    }

    /// Whether the PTX of architecture `arch` holds the version.
    fn in_ptx(&self, arch: Target) -> bool {
        match self {
            Version::Tensor(c, _) => c.in_ptx(arch.sm, arch.specific),
            _ => self.min_sm() <= arch.sm,
        }
    }

    /// Every version the PTX of architecture `arch` holds, SIMT first, then the direct rung.
    pub fn all_in(arch: Target) -> Vec<Version> {
        let mut v: Vec<Version> = SIMT_VERSIONS.iter().map(|s| Version::Simt(s)).collect();
        if Version::Direct.in_ptx(arch) {
            v.push(Version::Direct);
        }
        for c in TILE_CONFIGS
            .iter()
            .filter(|c| c.in_ptx(arch.sm, arch.specific))
        {
            v.push(Version::Tensor(c, Accum::F16));
            v.push(Version::Tensor(c, Accum::F32));
        }
        v
    }

    /// Parses a label as printed by [`Version::label`] (`naive`, `tc80_..._f16`), or a bare
    /// config name with the accumulator given separately.
    pub fn parse(s: &str, acc: Accum) -> Result<Version> {
        if let Some(v) = SIMT_VERSIONS.iter().find(|v| **v == s) {
            return Ok(Version::Simt(v));
        }
        if s == DIRECT {
            return Ok(Version::Direct);
        }
        for c in TILE_CONFIGS {
            for a in [Accum::F16, Accum::F32] {
                if s == format!("{}_{}", c.name, a.suffix()) {
                    return Ok(Version::Tensor(c, a));
                }
            }
            if s == c.name {
                return Ok(Version::Tensor(c, acc));
            }
        }
        let names: Vec<_> = SIMT_VERSIONS
            .iter()
            .copied()
            .chain([DIRECT])
            .chain(TILE_CONFIGS.iter().map(|c| c.name))
            .collect();
        bail!(
            "unknown GEMM version or config {s:?}; known: {}",
            names.join(", ")
        )
    }
}

/// `C = act(alpha·op(A)·op(B) + beta·C + bias)`, all row-major fp16 (see `gpu::gemm`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub layout: Layout,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub alpha: f32,
    pub beta: f32,
    pub relu: bool,
    /// Slices of K computed by separate blocks and summed by `splitk_reduce` (tensor-core
    /// versions only; needs a workspace, see [`workspace_len`]).
    pub split_k: usize,
    /// The SGD step the product is the gradient of, or none: C is then the weights' fp16 copy
    /// and [`Ptrs`] gives their master and velocity (see `gpu::gemm::Sgd`); the product is
    /// the plain `alpha·op(A)·op(B)` (no beta, ReLU, bias or gate).
    pub sgd: Option<SgdStep>,
}

/// Learning rate and momentum of an SGD step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    pub lr: f32,
    pub momentum: f32,
}

impl Problem {
    /// Tightly packed operands (leading dimension = stored row length).
    pub fn new(m: usize, n: usize, k: usize, layout: Layout) -> Problem {
        let lda = if layout.trans_a() { m } else { k };
        let ldb = if layout.trans_b() { k } else { n };
        Problem {
            m,
            n,
            k,
            layout,
            lda,
            ldb,
            ldc: n,
            alpha: 1.0,
            beta: 0.0,
            relu: false,
            split_k: 1,
            sgd: None,
        }
    }

    /// Stored (rows, cols) of A and of B.
    pub fn a_dims(&self) -> (usize, usize) {
        if self.layout.trans_a() {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }
    pub fn b_dims(&self) -> (usize, usize) {
        if self.layout.trans_b() {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }
    /// Elements a buffer must hold for each operand.
    pub fn a_len(&self) -> usize {
        let (r, c) = self.a_dims();
        (r - 1) * self.lda + c
    }
    pub fn b_len(&self) -> usize {
        let (r, c) = self.b_dims();
        (r - 1) * self.ldb + c
    }
    pub fn c_len(&self) -> usize {
        (self.m - 1) * self.ldc + self.n
    }
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Rejects shapes and buffers the kernels cannot take, before anything is launched.
    pub fn validate(
        &self,
        a_len: usize,
        b_len: usize,
        c_len: usize,
        bias_len: Option<usize>,
    ) -> Result<()> {
        ensure!(
            self.m > 0 && self.n > 0 && self.k > 0,
            "GEMM dimensions must be positive, got M={} N={} K={}",
            self.m,
            self.n,
            self.k
        );
        let limit = u32::MAX as usize / 2;
        ensure!(
            self.m.max(self.n).max(self.k) <= limit,
            "GEMM dimension too large for 32-bit indexing"
        );
        let (ar, ac) = self.a_dims();
        let (br, bc) = self.b_dims();
        ensure!(
            self.lda >= ac,
            "lda={} is smaller than A's stored row ({ac})",
            self.lda
        );
        ensure!(
            self.ldb >= bc,
            "ldb={} is smaller than B's stored row ({bc})",
            self.ldb
        );
        ensure!(
            self.ldc >= self.n,
            "ldc={} is smaller than N={}",
            self.ldc,
            self.n
        );
        ensure!(
            a_len >= self.a_len(),
            "A holds {a_len} elements; a {ar}×{ac} operand with lda={} needs {}",
            self.lda,
            self.a_len()
        );
        ensure!(
            b_len >= self.b_len(),
            "B holds {b_len} elements; a {br}×{bc} operand with ldb={} needs {}",
            self.ldb,
            self.b_len()
        );
        ensure!(
            c_len >= self.c_len(),
            "C holds {c_len} elements; M×N={}×{} with ldc={} needs {}",
            self.m,
            self.n,
            self.ldc,
            self.c_len()
        );
        ensure!(
            self.m.max(self.n).max(self.k) * self.lda.max(self.ldb).max(self.ldc)
                <= u32::MAX as usize,
            "GEMM operands too large for 32-bit indexing"
        );
        if let Some(len) = bias_len {
            ensure!(len >= self.n, "bias holds {len} elements, N={}", self.n);
        }
        Ok(())
    }
}

/// Device addresses of the operands (`bias` and `gate` 0 for none; `ws` the split-K workspace
/// of [`workspace_len`] f32, 0 when not splitting; `master` and `velocity`, fp32 laid out as C,
/// for a [`Problem::sgd`] step).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ptrs {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub bias: u64,
    pub gate: u64,
    pub ws: u64,
    pub master: u64,
    pub velocity: u64,
}

/// K per split slice (a multiple of the block's K step) and the number of slices that gives.
pub fn split_slices(p: &Problem, c: &TileConfig) -> (usize, usize) {
    let bk = c.block.2;
    let slice = p.k.div_ceil(p.split_k.max(1)).div_ceil(bk) * bk;
    (slice, p.k.div_ceil(slice))
}

/// f32 elements of workspace a split-K launch of `v` needs (0 without splitting).
pub fn workspace_len(v: Version, p: &Problem) -> usize {
    match v {
        Version::Tensor(c, _) if p.split_k > 1 => split_slices(p, c).1 * p.m * p.n,
        _ => 0,
    }
}

/// How many K slices to give an output too small to fill the GPU: enough blocks for about two
/// per SM, each slice at least 2 K steps deep, at most 32 slices.
pub fn choose_split(gpu: &Gpu, c: &TileConfig, m: usize, n: usize, k: usize) -> Result<usize> {
    let tiles = c.tiles(m, n);
    let sms = gpu.sm_count() as usize;
    Ok(if 2 * tiles > sms {
        1
    } else {
        (2 * sms / tiles).min(k / (2 * c.block.2)).clamp(1, 32)
    })
}

/// The smallest tile a GEMM beside another kernel takes where smaller ones would give more
/// than half the SMs a block ([`choose_config`]).
const BESIDE_MIN_TILE: (usize, usize) = (64, 64);

/// How a GEMM runs, besides its dimensions, where that changes the configuration the host
/// picks for it ([`choose_config`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Another kernel runs at the same time, on another stream.
    pub beside: bool,
    /// The epilogue takes an SGD step ([`Problem::sgd`]).
    pub steps: bool,
    /// A's and B's rows start 16-byte aligned (leading dimensions of multiples of 8 elements,
    /// from aligned addresses), so that the copy engine can read them for the `wgmma` rungs.
    pub copy_engine: bool,
}

impl Usage {
    /// A product's usage whose operands have leading dimensions `lda` and `ldb`, from
    /// 16-byte-aligned addresses.
    pub fn aligned(lda: usize, ldb: usize) -> Usage {
        Usage {
            copy_engine: lda.is_multiple_of(8) && ldb.is_multiple_of(8),
            ..Usage::default()
        }
    }
}

/// The tensor-core configuration the host picks for an M×N×K product on this GPU: among those
/// the PTX holds (sm_80+ ones where available), the largest tile that still gives every SM a
/// block, and among equal ones a K slice that K fills, else the shallowest; for small outputs,
/// the one with the most blocks, and among equal ones the deepest K slice that K fills (fewer
/// barriers; a short K pays for zero-filled depth instead).
///
/// `usage.beside`: another kernel runs at the same time, on another stream. Then a tile under
/// 64×64 takes part only where its tiles number at most half the SMs: more of them spread over
/// nearly every SM and keep the other kernel's large blocks out, which measured slower although
/// the GEMM alone ran faster; fewer leave the other kernel SMs of its own, and finish sooner
/// (`docs/gemm.md`).
///
/// `usage.steps`: the epilogue takes an SGD step. Then only tiles whose threads keep
/// [`SGD_DEEP`] quads of master weights and velocity in flight take part: at a short K those 16
/// bytes an element are most of the GEMM's time, and the shallow epilogue of the largest warp
/// tiles leaves DRAM waiting (`docs/gemm.md`).
///
/// `usage.copy_engine`, without a step: on sm_90a PTX the `wgmma` rung of [`choose_wgmma`]
/// where one fits the product, before any `mma.sync` one.
pub fn choose_config(
    gpu: &Gpu,
    (m, n, k): (usize, usize, usize),
    usage: Usage,
) -> Result<&'static TileConfig> {
    let smem = gpu.max_smem_optin();
    let sms = gpu.sm_count() as usize;
    if usage.copy_engine
        && !usage.steps
        && let Some(c) = choose_wgmma(gpu, (m, n, k))
    {
        return Ok(c);
    }
    let mma_sync = || {
        TILE_CONFIGS
            .iter()
            .filter(|c| c.min_sm <= gpu.ptx.sm && !c.is_wgmma())
    };
    let best_sm = mma_sync().map(|c| c.min_sm).max();
    let area = |c: &TileConfig| c.block.0 * c.block.1;
    let tiles = |c: &TileConfig| c.tiles(m, n);
    let beside_ok =
        |c: &TileConfig| area(c) >= BESIDE_MIN_TILE.0 * BESIDE_MIN_TILE.1 || 2 * tiles(c) <= sms;
    let usable: Vec<_> = mma_sync()
        .filter(|c| Some(c.min_sm) == best_sm && c.smem_bytes() <= smem)
        .filter(|c| !usage.beside || beside_ok(c))
        .filter(|c| !usage.steps || c.sgd_quads_in_flight() == SGD_DEEP)
        .collect();
    let depth = |c: &TileConfig| {
        let bk = c.block.2 as isize;
        if c.block.2 <= k { bk } else { -bk }
    };
    let filling = usable
        .iter()
        .filter(|c| tiles(c) >= sms)
        .max_by_key(|c| (area(c), depth(c).min(0)));
    filling
        .or_else(|| {
            usable
                .iter()
                .max_by_key(|c| (tiles(c), std::cmp::Reverse(area(c)), depth(c)))
        })
        .copied()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no tensor-core GEMM configuration of the {} PTX fits: {}",
                gpu.ptx.arch,
                gpu.describe_smem_limit()
            )
        })
}

/// The `wgmma` configuration for an M×N×K product, where the PTX holds them (sm_90a) and K
/// fills a K step of 64: the largest tile whose blocks leave at most an eighth of the SMs
/// without one. A warpgroup block computes its tile several times as fast as `mma.sync`
/// blocks on the same SM, so its tiles need not give every SM a block as `mma.sync` ones do
/// (measured in `docs/gemm.md`, "64-wide warpgroup tiles"). Among equal tiles, the last row of
/// the table.
fn choose_wgmma(gpu: &Gpu, (m, n, k): (usize, usize, usize)) -> Option<&'static TileConfig> {
    let sms = gpu.sm_count() as usize;
    let target = gpu.ptx.target();
    TILE_CONFIGS
        .iter()
        .filter(|c| c.is_wgmma() && c.in_ptx(target.sm, target.specific))
        .filter(|c| c.smem_bytes() <= gpu.max_smem_optin() && c.block.2 <= k)
        .filter(|c| 8 * c.tiles(m, n) >= 7 * sms)
        .max_by_key(|c| c.block.0 * c.block.1)
}

/// The depth of a product the direct rung computes in one step: one `m16n8k16`.
const DIRECT_K: usize = 16;

/// The version and K split the host runs an M×N×K product with when none is forced: the
/// direct rung for a product of one K step that takes no SGD step, where the PTX holds it
/// (`docs/gemm.md` has the measurement; it accumulates in fp32 whatever `acc` asks, which one
/// k step does not make slower); else [`choose_config`]'s tile with `acc`, split as
/// [`choose_split`] says.
pub fn choose_version(
    gpu: &Gpu,
    (m, n, k): (usize, usize, usize),
    usage: Usage,
    acc: Accum,
) -> Result<(Version, usize)> {
    if k <= DIRECT_K && !usage.steps && Version::Direct.in_ptx(gpu.ptx.target()) {
        return Ok((Version::Direct, 1));
    }
    let c = choose_config(gpu, (m, n, k), usage)?;
    Ok((Version::Tensor(c, acc), choose_split(gpu, c, m, n, k)?))
}

/// Kernel name, launch geometry and the shared memory it needs.
fn plan(gpu: &Gpu, v: Version, p: &Problem) -> Result<(String, LaunchConfig)> {
    let cfg = |tile_m: usize, tile_n: usize, threads: usize| LaunchConfig {
        grid_dim: (p.n.div_ceil(tile_n) as u32, p.m.div_ceil(tile_m) as u32, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: v.smem_bytes_for(p) as u32,
    };
    let geometry = match v {
        Version::Simt("naive") => cfg(16, 16, 256),
        Version::Simt("smem") => cfg(SMEM_TILE, SMEM_TILE, SMEM_TILE * SMEM_TILE),
        Version::Simt("regblock") => cfg(RB_TILE, RB_TILE, RB_THREADS),
        Version::Simt(other) => bail!("unknown SIMT version {other}"),
        Version::Direct => cfg(
            DIRECT_WARP.0 * DIRECT_WARPS,
            DIRECT_WARP.1,
            32 * DIRECT_WARPS,
        ),
        Version::Tensor(c, _) => {
            // Clusters stand along M: the grid holds whole ones, whose blocks past M read zeros
            // and store nothing.
            let mut g = cfg(c.block.0, c.block.1, c.threads());
            g.grid_dim.1 = g.grid_dim.1.next_multiple_of(c.cluster_m as u32);
            g
        }
    };
    v.ensure_runs_on(gpu)?;
    Ok((kernels::gemm(v, p.layout), geometry))
}

/// Launches one GEMM on the GPU's stream (asynchronously). Validate the problem first with
/// [`Problem::validate`]; the pointers must address buffers of those sizes.
pub fn launch(gpu: &Gpu, v: Version, p: &Problem, ptrs: Ptrs) -> Result<()> {
    launch_on(gpu, &gpu.stream, v, p, ptrs)
}

/// [`launch`] on `stream`, one of the GPU's context.
pub fn launch_on(
    gpu: &Gpu,
    stream: &CudaStream,
    v: Version,
    p: &Problem,
    ptrs: Ptrs,
) -> Result<()> {
    ensure!(
        p.m > 0 && p.n > 0 && p.k > 0,
        "GEMM dimensions must be positive, got M={} N={} K={}",
        p.m,
        p.n,
        p.k
    );
    ensure!(
        p.m.div_ceil(16) <= 65535,
        "M={} exceeds the grid's y limit",
        p.m
    );
    let sgd = sgd_of(v, p, ptrs)?;
    let (name, mut cfg) = plan(gpu, v, p)?;
    let f = gpu.function(&name)?;
    if cfg.shared_mem_bytes > 48 * 1024 {
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            cfg.shared_mem_bytes as i32,
        )?;
    }
    // The kernel's parameters (device addresses as the pointers the kernel reads).
    let params = gpu::gemm::Args {
        m: p.m as u32,
        n: p.n as u32,
        k: p.k as u32,
        a: ptrs.a as *const u16,
        lda: p.lda as u32,
        b: ptrs.b as *const u16,
        ldb: p.ldb as u32,
        c: ptrs.c as *mut u16,
        ldc: p.ldc as u32,
        bias: ptrs.bias as *const u16,
        alpha: p.alpha,
        beta: p.beta,
        relu: p.relu as u32,
        gate: ptrs.gate as *const u16,
        sgd,
    };
    if let Version::Tensor(c, _) = v
        && c.is_wgmma()
    {
        return launch_warpgroup(gpu, stream, (&f, cfg), c, p, ptrs, &params);
    }
    let (k_slice, splits) = match v {
        Version::Tensor(c, _) => split_slices(p, c),
        Version::Simt(_) | Version::Direct => {
            ensure!(
                p.split_k <= 1,
                "split-K needs a tensor-core tile version, not {}",
                v.label()
            );
            (0, 1)
        }
    };
    let (k_slice, ws) = (k_slice as u32, if splits > 1 { ptrs.ws } else { 0 });
    ensure!(
        splits == 1 || ws != 0,
        "split-K over {splits} slices needs a workspace of {} f32",
        workspace_len(v, p)
    );
    // On sm_90 the split-K reduction, and a tensor-core GEMM whose grid fits on the SMs in one
    // pass, are dependent launches: scheduled while the kernel before them finishes, they wait
    // for it on the GPU (`griddepcontrol.wait`, before their first global access) instead of
    // behind a launch. That saves a fraction of a microsecond on the MLP shapes; grids larger
    // than one pass run slower so (`docs/gemm.md` has both measurements).
    let mut dependent = [attribute(
        CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        |v| v.programmaticStreamSerializationAllowed = 1,
    )];
    let hopper = gpu.ptx.sm >= 90;
    let blocks = cfg.grid_dim.0 * cfg.grid_dim.1 * splits as u32;
    let one_pass = hopper && blocks <= gpu.sm_count();
    let mut args = [arg(&params), arg(&ws), arg(&k_slice)];
    // SAFETY: the arguments are the kernel's parameters, in order and of its types (SIMT
    // kernels take the first, the `#[repr(C)]` `Args`; the direct kernel all three, reading
    // the first); the caller keeps the buffers alive.
    unsafe {
        if !matches!(v, Version::Simt(_)) {
            cfg.grid_dim.2 = splits as u32;
            gpu.launch_ex(
                stream,
                &f,
                cfg,
                &mut dependent[..usize::from(one_pass)],
                &mut args,
            )
        } else {
            gpu.launch_ex(stream, &f, cfg, &mut [], &mut args[..1])
        }
    }?;
    if splits > 1 {
        let f = gpu.function(kernels::SPLITK_REDUCE)?;
        let s = splits as u32;
        let cfg = crate::cuda::grid_1d(p.m * p.n, 256);
        let mut args = [arg(&ws), arg(&s), arg(&params)];
        // SAFETY: the arguments are `splitk_reduce`'s parameters, in order and of its types;
        // the caller keeps the buffers alive as for any launch.
        unsafe {
            gpu.launch_ex(
                stream,
                &f,
                cfg,
                &mut dependent[..usize::from(hopper)],
                &mut args,
            )
        }?;
    }
    Ok(())
}

/// The kernel's SGD step for `p` ([`gpu::gemm::Sgd::NONE`] without one), or why `v` cannot
/// take it on these buffers: the `wgmma` rungs take none, and a step needs the master weights
/// and velocity and takes the plain product as its gradient.
fn sgd_of(v: Version, p: &Problem, ptrs: Ptrs) -> Result<gpu::gemm::Sgd> {
    let Some(SgdStep { lr, momentum }) = p.sgd else {
        return Ok(gpu::gemm::Sgd::NONE);
    };
    ensure!(v.takes_sgd_step(), "{} takes no SGD step", v.label());
    ensure!(
        ptrs.master != 0 && ptrs.velocity != 0,
        "an SGD step needs the master weights and velocity"
    );
    ensure!(
        p.beta == 0.0 && !p.relu && ptrs.bias == 0 && ptrs.gate == 0,
        "an SGD step takes the plain product as its gradient: no beta, ReLU, bias or gate"
    );
    Ok(gpu::gemm::Sgd {
        master: ptrs.master as *mut f32,
        velocity: ptrs.velocity as *mut f32,
        lr,
        momentum,
    })
}

/// Launches the `wgmma` kernel `f` of configuration `c`: its arguments are `params` and the
/// tensor maps of the operands; its blocks form clusters of `c.cluster_m` along M.
fn launch_warpgroup(
    gpu: &Gpu,
    stream: &CudaStream,
    (f, cfg): (&cudarc::driver::CudaFunction, LaunchConfig),
    c: &TileConfig,
    p: &Problem,
    ptrs: Ptrs,
    params: &gpu::gemm::Args,
) -> Result<()> {
    ensure!(p.split_k <= 1, "{} does not split K", c.name);
    let maps = tensor_maps(c, p, ptrs)?;
    let mut args = [arg(params), arg(&maps)];
    let mut cluster = [cluster_attribute((1, c.cluster_m as u32))];
    let attrs = &mut cluster[..usize::from(c.cluster_m > 1)];
    // SAFETY: the arguments are the kernel's parameters, in order and of its types; the maps
    // describe the caller's buffers, which it keeps alive.
    unsafe { gpu.launch_ex(stream, f, cfg, attrs, &mut args) }
}

/// Why version `v` cannot run `p` on these buffers, where it cannot for a reason of the
/// operands alone: the `wgmma` rungs take no SGD step, and read the operands through the copy
/// engine, which needs rows that start 16-byte aligned.
pub fn refuses(v: Version, p: &Problem, ptrs: Ptrs) -> Option<String> {
    if let Err(why) = sgd_of(v, p, ptrs) {
        return Some(why.to_string());
    }
    let Version::Tensor(c, _) = v else {
        return None;
    };
    if !c.is_wgmma() {
        return None;
    }
    let (a, b) = operands(p, ptrs);
    a.unsupported()
        .map(|why| format!("A: {why}"))
        .or_else(|| b.unsupported().map(|why| format!("B: {why}")))
}

/// A and B of `p` as the copy engine sees them: stored rows, columns and leading dimension.
fn operands(p: &Problem, ptrs: Ptrs) -> (tma::Matrix, tma::Matrix) {
    let matrix = |ptr, (rows, cols), ld| tma::Matrix {
        ptr,
        rows,
        cols,
        ld,
    };
    (
        matrix(ptrs.a, p.a_dims(), p.lda),
        matrix(ptrs.b, p.b_dims(), p.ldb),
    )
}

/// The tensor maps of A and B for the `wgmma` configuration `c`, in their storage orientation:
/// an operand stored K-major is read a whole tile (`BM` rows, or a block's share of `BN`: all
/// of it but in clusters) of 64 K at a time, one stored MN-major in boxes of 64 K rows × 64 of
/// M or N.
fn tensor_maps(c: &TileConfig, p: &Problem, ptrs: Ptrs) -> Result<TensorMaps> {
    let (a, b) = operands(p, ptrs);
    let a_rows = if p.layout.trans_a() { 64 } else { c.block.0 };
    let b_rows = if p.layout.trans_b() {
        c.block.1 / c.cluster_m
    } else {
        64
    };
    let map = |m: &tma::Matrix, rows: usize, name| {
        tma::tiled_map(m, rows as u32)
            .with_context(|| format!("{} reads {name} through a tensor map", c.name))
    };
    // C where the copy engine can store it, for the plain-product epilogue; the kernel checks
    // the same condition before it uses the map.
    let c = tma::Matrix {
        ptr: ptrs.c,
        rows: p.m,
        cols: p.n,
        ld: p.ldc,
    };
    let c = if copy_engine_reaches(c.ptr, c.ld as u64) {
        map(&c, 64, "C")?.opaque
    } else {
        [0; MAP_BYTES / 8]
    };
    Ok(TensorMaps {
        a: map(&a, a_rows, "A")?.opaque,
        b: map(&b, b_rows, "B")?.opaque,
        c,
    })
}

/// The separate epilogue kernel (bias, ReLU) that follows a cuBLAS GEMM in comparisons, on
/// `stream`.
pub fn launch_bias_act(
    gpu: &Gpu,
    stream: &CudaStream,
    p: &Problem,
    (c, bias): (u64, u64),
) -> Result<()> {
    let f = gpu.function(kernels::BIAS_ACT_F16)?;
    let (ldc, m, n, relu) = (p.ldc as u32, p.m as u32, p.n as u32, p.relu as u32);
    let mut b = stream.launch_builder(&f);
    b.arg(&c).arg(&ldc).arg(&m).arg(&n).arg(&bias).arg(&relu);
    unsafe { b.launch(crate::cuda::grid_1d(p.m * p.n, 256)) }?;
    Ok(())
}

/// The roof kernels this GPU's PTX has: (name, instruction K, accumulator).
pub fn roof_kernels(gpu: &Gpu) -> Vec<(&'static str, usize, Accum)> {
    kernels::ROOFS
        .into_iter()
        .filter(|(name, _, _)| kernels::in_ptx_of(name, gpu.ptx.sm))
        .collect()
}

/// Runs roof kernel `name` (see `gpu/src/gemm/roof.rs`): `blocks` × `threads` threads, each warp
/// `iters` rounds of `ROOF_CHAINS` products of operands whose every fp16 element is `a`; each
/// thread writes one sum to `out`.
pub fn launch_roof(
    gpu: &Gpu,
    name: &str,
    (blocks, threads): (u32, u32),
    a: f16,
    iters: u32,
    out: u64,
) -> Result<()> {
    let f = gpu.function(name)?;
    let pair = (a.to_bits() as u32) * 0x1_0001;
    let mut b = gpu.stream.launch_builder(&f);
    b.arg(&out).arg(&pair).arg(&iters);
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe { b.launch(cfg) }?;
    Ok(())
}

/// cuBLAS on one stream, computing the same row-major problem (alpha and beta only: bias and
/// ReLU are what [`launch_bias_act`] adds).
pub struct Cublas {
    blas: CudaBlas,
    stream: Arc<CudaStream>,
}

impl Cublas {
    /// cuBLAS on the GPU's stream.
    pub fn new(gpu: &Gpu) -> Result<Cublas> {
        Cublas::on(gpu.stream.clone())
    }

    /// cuBLAS on `stream`.
    pub fn on(stream: Arc<CudaStream>) -> Result<Cublas> {
        let blas = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            CudaBlas::new(stream.clone())
        }))
        .map_err(|_| {
            anyhow::anyhow!("cuBLAS could not be loaded (libcublas not found on the library path)")
        })??;
        Ok(Cublas { blas, stream })
    }

    /// The stream its calls queue on.
    pub fn stream(&self) -> &CudaStream {
        &self.stream
    }

    /// Row-major `C = op(A)·op(B)` is column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`, so B goes first.
    pub fn gemm(&self, p: &Problem, ptrs: Ptrs, compute: Accum) -> Result<()> {
        use cublas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let op_b = if p.layout.trans_b() {
            CUBLAS_OP_T
        } else {
            CUBLAS_OP_N
        };
        let op_a = if p.layout.trans_a() {
            CUBLAS_OP_T
        } else {
            CUBLAS_OP_N
        };
        let (alpha16, beta16) = (f16::from_f32(p.alpha), f16::from_f32(p.beta));
        let (ap, bp, ct) = match compute {
            Accum::F16 => (
                &alpha16 as *const f16 as *const _,
                &beta16 as *const f16 as *const _,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_16F,
            ),
            Accum::F32 => (
                &p.alpha as *const f32 as *const _,
                &p.beta as *const f32 as *const _,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
        };
        let h = cublas_sys::cudaDataType::CUDA_R_16F;
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                op_b,
                op_a,
                p.n as i32,
                p.m as i32,
                p.k as i32,
                ap,
                ptrs.b as *const _,
                h,
                p.ldb as i32,
                ptrs.a as *const _,
                h,
                p.lda as i32,
                bp,
                ptrs.c as *mut _,
                h,
                p.ldc as i32,
                ct,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )?;
        }
        Ok(())
    }
}

/// What the epilogue reads besides the product: C before the GEMM (read where beta ≠ 0), the
/// bias and the gate, as in [`Ptrs`].
#[derive(Clone, Copy, Debug, Default)]
pub struct EpilogueInputs<'a> {
    pub c_old: &'a [f16],
    pub bias: Option<&'a [f16]>,
    pub gate: Option<&'a [f16]>,
}

/// CPU reference of one output element in f64, and the sum of |products| that bounds its
/// rounding error.
pub fn reference_at(
    p: &Problem,
    a: &[f16],
    b: &[f16],
    e: EpilogueInputs,
    i: usize,
    j: usize,
) -> (f64, f64) {
    let (mut acc, mut mag) = (0.0f64, 0.0f64);
    for kk in 0..p.k {
        let av = if p.layout.trans_a() {
            a[kk * p.lda + i]
        } else {
            a[i * p.lda + kk]
        }
        .to_f64();
        let bv = if p.layout.trans_b() {
            b[j * p.ldb + kk]
        } else {
            b[kk * p.ldb + j]
        }
        .to_f64();
        acc += av * bv;
        mag += (av * bv).abs();
    }
    let mut v = p.alpha as f64 * acc;
    mag *= p.alpha.abs() as f64;
    if p.beta != 0.0 {
        let cv = e.c_old[i * p.ldc + j].to_f64() * p.beta as f64;
        v += cv;
        mag += cv.abs();
    }
    if let Some(bias) = e.bias {
        v += bias[j].to_f64();
        mag += bias[j].to_f64().abs();
    }
    if p.relu {
        v = v.max(0.0);
    }
    if e.gate.is_some_and(|g| g[i * p.ldc + j].to_f64() <= 0.0) {
        v = 0.0;
    }
    (v, mag)
}

/// Error allowed at one element: rounding of the accumulation (fp16 accumulators round at
/// every step, so the bound grows with the sum of |products|) plus the final rounding to fp16.
pub fn tolerance(acc: Accum, value: f64, magnitude: f64) -> f64 {
    let unit = match acc {
        Accum::F16 => 2f64.powi(-11),
        Accum::F32 => 2f64.powi(-18),
    };
    // fp16 operands are exact in either accumulator; a few ulps of the running sum per step
    // grows like sqrt(K) in practice, but the bound below is the linear worst case / 8.
    8.0 * unit * magnitude + 2f64.powi(-10) * value.abs() + 1e-6
}

/// Compares a GPU result with the reference at `samples` (all elements when `None`).
/// Returns the largest |error| and the number of elements over tolerance (NaN counts as over).
pub struct Check {
    pub max_err: f64,
    pub failures: usize,
    pub first_failure: Option<(usize, usize, f64, f64)>,
}

pub fn check(
    p: &Problem,
    acc: Accum,
    a: &[f16],
    b: &[f16],
    e: EpilogueInputs,
    got: &[f16],
    samples: Option<&[(usize, usize)]>,
) -> Check {
    let mut out = Check {
        max_err: 0.0,
        failures: 0,
        first_failure: None,
    };
    let visit = |i: usize, j: usize| {
        let (want, mag) = reference_at(p, a, b, e, i, j);
        let g = got[i * p.ldc + j].to_f64();
        let err = (g - want).abs();
        let within = err <= tolerance(acc, want, mag); // false for NaN
        if !within {
            out.failures += 1;
            out.first_failure.get_or_insert((i, j, g, want));
        }
        if err.is_finite() {
            out.max_err = out.max_err.max(err);
        } else {
            out.max_err = f64::INFINITY;
        }
    };
    visit_elements(p, samples, visit);
    out
}

/// Calls `visit` on each of `samples`, or on every element of C.
fn visit_elements(
    p: &Problem,
    samples: Option<&[(usize, usize)]>,
    mut visit: impl FnMut(usize, usize),
) {
    match samples {
        Some(s) => s.iter().for_each(|&(i, j)| visit(i, j)),
        None => (0..p.m).for_each(|i| (0..p.n).for_each(|j| visit(i, j))),
    }
}

/// The fp32 master weights and velocity of an SGD-epilogue GEMM, laid out as C.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    pub master: &'a [f32],
    pub velocity: &'a [f32],
}

/// Compares an SGD-epilogue GEMM's results (`after`, and C as `got`) with the reference at
/// `samples` or every element: the gradient the step took, recovered from the velocity as
/// `v₁ − momentum·v₀`, within the product's tolerance; the master weight moved by exactly
/// `−lr·v₁`; C its fp16 copy. `max_err` is the gradient's; a failure's values are the gradient
/// taken and the reference's.
pub fn check_sgd(
    p: &Problem,
    acc: Accum,
    (a, b): (&[f16], &[f16]),
    before: Weights,
    after: Weights,
    got: &[f16],
    samples: Option<&[(usize, usize)]>,
) -> Check {
    let step = p.sgd.expect("an SGD problem");
    let mut out = Check {
        max_err: 0.0,
        failures: 0,
        first_failure: None,
    };
    visit_elements(p, samples, |i, j| {
        let k = i * p.ldc + j;
        let (want, mag) = reference_at(p, a, b, EpilogueInputs::default(), i, j);
        let v1 = after.velocity[k];
        let g = v1 as f64 - step.momentum as f64 * before.velocity[k] as f64;
        // The velocity's own fp32 rounding, besides the gradient's.
        let slack = 2f64.powi(-22) * (v1.abs() as f64 + g.abs());
        let err = (g - want).abs();
        let w1 = before.master[k] - step.lr * v1;
        let stepped = (after.master[k] - w1).abs() <= 2f32.powi(-22) * w1.abs().max(1e-30)
            && got[k] == f16::from_f32(after.master[k]);
        if !(err <= tolerance(acc, want, mag) + slack && stepped) {
            out.failures += 1;
            out.first_failure.get_or_insert((i, j, g, want));
        }
        out.max_err = out
            .max_err
            .max(if err.is_finite() { err } else { f64::INFINITY });
    });
    out
}

/// Accumulator precision a version uses, for its tolerance (SIMT versions accumulate in f32).
pub fn accum_of(v: Version) -> Accum {
    match v {
        Version::Simt(_) | Version::Direct => Accum::F32,
        Version::Tensor(_, a) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `splitk_reduce` takes the GEMM's arguments as one by-value parameter of
    /// `size_of::<gemm::Args>()` bytes, aligned as the struct: host and kernel agree on the ABI.
    #[test]
    fn splitk_reduce_takes_gemm_args() {
        for p in crate::ptx::EMBEDDED {
            let entry = ".entry splitk_reduce(";
            let at = p.source.find(entry).unwrap_or_else(|| panic!("{}", p.arch));
            let params = &p.source[at + entry.len()..];
            let last = params[..params.find(')').unwrap()].lines().last().unwrap();
            assert_eq!(
                last.trim(),
                format!(
                    ".param .align {} .b8 splitk_reduce_param_2[{}]",
                    std::mem::align_of::<gpu::gemm::Args>(),
                    std::mem::size_of::<gpu::gemm::Args>()
                ),
                "{}",
                p.arch
            );
        }
    }

    #[test]
    fn validation_rejects_bad_shapes_and_buffers() {
        let p = Problem::new(4, 5, 6, Layout::NN);
        assert!(p.validate(24, 30, 20, None).is_ok());
        assert!(
            p.validate(23, 30, 20, None)
                .unwrap_err()
                .to_string()
                .contains("A holds 23")
        );
        assert!(p.validate(24, 29, 20, None).is_err());
        assert!(p.validate(24, 30, 19, None).is_err());
        assert!(
            p.validate(24, 30, 20, Some(4))
                .unwrap_err()
                .to_string()
                .contains("bias")
        );
        let zero = Problem::new(0, 5, 6, Layout::NN);
        assert!(
            zero.validate(100, 100, 100, None)
                .unwrap_err()
                .to_string()
                .contains("positive")
        );
        let mut narrow = Problem::new(4, 5, 6, Layout::NT);
        narrow.ldb = 5; // B is stored [N][K]: rows of 6
        assert!(
            narrow
                .validate(100, 100, 100, None)
                .unwrap_err()
                .to_string()
                .contains("ldb")
        );
    }

    #[test]
    fn operand_sizes_follow_the_layout() {
        let p = Problem::new(3, 5, 7, Layout::TN);
        assert_eq!(p.a_dims(), (7, 3));
        assert_eq!(p.b_dims(), (7, 5));
        assert_eq!((p.lda, p.ldb, p.ldc), (3, 5, 5));
        let p = Problem::new(3, 5, 7, Layout::NT);
        assert_eq!(p.b_dims(), (5, 7));
        assert_eq!(p.b_len(), 35);
    }

    #[test]
    fn reference_and_tolerance() {
        // A = [[1, 2]], B = [[3], [4]] → 11; with bias 1 and ReLU.
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let mut p = Problem::new(1, 1, 2, Layout::NN);
        p.relu = true;
        let bias = h(&[-20.0]);
        let e = EpilogueInputs {
            bias: Some(&bias),
            ..EpilogueInputs::default()
        };
        let (v, mag) = reference_at(&p, &h(&[1.0, 2.0]), &h(&[3.0, 4.0]), e, 0, 0);
        assert_eq!((v, mag), (0.0, 31.0));
        // A gate that is not positive zeroes the output; a positive one passes it.
        p.relu = false;
        for (g, want) in [(-0.0, 0.0), (0.5, 11.0)] {
            let gate = h(&[g]);
            let e = EpilogueInputs {
                gate: Some(&gate),
                ..EpilogueInputs::default()
            };
            let (v, _) = reference_at(&p, &h(&[1.0, 2.0]), &h(&[3.0, 4.0]), e, 0, 0);
            assert_eq!(v, want, "gate {g}");
        }
        // 1·3 + 2·4 = 11: a wrong value fails, and NaN never passes.
        for got in [12.0, f32::NAN] {
            let c = check(
                &Problem::new(1, 1, 2, Layout::NN),
                Accum::F16,
                &h(&[1.0, 2.0]),
                &h(&[3.0, 4.0]),
                EpilogueInputs::default(),
                &h(&[got]),
                None,
            );
            assert_eq!(c.failures, 1, "{got} must fail");
        }
    }

    /// A stepping launch asks for the staged tile where the stages hold less; others do not.
    #[test]
    fn only_a_stepping_launch_asks_for_the_staged_tile() {
        let v = Version::parse("tc75_128x128x32_64x32", Accum::F16).unwrap();
        let Version::Tensor(c, _) = v else {
            unreachable!("a tensor-core config")
        };
        let plain = Problem::new(128, 128, 32, Layout::NN);
        let stepping = Problem {
            sgd: Some(SgdStep {
                lr: 0.1,
                momentum: 0.9,
            }),
            ..plain
        };
        assert_eq!(v.smem_bytes_for(&plain), c.smem_bytes());
        assert_eq!(v.smem_bytes_for(&stepping), c.smem_bytes_stepping());
        assert!(c.smem_bytes_stepping() > c.smem_bytes());
    }

    /// The SGD check passes the step the kernels take and fails a wrong gradient, a master
    /// weight not moved by `−lr·v`, and a C that is not the master's fp16 copy.
    #[test]
    fn sgd_check_follows_the_step() {
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let step = SgdStep {
            lr: 0.5,
            momentum: 0.9,
        };
        let p = Problem {
            sgd: Some(step),
            ..Problem::new(1, 1, 2, Layout::NN)
        };
        let (a, b) = (h(&[1.0, 2.0]), h(&[3.0, 4.0]));
        let (w0, v0) = ([2.0f32], [1.0f32]);
        let before = Weights {
            master: &w0,
            velocity: &v0,
        };
        let run = |g: f32, nudge: f32, c: Option<f32>| {
            let v1 = [step.momentum * v0[0] + g];
            let w1 = [w0[0] - step.lr * v1[0] + nudge];
            let after = Weights {
                master: &w1,
                velocity: &v1,
            };
            let got = h(&[c.unwrap_or(w1[0])]);
            check_sgd(&p, Accum::F32, (&a, &b), before, after, &got, None).failures
        };
        assert_eq!(run(11.0, 0.0, None), 0);
        assert_eq!(run(11.5, 0.0, None), 1, "a wrong gradient");
        assert_eq!(run(11.0, 1e-3, None), 1, "a master weight moved otherwise");
        assert_eq!(
            run(11.0, 0.0, Some(1.0)),
            1,
            "a C that is not the master's copy"
        );
    }

    #[test]
    fn versions_parse_from_labels() {
        assert_eq!(
            Version::parse("naive", Accum::F16).unwrap(),
            Version::Simt("naive")
        );
        let c = &TILE_CONFIGS[0];
        assert_eq!(
            Version::parse(&format!("{}_f32", c.name), Accum::F16).unwrap(),
            Version::Tensor(c, Accum::F32)
        );
        assert_eq!(
            Version::parse(c.name, Accum::F16).unwrap(),
            Version::Tensor(c, Accum::F16)
        );
        assert!(Version::parse("fastest", Accum::F16).is_err());
    }
}
