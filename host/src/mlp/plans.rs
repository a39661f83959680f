//! How every GEMM of the model runs: the kernel version and K slices of each layer's products,
//! for a training step's rows and for an evaluation's, planned once, and where a weight
//! gradient's SGD step runs.
use super::layer::{self, Product};
use crate::cuda::Gpu;
use crate::gemm::{self, Problem, Usage, Version};
use anyhow::Result;
use gpu::gemm::Accum;

/// Whether layer `l`'s weight gradient runs on the second stream, beside the rest of the
/// backward pass: every layer's but the first's, which has nothing after it to run beside.
pub(super) fn weight_gradient_beside(l: usize) -> bool {
    l > 0
}

/// How one GEMM of the model runs: the kernel version and its K slices.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub version: Version,
    pub split_k: usize,
    /// The product takes the training step's SGD step in its epilogue: a weight gradient's,
    /// where its version takes one and the step does not run apart ([`gradient_plan`]).
    pub steps: bool,
}

/// How every GEMM of the model runs: per layer and [`Product`], for a training step's rows and
/// for an evaluation's.
pub(super) type Plans = [Vec<[Plan; 3]>; 2];

/// The shallowest weight gradient whose SGD step runs apart, in an `sgd_update` after a
/// `wgmma` product chosen as for a product without a step, where the PTX has `wgmma`. From
/// here the product's mainloop, at full occupancy, outweighs the gradient's round trip through
/// memory; shallower, the step's traffic dominates and fusing it wins (`docs/layered.md`,
/// `host mnist --layered` on an H200).
const SEPARATE_STEP_MIN_K: usize = 1024;

/// Whether a weight gradient of depth `k` on `version` takes its SGD step apart, in an
/// `sgd_update` after the product ([`SEPARATE_STEP_MIN_K`]).
fn steps_apart(version: Version, k: usize) -> bool {
    matches!(version, Version::Tensor(c, _) if c.is_wgmma()) && k >= SEPARATE_STEP_MIN_K
}

/// The plan of a weight gradient of usage `gradient` (which steps on a training step's rows):
/// from [`SEPARATE_STEP_MIN_K`] rows, the plan of the product without its step where that is a
/// `wgmma` one ([`steps_apart`]).
fn gradient_plan(
    dw: &Problem,
    gradient: Usage,
    plan: impl Fn(&Problem, Usage) -> Result<Plan>,
) -> Result<Plan> {
    if gradient.steps && dw.k >= SEPARATE_STEP_MIN_K {
        let p = plan(
            dw,
            Usage {
                steps: false,
                ..gradient
            },
        )?;
        if steps_apart(p.version, dw.k) {
            return Ok(p);
        }
    }
    plan(dw, gradient)
}

/// Every layer's GEMM plans (indexed by [`Product`]) for a training step's rows and for an
/// evaluation's, `rows`, and the split-K workspace they need on the GPU's stream and beside it.
pub(super) fn plan_gemms(
    gpu: &Gpu,
    sizes: &[usize],
    rows: [usize; 2],
    acc: Accum,
    config: Option<Version>,
) -> Result<(Plans, [usize; 2])> {
    let plan = |p: &Problem, usage: Usage| -> Result<Plan> {
        let (version, split_k) = match config {
            Some(version) => (version, 1),
            None => gemm::choose_version(gpu, (p.m, p.n, p.k), usage, acc)?,
        };
        Ok(Plan {
            version,
            split_k,
            steps: usage.steps && version.takes_sgd_step(p.layout),
        })
    };
    let mut plans: Plans = [Vec::new(), Vec::new()];
    // Workspace lengths on the GPU's stream and beside it (weight gradients of training
    // steps).
    let mut ws_len = [0, 0];
    for (slot, r) in rows.into_iter().enumerate() {
        for l in 0..sizes.len() - 1 {
            let problems = Product::ALL.map(|p| layer::problem(sizes, l, p, r));
            let beside = slot == 0 && weight_gradient_beside(l);
            // The forward reads the layer's input and W, the input gradient the output
            // gradient's padded rows and W, the weight gradient both gradient's and input's.
            let [fwd, dw, dx] = problems;
            // A training step's weight gradients take their SGD step in the epilogue, or
            // from `SEPARATE_STEP_MIN_K` rows maybe right after it (`gradient_plan`; on one
            // GPU: replicas of a data-parallel run step after the all-reduce, and keep the
            // plan).
            let gradient = Usage {
                beside,
                steps: slot == 0,
                ..Usage::aligned(dw.lda, dw.ldb)
            };
            let p = [
                plan(&fwd, Usage::aligned(fwd.lda, fwd.ldb))?,
                gradient_plan(&dw, gradient, plan)?,
                plan(&dx, Usage::aligned(dx.lda, dx.ldb))?,
            ];
            for (product, (q, prob)) in Product::ALL.into_iter().zip(p.iter().zip(problems)) {
                let prob = Problem {
                    split_k: q.split_k,
                    ..prob
                };
                let on = usize::from(product == Product::WeightGradient && beside);
                ws_len[on] = ws_len[on].max(gemm::workspace_len(q.version, &prob));
            }
            plans[slot].push(p);
        }
    }
    Ok((plans, ws_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu::gemm::{Layout, TILE_CONFIGS};

    fn version(wgmma: bool) -> Version {
        let c = TILE_CONFIGS.iter().find(|c| c.is_wgmma() == wgmma).unwrap();
        Version::Tensor(c, Accum::F16)
    }

    #[test]
    fn a_wgmma_weight_gradient_steps_apart_from_the_separate_depth() {
        assert!(steps_apart(version(true), SEPARATE_STEP_MIN_K));
        assert!(!steps_apart(version(true), SEPARATE_STEP_MIN_K / 2));
        assert!(!steps_apart(version(false), 4 * SEPARATE_STEP_MIN_K));
    }

    /// From the separate depth a stepping weight gradient takes the plan without its step
    /// where that is a `wgmma` one, else the stepping plan; shallower, or without a step, the
    /// plan of its own usage.
    #[test]
    fn a_deep_weight_gradient_plans_its_product_without_the_step() {
        let plan = |wgmma_apart: bool| {
            move |_: &Problem, u: Usage| -> Result<Plan> {
                Ok(Plan {
                    version: version(!u.steps && wgmma_apart),
                    split_k: 1,
                    steps: u.steps,
                })
            }
        };
        let steps = Usage {
            steps: true,
            ..Usage::default()
        };
        let dw = |k| Problem::new(4096, 784, k, Layout::TN);
        let chosen = |k, usage: Usage, wgmma_apart| {
            let p = gradient_plan(&dw(k), usage, plan(wgmma_apart)).unwrap();
            let wgmma = matches!(p.version, Version::Tensor(c, _) if c.is_wgmma());
            // The step is in the epilogue exactly where it does not run apart.
            assert_eq!(p.steps, usage.steps && !wgmma, "{k}");
            wgmma
        };
        assert!(chosen(SEPARATE_STEP_MIN_K, steps, true));
        assert!(!chosen(SEPARATE_STEP_MIN_K / 2, steps, true));
        assert!(!chosen(SEPARATE_STEP_MIN_K, steps, false));
        assert!(chosen(SEPARATE_STEP_MIN_K, Usage::default(), true));
    }
}
