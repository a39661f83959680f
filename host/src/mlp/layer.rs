//! The model's GEMMs, described once: the three products of each layer of a training step, with
//! the operands' leading dimensions the model's buffers give them. The model runs them; the GEMM
//! bench times the same problems.
use crate::gemm::Problem;
use gpu::gemm::Layout;
use gpu::layout::CHUNK;

/// One of the three GEMMs of a layer `in → out`; its value indexes the layer's plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Product {
    /// The layer's outputs `input · Wᵀ` (M = rows, N = out, K = in): bias and, on a hidden
    /// layer, ReLU in the epilogue.
    Forward = 0,
    /// The weight gradient `dW = dᵀ · input` (M = out, N = in, K = rows), or the SGD step it
    /// makes.
    WeightGradient = 1,
    /// The input gradient `d(input) = d · W` (M = rows, N = in, K = out), back through the ReLU
    /// that produced the input, in the epilogue.
    InputGradient = 2,
}

impl Product {
    /// In the order of a layer's plans.
    pub const ALL: [Product; 3] = [
        Product::Forward,
        Product::WeightGradient,
        Product::InputGradient,
    ];

    /// How the product's operands are stored ([`Layout`]): the forward reads W as `[out][in]`
    /// (NT), the weight gradient reads d and the input transposed (TN).
    pub const fn layout(self) -> Layout {
        match self {
            Product::Forward => Layout::NT,
            Product::WeightGradient => Layout::TN,
            Product::InputGradient => Layout::NN,
        }
    }

    /// The product's name at layer `l` (counted from 0), as the GEMM bench names the MLP's
    /// products: `fwd1`, `dw1`, `dx2`.
    pub fn name(self, l: usize) -> String {
        let stem = match self {
            Product::Forward => "fwd",
            Product::WeightGradient => "dw",
            Product::InputGradient => "dx",
        };
        format!("{stem}{}", l + 1)
    }
}

/// Every GEMM of a training step of `layers` layers, as (layer, product), in the order the
/// layered step queues them: the forward from the first layer, then from the last layer back,
/// each layer's input gradient (the first layer has none) and its weight gradient.
pub fn step_products(layers: usize) -> Vec<(usize, Product)> {
    let forward = (0..layers).map(|l| (l, Product::Forward));
    let backward = (0..layers).rev().flat_map(|l| {
        let input = (l > 0).then_some((l, Product::InputGradient));
        input.into_iter().chain([(l, Product::WeightGradient)])
    });
    forward.chain(backward).collect()
}

/// Layer `l`'s `product` over `rows` rows of a model of layer widths `sizes` (input first), as
/// the model runs it: its dimensions, layout and leading dimensions, and the ReLU of a hidden
/// layer's forward. A weight gradient's SGD step is the caller's to add.
pub fn problem(sizes: &[usize], l: usize, product: Product, rows: usize) -> Problem {
    let (i, o) = (sizes[l], sizes[l + 1]);
    match product {
        Product::Forward => Problem {
            lda: input_ld(sizes, l),
            ldc: stride(o),
            relu: l + 2 < sizes.len(),
            ..Problem::new(rows, o, i, product.layout())
        },
        Product::WeightGradient => Problem {
            lda: stride(o),
            ldb: input_ld(sizes, l),
            ..Problem::new(o, i, rows, product.layout())
        },
        Product::InputGradient => Problem {
            lda: stride(o),
            ldc: input_ld(sizes, l),
            ..Problem::new(rows, i, o, product.layout())
        },
    }
}

/// Leading dimension of layer `l`'s input: the samples' rows as given, or the padded rows of
/// the layer before's outputs.
pub fn input_ld(sizes: &[usize], l: usize) -> usize {
    match l {
        0 => sizes[0],
        _ => stride(sizes[l]),
    }
}

/// Leading dimension of a layer's outputs and their gradients: the width rounded up to whole
/// 16-byte chunks, so that every GEMM reading them (the 10 logits' gradient too) copies whole
/// chunks instead of single elements.
pub fn stride(width: usize) -> usize {
    width.next_multiple_of(CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_runs_the_forward_then_each_layer_back_from_the_last() {
        let names = |layers| -> Vec<String> {
            step_products(layers)
                .into_iter()
                .map(|(l, p)| p.name(l))
                .collect()
        };
        assert_eq!(names(2), ["fwd1", "fwd2", "dx2", "dw2", "dw1"]);
        assert_eq!(
            names(3),
            ["fwd1", "fwd2", "fwd3", "dx3", "dw3", "dx2", "dw2", "dw1"]
        );
    }

    /// The logits' rows are padded to whole chunks; the input's are as given; only hidden
    /// layers' forward takes the ReLU.
    #[test]
    fn problems_read_the_models_padded_rows() {
        let sizes = [30, 33, 10];
        let fwd1 = problem(&sizes, 0, Product::Forward, 19);
        assert_eq!(
            (fwd1.m, fwd1.n, fwd1.k, fwd1.lda, fwd1.ldc),
            (19, 33, 30, 30, 40)
        );
        assert!(fwd1.relu && !problem(&sizes, 1, Product::Forward, 19).relu);
        let dw1 = problem(&sizes, 0, Product::WeightGradient, 19);
        assert_eq!(
            (dw1.m, dw1.n, dw1.k, dw1.lda, dw1.ldb),
            (33, 30, 19, 40, 30)
        );
        let dx2 = problem(&sizes, 1, Product::InputGradient, 19);
        assert_eq!(
            (dx2.m, dx2.n, dx2.k, dx2.lda, dx2.ldc),
            (19, 33, 10, 16, 40)
        );
    }
}
