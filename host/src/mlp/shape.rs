//! The shapes of a run's passes over the data: a training step's (the global batch, this GPU's
//! rows of it, the steps of an epoch) and the evaluation's (the test set in chunks of rows).
//! Everything that sizes buffers, launches or lines of output by them takes them from here.

/// The shape of a training step. `batch` is the step's examples over every GPU (`--batch`);
/// `rows` is this GPU's share of them, the rows its buffers hold and its kernels take: the
/// whole batch on one GPU, `batch / replicas` on each replica of a data-parallel run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// Examples of one step, over every GPU.
    pub batch: usize,
    /// This GPU's rows of each step.
    pub rows: usize,
    /// Steps of an epoch: the last partial batch is dropped.
    pub steps: usize,
}

impl StepShape {
    /// Steps of `batch` examples over a training set of `train_count`, shared equally by
    /// `replicas` GPUs (1 for one GPU). The options' checks ensure that they share it evenly.
    pub fn new(batch: usize, train_count: usize, replicas: usize) -> StepShape {
        StepShape {
            batch,
            rows: batch / replicas,
            steps: train_count / batch,
        }
    }

    /// The first row of the batch that replica `rank` takes: replica `r` takes the `r`-th share.
    pub fn first_row(&self, rank: usize) -> usize {
        rank * self.rows
    }

    /// Examples an epoch trains on, over every GPU.
    pub fn epoch_examples(&self) -> usize {
        self.steps * self.batch
    }
}

/// Test rows of one evaluation forward pass at most: the activations of one pass are sized by
/// it, and the passes that cover a larger test set are few.
const EVAL_ROWS: usize = 8192;

/// The shape of an evaluation: the test set in `chunks` forward passes of up to `rows` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalShape {
    pub rows: usize,
    pub chunks: usize,
}

impl EvalShape {
    /// The passes that cover a test set of `test_count` examples.
    pub fn new(test_count: usize) -> EvalShape {
        let rows = test_count.min(EVAL_ROWS);
        EvalShape {
            rows,
            chunks: test_count.div_ceil(rows),
        }
    }

    /// The rows of chunk `c` of a test set of `test_count` examples: whole chunks, then the
    /// rest.
    pub fn rows_of(&self, c: usize, test_count: usize) -> usize {
        self.rows.min(test_count - c * self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_takes_an_equal_share_of_every_step() {
        let one = StepShape::new(128, 60_000, 1);
        assert_eq!((one.batch, one.rows, one.steps), (128, 128, 468));
        assert_eq!(one.epoch_examples(), 468 * 128);
        let two = StepShape::new(128, 60_000, 2);
        assert_eq!((two.batch, two.rows, two.steps), (128, 64, 468));
        assert_eq!(two.first_row(1), 64);
    }

    #[test]
    fn the_evaluation_covers_the_test_set_in_chunks() {
        let e = EvalShape::new(10_000);
        assert_eq!((e.rows, e.chunks), (8192, 2));
        assert_eq!((e.rows_of(0, 10_000), e.rows_of(1, 10_000)), (8192, 1808));
        let small = EvalShape::new(30);
        assert_eq!(
            (small.rows, small.chunks, small.rows_of(0, 30)),
            (30, 1, 30)
        );
    }
}
