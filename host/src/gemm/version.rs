//! The rungs of the GEMM ladder: which of them a GPU's PTX holds and its shared memory takes,
//! their labels and their kernels' names.
use super::problem::Problem;
use crate::cuda::Gpu;
use crate::ptx::Target;
use anyhow::{Result, bail, ensure};
use gpu::gemm::{
    Accum, DIRECT_MIN_SM, Layout, RB_K, RB_TILE, SIMT_VERSIONS, SMEM_TILE, TILE_CONFIGS,
    TileConfig, WGMMA_STEP_LAYOUT, simt_kernel, tensor_kernel, wgmma_step_kernel,
};

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

    /// The version's kernel for `layout`, named as the gpu crate names it from its version list
    /// and tile table.
    pub fn kernel(&self, layout: Layout) -> String {
        match *self {
            Version::Simt(s) => simt_kernel(s, layout),
            Version::Direct => simt_kernel(&self.label(), layout),
            Version::Tensor(c, acc) => tensor_kernel(c, layout, acc),
        }
    }

    /// The kernel for a product in `layout`, which takes its SGD step where `steps`: the
    /// `wgmma` rows' step is a kernel of its own, for [`WGMMA_STEP_LAYOUT`] alone
    /// ([`Version::takes_sgd_step`]), the others' a branch of the one kernel.
    pub fn kernel_for(&self, layout: Layout, steps: bool) -> String {
        match *self {
            Version::Tensor(c, acc) if steps && c.is_wgmma() && self.takes_sgd_step(layout) => {
                wgmma_step_kernel(c, acc)
            }
            _ => self.kernel(layout),
        }
    }

    /// Every kernel of the version: one a layout, and the `wgmma` rows' SGD step.
    pub fn kernels(&self) -> Vec<String> {
        let mut names: Vec<_> = Layout::ALL.iter().map(|&l| self.kernel(l)).collect();
        if let Version::Tensor(c, acc) = *self
            && c.is_wgmma()
        {
            names.push(wgmma_step_kernel(c, acc));
        }
        names
    }

    /// The lowest compute capability (×10) whose PTX holds the version.
    pub fn min_sm(&self) -> u32 {
        match self {
            Version::Simt(_) => 0,
            Version::Direct => DIRECT_MIN_SM,
            Version::Tensor(c, _) => c.min_sm(),
        }
    }

    /// Whether the version's epilogue can take an SGD step in `layout`: the direct rung takes
    /// none, the `wgmma` rows that of a weight gradient ([`WGMMA_STEP_LAYOUT`]).
    pub fn takes_sgd_step(&self, layout: Layout) -> bool {
        match self {
            Version::Direct => false,
            Version::Tensor(c, _) if c.is_wgmma() => layout == WGMMA_STEP_LAYOUT,
            _ => true,
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

    /// [`Version::smem_bytes`] for a problem: an `mma.sync` kernel's SGD epilogue may stage more
    /// (a `wgmma` step kernel stages in its ring).
    pub fn smem_bytes_for(&self, p: &Problem) -> usize {
        match self {
            Version::Tensor(c, _) if p.sgd.is_some() && !c.is_wgmma() => c.smem_bytes_stepping(),
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
    pub(super) fn in_ptx(&self, arch: Target) -> bool {
        match self {
            Version::Tensor(c, _) => c.in_ptx(arch),
            _ => self.min_sm() <= arch.sm,
        }
    }

    /// Every version the PTX of architecture `arch` holds, SIMT first, then the direct rung.
    pub fn all_in(arch: Target) -> Vec<Version> {
        let mut v: Vec<Version> = SIMT_VERSIONS.iter().map(|s| Version::Simt(s)).collect();
        if Version::Direct.in_ptx(arch) {
            v.push(Version::Direct);
        }
        for c in TILE_CONFIGS.iter().filter(|c| c.in_ptx(arch)) {
            v.extend(c.accums.iter().map(|&a| Version::Tensor(c, a)));
        }
        v
    }

    /// Parses a label as printed by [`Version::label`] (`naive`, `tc80_..._f16`), or a bare
    /// config name with the accumulator given separately; a row without kernels for that
    /// accumulator is an error.
    pub fn parse(s: &str, acc: Accum) -> Result<Version> {
        let v = Self::parse_name(s, acc)?;
        if let Version::Tensor(c, a) = v
            && !c.has(a)
        {
            bail!(
                "GEMM config {} has no {} accumulators (a thread would hold {} registers of \
                 them); it has {}",
                c.name,
                a.suffix(),
                c.accumulator_registers(a),
                c.accums
                    .iter()
                    .map(|a| a.suffix())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(v)
    }

    fn parse_name(s: &str, acc: Accum) -> Result<Version> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::SgdStep;

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
        let fp16_only = "wg90_128x256x64_128x256_s3_pp";
        for (label, acc) in [
            (format!("{fp16_only}_f32"), Accum::F16),
            (fp16_only.into(), Accum::F32),
        ] {
            let e = Version::parse(&label, acc).unwrap_err().to_string();
            assert!(
                e.contains("has no f32 accumulators") && e.contains("256 registers"),
                "{e}"
            );
        }
        assert!(Version::parse(fp16_only, Accum::F16).is_ok());
    }

    #[test]
    fn gemm_names_cover_every_version_layout_and_accumulator() {
        let c = &TILE_CONFIGS[0];
        let v = Version::Tensor(c, Accum::F32);
        assert_eq!(v.kernel(Layout::TN), format!("gemm_{}_tn_f32", c.name));
        assert_eq!(Version::Simt("smem").kernel(Layout::NT), "gemm_smem_nt");
    }
}
