//! How a GEMM runs, besides its dimensions: what the host's choice of a row depends on.
use gpu::gemm::{SGD_DEEP, TileConfig};

/// The depth from which a stepping product may take any `mma.sync` row: there the mainloop,
/// not the step's 18 bytes an element, sets the pace, and the larger tiles of the shallow
/// epilogue win. On 784-4096-10's first-layer gradient they make an epoch 6% faster at batch
/// 2048 (K = 2048) and 5% slower at batch 512 (`docs/gemm.md`).
const SHALLOW_STEP_MIN_K: usize = 1024;

/// How a GEMM runs, besides its dimensions, where that changes the configuration the host
/// picks for it (`choose_config`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Another kernel runs at the same time, on another stream.
    pub beside: bool,
    /// The epilogue takes an SGD step ([`Problem::sgd`](super::Problem::sgd)): a weight
    /// gradient's, whose layout ([`WGMMA_STEP_LAYOUT`](gpu::gemm::WGMMA_STEP_LAYOUT)) is the one
    /// the `wgmma` rows step in.
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

    /// Whether row `c` may run a product of this usage and depth `k`, for the general choice
    /// and a GPU's preference alike: a `wgmma` row needs operands the copy engine reads and a
    /// K of at least its slice (its step keeps [`SGD_DEEP`] quads in flight at any tile); an
    /// `mma.sync` row that steps keeps [`SGD_DEEP`] quads of the step in flight, unless K is
    /// at least `SHALLOW_STEP_MIN_K` (`docs/gemm.md`).
    pub fn admits(&self, c: &TileConfig, k: usize) -> bool {
        if c.is_wgmma() {
            self.copy_engine && c.block.2 <= k
        } else {
            !self.steps || c.sgd_quads_in_flight() == SGD_DEEP || k >= SHALLOW_STEP_MIN_K
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu::gemm::TILE_CONFIGS;

    #[test]
    fn a_stepping_product_takes_shallow_rows_only_when_deep() {
        let steps = Usage {
            steps: true,
            ..Usage::default()
        };
        let shallow = TILE_CONFIGS
            .iter()
            .find(|c| !c.is_wgmma() && c.sgd_quads_in_flight() != SGD_DEEP)
            .unwrap();
        let deep = TILE_CONFIGS
            .iter()
            .find(|c| !c.is_wgmma() && c.sgd_quads_in_flight() == SGD_DEEP)
            .unwrap();
        assert!(!steps.admits(shallow, 512));
        assert!(steps.admits(shallow, SHALLOW_STEP_MIN_K));
        assert!(steps.admits(deep, 128));
        assert!(Usage::default().admits(shallow, 128));
        // A `wgmma` row steps where the copy engine reads its operands.
        let wgmma = TILE_CONFIGS.iter().find(|c| c.is_wgmma()).unwrap();
        assert!(!steps.admits(wgmma, 4096));
        let aligned = Usage {
            steps: true,
            ..Usage::aligned(784, 784)
        };
        assert!(aligned.admits(wgmma, 128));
        assert!(!aligned.admits(wgmma, 32));
    }
}
