//! How a run trains each epoch, and why: the persistent kernel (one launch an epoch) wherever it
//! supports the run on one GPU, else the layered step (a kernel per operation, replayed from a
//! CUDA graph of several steps).
use super::options::Options;
use super::persistent::{self, Feed, Persistent, Support};
use super::shape::StepShape;
use crate::cuda::Gpu;
use anyhow::Result;
use cudarc::driver::CudaGraph;

/// How a run trains each epoch.
pub(super) enum Engine {
    /// One launch of the persistent kernel runs the whole epoch.
    Persistent(Box<Persistent>),
    /// One kernel per operation of each step.
    Layered(Layered),
}

pub(super) struct Layered {
    /// Why the persistent kernel does not train this run; `None` where the run asked for the
    /// layered engine.
    pub why_not_persistent: Option<String>,
    /// [`graph_steps`] steps captured in one graph, replayed until the epoch is done; `None`
    /// for eager launches.
    pub graph: Option<CudaGraph>,
}

/// Steps one graph holds at most. Replaying several steps a launch saves the GPU the gap between
/// two graph launches at each step; the gain levels off well before 16 (`docs/gemm.md`, "Fewer
/// launches in the layered step").
const GRAPH_STEPS: usize = 16;

/// Steps captured in the layered engine's graph: the largest divisor of the epoch's `steps` up
/// to [`GRAPH_STEPS`], so that whole replays make the epoch.
pub(super) fn graph_steps(steps: usize) -> usize {
    (1..=GRAPH_STEPS)
        .rev()
        .find(|k| steps.is_multiple_of(*k))
        .unwrap_or(1)
}

/// The engine a run asks for and the GPU allows, decided before anything is carved.
pub(super) enum Choice {
    Persistent(Feed),
    /// With why the persistent kernel does not apply, where the run did not ask for this.
    Layered(Option<String>),
}

impl Choice {
    /// The persistent kernel trains whatever it supports on one GPU, unless the run asks for the
    /// layered engine (or for what only it has: a forced GEMM configuration, eager launches).
    pub fn new(
        gpu: &Gpu,
        o: &Options,
        sizes: &[usize],
        step: &StepShape,
        replica: bool,
    ) -> Result<Choice> {
        if o.layered || o.config.is_some() || !o.graph {
            return Ok(Choice::Layered(None));
        }
        if replica {
            let why = "it trains on one GPU, and this run takes several";
            return Ok(Choice::Layered(Some(why.into())));
        }
        let (batch, steps, units) = (step.batch, step.steps, o.slice_units);
        Ok(
            match persistent::support_sliced(gpu, sizes, batch, steps, o.accum, units)? {
                Support::Yes(feed) => Choice::Persistent(feed),
                Support::No(why) => Choice::Layered(Some(why)),
            },
        )
    }
}

impl Engine {
    /// The engine in the words of a run's first line; `graph`: whether the layered engine
    /// replays a graph or launches eagerly.
    pub fn describe(&self, graph: bool) -> String {
        match self {
            Engine::Persistent(p) => format!(
                "persistent kernel ({} blocks{})",
                p.blocks(),
                p.feed().describe()
            ),
            Engine::Layered(Layered {
                why_not_persistent: Some(why),
                ..
            }) => format!("CUDA graph (the persistent kernel does not apply: {why})"),
            Engine::Layered(_) if graph => "CUDA graph".into(),
            Engine::Layered(_) => "eager launches".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_holds_the_largest_divisor_of_the_epoch_up_to_16_steps() {
        // MNIST at batch 128: 468 steps, 36 replays of 13.
        assert_eq!(graph_steps(468), 13);
        assert_eq!(graph_steps(469), 7);
        assert_eq!(graph_steps(480), 16);
        assert_eq!(graph_steps(467), 1);
        assert_eq!(graph_steps(3), 3);
        assert_eq!(graph_steps(1), 1);
    }
}
