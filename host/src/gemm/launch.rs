//! Launching a GEMM: its kernel's geometry and arguments, the split-K workspace and reduction,
//! the `wgmma` rungs' tensor maps; and the roof kernels.
use super::problem::{Problem, SgdStep};
use super::version::Version;
use crate::cuda::{Gpu, PushKernelArg, arg, cluster_attribute, dependent_attribute};
use crate::kernels;
use crate::tma;
use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig};
use gpu::gemm::descriptor::{MAP_BYTES, TensorMaps, copy_engine_reaches};
use gpu::gemm::{Accum, DIRECT_WARP, DIRECT_WARPS, RB_THREADS, RB_TILE, SMEM_TILE, TileConfig};
use half::f16;

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
        // Persistent blocks: one an SM (their shared memory allows no more), or a tile each.
        Version::Tensor(c, _) if c.is_ping_pong() => LaunchConfig {
            grid_dim: ((c.tiles(p.m, p.n) as u32).min(gpu.sm_count()), 1, 1),
            ..cfg(c.block.0, c.block.1, c.threads())
        },
        Version::Tensor(c, _) => {
            // Clusters stand along M: the grid holds whole ones, whose blocks past M read zeros
            // and store nothing.
            let mut g = cfg(c.block.0, c.block.1, c.threads());
            g.grid_dim.1 = g.grid_dim.1.next_multiple_of(c.cluster_m as u32);
            g
        }
    };
    v.ensure_runs_on(gpu)?;
    Ok((v.kernel_for(p.layout, p.sgd.is_some()), geometry))
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
    p.ensure_positive()?;
    ensure!(
        p.m.div_ceil(16) <= 65535,
        "M={} exceeds the grid's y limit",
        p.m
    );
    let sgd = sgd_of(v, p, ptrs)?;
    let (name, cfg) = plan(gpu, v, p)?;
    let f = gpu.function(&name)?;
    if cfg.shared_mem_bytes > 48 * 1024 {
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            cfg.shared_mem_bytes as i32,
        )?;
    }
    let params = args(p, ptrs, sgd);
    if let Version::Tensor(c, _) = v
        && c.is_wgmma()
    {
        return launch_warpgroup(gpu, stream, (&f, cfg), c, p, ptrs, &params);
    }
    launch_sliced(gpu, stream, (&f, cfg), v, p, ptrs.ws, &params)
}

/// The kernel's parameters (device addresses as the pointers the kernel reads).
fn args(p: &Problem, ptrs: Ptrs, sgd: gpu::gemm::Sgd) -> gpu::gemm::Args {
    gpu::gemm::Args {
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
    }
}

/// Launches the SIMT, direct or `mma.sync` kernel `f` of `v`, its blocks over the K slices of
/// `p.split_k` (tensor-core versions only, summed in the workspace at `ws`), then the split-K
/// reduction where there is more than one slice.
fn launch_sliced(
    gpu: &Gpu,
    stream: &CudaStream,
    (f, mut cfg): (&CudaFunction, LaunchConfig),
    v: Version,
    p: &Problem,
    ws: u64,
    params: &gpu::gemm::Args,
) -> Result<()> {
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
    let (k_slice, ws) = (k_slice as u32, if splits > 1 { ws } else { 0 });
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
    let mut dependent = [dependent_attribute()];
    let hopper = gpu.ptx.target().dependent_launches();
    let blocks = cfg.grid_dim.0 * cfg.grid_dim.1 * splits as u32;
    let one_pass = hopper && blocks <= gpu.sm_count();
    let mut args = [arg(params), arg(&ws), arg(&k_slice)];
    // SAFETY: the arguments are the kernel's parameters, in order and of its types (SIMT
    // kernels take the first, the `#[repr(C)]` `Args`; the direct kernel all three, reading
    // the first); the caller keeps the buffers alive.
    unsafe {
        if !matches!(v, Version::Simt(_)) {
            cfg.grid_dim.2 = splits as u32;
            gpu.launch_ex(
                stream,
                f,
                cfg,
                &mut dependent[..usize::from(one_pass)],
                &mut args,
            )
        } else {
            gpu.launch_ex(stream, f, cfg, &mut [], &mut args[..1])
        }
    }?;
    if splits > 1 {
        let f = gpu.function(kernels::SPLITK_REDUCE)?;
        let s = splits as u32;
        let cfg = crate::cuda::grid_1d(p.m * p.n, 256);
        let mut args = [arg(&ws), arg(&s), arg(params)];
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
/// take it on these buffers: the direct rung takes none, the `wgmma` rows only a weight
/// gradient's, and a step needs the master weights
/// and velocity and takes the plain product as its gradient.
fn sgd_of(v: Version, p: &Problem, ptrs: Ptrs) -> Result<gpu::gemm::Sgd> {
    let Some(SgdStep { lr, momentum }) = p.sgd else {
        return Ok(gpu::gemm::Sgd::NONE);
    };
    ensure!(
        v.takes_sgd_step(p.layout),
        "{} takes no SGD step in the {:?} layout",
        v.label(),
        p.layout
    );
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
    (f, cfg): (&CudaFunction, LaunchConfig),
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
/// operands alone: the direct rung takes no SGD step (the `wgmma` rows only a weight gradient's),
/// and the `wgmma` rungs read the operands
/// through the copy engine, which needs rows that start 16-byte aligned.
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

#[cfg(test)]
mod tests {
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
}
