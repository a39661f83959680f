//! The phase trace. Built with `GPU_PHASE_TRACE=1` (`build.rs` then compiles the PTX with
//! `--cfg phase_trace`), each block's thread 0 reads the GPU's nanosecond clock as a step
//! starts and at the end of each of its phases, into `Params::trace`: `[step][block][mark]`,
//! [`MARKS`] marks a step and block, step counted from the epoch's first. `host mnist --phases`
//! prints the medians. Without it `Trace` holds nothing and marks nothing: the kernels are a
//! plain build's.
//!
//! Each loop's phases are a table here, which the host prints by; a loop marks them in order,
//! one `Trace::mark` a phase, and a block that skips a phase marks it anyway.
#[cfg(target_arch = "nvptx64")]
use super::Params;

/// The phases of `layers::train` with one hidden layer, whose last layer's shares are marked
/// apart.
pub const ONE_LAYER: &[&str] = &[
    "batch and W1 wait",
    "forward",
    "partial logits",
    "logits exchange",
    "softmax",
    "dH, db1 shares",
    "dW2 shares",
    "dW1 shares",
    "loss sums",
    "receive",
    "update",
];

/// The phases of `layers::train` with two, three and four hidden layers; a
/// shadow block of a layer marks its phases of that layer as it passes them (and refills the
/// batch buffer in the first receive it runs).
pub const TWO_LAYERS: &[&str] = &[
    "W publish, batch wait",
    "L1 forward",
    "publish H1",
    "gather H1",
    "L2 forward, partial logits",
    "logits exchange",
    "softmax, dZ2 publish",
    "L2 shares",
    "dH1 (gathers dZ2, W2)",
    "L1 shares",
    "L2 receive, refill, update",
    "L1 receive, update",
];
pub const THREE_LAYERS: &[&str] = &[
    "W publish, batch wait",
    "L1 forward",
    "publish H1",
    "gather H1",
    "L2 forward, publish H2",
    "gather H2",
    "L3 forward, partial logits",
    "logits exchange",
    "softmax, dZ3 publish",
    "L3 shares",
    "dH2 (gathers dZ3, W3)",
    "dZ2 publish, L2 shares",
    "dH1 (gathers dZ2, W2)",
    "L1 shares",
    "L3 receive, refill, update",
    "L2 receive, update",
    "L1 receive, update",
];
pub const FOUR_LAYERS: &[&str] = &[
    "W publish, batch wait",
    "L1 forward",
    "publish H1",
    "gather H1",
    "L2 forward, publish H2",
    "gather H2",
    "L3 forward, publish H3",
    "gather H3",
    "L4 forward, partial logits",
    "logits exchange",
    "softmax, dZ4 publish",
    "L4 shares",
    "dH3 (gathers dZ4, W4)",
    "dZ3 publish, L3 shares",
    "dH2 (gathers dZ3, W3)",
    "dZ2 publish, L2 shares",
    "dH1 (gathers dZ2, W2)",
    "L1 shares",
    "L4 receive, refill, update",
    "L3 receive, update",
    "L2 receive, update",
    "L1 receive, update",
];

/// The offchip loop's phases (`offchip::train`).
pub const OFFCHIP: &[&str] = &[
    "forward",
    "partial logits",
    "logits exchange",
    "softmax, loss sums",
    "dH",
    "db1",
    "dW2",
    "dW1 and its step",
    "small steps",
];

/// The phases of the loop variant `v` runs.
pub const fn phases_of(v: &super::Variant) -> &'static [&'static str] {
    if v.layers == 2 {
        TWO_LAYERS
    } else if v.layers == 3 {
        THREE_LAYERS
    } else if v.layers == 4 {
        FOUR_LAYERS
    } else if v.offchip() {
        OFFCHIP
    } else {
        ONE_LAYER
    }
}

/// Marks a step and block: its start, then room for the longest loop's phases.
pub const MARKS: usize = 1 + max_len(&[ONE_LAYER, TWO_LAYERS, THREE_LAYERS, FOUR_LAYERS, OFFCHIP]);

const fn max_len(tables: &[&[&str]]) -> usize {
    let (mut i, mut most) = (0, 0);
    while i < tables.len() {
        if tables[i].len() > most {
            most = tables[i].len();
        }
        i += 1;
    }
    most
}

/// One block's marks of one step: where the next goes. Empty without the trace.
#[cfg(target_arch = "nvptx64")]
pub struct Trace {
    #[cfg(phase_trace)]
    at: *mut u64,
}

#[cfg(target_arch = "nvptx64")]
impl Trace {
    /// Marks the start of step `k` of this launch (thread 0 of each block), where
    /// `args.trace` is set.
    #[inline(always)]
    pub fn start(args: &Params, k: u32) -> Trace {
        #[cfg(phase_trace)]
        {
            use crate::arch::{block_x, grid_dim_x, thread_x};
            let row = (args.step0 + k) as usize * grid_dim_x() as usize + block_x() as usize;
            let at = if args.trace == 0 || thread_x() != 0 {
                core::ptr::null_mut()
            } else {
                (args.trace as *mut u64).wrapping_add(row * MARKS)
            };
            let mut t = Trace { at };
            t.mark();
            t
        }
        #[cfg(not(phase_trace))]
        {
            let _ = (args, k);
            Trace {}
        }
    }

    /// Marks the end of the next phase.
    #[inline(always)]
    pub fn mark(&mut self) {
        #[cfg(phase_trace)]
        if !self.at.is_null() {
            unsafe {
                *self.at = crate::arch::global_timer();
                self.at = self.at.add(1);
            }
        }
    }

    /// Marks the end of the next phase where `phase` says the loop marks it apart.
    #[inline(always)]
    pub fn mark_if(&mut self, phase: bool) {
        if phase {
            self.mark();
        }
    }

    /// Marks `n` phases this block passes without work.
    #[inline(always)]
    pub fn skip(&mut self, n: usize) {
        for _ in 0..n {
            self.mark();
        }
    }
}
