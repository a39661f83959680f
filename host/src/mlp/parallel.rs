//! Training on several GPUs: data parallel, one replica of the model per GPU, each taking an
//! equal share of every global batch, the gradients summed through NCCL; or tensor parallel, a
//! block of the hidden layer per GPU, each taking the whole batch, the logits summed
//! ([`split`](super::split)). The sums run inside the captured steps, so the steps stay graph
//! replays on every GPU.
//!
//! With `--gpus`, each rank is a thread of this process, driving one GPU; under a launcher
//! (`torchrun`, `srun`), each is a process of its own ([`train_launched`]). Nothing but the NCCL
//! unique id and the rank passes between ranks, so both run the same replica.
use super::data::Dataset;
use super::launched::Launched;
use super::options::{Options, Parallel, validate};
use super::shape::StepShape;
use super::train::{Epoch, Trainer};
use crate::cuda::{Gpu, GpuOptions, dptr};
use crate::nccl::{self, Comm, UniqueId};
use anyhow::{Result, anyhow, ensure};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Trains `o.gpus` replicas on GPUs `first..first + o.gpus`, each opened with `gpu`, through
/// NCCL even for one GPU. Rank 0 prints, evaluates and writes the metrics and checkpoints; its
/// results are returned.
pub fn train_data_parallel(
    first: usize,
    gpu: &GpuOptions,
    o: &Options,
    ds: &Dataset,
) -> Result<Vec<Epoch>> {
    validate(o)?;
    let o = &o.settled();
    let world = o.gpus;
    let present = Gpu::count()?;
    ensure!(
        first + world <= present,
        "--gpus {world} needs GPUs {first} to {}, but only {present} present",
        first + world - 1
    );
    if !o.quiet {
        println!("{}", sharing_line(o, ds, "GPUs")?);
    }
    let id = UniqueId::new()?;
    first_error(on_each_rank(world, |rank, meet| {
        replica(rank, (first + rank, gpu), &id, meet, o, ds)
    }))
}

/// `run(rank, meeting)` on a thread of its own for each of `world` ranks, which meet at the
/// one meeting; every rank's result, in rank order.
pub(crate) fn on_each_rank<T: Send>(
    world: usize,
    run: impl Fn(usize, &Meeting) -> Result<T> + Sync,
) -> Vec<Result<T>> {
    let meet = Meeting::new(world);
    std::thread::scope(|s| {
        let ranks: Vec<_> = (0..world)
            .map(|rank| {
                let (run, meet) = (&run, &meet);
                s.spawn(move || run(rank, meet))
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// Rank `rank`'s whole run on GPU `device` (ordinal, options). Ranks meet after each step that
/// may fail on one alone, so that none is left waiting in a collective for a rank that has
/// stopped.
fn replica(
    rank: usize,
    (ordinal, options): (usize, &GpuOptions),
    id: &UniqueId,
    meet: &Meeting,
    o: &Options,
    ds: &Dataset,
) -> Result<Vec<Epoch>> {
    let gpu = meet.all_ok(Gpu::with_options(ordinal, options))?;
    gpu.ctx.bind_to_thread()?;
    let comm = Comm::new(id, rank, o.gpus)?;
    let o = rank_options(rank, o);
    let trainer = meet.all_ok(Trainer::new(&gpu, &o, ds, Some(&comm)))?;
    trainer.run()
}

/// The line that says how the run's `o.gpus` ranks (`what`: GPUs, processes) share a step.
fn sharing_line(o: &Options, ds: &Dataset, what: &str) -> Result<String> {
    let (world, version) = (o.gpus, nccl::describe()?);
    Ok(match o.sharing() {
        Parallel::Data => format!(
            "data parallel over {world} {what} through NCCL {version}: {} rows of each batch per GPU",
            StepShape::new(o.batch, ds.train.count, world).rows
        ),
        Parallel::Tensor => format!(
            "tensor parallel over {world} {what} through NCCL {version}: {} hidden units per GPU, the whole batch on each",
            o.hidden[0] / world
        ),
    })
}

/// Rank 0 runs with the run's options; the others train quietly, writing nothing (those of a
/// split hidden layer keep `save`: every rank's block goes into the checkpoint rank 0 writes).
fn rank_options(rank: usize, o: &Options) -> Options {
    if rank == 0 {
        return o.clone();
    }
    let takes_part = o.sharing() == Parallel::Tensor;
    Options {
        quiet: true,
        metrics: None,
        save: o.save.clone().filter(|_| takes_part),
        ..o.clone()
    }
}

/// Trains this process's replica in a world of processes a launcher started, one per GPU: GPU
/// `l.local_rank`, each opened with `gpu`, the replicas joined by NCCL's bootstrap at `l.root`
/// (which `NCCL_COMM_ID` must name: the caller sets it before any thread starts). Rank 0 prints,
/// evaluates and writes the metrics and checkpoints, as with `--gpus`.
pub fn train_launched(
    l: &Launched,
    gpu: &GpuOptions,
    o: &Options,
    ds: &Dataset,
) -> Result<Vec<Epoch>> {
    ensure!(
        o.gpus == 1,
        "--gpus and a launcher's WORLD_SIZE both ask for GPUs: use one"
    );
    let o = Options {
        gpus: l.world,
        ..o.clone()
    }
    .settled();
    let o = rank_options(l.rank, &o);
    validate(&o)?;
    if !o.quiet {
        println!("{}", sharing_line(&o, ds, "processes")?);
    }
    let gpu = Gpu::with_options(l.local_rank, gpu)?;
    gpu.ctx.bind_to_thread()?;
    // With NCCL_COMM_ID set, every rank makes the same id, and rank 0 listens at that address.
    let id = UniqueId::new()?;
    let comm = within(l.timeout_s, &l.root, || Comm::new(&id, l.rank, l.world))?;
    let trainer = all_ok_across(&comm, &gpu, Trainer::new(&gpu, &o, ds, Some(&comm)))?;
    trainer.run()
}

/// `join()`, or the end of this process with an error if it has not returned within `secs`:
/// NCCL's bootstrap waits for ever for a rank that never comes.
fn within<T>(secs: u64, root: &str, join: impl FnOnce() -> T) -> T {
    let (done, wait) = mpsc::channel::<()>();
    let root = root.to_string();
    std::thread::spawn(move || {
        if wait.recv_timeout(Duration::from_secs(secs)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!(
                "error: not every rank joined NCCL's bootstrap at {root} within {secs} s (HOST_BOOTSTRAP_TIMEOUT): another rank failed to start, or that address is not reachable"
            );
            std::process::exit(1);
        }
    });
    let r = join();
    drop(done);
    r
}

/// `r` once every process's rank has reached this point, unless another arrived with an error:
/// the processes' form of [`Meeting::all_ok`], a sum of failure flags through NCCL.
fn all_ok_across<T>(comm: &Comm, gpu: &Gpu, r: Result<T>) -> Result<T> {
    let flag = gpu.upload(&[if r.is_err() { 1.0f32 } else { 0.0 }])?;
    comm.sum_in_place::<f32>(dptr(&flag, &gpu.stream), 1, &gpu.stream)?;
    let failed = gpu.download(&flag)?[0] > 0.0;
    match r {
        Ok(_) if failed => Err(PeerFailed.into()),
        r => r,
    }
}

/// The error of a rank that stopped because another did.
#[derive(Debug)]
struct PeerFailed;

impl std::fmt::Display for PeerFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("another GPU's replica failed")
    }
}

impl std::error::Error for PeerFailed {}

/// Rank 0's results, or the first error of a rank that failed by itself.
pub(crate) fn first_error<T>(results: Vec<Result<T>>) -> Result<T> {
    let own = |e: &anyhow::Error| e.downcast_ref::<PeerFailed>().is_none();
    if let Some(e) = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .find(|e| own(e))
    {
        return Err(anyhow!("{e:#}"));
    }
    results.into_iter().next().unwrap()
}

/// A point every rank reaches, learning there whether all got there without an error.
pub(crate) struct Meeting {
    barrier: Barrier,
    failed: AtomicBool,
}

impl Meeting {
    pub(crate) fn new(ranks: usize) -> Meeting {
        Meeting {
            barrier: Barrier::new(ranks),
            failed: AtomicBool::new(false),
        }
    }

    /// `r` once every rank has arrived, unless another rank arrived with an error.
    pub(crate) fn all_ok<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.failed.store(true, Ordering::SeqCst);
        }
        self.barrier.wait();
        match r {
            Ok(_) if self.failed.load(Ordering::SeqCst) => Err(PeerFailed.into()),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_that_fails_stops_every_rank_and_its_error_is_reported() {
        let results: Vec<Result<Vec<Epoch>>> = on_each_rank(3, |rank, meet| {
            let r = if rank == 2 {
                Err(anyhow!("GPU 2 is out of memory"))
            } else {
                Ok(vec![])
            };
            meet.all_ok(r)
        });
        assert!(results.iter().all(|r| r.is_err()));
        let e = first_error(results).err().unwrap().to_string();
        assert_eq!(e, "GPU 2 is out of memory");
        let fine = Meeting::new(1);
        assert!(fine.all_ok(Ok(1)).is_ok());
    }
}
