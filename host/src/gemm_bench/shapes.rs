//! The table's problems: squares and the MLP's products, each with its epilogue.
use crate::gemm::{Problem, SgdStep};
use crate::mlp::model::stride;
use anyhow::{Result, anyhow, bail};
use gpu::gemm::Layout;

/// One problem of the table: its name, the product with its operands' leading dimensions, and
/// what follows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub name: String,
    pub problem: Problem,
    pub epilogue: Epilogue,
}

/// What a shape's kernels do after the product. Ours fuse it into the GEMM; cuBLAS's rows run
/// the separate kernel the project has for it, where it has one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Epilogue {
    None,
    /// Bias and ReLU (a forward layer); cuBLAS is followed by `bias_act`.
    BiasRelu,
    /// The ReLU's backward: zero where the layer's output was (an input gradient). cuBLAS's
    /// rows have no separate kernel for it and leave it out, doing less than ours.
    Gate,
    /// An SGD step with momentum taken from the product (a weight gradient): C is the weights'
    /// fp16 copy. cuBLAS writes the gradient, which `sgd_update` then steps with.
    Step,
}

/// The step the `Step` shapes take.
pub(super) const STEP: SgdStep = SgdStep {
    lr: 1e-4,
    momentum: 0.9,
};

impl Shape {
    fn new(name: String, problem: Problem, epilogue: Epilogue) -> Shape {
        Shape {
            name,
            problem,
            epilogue,
        }
    }

    /// A default shape by name, or `MxNxK` (NN layout, packed, no epilogue).
    pub fn parse(s: &str) -> Result<Shape> {
        if let Some(shape) = default_shapes().into_iter().find(|d| d.name == s) {
            return Ok(shape);
        }
        let d: Vec<usize> = s
            .split('x')
            .map(|x| x.trim().parse())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                anyhow!(
                    "size {s:?} is not MxNxK nor a default shape's name (see `host gemm --help`)"
                )
            })?;
        match d[..] {
            [m, n, k] if m > 0 && n > 0 && k > 0 => Ok(Shape::new(
                s.to_string(),
                Problem::new(m, n, k, Layout::NN),
                Epilogue::None,
            )),
            _ => bail!(
                "size {s:?} is not MxNxK with positive dimensions, nor a default shape's name"
            ),
        }
    }
}

/// Default sizes: squares 256…8192 and the GEMMs of a training step of the MNIST MLP (batch
/// 128, 784-H-10 at H = 128, 4096 and 8192) as the layered step runs them: activations and
/// their gradients in rows padded to whole 16-byte chunks (the 10 logits' to 16), each
/// product's epilogue fused.
pub fn default_shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for s in [256, 512, 1024, 2048, 4096, 8192] {
        let p = Problem::new(s, s, s, Layout::NN);
        v.push(Shape::new(format!("square{s}"), p, Epilogue::None));
    }
    let (b, i, o) = (128, 784, 10);
    for h in [128, 4096, 8192] {
        for (product, p, epilogue) in [
            (
                "fwd1",
                Problem {
                    lda: stride(i),
                    ldc: stride(h),
                    ..Problem::new(b, h, i, Layout::NT)
                },
                Epilogue::BiasRelu,
            ),
            (
                "fwd2",
                Problem {
                    lda: stride(h),
                    ldc: stride(o),
                    ..Problem::new(b, o, h, Layout::NT)
                },
                Epilogue::None,
            ),
            (
                "dx2",
                Problem {
                    lda: stride(o),
                    ldc: stride(h),
                    ..Problem::new(b, h, o, Layout::NN)
                },
                Epilogue::Gate,
            ),
            (
                "dw2",
                Problem {
                    lda: stride(o),
                    ldb: stride(h),
                    ..Problem::new(o, h, b, Layout::TN)
                },
                Epilogue::Step,
            ),
            (
                "dw1",
                Problem {
                    lda: stride(h),
                    ldb: stride(i),
                    ..Problem::new(h, i, b, Layout::TN)
                },
                Epilogue::Step,
            ),
        ] {
            v.push(Shape::new(format!("mlp{h}.{product}"), p, epilogue));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_from_names_and_dimensions() {
        let fwd = Shape::parse("mlp128.fwd1").unwrap();
        let p = fwd.problem;
        assert_eq!((p.m, p.n, p.k, p.layout), (128, 128, 784, Layout::NT));
        assert_eq!(fwd.epilogue, Epilogue::BiasRelu);
        let s = Shape::parse("64x32x16").unwrap();
        let packed = Problem::new(64, 32, 16, Layout::NN);
        assert_eq!(s, Shape::new("64x32x16".into(), packed, Epilogue::None));
        for bad in ["64x32", "64x0x16", "big", "1x2x3x4"] {
            let e = Shape::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    /// The MLP's shapes are the layered step's products: the logits' gradient is read from rows
    /// padded to 16, and each product keeps the epilogue the step fuses into it.
    #[test]
    fn mlp_shapes_use_the_steps_strides_and_epilogues() {
        let dx2 = Shape::parse("mlp4096.dx2").unwrap();
        let p = dx2.problem;
        assert_eq!((p.m, p.n, p.k, p.lda, p.ldc), (128, 4096, 10, 16, 4096));
        assert_eq!(dx2.epilogue, Epilogue::Gate);
        let dw2 = Shape::parse("mlp8192.dw2").unwrap();
        let p = dw2.problem;
        assert_eq!((p.m, p.n, p.k, p.layout), (10, 8192, 128, Layout::TN));
        assert_eq!((p.lda, p.ldb, p.ldc), (16, 8192, 8192));
        assert_eq!(dw2.epilogue, Epilogue::Step);
        let fwd2 = Shape::parse("mlp128.fwd2").unwrap().problem;
        assert_eq!((fwd2.n, fwd2.ldc), (10, 16));
    }
}
