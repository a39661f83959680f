//! The configuration, K split and version the host runs a product with when none is forced.
use super::prefer::preferred;
use super::usage::Usage;
use super::version::Version;
use crate::cuda::Gpu;
use anyhow::Result;
use cudarc::driver::sys::CUfunction_attribute;
use gpu::gemm::{Accum, Layout, TILE_CONFIGS, TileConfig, WGMMA_STEP_LAYOUT};

/// The deepest product without an SGD step that runs in one K slice: eight K steps of 64.
/// A split saves fewer K steps than its reduction, a kernel of about 2.5 µs in the chain,
/// costs: unsplit, 784-256-256-256-10 and 784-512-512-512-512-10 at batch 128 train 3–4%
/// faster an epoch (`docs/gemm.md`, "Split-K").
const UNSPLIT_MAX_K: usize = 512;

/// How many K slices to give an M×N×K product on row `c`: `split_for` on this GPU's SMs.
pub fn choose_split(gpu: &Gpu, c: &TileConfig, mnk: (usize, usize, usize), usage: Usage) -> usize {
    split_for(gpu.sm_count() as usize, c, mnk, usage)
}

/// How many K slices to give an M×N×K product on row `c` with `sms` SMs: one on a `wgmma`
/// row (which does not split K), where its tiles give more than half the SMs a block, or where
/// it takes no SGD step and K is at most [`UNSPLIT_MAX_K`]; else enough for about two blocks
/// per SM, each slice at least 2 K steps deep, at most 32. A stepping product keeps its split at any depth: the reduction then takes
/// the step, spreading its 18 bytes an element over the whole GPU.
fn split_for(sms: usize, c: &TileConfig, (m, n, k): (usize, usize, usize), usage: Usage) -> usize {
    let tiles = c.tiles(m, n);
    if c.is_wgmma() || 2 * tiles > sms || (!usage.steps && k <= UNSPLIT_MAX_K) {
        1
    } else {
        (2 * sms / tiles).min(k / (2 * c.block.2)).clamp(1, 32)
    }
}

/// The smallest tile a GEMM beside another kernel takes where smaller ones would give more
/// than half the SMs a block ([`choose_config`]).
const BESIDE_MIN_TILE: (usize, usize) = (64, 64);

/// The tensor-core configuration the host picks for an M×N×K product on this GPU: the GPU's
/// preference for the product's size where it has one ([`PREFERENCES`](super::PREFERENCES));
/// else among those the PTX holds (sm_80+ ones where available), the largest tile that still
/// gives every SM a block, and among equal ones a K slice that K fills, else the shallowest;
/// for small outputs, the one with the most blocks, and among equal ones the deepest K slice
/// that K fills (fewer barriers; a short K pays for zero-filled depth instead).
///
/// `usage.beside`: another kernel runs at the same time, on another stream. Then a tile under
/// 64×64 takes part only where its tiles number at most half the SMs: more of them spread over
/// nearly every SM and keep the other kernel's large blocks out, which measured slower although
/// the GEMM alone ran faster; fewer leave the other kernel SMs of its own, and finish sooner
/// (`docs/gemm.md`).
///
/// `usage.steps`: the epilogue takes an SGD step. Then only tiles whose threads keep
/// [`SGD_DEEP`](gpu::gemm::SGD_DEEP) quads of master weights and velocity in flight take part: at a short K those 16
/// bytes an element are most of the GEMM's time, and the shallow epilogue of the largest warp
/// tiles leaves DRAM waiting (`docs/gemm.md`).
///
/// Only rows with kernels accumulating in `acc` take part.
///
/// `usage.copy_engine`: on sm_90a PTX a `wgmma` configuration where one fits the product
/// (`choose_wgmma`; `acc` because the accumulators' registers decide how many blocks an SM
/// holds), before any `mma.sync` one.
pub fn choose_config(
    gpu: &Gpu,
    (m, n, k): (usize, usize, usize),
    usage: Usage,
    acc: Accum,
) -> Result<&'static TileConfig> {
    let smem = gpu.max_smem_optin();
    let sms = gpu.sm_count() as usize;
    if let Some(c) = preferred((gpu.sm, gpu.ptx.target(), smem), (m, n, k), usage, acc) {
        return Ok(c);
    }
    if let Some(c) = choose_wgmma(gpu, (m, n, k), usage, acc)? {
        return Ok(c);
    }
    let mma_sync = || {
        TILE_CONFIGS
            .iter()
            .filter(|c| c.in_ptx(gpu.ptx.target()) && !c.is_wgmma() && c.has(acc))
    };
    let best_sm = mma_sync().map(|c| c.min_sm()).max();
    let area = |c: &TileConfig| c.block.0 * c.block.1;
    let tiles = |c: &TileConfig| c.tiles(m, n);
    let beside_ok =
        |c: &TileConfig| area(c) >= BESIDE_MIN_TILE.0 * BESIDE_MIN_TILE.1 || 2 * tiles(c) <= sms;
    let usable: Vec<_> = mma_sync()
        .filter(|c| Some(c.min_sm()) == best_sm && c.smem_bytes() <= smem)
        .filter(|c| !usage.beside || beside_ok(c))
        .filter(|c| usage.admits(c, k))
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
/// fills a K step of 64: among the tiles whose blocks leave at most an eighth of the SMs
/// without one, those of which two blocks fit an SM at once ([`two_an_sm`]), then the largest.
/// A product that steps is weighed by its step kernel's registers, which leave two blocks an
/// SM to the 64×64 tile alone: alone on the GPU the larger tiles step `mlp4096b512.dw1` faster
/// (18 µs on 128×256 against 23), but in the layered step, where other kernels run beside it,
/// their one wave is held up (784-4096-10 at batch 512: 7.94 ms an epoch against 7.57–7.59).
/// A warpgroup block computes its tile several times as fast as `mma.sync` blocks on the same
/// SM, so its tiles need not give every SM a block as `mma.sync` ones do (measured in
/// `docs/gemm.md`, "64-wide warpgroup tiles"). Two blocks an SM overlap one's fill and
/// epilogue with the other's mainloop, which at a short K is much of a tile's time
/// (`square2048`: 25.4 µs on 128×128 tiles, 28.2 on the 256×128 ones of one block an SM).
/// Among equal tiles, the last row of the table.
fn choose_wgmma(
    gpu: &Gpu,
    (m, n, k): (usize, usize, usize),
    usage: Usage,
    acc: Accum,
) -> Result<Option<&'static TileConfig>> {
    let sms = gpu.sm_count() as usize;
    let target = gpu.ptx.target();
    let mut best = None;
    for c in TILE_CONFIGS
        .iter()
        .filter(|c| c.is_wgmma() && !c.is_ping_pong() && c.in_ptx(target) && c.has(acc))
        .filter(|c| c.smem_bytes() <= gpu.max_smem_optin() && usage.admits(c, k))
        .filter(|c| 8 * c.tiles(m, n) >= 7 * sms)
    {
        let key = (two_an_sm(gpu, c, acc, usage.steps)?, c.block.0 * c.block.1);
        if best.is_none_or(|(b, _)| key >= b) {
            best = Some((key, c));
        }
    }
    Ok(best.map(|(_, c)| c))
}

/// Whether two blocks of row `c`'s kernel accumulating in `acc` are resident on an SM at once,
/// as the driver's occupancy calculator says for its `nt` kernel (the layouts differ only in
/// their copy descriptors), or where the product `steps` its SGD step kernel: the registers of
/// fp32 accumulators, or of the step's loads, can allow one where the shared memory allows two.
fn two_an_sm(gpu: &Gpu, c: &'static TileConfig, acc: Accum, steps: bool) -> Result<bool> {
    let layout = if steps { WGMMA_STEP_LAYOUT } else { Layout::NT };
    let f = gpu.function(&Version::Tensor(c, acc).kernel_for(layout, steps))?;
    let smem = c.smem_bytes();
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?;
    Ok(f.occupancy_max_active_blocks_per_multiprocessor(c.threads() as u32, smem, None)? >= 2)
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
    let c = choose_config(gpu, (m, n, k), usage, acc)?;
    Ok((
        Version::Tensor(c, acc),
        choose_split(gpu, c, (m, n, k), usage),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu::gemm::rows;

    const H200_SMS: usize = 132;

    #[test]
    fn a_split_gives_small_outputs_two_blocks_an_sm() {
        let c = &rows::tc80_32x32x64_16x16_s3;
        let plain = Usage::default();
        // The logits, 128×10 over K = 4096: 4 tiles, 32 slices at most.
        assert_eq!(split_for(H200_SMS, c, (128, 10, 4096), plain), 32);
        // The first layer of 784-256-…: 32 tiles, for which two blocks an SM would be 8
        // slices; slices of at least two K steps of 64 leave 6 in K = 784.
        assert_eq!(split_for(H200_SMS, c, (128, 256, 784), plain), 6);
        // Enough tiles for every SM: no split.
        assert_eq!(split_for(H200_SMS, c, (2048, 4096, 784), plain), 1);
        // A `wgmma` row, which a preference may give few tiles: never split.
        let wg = &rows::wg90_128x128x64_128x128_s5_pp;
        assert_eq!(split_for(H200_SMS, wg, (128, 256, 4096), plain), 1);
    }

    #[test]
    fn shallow_products_run_unsplit_unless_they_step() {
        let c = &rows::tc80_32x32x64_16x16_s3;
        let plain = Usage::default();
        let steps = Usage {
            steps: true,
            ..plain
        };
        for k in [128, 256, UNSPLIT_MAX_K] {
            assert_eq!(split_for(H200_SMS, c, (128, 512, k), plain), 1, "K = {k}");
        }
        assert_eq!(
            split_for(H200_SMS, c, (128, 512, UNSPLIT_MAX_K + 64), plain),
            4
        );
        // dW2 of 784-4096-10 at batch 512: 10×4096 over K = 512, stepping, keeps its split.
        let c = &rows::tc80_64x64x64_32x32_s3;
        assert_eq!(split_for(H200_SMS, c, (10, 4096, 512), steps), 4);
    }
}
