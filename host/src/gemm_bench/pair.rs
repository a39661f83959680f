//! Two products at the same time, as the layered step runs its weight gradients: the output
//! layer's on a second stream, queued first, and the first layer's on the GPU's stream. Timed
//! together against cuBLAS's pair (each product followed by `sgd_update` on its stream), they
//! measure what timing each product alone cannot: how the two share the GPU, which decides the
//! tile of a GEMM beside another (`gemm::Usage::beside`).
use super::cublas::Cublas;
use super::operands::Operands;
use super::reference::Check;
use super::shapes::Pair;
use super::{Bench, Row, Work, row, time_ms};
use crate::cuda::{Gpu, SideStream, dptr};
use crate::gemm::{self, Problem, Ptrs, Usage, Version};
use anyhow::Result;
use cudarc::driver::{CudaSlice, CudaStream};
use gpu::gemm::Accum;
use rand::rngs::StdRng;
use std::io::Write;

/// One product of a pair as our kernels run it: its version and K split, and the split's
/// workspace.
struct Planned {
    v: Version,
    p: Problem,
    ws: CudaSlice<f32>,
}

impl Planned {
    /// What the host picks for `ops`' product in `usage` ([`gemm::choose_version`]).
    fn choose(gpu: &Gpu, ops: &Operands, usage: Usage) -> Result<Planned> {
        let p = ops.p;
        let (v, split_k) = gemm::choose_version(gpu, (p.m, p.n, p.k), usage, Accum::F16)?;
        let p = Problem { split_k, ..p };
        let ws = gpu.zeros::<f32>(gemm::workspace_len(v, &p))?;
        Ok(Planned { v, p, ws })
    }

    fn label(&self) -> String {
        match self.p.split_k {
            1 => self.v.label(),
            s => format!("{}_splitk{s}", self.v.label()),
        }
    }

    fn launch(&self, gpu: &Gpu, stream: &CudaStream, ops: &Operands) -> Result<()> {
        let ptrs = Ptrs {
            ws: dptr(&self.ws, stream),
            ..ops.ptrs(gpu)
        };
        gemm::launch_on(gpu, stream, self.v, &self.p, ptrs)
    }
}

/// The rows of one pair: cuBLAS's, then ours with the tiles the step takes (the product on
/// the second stream on tiles for a GEMM beside another), then, where that differs, ours with
/// each product's tile chosen as if it ran alone.
pub(super) fn rows(
    gpu: &Gpu,
    bench: &Bench,
    pair: &Pair,
    rng: &mut StdRng,
    out: &mut dyn Write,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let side_ops = Operands::new(gpu, &pair.beside, rng)?;
    let main_ops = Operands::new(gpu, &pair.main, rng)?;
    let side = SideStream::new(gpu)?;
    // Queues `on_side` on the second stream and then `on_main` on the GPU's stream, and joins
    // them even when queueing fails, so that a capture in progress ends joined.
    let both = |on_side: &dyn Fn(&CudaStream) -> Result<()>, on_main: &dyn Fn() -> Result<()>| {
        side.fork(gpu)?;
        let queued = on_side(&side.stream).and_then(|()| on_main());
        side.join(gpu)?;
        queued
    };
    // Checks what one call from a reset state left, then times the call.
    let measure = |f: &dyn Fn() -> Result<()>| -> Result<(f64, Check)> {
        side_ops.reset(gpu)?;
        main_ops.reset(gpu)?;
        f()?;
        let (a, b) = (
            side_ops.check(gpu, Accum::F16, true)?,
            main_ops.check(gpu, Accum::F16, true)?,
        );
        let c = Check {
            max_err: a.max_err.max(b.max_err),
            failures: a.failures + b.failures,
            first_failure: a.first_failure.or(b.first_failure),
        };
        Ok((time_ms(gpu, bench.budget_ms, f)?, c))
    };
    let work = Work {
        dims: (main_ops.p.m, main_ops.p.n, main_ops.p.k),
        flops: side_ops.p.flops() + main_ops.p.flops(),
    };
    let label = pair.name.as_str();

    let side_blas = Cublas::on(side.stream.clone())?;
    let (cublas_ms, c) = measure(&|| {
        both(&|_| side_ops.cublas(gpu, &side_blas, Accum::F16), &|| {
            main_ops.cublas(gpu, &bench.blas, Accum::F16)
        })
    })?;
    let name = "cublas_f16+sgd_update | cublas_f16+sgd_update".to_string();
    rows.push(row(out, (name, label), work, (cublas_ms, cublas_ms), &c)?);

    // Each with its step, as the layered step plans them below `SEPARATE_STEP_MIN_K` rows
    // (deeper, Hopper's step runs apart, which the pair does not time).
    let steps = |ops: &Operands, beside| Usage {
        beside,
        steps: true,
        ..Usage::aligned(ops.p.lda, ops.p.ldb)
    };
    let main = Planned::choose(gpu, &main_ops, steps(&main_ops, false))?;
    let (as_step, alone) = (
        Planned::choose(gpu, &side_ops, steps(&side_ops, true))?,
        Planned::choose(gpu, &side_ops, steps(&side_ops, false))?,
    );
    let differs = (alone.v, alone.p.split_k) != (as_step.v, as_step.p.split_k);
    for on_side in std::iter::once(as_step).chain(differs.then_some(alone)) {
        let (ms, c) = measure(&|| {
            both(&|s| on_side.launch(gpu, s, &side_ops), &|| {
                main.launch(gpu, &gpu.stream, &main_ops)
            })
        })?;
        let name = format!("{} | {}", on_side.label(), main.label());
        rows.push(row(out, (name, label), work, (ms, cublas_ms), &c)?);
    }
    Ok(())
}
