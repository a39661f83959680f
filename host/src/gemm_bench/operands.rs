//! A shape's operands on the host and on the GPU, cuBLAS's calls on them, and the checks of what
//! a call left.
use super::cublas::{self, Cublas};
use super::random;
use super::reference::{self, Check, EpilogueInputs, Weights};
use super::shapes::{Epilogue, STEP, Shape};
use crate::cuda::{Gpu, dptr};
use crate::gemm::{Problem, Ptrs};
use crate::mlp::launchers::sgd_update;
use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;
use gpu::gemm::Accum;
use gpu::params::SgdUpdate;
use half::f16;
use rand::{Rng, rngs::StdRng};

/// A shape's operands on the host and on the GPU: A and B, and what its epilogue reads (the
/// bias, the gate, or the weights a step starts from).
pub(super) struct Operands {
    pub(super) p: Problem,
    epilogue: Epilogue,
    a: Vec<f16>,
    b: Vec<f16>,
    /// The bias (`BiasRelu`) or the gate, laid out as C (`Gate`); empty otherwise.
    input: Vec<f16>,
    /// The master weights and velocity, laid out as C (`Step`); empty otherwise.
    weights: (Vec<f32>, Vec<f32>),
    /// Elements checked: all of C, or 512 at random where the product is large.
    samples: Option<Vec<(usize, usize)>>,
    d: DeviceOperands,
}

struct DeviceOperands {
    a: CudaSlice<f16>,
    b: CudaSlice<f16>,
    c: CudaSlice<f16>,
    input: Option<CudaSlice<f16>>,
    weights: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    /// Where cuBLAS writes the gradient that `sgd_update` takes (`Step`).
    gradient: Option<CudaSlice<f16>>,
}

impl Operands {
    pub(super) fn new(gpu: &Gpu, shape: &Shape, rng: &mut StdRng) -> Result<Operands> {
        let e = shape.epilogue;
        let p = Problem {
            relu: e == Epilogue::BiasRelu,
            sgd: (e == Epilogue::Step).then_some(STEP),
            ..shape.problem
        };
        let (a, b) = (random(p.a_len(), rng), random(p.b_len(), rng));
        let input = match e {
            Epilogue::BiasRelu => random(p.n, rng),
            Epilogue::Gate => random(p.c_len(), rng),
            Epilogue::None | Epilogue::Step => Vec::new(),
        };
        let uniform = |rng: &mut StdRng| -> Vec<f32> {
            (0..p.c_len())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        };
        let weights = match e {
            Epilogue::Step => (uniform(rng), uniform(rng)),
            _ => (Vec::new(), Vec::new()),
        };
        let samples = (p.m * p.n * p.k > 1 << 27).then(|| {
            (0..512)
                .map(|_| (rng.random_range(0..p.m), rng.random_range(0..p.n)))
                .collect()
        });
        let weights_on_gpu = match e {
            Epilogue::Step => Some((gpu.upload(&weights.0)?, gpu.upload(&weights.1)?)),
            _ => None,
        };
        let d = DeviceOperands {
            a: gpu.upload(&a)?,
            b: gpu.upload(&b)?,
            c: gpu.zeros(p.c_len())?,
            input: (!input.is_empty())
                .then(|| gpu.upload(&input))
                .transpose()?,
            gradient: weights_on_gpu
                .is_some()
                .then(|| gpu.zeros(p.c_len()))
                .transpose()?,
            weights: weights_on_gpu,
        };
        Ok(Operands {
            p,
            epilogue: e,
            a,
            b,
            input,
            weights,
            samples,
            d,
        })
    }

    /// The addresses our kernels take: the epilogue's inputs included.
    pub(super) fn ptrs(&self, gpu: &Gpu) -> Ptrs {
        let s = &gpu.stream;
        let input = self.d.input.as_ref().map_or(0, |x| dptr(x, s));
        let (master, velocity) = self
            .d
            .weights
            .as_ref()
            .map_or((0, 0), |(m, v)| (dptr(m, s), dptr(v, s)));
        Ptrs {
            a: dptr(&self.d.a, s),
            b: dptr(&self.d.b, s),
            c: dptr(&self.d.c, s),
            bias: if self.epilogue == Epilogue::BiasRelu {
                input
            } else {
                0
            },
            gate: if self.epilogue == Epilogue::Gate {
                input
            } else {
                0
            },
            master,
            velocity,
            ..Ptrs::default()
        }
    }

    /// Poisons C with NaN (all-ones fp16), so that an element a kernel never writes cannot
    /// pass, and restores the weights a step starts from.
    pub(super) fn reset(&self, gpu: &Gpu) -> Result<()> {
        let (ptrs, s) = (self.ptrs(gpu), gpu.stream.cu_stream());
        let c_bytes = self.d.c.num_bytes();
        // SAFETY: each copy stays within its buffer, which outlives the queued work.
        unsafe {
            cudarc::driver::result::memset_d8_async(ptrs.c, 0xff, c_bytes, s)?;
            if self.epilogue == Epilogue::Step {
                cudarc::driver::result::memcpy_htod_async(ptrs.master, &self.weights.0, s)?;
                cudarc::driver::result::memcpy_htod_async(ptrs.velocity, &self.weights.1, s)?;
            }
        }
        Ok(())
    }

    /// Checks what one call from [`Operands::reset`] left against the CPU reference (`gated`:
    /// whether the call applied the gate).
    pub(super) fn check(&self, gpu: &Gpu, acc: Accum, gated: bool) -> Result<Check> {
        let (p, got) = (&self.p, gpu.download(&self.d.c)?);
        let samples = self.samples.as_deref();
        if let Some((m, v)) = &self.d.weights {
            let (m1, v1) = (gpu.download(m)?, gpu.download(v)?);
            let before = Weights {
                master: &self.weights.0,
                velocity: &self.weights.1,
            };
            let after = Weights {
                master: &m1,
                velocity: &v1,
            };
            let ab = (&self.a[..], &self.b[..]);
            return Ok(reference::check_sgd(
                p, acc, ab, before, after, &got, samples,
            ));
        }
        let input = Some(&self.input[..]);
        let inputs = EpilogueInputs {
            bias: input.filter(|_| self.epilogue == Epilogue::BiasRelu),
            gate: input.filter(|_| self.epilogue == Epilogue::Gate && gated),
            ..EpilogueInputs::default()
        };
        Ok(reference::check(
            p, acc, &self.a, &self.b, inputs, &got, samples,
        ))
    }

    /// cuBLAS's product with `compute`, and the separate kernel of the epilogue where the
    /// project has one, both on `blas`'s stream.
    pub(super) fn cublas(&self, gpu: &Gpu, blas: &Cublas, compute: Accum) -> Result<()> {
        let ptrs = self.ptrs(gpu);
        match self.epilogue {
            Epilogue::None | Epilogue::Gate => blas.gemm(&self.p, ptrs, compute),
            Epilogue::BiasRelu => {
                blas.gemm(&self.p, ptrs, compute)?;
                cublas::launch_bias_act(gpu, blas.stream(), &self.p, (ptrs.c, ptrs.bias))
            }
            Epilogue::Step => {
                let gradient = self
                    .d
                    .gradient
                    .as_ref()
                    .context("a step's gradient buffer")?;
                let g = dptr(gradient, &gpu.stream);
                blas.gemm(&self.p, Ptrs { c: g, ..ptrs }, compute)?;
                let update = SgdUpdate {
                    w: ptrs.master,
                    w16: ptrs.c,
                    g,
                    v: ptrs.velocity,
                    n: self.p.c_len() as u32,
                    lr: STEP.lr,
                    momentum: STEP.momentum,
                };
                sgd_update(gpu, blas.stream(), update)
            }
        }
    }
}
