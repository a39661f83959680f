//! Parameter blocks of kernels with more than a few parameters, shared with the host: each
//! kernel takes one `#[repr(C)]` struct by value, so its parameter list is written once and the
//! host fills it by name. Device addresses are `u64`.

/// The parameters of `gather_batch`: rows `first..first + rows` of step `*step` of the epoch
/// keyed `*seed`, a step being `step_rows` rows of the shuffled training set. One GPU takes a
/// whole step (`first` 0, `rows` = `step_rows`); each data-parallel replica takes its share.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GatherBatch {
    /// The training set: `n` rows of `dim` fp16 features, and a `u8` label each.
    pub x: u64,
    pub y: u64,
    pub n: u32,
    pub dim: u32,
    /// The batch's features and labels, `rows` rows.
    pub xb: u64,
    pub yb: u64,
    pub rows: u32,
    pub step_rows: u32,
    pub first: u32,
    /// Where the step within the epoch and the epoch's shuffle key are read (`u32` each), so
    /// that a graph replays the same launch at every step.
    pub step: u64,
    pub seed: u64,
}

/// The parameters of `softmax_ce`: softmax cross-entropy of `rows` rows of `classes` logits
/// against their labels.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxCe {
    /// The logits, fp16, row `r` from element `r·ld`; the labels, a `u8` per row.
    pub logits: u64,
    pub labels: u64,
    pub rows: u32,
    pub classes: u32,
    pub ld: u32,
    /// The factor that scales the logits' gradient.
    pub scale: f32,
    /// The logits' gradient, `rows × classes` fp16 from element `r·ld`, or 0 for none; with it,
    /// the logits' bias gradient, `classes` fp16, or with `sgd` its step: `db` is then the
    /// bias's fp16 copy.
    pub dlogits: u64,
    pub db: u64,
    pub sgd: crate::gemm::Sgd,
    /// Where the mean loss and the count of rows whose arg-max is the label go (f32 each), in
    /// slot `*step`.
    pub loss: u64,
    pub correct: u64,
    /// Where the slot is read (`u32`) and then advanced, so that a replayed graph fills one
    /// slot per step; 0 for slot 0.
    pub step: u64,
    /// Each block's sums (f32): the loss and correct count of its rows, a pair a block, then
    /// its rows' column sums of the logits' gradient, `classes` a block
    /// ([`softmax_partials`](crate::softmax_partials) values); and the count of blocks done
    /// (`u32`, zero before the launch; the last block sets it back to zero).
    pub partials: u64,
    pub done: u64,
}

/// The parameters of `bias_grad`: the column sums of `rows × cols` fp16 `dy` (leading dimension
/// `ld` ≥ `cols`, `rows × ld` elements: the padding of every row is read) into `db`, fp16; or
/// with `sgd` the step they are the gradient of, `db` then being the bias's fp16 copy.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BiasGrad {
    pub dy: u64,
    pub rows: u32,
    pub cols: u32,
    pub ld: u32,
    pub db: u64,
    pub sgd: crate::gemm::Sgd,
    /// Each slice of rows' column sums (f32, slice-major), and the count of slices done for each
    /// group of columns (`u32`, zero before the launch; the group's last block to finish sets
    /// it back to zero): [`bias_grad_scratch`](crate::bias_grad_scratch) values each, 0 where it
    /// gives none.
    pub partials: u64,
    pub done: u64,
}

/// The parameters of `sgd_update`: one step of SGD with momentum over `n` parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SgdUpdate {
    /// The fp32 master weights, their fp16 copy, the fp16 gradients and the fp32 momentum,
    /// `n` each.
    pub w: u64,
    pub w16: u64,
    pub g: u64,
    pub v: u64,
    pub n: u32,
    pub lr: f32,
    pub momentum: f32,
}

/// The parameters of `regression_generate`: `n` points of `y = w·x + b + noise·N(0, 1)` in the
/// split order keyed `seed`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegressionGenerate {
    /// Where the points go: `n` f32 each.
    pub x: u64,
    pub y: u64,
    pub n: u32,
    /// The line and the standard deviation of its noise.
    pub w: f32,
    pub b: f32,
    pub noise: f32,
    pub seed: u32,
}

/// The parameters of `regression_fused`: the partial sums of `n` points, by blocks
/// `block_offset..` of a grid of `blocks`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegressionFused {
    /// The points: `n` f32 each.
    pub x: u64,
    pub y: u64,
    /// `w` and `b` (f32 each).
    pub params: u64,
    /// The partial sums: three f64 per block of the whole grid.
    pub partials: u64,
    pub n: u32,
    pub block_offset: u32,
    pub blocks: u32,
}

/// The gradient step of the regression kernels that end an epoch: from the sums over `n`
/// points, the epoch's loss into `history[*epoch]`, the step of `params` with learning rate
/// `lr`, then `*epoch += 1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegressionStep {
    /// `w` and `b` (f32 each).
    pub params: u64,
    /// The loss of each epoch (f32) and the epoch (`u32`).
    pub history: u64,
    pub epoch: u64,
    /// The points the sums are over, and the learning rate.
    pub n: u32,
    pub lr: f32,
}

/// The parameters of `regression_update`: the step from the totals `sums` (three f64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegressionUpdate {
    pub sums: u64,
    pub step: RegressionStep,
}

/// The parameters of `regression_reduce_update`: the step from the totals of `blocks` partial
/// triples (f64) at `partials`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegressionReduceUpdate {
    pub partials: u64,
    pub blocks: u32,
    pub step: RegressionStep,
}

/// The parameters of `mlp_persistent_shuffle`: rows `0..count` of the epoch keyed `seed` of a
/// training set of `n` examples, in the layout the persistent kernel copies.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PersistentShuffle {
    /// The training set: `n` rows of `dim` fp16 features, and a `u8` label each.
    pub x: u64,
    pub y: u64,
    /// The rows in shuffled order, [`row_stride`](crate::persistent::row_stride)`(dim)` bytes
    /// each.
    pub out: u64,
    pub n: u32,
    pub dim: u32,
    pub seed: u32,
    pub count: u32,
}
