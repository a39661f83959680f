//! How a GEMM runs, besides its dimensions: what the host's choice of a row depends on.

/// How a GEMM runs, besides its dimensions, where that changes the configuration the host
/// picks for it (`choose_config`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Another kernel runs at the same time, on another stream.
    pub beside: bool,
    /// The epilogue takes an SGD step ([`Problem::sgd`](super::Problem::sgd)).
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
