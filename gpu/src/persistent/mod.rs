//! A one-hidden-layer MLP trained by one persistent kernel: batch fetch, forward, softmax
//! cross-entropy, backward and the SGD update of many consecutive steps run inside one launch.
//! (The same step loop, `layers`, runs these phases once per hidden layer of deeper MLPs.)
//!
//! Why: at MNIST size (784-128-10, batch 128) a step is about 50 MFLOP, a few microseconds of
//! tensor-core work, while a step of a dozen dependent kernels spends most of its time launching
//! and draining them. Here blocks meet twice a step: all of them at a grid barrier, and the
//! blocks of each slice at the exchange of their gradients.
//!
//! Decomposition: the hidden units are cut in slices of 8 (one n = 8 `mma` tile) and the batch
//! in `P` parts, two (or four: below); block `P·s + h` owns slice `s` for part `h`. Each block
//! holds its slice's rows of W1, entries of b1 and columns of W2 (the blocks of a slice hold
//! identical copies) and its part of the batch (fp16, in shared memory: below). A step:
//! - forward, `H = relu(X·W1[s]ᵀ + b1[s])` for the block's rows: block-local;
//! - logits `H·W2ᵀ`: a sum over slices. Each block adds its partial product into one buffer in
//!   64-bit fixed point, whose adds are associative, so the sums do not depend on the order of
//!   arrival: runs repeat bit for bit and every block sees the same logits. Grid barrier;
//! - softmax cross-entropy and the gradients of the block's rows: dlogits, dH, and the
//!   block's share (its part of the batch) of `dW1[s]`, `db1[s]`, `dW2[:, s]`, `db2`;
//! - the blocks of a slice exchange their shares, add them in part order (so all get the same
//!   sums) and apply the same SGD update to their copies. On Hopper the two blocks of a pair
//!   are a thread-block cluster: the shares go straight into the partner's shared memory as
//!   `st.async` messages, which its `mbarrier` counts until all have arrived; elsewhere they go
//!   through global memory and the slice's blocks meet at a counter there.
//!
//! Where hidden layers are too wide for two blocks per 8 units to be resident at once, the
//! wide kernels (Hopper) give a block a slice of `N` n-tiles of 8 units (16 or 32 units): the
//! two blocks of a pair then each keep and update W1's state of half the slice's n-tiles and
//! send each other their new values (`exchange`).
//!
//! Past what the chip holds of W1's state (on an H100, 2,112 units in the wide kernels), the
//! offchip kernel (`offchip`) keeps W1's master values and momentum in global memory and gives
//! each block a slice of 32 units for the whole batch, streamed through a ring of chunks: no
//! exchange, one grid barrier a step.
//!
//! Splitting the batch halves the shared memory a block needs for it, which on Hopper leaves
//! room for a second buffer: the copy of the next batch (the step's largest transfer) overlaps
//! the step instead of preceding its forward. With room for one buffer (an A100), the next batch
//! refills it during the exchange and the update; with room for a quarter (99 KiB), the
//! one-buffer kernel splits the batch in four parts (four blocks a slice, summing their shares
//! in part order through global memory). The epoch's rows are shuffled before it by a
//! kernel of their own, in step order and each with its label, so a block's rows of a step are
//! one run of memory. Within a block, the forward's product splits the input over the warps
//! (all eight where their partial sums fit, the four tile warps with fp32 ones: no warp fetches
//! meanwhile, as Hopper's copy engine fetches two buffers' batch and one buffer fills after
//! dW1). Warps 0-3 then own the 16-row tiles of the batch through H, the partial logits and
//! dH, so those stay in registers as `mma` fragments (an accumulator fragment of one product is
//! the A fragment of the next); all eight share the softmax and dW1. W1's fp32 master values
//! and momentum live in registers for the whole launch.
//!
//! The variants (how the batch reaches shared memory, how many blocks share a slice and how
//! wide it is, where W1's state lives, how the partial logits are added) are the rows of one
//! table, [`persistent_variants!`](crate::persistent_variants) in `variant`: the kernels are
//! exported from it, each reading its row as constants, and the host chooses among its rows.
//!
//! The step is a sequence of phases, one file each (`layers::train` calls them in order): `fetch`
//! (the next batch), `forward`, `logits` (the partial logits and their exchange at the grid
//! barrier), `softmax` (cross-entropy and the gradient of the logits), `backward` (dH, db1,
//! dW2 and db2, dW1), `exchange` (the block's shares to its partner and the partner's back),
//! `update` (SGD). They share one `Block` (`context`): the block's role, its regions of
//! shared memory and the launch's parameters. `weights` brings the parameters in and out of the
//! launch, `smem` lays out shared memory, `stack` holds the layers of a launch, `between` what
//! passes between them, `export` the kernels, `shuffle` is the kernel that orders an epoch's
//! rows.
//!
//! Where not even one batch buffer fits a block's shared memory (at MNIST's batch of 128, GPUs
//! with 99 KiB a block or less), the *streamed* kernels (`stream`) hold no whole batch: the block's
//! rows pass through a ring of [`CHUNK`]-input chunks, once for the forward and once more for
//! dW1, loaded by `cp.async` (sm_80+) or through registers (sm_75) a few chunks ahead of the
//! one the warps read. `docs/persistent.md` explains the design and its measured costs.

/// Hidden units per n-tile: one n = 8 `mma` tile. A block's slice of the hidden units has one
/// n-tile, or (the wide and offchip variants) several: [`Variant::n`].
pub const UNITS: usize = 8;
/// Threads per block: 8 warps. Warps `0..TILE_WARPS` own the 16-row tiles of half the batch
/// (all eight those of the whole batch in the offchip kernel).
pub const THREADS: usize = 256;
pub const WARPS: usize = THREADS / 32;
pub const TILE_WARPS: usize = 4;
/// Limits of the kernel: four 16-row tiles per half batch (each warp of the forward takes all
/// four), seven 16-wide tiles of dW1ᵀ along the input per warp, the classes within one k = 16
/// step. The variants of four parts with a part's 64 rows (`quartered`, `deep_quartered`) take
/// twice the batch.
pub const MAX_BATCH: usize = 128;
pub const MAX_DIM: usize = 896;
pub const MAX_CLASSES: usize = 16;
/// 16-wide tiles of dW1ᵀ (along the input) per warp.
const TILES_PER_WARP: usize = MAX_DIM / 16 / WARPS;
/// 16-row tiles of a block's rows of the batch, at most: with the batch in two parts.
const MAX_TILES: usize = tiles(PAIR);
/// Bytes of the forward's partial sums with slices of `n` n-tiles: a fragment of fp16
/// accumulators per warp, tile, n-tile and lane (fp32 ones take twice the bytes: half the
/// warps then split the forward).
pub const fn partials_bytes(n: usize) -> usize {
    WARPS * MAX_TILES * n * 32 * 8
}

/// The n-tiles of a slice of `n` whose W1 master values and momentum a block keeps and
/// updates: every one of a slice of one (both blocks of a slice update the same copy); with
/// more, the blocks of a pair split them, each sending the other its gradient share of the
/// other's n-tiles and then their new values.
pub const fn owned(n: usize) -> usize {
    if n == 1 { 1 } else { n / PAIR }
}
const _: () = assert!(
    WARPS * TILES_PER_WARP * 16 == MAX_DIM,
    "the warps' tiles cover MAX_DIM"
);

/// 16-row tiles of a block's part of the batch at most, with the batch in `parts` parts.
pub const fn tiles(parts: usize) -> usize {
    MAX_BATCH / 16 / parts
}
/// The parts of the two-buffer and streamed kernels.
pub const PAIR: usize = 2;
/// Parts at most: the one-buffer kernels' quarters of the batch.
pub const MAX_PARTS: usize = 4;

/// Inputs per chunk of the streamed kernels: one 16-wide tile of dW1ᵀ per warp, so chunk `c`
/// holds tile `w + WARPS·c` of each warp `w`, the tiles whose W1 elements the warp keeps in
/// registers, and the forward's k-steps `8c..8c + 8`.
pub const CHUNK: usize = WARPS * 16;
/// Chunks of a row at most: one per dW1ᵀ tile a warp keeps.
pub const MAX_CHUNKS: usize = MAX_DIM / CHUNK;
/// Stages of the streamed kernels' ring: at least two (one read while the next arrives), at
/// most six (`cp.async.wait_group` takes its count as an immediate, so the ring's wait has an
/// arm per count). Where more would fit, one whole-batch buffer fits too at MNIST's size, and
/// the host takes that.
pub const MIN_STAGES: usize = 2;
pub const MAX_STAGES: usize = 6;
const _: () = assert!(
    MAX_CHUNKS == TILES_PER_WARP,
    "a chunk per dW1 tile of a warp"
);

/// The kernel's parameters, passed by value as one `.param` block: `#[repr(C)]` gives the
/// host and the device the same layout, so the parameter list is written once. Device
/// addresses are `u64`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// The epoch's examples in shuffled order as the kernel `mlp_persistent_shuffle` writes
    /// them: [`row_stride`] bytes a row, the features, then the label.
    pub batches: u64,
    /// Every parameter: fp32 master values, their fp16 copy, SGD momentum.
    pub w32: u64,
    pub w16: u64,
    pub vel: u64,
    /// Each step's mean loss and correct count, added at `[step]` (zeroed by the host).
    pub loss: u64,
    pub correct: u64,
    /// Fixed-point logit sums ([`LOGIT_SLOTS`] slots), the blocks' [`EXCHANGE`] areas of each
    /// hidden layer (`[layer][block]`) and the barrier counters ([`counters`]; zeroed by the
    /// host before each launch).
    pub logits: u64,
    pub exchange: u64,
    pub counters: u64,
    /// What the layer engine's blocks share: the later layers' inputs, output gradients and W
    /// copies ([`Scratch`]; unused by the one-layer kernels).
    pub scratch: u64,
    /// Hidden layers; the width of every layer: the input, each hidden layer, then the
    /// classes at `widths[layers + 1]` (zeros past them).
    pub layers: u32,
    pub widths: [u32; MAX_LAYERS + 2],
    /// Offsets of each layer's weights and bias in the parameter buffers, the output layer's
    /// at `[layers]`.
    pub o_w: [u32; MAX_LAYERS + 1],
    pub o_b: [u32; MAX_LAYERS + 1],
    /// Rows of the batch.
    pub batch: u32,
    pub lr: f32,
    pub momentum: f32,
    /// This launch runs steps `step0..step0 + steps` of the epoch: step `k` reads rows
    /// `k·batch..(k + 1)·batch` of `batches`.
    pub step0: u32,
    pub steps: u32,
    /// The streamed kernels' ring stages ([`Smem::streamed`]), `MIN_STAGES..=MAX_STAGES` (two
    /// on sm_75); unused by the others, whose kernel says how many whole-batch buffers they
    /// have.
    pub stages: u32,
    /// Where the phase trace goes ([`trace`]), in a build with it; 0 for none.
    pub trace: u64,
}

impl Params {
    /// Hidden layer `l` as its blocks see it.
    #[inline(always)]
    pub const fn layer(&self, l: usize) -> Layer {
        let last = l + 1 == self.layers as usize;
        Layer {
            index: l as u32,
            dim: self.widths[l],
            hidden: self.widths[l + 1],
            classes: if last { self.widths[l + 2] } else { 0 },
            o_w1: self.o_w[l],
            o_b1: self.o_b[l],
            o_w2: self.o_w[l + 1],
            o_b2: self.o_b[l + 1],
        }
    }
}

/// Most hidden layers of a model the persistent kernels train.
pub const MAX_LAYERS: usize = 4;

/// One hidden layer of the model as the phases of a step see it, whatever its depth: its
/// input width (`dim`) and units (`hidden`), the classes where the next layer is the output
/// (0 elsewhere), and the offsets of its weights and bias (`o_w1`, `o_b1`) and of the next
/// layer's (`o_w2`, `o_b2`, read where it has classes).
#[derive(Clone, Copy, Debug)]
pub struct Layer {
    /// Its place in the model, from 0: which of the exchange's areas and counters it uses.
    pub index: u32,
    pub dim: u32,
    pub hidden: u32,
    pub classes: u32,
    pub o_w1: u32,
    pub o_b1: u32,
    pub o_w2: u32,
    pub o_b2: u32,
}

/// Elements of the global logits buffer per step: the sums ([`logits_row`] to a row), then a
/// count of partial values that were not finite (or too large for the fixed point), which
/// turns the loss into NaN, and one element of padding (every slot starts on 16 bytes).
pub const fn logits_slot(batch: usize, classes: usize) -> usize {
    batch * logits_row(classes) + 2
}

/// Elements of a row of logit sums: an even number, so that each row starts on 16 bytes and
/// the softmax loads the sums in pairs.
pub const fn logits_row(classes: usize) -> usize {
    classes.next_multiple_of(2)
}

/// Bytes per row of the batch ([`Smem::stride`]) for inputs of width `dim`.
pub const fn row_stride(dim: usize) -> usize {
    ((dim * 2).div_ceil(16) | 1) * 16
}

/// Byte offset of a row's label (u32) in its row of `batches` and of the shared batch buffers:
/// the 16 bytes after the features, which a row's stride leaves free.
pub const fn label_offset(dim: usize) -> usize {
    2 * dim
}

/// The logits buffer rotates over three slots: step k adds into slot k % 3 while block 0
/// clears slot (k + 1) % 3, which every block finished reading before step k began.
pub const LOGIT_SLOTS: usize = 3;

/// Words a block leaves for the other blocks of its slice each step, in fragment order (so
/// both the writes and the reads are coalesced): its share of dW1 as fp16 pairs
/// (`[tile][pair][lane]`; the layered path keeps weight gradients in fp16 too), then f32 shares
/// of dW2 and db2 (`[element][lane]` each) and of db1. (Within a Hopper cluster they go to the
/// partner's shared memory; slices of one n-tile only exchange through global memory.) Then, in
/// four parts, the warps' sums of slice 0's loss and correct count.
pub const EXCHANGE: usize = WARPS * TILES_PER_WARP * 2 * 32 + small_shares(1) + 2 * WARPS;
/// Words of the shares of dW2 and db2 and of db1 with slices of `n` n-tiles.
pub const fn small_shares(n: usize) -> usize {
    own_shares(n) + n * UNITS
}
/// Words of the shares of dW2 (one `mma` fragment per n-tile) and db2 (one fragment).
pub const fn own_shares(n: usize) -> usize {
    (n + 1) * 4 * 32
}

mod deep;
pub use deep::*;
mod flagged;
pub use flagged::plane_words;
mod select;
pub use select::{pick, put};
mod smem;
pub use smem::*;
mod variant;
pub use variant::*;
pub mod trace;

#[cfg(target_arch = "nvptx64")]
mod backward;
#[cfg(target_arch = "nvptx64")]
mod context;
#[cfg(target_arch = "nvptx64")]
mod exchange;
#[cfg(target_arch = "nvptx64")]
mod fetch;
#[cfg(target_arch = "nvptx64")]
mod forward;
#[cfg(target_arch = "nvptx64")]
mod logits;
#[cfg(target_arch = "nvptx64")]
mod owners;
#[cfg(target_arch = "nvptx64")]
mod shuffle;
#[cfg(target_arch = "nvptx64")]
mod softmax;
#[cfg(target_arch = "nvptx64")]
mod stream;
#[cfg(target_arch = "nvptx64")]
mod update;
#[cfg(target_arch = "nvptx64")]
mod weights;

#[cfg(target_arch = "nvptx64")]
mod between;
#[cfg(target_arch = "nvptx64")]
mod plane;
#[cfg(target_arch = "nvptx64")]
mod stack;

// The step loops, each apart from the types above that every phase shares: one to four
// hidden layers (`layers`), and W1's state in global memory (`offchip`); and the kernels'
// exports, each to its loop.
#[cfg(target_arch = "nvptx64")]
#[rustfmt::skip::macros(export)]
mod export;
#[cfg(target_arch = "nvptx64")]
mod layers;
// The offchip kernel is Hopper's alone.
#[cfg(all(
    target_arch = "nvptx64",
    target_feature = "sm_90",
    target_feature = "ptx81"
))]
mod offchip;
