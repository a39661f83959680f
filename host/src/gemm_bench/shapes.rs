//! The table's problems: squares and the MLP's products, each with its epilogue, and the pairs
//! of products the step runs at the same time.
use crate::gemm::{Problem, SgdStep};
use crate::mlp::layer::{self, Product};
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

/// Two of the step's products that run at the same time, as the layered step runs its weight
/// gradients: `beside` on a second stream, queued first, and `main` on the GPU's stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    pub name: String,
    pub beside: Shape,
    pub main: Shape,
}

/// What one name of the table stands for: a product alone, or a pair run together.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    One(Shape),
    Pair(Pair),
}

impl Entry {
    /// A pair's name (`mlp4096.dw2+dw1`), else [`Shape::parse`].
    pub fn parse(s: &str) -> Result<Entry> {
        match parse_mlp(s) {
            Some((h, b, "dw2+dw1")) => Ok(Entry::Pair(mlp_pair(h, b))),
            _ => Shape::parse(s).map(Entry::One),
        }
    }
}

/// The step the `Step` shapes take.
pub(super) const STEP: SgdStep = SgdStep {
    lr: 1e-4,
    momentum: 0.9,
};

/// The batch of the default MLP shapes, which their names leave out.
const BATCH: usize = 128;

/// The MLP's products by name, in the order the step runs them: `fwd1`, `fwd2`, `dx2`, `dw2`,
/// `dw1`.
fn products() -> Vec<String> {
    layer::step_products(2)
        .into_iter()
        .map(|(l, p)| p.name(l))
        .collect()
}

impl Shape {
    fn new(name: String, problem: Problem, epilogue: Epilogue) -> Shape {
        Shape {
            name,
            problem,
            epilogue,
        }
    }

    /// A square's name, an MLP product's (`mlp<H>[b<B>].<product>`, any width and batch), or
    /// `MxNxK` (NN layout, packed, no epilogue).
    pub fn parse(s: &str) -> Result<Shape> {
        if let Some(shape) = default_shapes().into_iter().find(|d| d.name == s) {
            return Ok(shape);
        }
        if let Some((h, b, product)) = parse_mlp(s) {
            return mlp_product(h, b, product).ok_or_else(|| {
                anyhow!(
                    "{s:?}: no product {product:?} (the MLP's are {}, and the pair \
                         dw2+dw1)",
                    products().join(", ")
                )
            });
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

/// `mlp<H>[b<B>].<rest>` as (H, B, rest), B 128 where left out; both positive.
fn parse_mlp(s: &str) -> Option<(usize, usize, &str)> {
    let (dims, rest) = s.strip_prefix("mlp")?.split_once('.')?;
    let (h, b) = match dims.split_once('b') {
        Some((h, b)) => (h.parse().ok()?, b.parse().ok()?),
        None => (dims.parse().ok()?, BATCH),
    };
    (h > 0 && b > 0).then_some((h, b, rest))
}

/// The names' prefix of the MLP's products at hidden `h` and batch `b`.
fn mlp_prefix(h: usize, b: usize) -> String {
    match b {
        BATCH => format!("mlp{h}"),
        _ => format!("mlp{h}b{b}"),
    }
}

/// Default sizes: squares 256…8192 and the products of a training step of the MNIST MLP at
/// hidden 128, 4096 and 8192, batch 128.
pub fn default_shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for s in [256, 512, 1024, 2048, 4096, 8192] {
        let p = Problem::new(s, s, s, Layout::NN);
        v.push(Shape::new(format!("square{s}"), p, Epilogue::None));
    }
    for h in [128, 4096, 8192] {
        v.extend(mlp_shapes(h, BATCH));
    }
    v
}

/// The table's entries by default: [`default_shapes`], then [`default_pairs`].
pub fn default_entries() -> Vec<Entry> {
    let ones = default_shapes().into_iter().map(Entry::One);
    ones.chain(default_pairs().into_iter().map(Entry::Pair))
        .collect()
}

/// The weight gradients' pairs at the default shapes' widths.
pub fn default_pairs() -> Vec<Pair> {
    [128, 4096, 8192]
        .into_iter()
        .map(|h| mlp_pair(h, BATCH))
        .collect()
}

/// The MLP's two weight gradients at hidden `h` and batch `b`: the output layer's beside the
/// first layer's, as the step runs them.
fn mlp_pair(h: usize, b: usize) -> Pair {
    let product = |name| mlp_product(h, b, name).expect("dw1 and dw2 are among the products");
    Pair {
        name: format!("{}.dw2+dw1", mlp_prefix(h, b)),
        beside: product("dw2"),
        main: product("dw1"),
    }
}

/// One of [`mlp_shapes`] by its product's name.
fn mlp_product(h: usize, b: usize, product: &str) -> Option<Shape> {
    let i = products().iter().position(|p| p == product)?;
    mlp_shapes(h, b).into_iter().nth(i)
}

/// The GEMMs of a training step of the MNIST MLP (784-`h`-10, batch `b`) as the layered step
/// runs them (the model's own problems, [`layer::problem`]), in the order of [`products`]:
/// activations and their gradients in rows padded to whole 16-byte chunks (the 10 logits' to
/// 16), each product's epilogue fused.
pub fn mlp_shapes(h: usize, b: usize) -> Vec<Shape> {
    let sizes = [784, h, 10];
    let prefix = mlp_prefix(h, b);
    layer::step_products(2)
        .into_iter()
        .map(|(l, product)| {
            let problem = layer::problem(&sizes, l, product, b);
            let epilogue = match product {
                Product::Forward if problem.relu => Epilogue::BiasRelu,
                Product::Forward => Epilogue::None,
                Product::InputGradient => Epilogue::Gate,
                Product::WeightGradient => Epilogue::Step,
            };
            Shape::new(format!("{prefix}.{}", product.name(l)), problem, epilogue)
        })
        .collect()
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
        let wide = Shape::parse("mlp2048b512.fwd1").unwrap().problem;
        assert_eq!((wide.m, wide.n, wide.k, wide.ldc), (512, 2048, 784, 2048));
        let named = Shape::parse("mlp4096b128.dw1").unwrap();
        assert_eq!(named.problem, Shape::parse("mlp4096.dw1").unwrap().problem);
        for bad in [
            "64x32",
            "64x0x16",
            "big",
            "1x2x3x4",
            "mlp0.fwd1",
            "mlp128b.fwd1",
        ] {
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

    /// A pair's name gives the step's two weight gradients, the output layer's on the second
    /// stream; any other name parses as one shape.
    #[test]
    fn pairs_are_the_steps_weight_gradients_side_by_side() {
        let Entry::Pair(pair) = Entry::parse("mlp8192.dw2+dw1").unwrap() else {
            panic!("mlp8192.dw2+dw1 is not a pair");
        };
        assert_eq!(pair.beside, Shape::parse("mlp8192.dw2").unwrap());
        assert_eq!(pair.main, Shape::parse("mlp8192.dw1").unwrap());
        let one = Entry::parse("mlp8192.dw2").unwrap();
        assert_eq!(one, Entry::One(Shape::parse("mlp8192.dw2").unwrap()));
        assert!(Entry::parse("mlp8192.dw1+dw2").is_err());
        let Entry::Pair(wide) = Entry::parse("mlp1024b512.dw2+dw1").unwrap() else {
            panic!("mlp1024b512.dw2+dw1 is not a pair");
        };
        assert_eq!(wide.main, Shape::parse("mlp1024b512.dw1").unwrap());
        let e = Shape::parse("mlp128.fwd3").unwrap_err().to_string();
        assert!(e.contains("\"fwd3\"") && e.contains("dw2+dw1"), "{e}");
        let pairs = default_entries()
            .into_iter()
            .filter(|e| matches!(e, Entry::Pair(_)))
            .count();
        assert_eq!(pairs, 3);
    }
}
