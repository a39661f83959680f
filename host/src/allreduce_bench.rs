//! `host allreduce`: the collectives of a data-parallel step, alone, as the replicas of `host
//! mnist --gpus N` make them: the fp16 sum in place of every gradient of a 784-H-10 MLP, whole
//! and in the pieces of `--reduce-pieces` ([`reduce`](crate::mlp::reduce)), and the pair a
//! sharded update would make instead (reduce-scatter of the gradients, all-gather of the
//! weights); each in NCCL's symmetric memory (where the library has it) and in plain device
//! memory. One thread per GPU, as `--gpus` runs.
//!
//! Each row is timed as a step replays it: a CUDA graph of [`CALLS`] repetitions, replayed once
//! all ranks are ready; the median over the replays, divided by the repetitions.
use crate::cuda::{Gpu, GpuOptions, dptr};
use crate::mlp::parallel::{Meeting, first_error, on_each_rank};
use crate::mlp::params::param_layout;
use crate::mlp::reduce::{param_ranges, split_units};
use crate::nccl::{Comm, UniqueId};
use anyhow::{Context, Result, ensure};
use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use half::f16;
use std::ops::Range;

/// Repetitions of a row's collectives in one graph.
pub const CALLS: usize = 20;

/// What `host allreduce` measures.
pub struct Sweep {
    pub gpus: usize,
    /// Hidden widths of the 784-H-10 MLPs whose gradients are summed.
    pub hidden: Vec<usize>,
    /// Pieces of the sum.
    pub pieces: Vec<usize>,
    /// Timed replays of each row.
    pub reps: usize,
}

/// One measured row.
pub struct Row {
    /// `symmetric` or `plain`.
    pub memory: &'static str,
    /// `all-reduce` or `reduce-scatter+all-gather`.
    pub collective: &'static str,
    pub hidden: usize,
    /// Calls the sum is split into (those of the all-reduce).
    pub pieces: usize,
    pub bytes: usize,
    /// Median microseconds of one whole sum.
    pub us: f64,
}

impl Row {
    /// Bus bandwidth as NCCL's own tests report an all-reduce's: bytes · 2(N−1)/N over the time.
    pub fn bus_gb_s(&self, gpus: usize) -> f64 {
        self.bytes as f64 * 2.0 * (gpus - 1) as f64 / gpus as f64 / (self.us * 1e3)
    }
}

/// Runs `s` on GPUs `0..s.gpus`, each opened with `gpu`; rank 0's rows.
pub fn run(s: &Sweep, gpu: &GpuOptions) -> Result<Vec<Row>> {
    let present = Gpu::count()?;
    ensure!(
        (2..=present).contains(&s.gpus),
        "--gpus {}: the sum needs 2 to {present} GPUs here",
        s.gpus
    );
    let id = UniqueId::new()?;
    first_error(on_each_rank(s.gpus, |rank, meet| {
        rank_rows(rank, gpu, &id, meet, s)
    }))
}

/// Rank `rank`'s share of the sweep. The ranks meet where one may fail alone (opening its GPU,
/// allocating), so that none is left waiting in a collective for one that stopped.
fn rank_rows(
    rank: usize,
    options: &GpuOptions,
    id: &UniqueId,
    meet: &Meeting,
    s: &Sweep,
) -> Result<Vec<Row>> {
    let gpu = meet.all_ok(Gpu::with_options(rank, options))?;
    gpu.ctx.bind_to_thread()?;
    let comm = Comm::new(id, rank, s.gpus)?;
    let mut rows = Vec::new();
    for &hidden in &s.hidden {
        let sizes = [784, hidden, 10];
        // Padded to equal shares of whole 64-element blocks, as a sharded update would pad it.
        let n_params = param_layout(&sizes).1;
        let (n, bytes) = (n_params.next_multiple_of(64 * s.gpus), 2 * n_params);
        let plain = meet.all_ok(gpu.zeros::<f16>(n))?;
        let symmetric = comm.symmetric_memory(2 * n)?;
        let mut memories = vec![("plain", dptr(&plain, &gpu.stream))];
        if let Some(m) = &symmetric {
            memories.insert(0, ("symmetric", m.ptr()));
        }
        for (memory, ptr) in memories {
            let mut row = |collective, pieces, queue: &dyn Fn() -> Result<()>| -> Result<()> {
                let us = time(&gpu, meet, s.reps, queue)?;
                rows.push(Row {
                    memory,
                    collective,
                    hidden,
                    pieces,
                    bytes,
                    us,
                });
                Ok(())
            };
            for &p in &s.pieces {
                let ranges = param_ranges(&sizes, &split_units(hidden, p));
                row("all-reduce", ranges.len(), &|| {
                    sum(&comm, &gpu, ptr, &ranges)
                })?;
            }
            // In place: each rank's share lies at its place in the whole.
            let share = n / s.gpus;
            let own = ptr + (2 * rank * share) as u64;
            row("reduce-scatter+all-gather", 1, &|| {
                comm.reduce_scatter::<f16>((ptr, own), share, &gpu.stream)?;
                comm.all_gather::<f16>((own, ptr), share, &gpu.stream)
            })?;
        }
        gpu.sync()?;
    }
    Ok(rows)
}

/// Queues the sum in place of each of `ranges` (elements) at `ptr`, one call each.
fn sum(comm: &Comm, gpu: &Gpu, ptr: u64, ranges: &[Range<usize>]) -> Result<()> {
    ranges
        .iter()
        .try_for_each(|r| comm.sum_in_place::<f16>(ptr + 2 * r.start as u64, r.len(), &gpu.stream))
}

/// Median microseconds of one `queue`, captured [`CALLS`] times in a graph and replayed `reps`
/// times once every rank is ready, after a few replays unmeasured.
fn time(gpu: &Gpu, meet: &Meeting, reps: usize, queue: &dyn Fn() -> Result<()>) -> Result<f64> {
    let graph = meet.all_ok(capture(gpu, queue))?;
    let timer = gpu.timer()?;
    let mut us = Vec::with_capacity(reps);
    for i in 0..reps + 3 {
        gpu.sync()?;
        meet.all_ok(Ok(()))?;
        timer.start()?;
        graph.launch()?;
        let ms = timer.stop_ms()?;
        if i >= 3 {
            us.push(1e3 * ms as f64 / CALLS as f64);
        }
    }
    us.sort_by(f64::total_cmp);
    Ok(us[us.len() / 2])
}

/// A CUDA graph of [`CALLS`] `queue`s.
fn capture(gpu: &Gpu, queue: &dyn Fn() -> Result<()>) -> Result<CudaGraph> {
    // Once outside the graph first: NCCL sets up a collective's first use of a buffer with
    // calls that a capture does not allow.
    queue()?;
    gpu.sync()?;
    let s = &gpu.stream;
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (0..CALLS).try_for_each(|_| queue());
    let graph = s.end_capture(CUgraphInstantiate_flags(0))?;
    captured?;
    graph.context("stream capture produced no graph")
}

/// Writes `rows` (of a sum over `gpus` GPUs) as CSV.
pub fn write_csv(path: &std::path::Path, rows: &[Row], gpus: usize) -> Result<()> {
    let mut out = String::from("memory,collective,gpus,hidden,pieces,bytes,us,bus_gb_s\n");
    for r in rows {
        out += &format!(
            "{},{},{gpus},{},{},{},{:.2},{:.1}\n",
            r.memory,
            r.collective,
            r.hidden,
            r.pieces,
            r.bytes,
            r.us,
            r.bus_gb_s(gpus)
        );
    }
    crate::write_atomic(path, out.as_bytes())
}
