//! The name of every kernel the host launches, as the gpu crate exports it, in one place: the
//! GEMM ladder's are built from its versions (`gemm::Version::kernel`), the persistent kernel's
//! from its variants (`gpu::persistent::VARIANTS`). A CPU test finds each in every embedded PTX
//! that should hold it, so a misspelt name fails the test suite rather than a run.
use gpu::gemm::Accum;

/// Declares each name as a constant and lists it in [`NAMED`] with the oldest architecture
/// (compute capability ×10) whose PTX exports it.
macro_rules! kernels {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, sm $sm:literal;)*) => {
        $($(#[$doc])* pub const $konst: &str = $name;)*
        /// Every named kernel with the oldest architecture that has it.
        pub const NAMED: &[(&str, u32)] = &[$(($name, $sm)),*];
    };
}

kernels! {
    /// Smoke kernels, launched by the GPU tests.
    VEC_ADD = "vec_add", sm 75;
    BLOCK_SUM = "block_sum", sm 75;
    MMA_TILE = "mma_tile", sm 75;
    /// The MLP's kernels besides its GEMMs.
    NORMALIZE_U8 = "normalize_u8", sm 75;
    GATHER_BATCH = "gather_batch", sm 75;
    SOFTMAX_CE = "softmax_ce", sm 75;
    BIAS_GRAD = "bias_grad", sm 75;
    SGD_UPDATE = "sgd_update", sm 75;
    F32_TO_F16 = "f32_to_f16", sm 75;
    /// Beside the GEMMs: the reduction of split-K slices, and the epilogue that follows cuBLAS.
    SPLITK_REDUCE = "splitk_reduce", sm 75;
    BIAS_ACT_F16 = "bias_act_f16", sm 75;
    /// The shuffle of the persistent kernel's epochs (its variants' names come from
    /// `gpu::persistent::VARIANTS`).
    PERSISTENT_SHUFFLE = "mlp_persistent_shuffle", sm 75;
    /// The roof of the GEMM ladder, per instruction K and accumulator.
    ROOF_K8_F16 = "mma_roof_k8_f16", sm 75;
    ROOF_K8_F32 = "mma_roof_k8_f32", sm 75;
    ROOF_K16_F16 = "mma_roof_k16_f16", sm 80;
    ROOF_K16_F32 = "mma_roof_k16_f32", sm 80;
    /// Linear regression.
    REGRESSION_GENERATE = "regression_generate", sm 75;
    REGRESSION_FORWARD = "regression_forward", sm 75;
    REGRESSION_RESIDUAL = "regression_residual", sm 75;
    REGRESSION_GRAD_PARTIALS = "regression_grad_partials", sm 75;
    REGRESSION_REDUCE = "regression_reduce", sm 75;
    REGRESSION_UPDATE = "regression_update", sm 75;
    REGRESSION_FUSED = "regression_fused", sm 75;
    REGRESSION_REDUCE_UPDATE = "regression_reduce_update", sm 75;
}

/// Whether the PTX of architecture `sm` has kernel `name` of [`NAMED`].
pub fn in_ptx_of(name: &str, sm: u32) -> bool {
    NAMED.iter().any(|&(n, oldest)| n == name && oldest <= sm)
}

/// Every roof kernel as (name, K of its `mma.sync` shape, accumulator), in the order `host gemm`
/// prints them.
pub const ROOFS: [(&str, usize, Accum); 4] = [
    (ROOF_K8_F16, 8, Accum::F16),
    (ROOF_K8_F32, 8, Accum::F32),
    (ROOF_K16_F16, 16, Accum::F16),
    (ROOF_K16_F32, 16, Accum::F32),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::Version;
    use crate::ptx::{EMBEDDED, EmbeddedPtx};
    use gpu::persistent::VARIANTS;

    /// The persistent kernel's variants that `p` exports, each with the names of its kernels.
    fn persistent_kernels(p: &EmbeddedPtx) -> Vec<String> {
        let accums = [Accum::F16, Accum::F32];
        VARIANTS
            .iter()
            .filter(|v| v.exists_in(p.target()))
            .flat_map(|v| accums.iter().filter_map(|&a| v.kernel(a)))
            .collect()
    }

    /// Every name the host can launch on a device running `p`.
    fn launchable(p: &EmbeddedPtx) -> Vec<String> {
        let mut names: Vec<String> = NAMED
            .iter()
            .filter(|(_, sm)| *sm <= p.sm)
            .map(|(n, _)| n.to_string())
            .collect();
        names.extend(persistent_kernels(p));
        for v in Version::all_in(p.target()) {
            names.extend(v.kernels());
        }
        names
    }

    #[test]
    fn every_kernel_the_host_names_is_in_each_embedded_ptx_that_runs_it() {
        // And no persistent kernel besides the table's: a row whose `cfg` exports more, or
        // under another name, fails here too.
        for p in EMBEDDED {
            let exported: Vec<_> = crate::ptx::kernels(p.source)
                .into_iter()
                .filter(|n| n.starts_with("mlp_persistent_") && *n != PERSISTENT_SHUFFLE)
                .map(String::from)
                .collect();
            let mut named = persistent_kernels(p);
            let mut exported = exported;
            named.sort();
            exported.sort();
            assert_eq!(exported, named, "{} PTX", p.arch);
        }
        assert!(!EMBEDDED.is_empty());
        for p in EMBEDDED {
            let missing: Vec<_> = launchable(p)
                .into_iter()
                .filter(|n| !p.source.contains(&format!(".entry {n}(")))
                .collect();
            assert!(missing.is_empty(), "{} PTX lacks {missing:?}", p.arch);
        }
    }

    /// Kernels taking one parameter block (of `gpu::params`, or the persistent kernel's
    /// `Params`) declare exactly that block in every PTX that has them: host and kernel agree
    /// on its size and alignment.
    #[test]
    fn kernels_taking_a_parameter_block_declare_its_size_and_alignment() {
        use crate::ptx::{one_block, parameters};
        use gpu::params::{
            BiasGrad, GatherBatch, PersistentShuffle, RegressionFused, RegressionGenerate,
            RegressionReduceUpdate, RegressionUpdate, SgdUpdate, SoftmaxCe,
        };
        use gpu::persistent::Params;
        fn block<T>(name: &'static str) -> (&'static str, String) {
            (name, one_block::<T>(name))
        }
        for p in EMBEDDED {
            for name in persistent_kernels(p) {
                let want = one_block::<Params>(&name);
                assert_eq!(
                    parameters(p.source, &name),
                    Some(want.as_str()),
                    "{}",
                    p.arch
                );
            }
        }
        let blocks = [
            block::<GatherBatch>(GATHER_BATCH),
            block::<SoftmaxCe>(SOFTMAX_CE),
            block::<SgdUpdate>(SGD_UPDATE),
            block::<BiasGrad>(BIAS_GRAD),
            block::<RegressionGenerate>(REGRESSION_GENERATE),
            block::<RegressionFused>(REGRESSION_FUSED),
            block::<RegressionUpdate>(REGRESSION_UPDATE),
            block::<RegressionReduceUpdate>(REGRESSION_REDUCE_UPDATE),
            block::<PersistentShuffle>(PERSISTENT_SHUFFLE),
        ];
        for p in EMBEDDED {
            for (name, block) in blocks.iter().filter(|(n, _)| in_ptx_of(n, p.sm)) {
                assert_eq!(
                    parameters(p.source, name),
                    Some(block.as_str()),
                    "{}",
                    p.arch
                );
            }
        }
    }

    /// The `wgmma` kernels take the GEMM's `Args`, then their tensor maps by value, which the
    /// copy engine reads in place: declared 64-byte aligned (as `build.rs` raises them).
    #[test]
    fn warpgroup_kernels_declare_their_tensor_maps_64_byte_aligned() {
        use crate::ptx::{one_block, parameters};
        use gpu::gemm::descriptor::TensorMaps;
        let specific: Vec<_> = EMBEDDED.iter().filter(|p| p.target().specific).collect();
        if specific.is_empty() {
            eprintln!("skipped: this build embeds no sm_90a PTX");
            return;
        }
        for p in specific {
            let wgmma = Version::all_in(p.target())
                .into_iter()
                .filter(|v| matches!(v, Version::Tensor(c, _) if c.is_wgmma()));
            for v in wgmma {
                for name in v.kernels() {
                    let args = one_block::<gpu::gemm::Args>(&name);
                    let maps = format!(
                        ".param .align 64 .b8 {name}_param_1[{}]",
                        size_of::<TensorMaps>()
                    );
                    let want = format!("{args},\n\t{maps}");
                    assert_eq!(parameters(p.source, &name), Some(want.as_str()));
                }
            }
        }
    }

    #[test]
    fn in_ptx_of_follows_the_oldest_architecture() {
        assert!(in_ptx_of(ROOF_K8_F16, 75) && !in_ptx_of(ROOF_K16_F16, 75));
    }
}
