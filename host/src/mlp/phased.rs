//! Training by the phased kernel (`gpu::phased`): the layered step's operations, a whole epoch
//! of steps in one cooperative launch, for the models the one-layer persistent kernel does not
//! take (two hidden layers or more, batches above its limit).
use super::epoch_rows::EpochRows;
use super::layer::{self, Product, stride};
use super::model::Mlp;
use crate::cuda::{Arena, Buf, Gpu, ParamBlock, arg, attribute};
use crate::gemm::{Problem, Ptrs, SgdStep, gemm_args};
use crate::kernels;
use anyhow::Result;
use cudarc::driver::sys::{CUfunction_attribute, CUlaunchAttributeID};
use cudarc::driver::{CudaFunction, LaunchConfig};
use gpu::gemm::Layout;
use gpu::gemm::{Accum, Sgd};
use gpu::params::{BiasGrad, SoftmaxCe};
use gpu::persistent::{label_offset, row_stride};
use gpu::phased::{Gemm, GemmLayout, MAX_OPS, Op, Params, Rows, THREADS, Work, smem_bytes};

/// Blocks an SM at most: more hide more of each tile's memory latency, but every block arrives
/// at each of the step's grid barriers.
const BLOCKS_PER_SM: u32 = 1;

/// Classes at most: the softmax reads a label's low byte.
const MAX_CLASSES: usize = 256;

pub struct Phased {
    f: CudaFunction,
    blocks: u32,
    smem: usize,
    /// The step's operations, written before each launch.
    ops: Buf<ParamBlock<Op>>,
    n_ops: usize,
    /// Layers of the model.
    layers: usize,
    /// The grid barrier's arrival count, zeroed before each launch.
    counters: Buf<u32>,
    trace: Buf<u64>,
    rows: EpochRows,
}

/// Why the phased kernel cannot train layers `sizes` with this batch and epochs of `steps`
/// steps on this GPU, or `None` where it can.
pub fn why_not(gpu: &Gpu, sizes: &[usize], batch: usize, steps: usize) -> Result<Option<String>> {
    let classes = *sizes.last().unwrap();
    let shuffled = 2 * steps * batch * row_stride(sizes[0]);
    let layers = sizes.len() - 1;
    let unaligned = sizes[..layers].iter().find(|w| !w.is_multiple_of(8));
    Ok(if let Some(w) = unaligned {
        Some(format!(
            "its layers' inputs must be multiples of 8 wide (whole 16-byte rows of the weights), not {w}"
        ))
    } else if step_op_count(layers) > MAX_OPS {
        Some(format!("{layers} layers are more than its table holds"))
    } else if classes > MAX_CLASSES {
        Some(format!("{classes} classes are more than {MAX_CLASSES}"))
    } else if shuffled > gpu.mem_info()?.0 / 2 {
        Some(format!(
            "its two shuffled copies of the training set need {} MiB, over half the GPU's free memory",
            shuffled >> 20
        ))
    } else {
        None
    })
}

/// The phased kernel with accumulator `acc`, allowed its dynamic shared memory for a table of
/// `ops` operations.
fn function(gpu: &Gpu, acc: Accum, ops: usize) -> Result<(CudaFunction, usize)> {
    let f = gpu.function(match acc {
        Accum::F16 => kernels::PHASED_F16,
        Accum::F32 => kernels::PHASED_F32,
    })?;
    let smem = smem_bytes(gpu.ptx.target(), ops);
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?;
    Ok((f, smem))
}

impl Phased {
    /// Carves the kernel's buffers from `arena` for a model of `layers` layers, epochs of
    /// `steps` steps of `batch` rows of `dim` inputs.
    pub fn new(
        gpu: &Gpu,
        arena: &mut Arena,
        (dim, layers): (usize, usize),
        (batch, steps): (usize, usize),
        acc: Accum,
    ) -> Result<Phased> {
        let n_ops = step_op_count(layers);
        let (f, smem) = function(gpu, acc, n_ops)?;
        let per_sm =
            f.occupancy_max_active_blocks_per_multiprocessor(THREADS as u32, smem, None)?;
        let bps = std::env::var("PHASED_BPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(BLOCKS_PER_SM);
        let blocks = gpu.sm_count() * per_sm.clamp(1, bps);
        Ok(Phased {
            f,
            blocks,
            smem,
            ops: arena.alloc(n_ops)?,
            n_ops,
            layers,
            counters: arena.alloc(1)?,
            trace: arena.alloc(64)?,
            rows: EpochRows::new(gpu, arena, (batch, steps), dim)?,
        })
    }

    /// Runs steps `step0..step0 + steps` of the epoch shuffled into buffer `buf`
    /// ([`EpochRows::shuffle`]), writing each step's mean loss and correct count to
    /// `loss[step]`/`correct[step]`. Queued on the stream; nothing is copied to the host.
    pub fn run(
        &self,
        gpu: &Gpu,
        model: &Mlp,
        buf: usize,
        sums: (u64, u64),
        (step0, steps): (usize, usize),
        step: SgdStep,
    ) -> Result<()> {
        let batches = self.rows.ready(gpu, buf, (step0, steps))?;
        let table = Table {
            model,
            batch: self.rows.batch(),
            row_bytes: self.rows.row_bytes(),
        };
        let ops = table.step_ops(sums, step);
        debug_assert_eq!(ops.len(), self.n_ops);
        let keep: Option<Vec<usize>> = std::env::var("PHASED_KEEP")
            .ok()
            .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect());
        let ops: Vec<_> = ops
            .into_iter()
            .enumerate()
            .map(|(i, mut op)| {
                if keep.as_ref().is_some_and(|k| !k.contains(&i)) {
                    match &mut op.work {
                        Work::Gemm(g) => g.args.m = 0,
                        Work::SoftmaxCe(s) => s.rows = 0,
                        Work::BiasGrad(b) => b.cols = 0,
                    }
                }
                ParamBlock(op)
            })
            .collect();
        gpu.upload_to(self.ops, &ops)?;
        gpu.zero(self.counters)?;
        let args = Params {
            ops: self.ops.ptr,
            n_ops: self.n_ops as u32,
            batch: self.rows.batch() as u32,
            batches,
            row_bytes: self.rows.row_bytes() as u32,
            step0: step0 as u32,
            steps: steps as u32,
            counters: self.counters.ptr,
            trace: if std::env::var("PHASED_TRACE").is_ok() {
                self.trace.ptr
            } else {
                0
            },
            poll_ns: std::env::var("PHASED_POLL")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        };
        // Cooperative: the driver refuses the launch unless every block can be resident at
        // once, which the grid barrier needs.
        let mut attrs = vec![attribute(
            CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            |v| v.cooperative = 1,
        )];
        let cfg = LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: self.smem as u32,
        };
        // SAFETY: the kernel's one parameter is a `Params` (the same `#[repr(C)]` type); the
        // table and every buffer it names live as long as `self` and `model`, which outlive the
        // stream's work (the training loop synchronises first).
        unsafe { gpu.launch_ex(&gpu.stream, &self.f, cfg, &mut attrs, &mut [arg(&args)]) }
    }

    pub fn print_trace(&self, gpu: &Gpu, steps: usize) -> Result<()> {
        if std::env::var("PHASED_TRACE").is_err() {
            return Ok(());
        }
        let t = gpu.download_buf(self.trace)?;
        let ph = 2 * self.layers + 1;
        let last = steps * ph; // meetings count at end
        let mut line = String::new();
        for k in 0..ph {
            let m = last - ph + 1 + k; // meeting index of phase k of the last step
            let (arrive, leave) = (t[2 * (m % 32)], t[2 * (m % 32) + 1]);
            let prev_leave = t[2 * ((m - 1) % 32) + 1];
            line += &format!(
                " p{k}: work {} wait {} |",
                arrive.wrapping_sub(prev_leave),
                leave.wrapping_sub(arrive)
            );
        }
        eprintln!("trace:{line}");
        Ok(())
    }

    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// Phases of a step, each ended by a grid barrier: the forward products, the softmax, a
    /// phase of the backward per layer.
    pub fn phases(&self) -> usize {
        2 * self.layers + 1
    }

    /// The epoch's rows it trains on.
    pub fn rows(&self) -> &EpochRows {
        &self.rows
    }
}

/// Operations of a step of `layers` layers ([`step_ops`]).
fn step_op_count(layers: usize) -> usize {
    // The forward products and the softmax; each layer's weight step and input gradient (the
    // first has none); each hidden layer's bias step.
    layers + 1 + layers + (layers - 1) + (layers - 1)
}

/// What a step's table is built from: the model and its batches of `batch` rows of
/// `row_bytes` bytes in the epoch's rows.
struct Table<'a, 'g> {
    model: &'a Mlp<'g>,
    batch: usize,
    row_bytes: usize,
}

impl Table<'_, '_> {
    /// The table of a training step, each step's loss and correct count into `sums`, every
    /// parameter taking SGD step `step` (module doc of `gpu::phased` for the phases).
    fn step_ops(&self, (loss, correct): (u64, u64), step: SgdStep) -> Vec<Op> {
        let (model, batch) = (self.model, self.batch);
        let n = model.layers();
        let mut phases: Vec<Vec<(Work, Rows)>> = Vec::new();
        for l in 0..n {
            phases.push(vec![self.forward(l)]);
        }
        phases.push(vec![(self.softmax((loss, correct), step), Rows::Labels)]);
        for j in (0..n).rev() {
            let mut phase = Vec::new();
            if j > 0 {
                phase.push((self.input_gradient(j), Rows::None));
            }
            if j + 1 < n {
                phase.push((self.weight_step(j + 1, step), Rows::None));
                phase.push((bias_step(model, j, batch, step), Rows::None));
            }
            if j == 0 {
                phase.push((self.weight_step(0, step), Rows::B));
            }
            phases.push(phase);
        }
        let ops = phases.into_iter().flat_map(|phase| {
            let last = phase.len() - 1;
            phase
                .into_iter()
                .enumerate()
                .map(move |(i, (work, rows))| Op {
                    work,
                    rows,
                    ends_phase: u32::from(i == last),
                })
        });
        ops.collect()
    }

    /// Leading dimension of the step's rows, in elements.
    fn rows_ld(&self) -> usize {
        self.row_bytes / 2
    }

    /// GEMM `p` on `ptrs`, taking SGD step `sgd`.
    fn gemm(&self, p: &Problem, ptrs: Ptrs, sgd: Sgd) -> Work {
        let layout = match p.layout {
            Layout::NN => GemmLayout::Nn,
            Layout::NT => GemmLayout::Nt,
            Layout::TN => GemmLayout::Tn,
        };
        Work::Gemm(Gemm {
            args: gemm_args(p, ptrs, sgd),
            layout,
        })
    }

    /// Layer `l`'s forward product, bias and ReLU (none on the logits); the first layer's input
    /// is the step's rows.
    fn forward(&self, l: usize) -> (Work, Rows) {
        let model = self.model;
        let mut p = layer::problem(&model.sizes, l, Product::Forward, self.batch);
        let (input, rows) = match l {
            0 => {
                p.lda = self.rows_ld();
                (0, Rows::A)
            }
            _ => (model.output(l - 1), Rows::None),
        };
        let ptrs = Ptrs {
            a: input,
            b: model.weights16(l),
            c: model.output(l),
            bias: model.bias16(l),
            ..Ptrs::default()
        };
        (self.gemm(&p, ptrs, Sgd::NONE), rows)
    }

    /// The softmax cross-entropy of the logits against the step's labels, its gradient and the
    /// logits' bias step.
    fn softmax(&self, (loss, correct): (u64, u64), step: SgdStep) -> Work {
        let model = self.model;
        let n = model.layers();
        let classes = model.sizes[n];
        let (db, sgd) = model.gradient_of(model.offsets[n - 1].1, Some(step));
        Work::SoftmaxCe(SoftmaxCe {
            logits: model.logits(),
            labels: label_offset(model.sizes[0]) as u64,
            label_stride: self.row_bytes as u32,
            rows: self.batch as u32,
            classes: classes as u32,
            ld: stride(classes) as u32,
            scale: 1.0 / self.batch as f32,
            dlogits: model.dlogits(),
            db,
            sgd,
            loss,
            correct,
            step: 0,
        })
    }

    /// Layer `l`'s input gradient back through the ReLU of the layer before.
    fn input_gradient(&self, l: usize) -> Work {
        let model = self.model;
        let p = layer::problem(&model.sizes, l, Product::InputGradient, self.batch);
        let ptrs = Ptrs {
            a: model.output_grad(l),
            b: model.weights16(l),
            c: model.output_grad(l - 1),
            gate: model.output(l - 1),
            ..Ptrs::default()
        };
        self.gemm(&p, ptrs, Sgd::NONE)
    }

    /// Layer `l`'s weight gradient taken as its SGD step; the first layer's input is the step's
    /// rows (its B operand then an offset into them).
    fn weight_step(&self, l: usize, step: SgdStep) -> Work {
        let model = self.model;
        let mut p = layer::problem(&model.sizes, l, Product::WeightGradient, self.batch);
        let input = match l {
            0 => {
                p.ldb = self.rows_ld();
                0
            }
            _ => model.output(l - 1),
        };
        let (c, sgd) = model.gradient_of(model.offsets[l].0, Some(step));
        let ptrs = Ptrs {
            a: model.output_grad(l),
            b: input,
            c,
            ..Ptrs::default()
        };
        self.gemm(&p, ptrs, sgd)
    }
}

/// Hidden layer `l`'s bias step over `batch` rows: the column sums of its outputs' gradient.
fn bias_step(model: &Mlp, l: usize, batch: usize, step: SgdStep) -> Work {
    let o = model.sizes[l + 1];
    let (db, sgd) = model.gradient_of(model.offsets[l].1, Some(step));
    Work::BiasGrad(BiasGrad {
        dy: model.output_grad(l),
        rows: batch as u32,
        cols: o as u32,
        ld: stride(o) as u32,
        db,
        sgd,
    })
}
