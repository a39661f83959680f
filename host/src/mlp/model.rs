//! The MLP on the GPU: parameters in one flat buffer (fp32 master, fp16 copy, fp16 gradients,
//! fp32 velocity), activations for a fixed number of rows, all allocated once.
use super::launchers::{bias_grad, sgd_update, softmax_ce};
use super::layer::{self, Product, stride};
use super::params::param_layout;
use super::plans::{Plan, Plans, plan_gemms, weight_gradient_beside};
use super::shape::StepShape;
use crate::cuda::{Arena, Buf, Gpu, SideStream, grid_1d};
use crate::gemm::{self, Problem, Ptrs, SgdStep, Version};
use crate::kernels;
use anyhow::{Result, ensure};
use cudarc::driver::{CudaStream, PushKernelArg};
use gpu::gemm::{Accum, Sgd};
use gpu::params::{BiasGrad, SgdUpdate, SoftmaxCe};
use gpu::{SOFTMAX_MAX_CLASSES, bias_grad_scratch, softmax_partials};
use half::f16;
use std::ops::Range;

pub struct Mlp<'g> {
    gpu: &'g Gpu,
    /// Layer widths, input first: `[784, 128, 10]`.
    pub sizes: Vec<usize>,
    pub offsets: Vec<(usize, usize)>,
    pub n_params: usize,
    pub w32: Buf<f32>,
    pub w16: Buf<f16>,
    pub g16: Buf<f16>,
    /// SGD momentum of every parameter.
    pub vel: Buf<f32>,
    /// Output of each layer (`acts[l]` is layer l's output), `rows × width`, leading dimension
    /// [`stride`]`(width)`.
    acts: Vec<Buf<f16>>,
    /// Gradient w.r.t. each layer's output, laid out as its output.
    grads: Vec<Buf<f16>>,
    /// Most rows a forward pass may take.
    pub rows: usize,
    acc: Accum,
    plans: Plans,
    /// The training step: the GEMMs of its rows use the training plans, those of other row
    /// counts the evaluation plans.
    step: StepShape,
    /// Split-K workspace of the GEMMs on the GPU's stream, sized for the largest plan.
    ws: Buf<f32>,
    /// Where the parameters' gradients (and steps) run beside the rest of the backward pass.
    beside: Beside,
    /// The loss's blocks' sums and the count of its blocks done (`SoftmaxCe::partials`).
    loss_partials: (Buf<f32>, Buf<u32>),
    /// The hidden layers' bias gradients' slices and counts (`BiasGrad::partials`), one set
    /// for all: they run one after another on the second stream.
    bias_partials: (Buf<f32>, Buf<u32>),
}

/// A second stream and the split-K workspace of the GEMMs it runs.
struct Beside {
    side: SideStream,
    ws: Buf<f32>,
}

impl Drop for Beside {
    /// Work forked onto the stream writes buffers of the arena, which outlives the model: it
    /// must end first.
    fn drop(&mut self) {
        let _ = self.side.stream.synchronize();
    }
}

impl<'g> Mlp<'g> {
    /// Carves from `arena` everything training steps of `step`'s rows and forward passes of up
    /// to `eval_rows` rows need; the parameters are set by [`Mlp::set_params`]. `config` forces
    /// one tensor-core configuration for every GEMM; otherwise each shape gets the host's choice
    /// of configuration and split-K, planned once for each of the two row counts.
    pub fn new(
        gpu: &'g Gpu,
        arena: &mut Arena,
        sizes: &[usize],
        step: &StepShape,
        eval_rows: usize,
        acc: Accum,
        config: Option<Version>,
    ) -> Result<Mlp<'g>> {
        ensure!(
            sizes.len() >= 2 && sizes.iter().all(|&s| s > 0),
            "layer widths must be positive"
        );
        let classes = *sizes.last().unwrap();
        ensure!(
            classes <= SOFTMAX_MAX_CLASSES,
            "{classes} classes: the softmax takes at most {SOFTMAX_MAX_CLASSES}"
        );
        let rows = step.rows.max(eval_rows);
        let (offsets, n_params) = param_layout(sizes);
        let (w32, w16) = (arena.alloc(n_params)?, arena.alloc(n_params)?);
        let (g16, vel) = (arena.alloc(n_params)?, arena.alloc(n_params)?);
        let mut acts = Vec::new();
        let mut grads = Vec::new();
        for &w in &sizes[1..] {
            acts.push(arena.alloc(rows * stride(w))?);
            grads.push(arena.alloc(rows * stride(w))?);
        }
        if let Some(v) = config {
            v.ensure_runs_on(gpu)?;
        }
        let (plans, ws_len) = plan_gemms(gpu, sizes, [step.rows, eval_rows], acc, config)?;
        let ws = arena.alloc(ws_len[0])?;
        let bias_scratch = sizes[1..sizes.len() - 1]
            .iter()
            .map(|&w| bias_grad_scratch(rows, w))
            .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
        Ok(Mlp {
            gpu,
            sizes: sizes.to_vec(),
            offsets,
            n_params,
            w32,
            w16,
            g16,
            vel,
            acts,
            grads,
            rows,
            acc,
            plans,
            step: *step,
            ws,
            beside: Beside {
                side: SideStream::new(gpu)?,
                ws: arena.alloc(ws_len[1])?,
            },
            loss_partials: (
                arena.alloc(softmax_partials(rows, *sizes.last().unwrap()))?,
                arena.alloc(1)?,
            ),
            bias_partials: (arena.alloc(bias_scratch.0)?, arena.alloc(bias_scratch.1)?),
        })
    }

    /// Sets the fp32 master weights (and their fp16 copy) and clears the momentum.
    pub fn set_params(&self, params: &[f32]) -> Result<()> {
        ensure!(
            params.len() == self.n_params,
            "parameter buffer holds {} values, the model needs {}",
            params.len(),
            self.n_params
        );
        self.gpu.upload_to(self.w32, params)?;
        self.gpu.zero(self.vel)?;
        // The counts of blocks done start at zero; each call's last block resets its own.
        self.gpu.zero(self.loss_partials.1)?;
        self.gpu.zero(self.bias_partials.1)?;
        let f = self.gpu.function(kernels::F32_TO_F16)?;
        let n = self.n_params as u32;
        let mut b = self.gpu.stream.launch_builder(&f);
        b.arg(&self.w32.ptr).arg(&self.w16.ptr).arg(&n);
        unsafe { b.launch(grid_1d(self.n_params, 256)) }?;
        Ok(())
    }

    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    pub fn layers(&self) -> usize {
        self.sizes.len() - 1
    }

    fn p16(&self, off: usize) -> u64 {
        self.w16.at(off)
    }
    fn g16(&self, off: usize) -> u64 {
        self.g16.at(off)
    }

    /// Logits of the last forward pass (`rows × classes`, leading dimension
    /// [`stride`]`(classes)`).
    pub fn logits(&self) -> u64 {
        self.acts.last().unwrap().ptr
    }
    pub fn dlogits(&self) -> u64 {
        self.grads.last().unwrap().ptr
    }

    /// Layer `l`'s input: `x` (dense, as [`layer::input_ld`] says) or the layer before's output.
    fn input_of(&self, l: usize, x: u64) -> u64 {
        match l {
            0 => x,
            _ => self.acts[l - 1].ptr,
        }
    }

    /// Runs layer `l`'s `product` over `rows` rows by its plan on the GPU's stream.
    fn gemm(&self, product: Product, l: usize, rows: usize, ptrs: Ptrs) -> Result<()> {
        let main = (&*self.gpu.stream, self.ws.ptr);
        self.gemm_on(main, (product, l, rows), None, ptrs)
    }

    /// How layer `l`'s `product` runs over `rows` rows: a training step's plan, or an
    /// evaluation's.
    fn plan(&self, product: Product, l: usize, rows: usize) -> Plan {
        self.plans[usize::from(rows != self.step.rows)][l][product as usize]
    }

    /// [`Mlp::gemm`] on `stream`, with `ws` as its split-K workspace, taking SGD step `sgd`
    /// where the product is a weight gradient that takes one.
    fn gemm_on(
        &self,
        (stream, ws): (&CudaStream, u64),
        (product, l, rows): (Product, usize, usize),
        sgd: Option<SgdStep>,
        ptrs: Ptrs,
    ) -> Result<()> {
        let plan = self.plan(product, l, rows);
        let p = Problem {
            split_k: plan.split_k,
            sgd,
            ..layer::problem(&self.sizes, l, product, rows)
        };
        gemm::launch_on(self.gpu, stream, plan.version, &p, Ptrs { ws, ..ptrs })
    }

    /// Forward over `rows` rows of `x` (fp16, `rows × sizes[0]`): bias and ReLU fused into each
    /// GEMM's epilogue, no ReLU on the logits.
    pub fn forward(&self, x: u64, rows: usize) -> Result<()> {
        ensure!(
            rows > 0 && rows <= self.rows,
            "forward over {rows} rows; buffers hold {}",
            self.rows
        );
        for l in 0..self.layers() {
            let input = self.input_of(l, x);
            let ptrs = Ptrs {
                a: input,
                b: self.p16(self.offsets[l].0),
                c: self.acts[l].ptr,
                bias: self.p16(self.offsets[l].1),
                ..Ptrs::default()
            };
            self.gemm(Product::Forward, l, rows, ptrs)?;
        }
        Ok(())
    }

    /// Where the gradient of the parameters at `off` goes: to `g16`, or with `step` into their
    /// SGD step, which writes their fp16 copy.
    fn gradient_of(&self, off: usize, step: Option<SgdStep>) -> (u64, Sgd) {
        match step {
            None => (self.g16(off), Sgd::NONE),
            Some(SgdStep { lr, momentum }) => (
                self.p16(off),
                Sgd {
                    master: self.w32.at(off) as *mut f32,
                    velocity: self.vel.at(off) as *mut f32,
                    lr,
                    momentum,
                },
            ),
        }
    }

    /// Backward from `dlogits` and the logits' bias gradient (both written by [`Mlp::loss`]) to
    /// every parameter gradient; with `step`, every parameter takes that SGD step as soon as its
    /// gradient is made: in the kernel that makes it, or (a weight gradient whose GEMM takes no
    /// step) by an `sgd_update` right after it, from its gradient stored in `g16`.
    pub fn backward(&self, x: u64, rows: usize, step: Option<SgdStep>) -> Result<()> {
        let main = (&*self.gpu.stream, self.ws.ptr);
        self.backward_then(x, rows, step, || {
            self.weight_gradient(main, 0, x, rows, step)
        })
    }

    /// [`Mlp::backward`] with the first layer's weight gradient, the last GEMM of the pass,
    /// queued by `first` on the GPU's stream: a data-parallel replica makes it in pieces.
    ///
    /// A layer's input gradient, which reads its weights, comes first; its parameters' gradients
    /// then run on the second stream beside the rest of the pass (nothing after reads what they
    /// write or writes what they read), the first layer's weights' on the GPU's stream beside
    /// its bias's. The streams meet at the end, even when queueing fails, so a capture in
    /// progress ends joined.
    pub fn backward_then(
        &self,
        x: u64,
        rows: usize,
        step: Option<SgdStep>,
        first: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut forked = false;
        let queued = self
            .queue_backward(x, rows, step, &mut forked)
            .and_then(|()| first());
        if forked {
            self.join_beside()?;
        }
        queued
    }

    /// Queues [`Mlp::backward`]'s work but the first layer's weight gradient, setting `forked`
    /// once work is on the second stream.
    fn queue_backward(
        &self,
        x: u64,
        rows: usize,
        step: Option<SgdStep>,
        forked: &mut bool,
    ) -> Result<()> {
        let main = (&*self.gpu.stream, self.ws.ptr);
        let beside = (&*self.beside.side.stream, self.beside.ws.ptr);
        for l in (0..self.layers()).rev() {
            if l > 0 {
                self.input_gradient(l, x, rows)?;
            }
            // The logits' bias gradient came with the loss.
            let hidden = l + 1 < self.layers();
            let on_beside = weight_gradient_beside(l);
            if on_beside || hidden {
                self.fork()?;
                *forked = true;
            }
            if hidden {
                bias_grad(self.gpu, beside.0, self.bias_gradient(l, rows, step))?;
            }
            if l > 0 {
                let on = if on_beside { beside } else { main };
                self.weight_gradient(on, l, x, rows, step)?;
            }
        }
        Ok(())
    }

    /// Queues layer `l`'s input gradient, `d(input) = d · W` (M = rows, N = in, K = out), back
    /// through the ReLU that produced the input, in the epilogue.
    fn input_gradient(&self, l: usize, x: u64, rows: usize) -> Result<()> {
        let ptrs = Ptrs {
            a: self.grads[l].ptr,
            b: self.p16(self.offsets[l].0),
            c: self.grads[l - 1].ptr,
            gate: self.input_of(l, x),
            ..Ptrs::default()
        };
        self.gemm(Product::InputGradient, l, rows, ptrs)
    }

    /// Queues layer `l`'s weight gradient `dW = dᵀ · input` (M = out, N = in, K = rows), or
    /// with `step` its SGD step, on `on`: a stream and its split-K workspace. The step is in the
    /// GEMM's epilogue where its plan says so ([`Plan::steps`]), else an `sgd_update` after it
    /// on `on`.
    fn weight_gradient(
        &self,
        on: (&CudaStream, u64),
        l: usize,
        x: u64,
        rows: usize,
        step: Option<SgdStep>,
    ) -> Result<()> {
        let w = self.offsets[l].0;
        let plan = self.plan(Product::WeightGradient, l, rows);
        let fused = step.filter(|_| plan.steps);
        let (c, sgd) = self.gradient_of(w, fused);
        let ptrs = Ptrs {
            a: self.grads[l].ptr,
            b: self.input_of(l, x),
            c,
            master: sgd.master as u64,
            velocity: sgd.velocity as u64,
            ..Ptrs::default()
        };
        self.gemm_on(on, (Product::WeightGradient, l, rows), fused, ptrs)?;
        match (step, fused) {
            (Some(step), None) => {
                let n = self.sizes[l] * self.sizes[l + 1];
                self.update_on(on.0, step, w..w + n)
            }
            _ => Ok(()),
        }
    }

    /// Queues on the GPU's stream the first layer's weight gradient for its output `units`
    /// only (rows `units` of W1), into `g16`: a piece of `Mlp::weight_gradient`'s product by
    /// the same plan, so each element is the same sum as in the whole.
    pub fn first_weight_gradient(&self, x: u64, rows: usize, units: Range<usize>) -> Result<()> {
        let (inputs, outputs) = (self.sizes[0], self.sizes[1]);
        ensure!(
            units.start < units.end && units.end <= outputs && units.start.is_multiple_of(8),
            "units {units:?} of {outputs} are no piece of the first layer"
        );
        let plan = self.plan(Product::WeightGradient, 0, rows);
        let p = Problem {
            m: units.len(),
            split_k: plan.split_k,
            ..layer::problem(&self.sizes, 0, Product::WeightGradient, rows)
        };
        let ptrs = Ptrs {
            a: self.grads[0].at(units.start),
            b: x,
            c: self.g16(self.offsets[0].0 + units.start * inputs),
            ws: self.ws.ptr,
            ..Ptrs::default()
        };
        gemm::launch_on(self.gpu, &self.gpu.stream, plan.version, &p, ptrs)
    }

    /// Layer `l`'s bias gradient, or with `step` its SGD step: column sums of `d`.
    fn bias_gradient(&self, l: usize, rows: usize, step: Option<SgdStep>) -> BiasGrad {
        let o = self.sizes[l + 1];
        let (db, sgd) = self.gradient_of(self.offsets[l].1, step);
        BiasGrad {
            dy: self.grads[l].ptr,
            rows: rows as u32,
            cols: o as u32,
            ld: stride(o) as u32,
            db,
            sgd,
            partials: self.bias_partials.0.ptr,
            done: self.bias_partials.1.ptr,
        }
    }

    /// Makes the second stream wait for the work queued so far on the GPU's stream.
    fn fork(&self) -> Result<()> {
        self.beside.side.fork(self.gpu)
    }

    /// Makes the GPU's stream wait for the work queued so far on the second stream.
    pub fn join_beside(&self) -> Result<()> {
        self.beside.side.join(self.gpu)
    }

    /// One SGD step, on the GPU's stream, over the parameters `range` of the flat buffer from
    /// their gradients in `g16`, in one launch.
    pub fn update(&self, step: SgdStep, range: Range<usize>) -> Result<()> {
        self.update_on(&self.gpu.stream, step, range)
    }

    /// [`Mlp::update`] on `stream`.
    fn update_on(&self, stream: &CudaStream, step: SgdStep, range: Range<usize>) -> Result<()> {
        let p = SgdUpdate {
            w: self.w32.at(range.start),
            w16: self.w16.at(range.start),
            g: self.g16.at(range.start),
            v: self.vel.at(range.start),
            n: range.len() as u32,
            lr: step.lr,
            momentum: step.momentum,
        };
        sgd_update(self.gpu, stream, p)
    }

    /// Softmax cross-entropy of the last forward pass against `labels`; writes the mean loss
    /// and correct count into slot `*step` of `sums` (loss, correct) and advances `*step` (slot
    /// 0 where `step` is 0), and, given a `grad_scale` (1/rows for the mean over these rows),
    /// the logits' gradient scaled by it and the logits' bias gradient, or with `sgd` the
    /// logits' bias's step.
    pub fn loss(
        &self,
        labels: u64,
        rows: usize,
        grad_scale: Option<f32>,
        (loss, correct): (u64, u64),
        step: u64,
        sgd: Option<SgdStep>,
    ) -> Result<()> {
        let classes = *self.sizes.last().unwrap() as u32;
        let (db, bias_sgd) = self.gradient_of(self.offsets[self.layers() - 1].1, sgd);
        let p = SoftmaxCe {
            logits: self.logits(),
            labels,
            rows: rows as u32,
            classes,
            ld: stride(classes as usize) as u32,
            scale: grad_scale.unwrap_or(0.0),
            dlogits: grad_scale.map_or(0, |_| self.dlogits()),
            db,
            sgd: bias_sgd,
            loss,
            correct,
            step,
            partials: self.loss_partials.0.ptr,
            done: self.loss_partials.1.ptr,
        };
        softmax_ce(self.gpu, p)
    }

    pub fn accum(&self) -> Accum {
        self.acc
    }

    /// The fp32 master weights, in the flat layout.
    pub fn params(&self) -> Result<Vec<f32>> {
        self.gpu.download_buf(self.w32)
    }
}
