//! The persistent kernel's variants: one row each of [`persistent_variants!`](crate::persistent_variants),
//! the table that the kernels' exports, the host's choice and its printed reasons, the
//! shared-memory layout and `host info` all read. A variant is a way of feeding the batch and
//! holding W1 that some GPU generation needs; the host takes the first row, in table order,
//! that the loaded PTX has, whose layout fits the block's shared memory and whose blocks are
//! all resident at once.
use super::*;
use crate::gemm::{Accum, accum};
use crate::target::Target;

/// How the batch reaches a block's shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    /// Two buffers of the block's whole rows: the next batch arrives in one while the step
    /// reads the other.
    Double,
    /// One buffer of the block's whole rows, refilled with the next batch once dW1 has read it.
    Single,
    /// A ring of `stages` buffers of one [`CHUNK`]-input chunk of every row, through which the
    /// rows pass twice a step (`stream`).
    Ring,
}

/// Where W1's fp32 master values and momentum live, and its fp16 copy (which the forward reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum W1State {
    /// Master values and momentum in registers for the whole launch, the fp16 copy in shared
    /// memory.
    Registers,
    /// All three in registers, the fp16 copy as the forward's B fragments: eight warps split
    /// the forward over the k-steps that are their own dW1 tiles, so each reads only values it
    /// updates itself (one batch buffer in 64 KiB at MNIST's size).
    RegistersWithCopy,
    /// Master values and momentum in global memory, read and written once a step as each dW1
    /// tile is applied; the fp16 copy in shared memory (widths past what the chip's registers
    /// hold). Its blocks take the whole batch and never exchange gradients (`offchip`).
    Global,
}

/// How the blocks add their partial logits into the step's sums in global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// A `red` per value: cheapest for few slices.
    Red,
    /// Staged in shared memory and added by bulk reductions (Hopper): one round trip whatever
    /// the slice count, where the `red`s contend in L2 the more slices add into each sum.
    Bulk,
}

/// The PTX architectures that export a variant: from `min` on, up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Archs {
    pub min: u32,
    pub max: u32,
}

/// One variant of the persistent kernel (a row of [`VARIANTS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The row's name: its kernels are exported as `mlp_persistent_{name}_{f16|f32}`.
    pub name: &'static str,
    pub batch: Batch,
    /// Blocks per slice of hidden units, each with its part of the batch: 2 (a pair, on Hopper
    /// a cluster), 4 (the quarters, through global memory) or 1 (the whole batch).
    pub parts: usize,
    /// The largest batch it takes: [`MAX_BATCH`], or twice that in four parts of the rows a
    /// pair's block holds.
    pub most_batch: usize,
    /// n-tiles of [`UNITS`] hidden units in a block's slice.
    pub n: usize,
    pub w1: W1State,
    pub logits: Logits,
    /// The accumulators it has a kernel for: fp32 ones of several n-tiles take more
    /// registers than a thread has.
    pub accums: &'static [Accum],
    pub archs: Archs,
    /// The fewest slices it is taken for (the bulk reductions pay from many slices on).
    pub min_slices: usize,
    /// Ring stages it runs with, fewest and most (rings only; sm_75's ring loads through
    /// registers, which hold one chunk ahead: two stages).
    pub stages: (usize, usize),
    /// Hidden layers of the models it trains: 1, or 2 to [`MAX_LAYERS`] (the `deep` rows).
    pub layers: usize,
    /// The widest input of a layer past the first (0 with one layer): it sets the input tiles
    /// whose W state a thread of those layers keeps in registers ([`Variant::inner_tiles`]).
    pub inner: usize,
}

impl Variant {
    /// Whether PTX built for `target` exports this variant.
    pub const fn exists_in(&self, target: Target) -> bool {
        target.among(self.archs.min, self.archs.max)
    }
    pub const fn has(&self, acc: Accum) -> bool {
        acc.among(self.accums)
    }
    /// 16-wide input tiles a warp of a layer past the first holds, at most.
    pub const fn inner_tiles(&self) -> usize {
        self.inner / 16 / WARPS
    }
    /// Hidden units a block.
    pub const fn units(&self) -> usize {
        self.n * UNITS
    }
    /// 16-row tiles of a block's part of the batch, at most.
    pub const fn tiles(&self) -> usize {
        self.most_batch / 16 / self.parts
    }
    /// Whether it takes a batch of `batch` rows.
    pub const fn takes_batch(&self, batch: usize) -> bool {
        batch <= self.most_batch
    }
    /// n-tiles whose W1 state a block keeps and updates ([`owned`]).
    pub const fn owned(&self) -> usize {
        owned(self.n)
    }
    pub const fn ring(&self) -> bool {
        matches!(self.batch, Batch::Ring)
    }
    pub const fn single(&self) -> bool {
        matches!(self.batch, Batch::Single)
    }
    pub const fn offchip(&self) -> bool {
        matches!(self.w1, W1State::Global)
    }
    pub const fn w1_copy_in_registers(&self) -> bool {
        matches!(self.w1, W1State::RegistersWithCopy)
    }
    pub const fn bulk(&self) -> bool {
        matches!(self.logits, Logits::Bulk)
    }
    /// Whether a slice's blocks form a cluster with PTX built for `target` and exchange
    /// through distributed shared memory: a pair, on Hopper.
    pub const fn clustered(&self, target: Target) -> bool {
        target.clusters() && self.parts == PAIR
    }
    /// Whether it runs with `stages` ring stages (any count where it has no ring).
    pub const fn takes_stages(&self, stages: usize) -> bool {
        !self.ring() || (self.stages.0 <= stages && stages <= self.stages.1)
    }

    /// The shared-memory layout of a block for a batch of `batch` × `dim` with `stages` ring
    /// stages (ignored without a ring): the one function host and kernel both lay it out by.
    pub const fn smem(&self, batch: usize, dim: usize, stages: usize) -> Smem {
        match (self.batch, self.w1) {
            (Batch::Ring, W1State::Global) => Smem::offchip(batch, dim, self.n, stages),
            (Batch::Ring, _) => Smem::streamed(batch, dim, stages),
            (_, _) if self.n > 1 => Smem::wide(batch, dim, self.n),
            (Batch::Double, _) => Smem::whole(batch, dim, 2, self.parts, false),
            (Batch::Single, w1) => Smem::whole(
                batch,
                dim,
                1,
                self.parts,
                matches!(w1, W1State::RegistersWithCopy),
            ),
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl std::fmt::Display for Archs {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        if self.min == self.max {
            write!(f, "sm_{} PTX only", self.min)
        } else {
            write!(f, "PTX from sm_{} on", self.min)
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl Variant {
    /// Its kernel's exported name with accumulator `acc`, if it has one.
    pub fn kernel(&self, acc: Accum) -> Option<String> {
        self.has(acc)
            .then(|| format!("mlp_persistent_{}_{}", self.name, acc.suffix()))
    }

    /// How the first line of a run names it, after the block count.
    pub fn describe(&self, stages: usize) -> String {
        let units = self.units();
        // Said where the batch is not in a pair's halves (the offchip row says its own).
        let parts = if self.parts == MAX_PARTS {
            format!(", the batch in {} parts", self.parts)
        } else {
            String::new()
        };
        let single = ", one batch buffer refilled after dW1";
        match (self.batch, self.w1) {
            _ if self.layers > 1 => format!(", {} hidden layers{single}{parts}", self.layers),
            (Batch::Double, _) => parts,
            (Batch::Ring, W1State::Global) => format!(
                ", {units} hidden units a block, the whole batch streamed in {CHUNK}-input \
                 chunks through {stages} stages, W1's state in global memory"
            ),
            (Batch::Ring, _) => {
                format!(", the batch streamed in {CHUNK}-input chunks through {stages} stages")
            }
            (Batch::Single, _) if self.n > 1 => format!(", {units} hidden units a block{single}"),
            (Batch::Single, _) => format!("{single}{parts}"),
        }
    }
}

/// The one table to edit to add a variant, in the order the host prefers them. Each row: name,
/// batch ([`Batch`]), parts, the largest batch, n-tiles, W1 ([`W1State`]), logits
/// ([`Logits`]), accumulators, the PTX that exports it (`from` an architecture on, or `only`
/// one), the fewest slices it is taken for, ring stages (fewest, most; `-` without a ring),
/// hidden layers, the widest input of a layer past the first (`-` with one).
/// `persistent::kernel` exports every row's kernels under the row's `cfg`.
#[macro_export]
macro_rules! persistent_variants {
    ($then:ident) => {
        $then! {
            // Hopper, many slices of 8 units (from 24): two buffers, the partial logits added
            // by bulk reductions.
            (bulk, Double, 2, 128, 1, Registers, Bulk, [f16], from 90, 24, -, 1, -),
            // Two buffers of half the batch each (at MNIST's size only Hopper's 227 KiB), the
            // next batch fetched by the copy engine.
            (whole, Double, 2, 128, 1, Registers, Red, [f16 f32], from 90, 1, -, 1, -),
            // Hopper, batches of 129 to 256: two buffers of a quarter of the batch each, the
            // shares of the four parts summed through global memory.
            (quartered, Double, 4, 256, 1, Registers, Red, [f16 f32], from 90, 1, -, 1, -),
            // One buffer of half the batch (an A100's 163 KiB), or of a quarter (99 KiB).
            (single, Single, 2, 128, 1, Registers, Red, [f16 f32], from 80, 1, -, 1, -),
            (quarters, Single, 4, 128, 1, Registers, Red, [f16 f32], from 80, 1, -, 1, -),
            // Turing: a quarter with W1's fp16 copy in registers fits 64 KiB; fp32
            // accumulators there need more registers than a thread has.
            (quarters_regs, Single, 4, 128, 1, RegistersWithCopy, Red, [f16], only 75, 1, -, 1, -),
            // Hopper, hidden layers too wide for slices of 8: slices of 16 and 32 units.
            (wide2, Single, 2, 128, 2, Registers, Bulk, [f16], from 90, 1, -, 1, -),
            (wide4, Single, 2, 128, 4, Registers, Bulk, [f16], from 90, 1, -, 1, -),
            // Two to four hidden layers (the layer engine): one buffer of half the batch for
            // the first layer's slices of 8 units, over which each later layer's n-tiles are
            // dealt; fp32 accumulators beside several layers' state need more registers than a
            // thread has. A later layer's input is at most 640 wide with two layers (past the
            // 528 units of 132 SMs' pairs), 256 with three and 128 with four, so its W state
            // takes 40, 16 or 8 registers a thread. Hopper's pairs are clusters; an A100's
            // exchange through global memory, whose sums of every part's shares take more
            // registers: past two layers they spill there.
            (deep, Single, 2, 128, 1, Registers, Red, [f16], from 80, 1, -, 2, 640),
            (deep3, Single, 2, 128, 1, Registers, Red, [f16], from 90, 1, -, 3, 256),
            (deep4, Single, 2, 128, 1, Registers, Red, [f16], from 90, 1, -, 4, 128),
            // Two hidden layers at batches up to 256, and at 128 or fewer where `deep`'s
            // layout does not fit (99 KiB): a quarter of the batch a block, the same rows as a
            // pair's half of 128, the shares of the four parts summed through global memory.
            (deep_quartered, Single, 4, 256, 1, Registers, Red, [f16], from 80, 1, -, 2, 256),
            // Hopper, past what the registers hold of W1's state.
            (offchip, Ring, 1, 128, 4, Global, Red, [f16], from 90, 1, (MIN_STAGES, MAX_STAGES), 1, -),
            // Where no whole-batch buffer fits: the ring (`cp.async`, or registers on sm_75).
            (streamed, Ring, 2, 128, 1, Registers, Red, [f16 f32], from 80, 1, (MIN_STAGES, MAX_STAGES), 1, -),
            (streamed_regs, Ring, 2, 128, 1, Registers, Red, [f16 f32], only 75, 1, (MIN_STAGES, MIN_STAGES), 1, -),
        }
    };
}

/// The [`Archs`] of a row's `from`/`only` column.
#[macro_export]
#[doc(hidden)]
macro_rules! variant_archs {
    (from $sm:literal) => {
        $crate::persistent::Archs {
            min: $sm,
            max: u32::MAX,
        }
    };
    (only $sm:literal) => {
        $crate::persistent::Archs { min: $sm, max: $sm }
    };
}

/// A row's ring stages: `(fewest, most)`, or `-` for none.
#[macro_export]
#[doc(hidden)]
macro_rules! variant_stages {
    (-) => {
        (0, 0)
    };
    (($lo:expr, $hi:expr)) => {
        ($lo, $hi)
    };
}

/// A row's widest input past the first layer: a width, or `-` for none.
#[macro_export]
#[doc(hidden)]
macro_rules! variant_inner {
    (-) => {
        0
    };
    ($w:literal) => {
        $w
    };
}

macro_rules! variant_table {
    ($(($name:ident, $batch:ident, $parts:literal, $most:literal, $n:literal, $w1:ident,
        $logits:ident, [$($acc:ident)*], $which:ident $sm:literal, $slices:literal, $stages:tt,
        $layers:literal, $inner:tt),)*) => {
        /// Each row of [`persistent_variants!`](crate::persistent_variants) by its name, for
        /// code that names one (the kernels' exports and the tests).
        #[allow(non_upper_case_globals)]
        pub mod rows {
            use super::*;
            $(pub const $name: Variant = Variant {
                name: stringify!($name),
                batch: Batch::$batch,
                parts: $parts,
                most_batch: $most,
                n: $n,
                w1: W1State::$w1,
                logits: Logits::$logits,
                accums: &[$(accum!($acc)),*],
                archs: $crate::variant_archs!($which $sm),
                min_slices: $slices,
                stages: $crate::variant_stages!($stages),
                layers: $layers,
                inner: $crate::variant_inner!($inner),
            };)*
        }
        /// Every variant, from [`persistent_variants!`](crate::persistent_variants), in the
        /// host's order of preference.
        pub const VARIANTS: &[Variant] = &[$(rows::$name),*];
    };
}
persistent_variants!(variant_table);

/// The largest batch of the one-hidden-layer variants that PTX built for `target` exports
/// (0 for none; the layer engine's rows say their own).
pub const fn most_batch(target: Target) -> usize {
    let (mut i, mut most) = (0, 0);
    while i < VARIANTS.len() {
        let v = &VARIANTS[i];
        if v.layers == 1 && v.exists_in(target) && v.most_batch > most {
            most = v.most_batch;
        }
        i += 1;
    }
    most
}

/// A row of [`VARIANTS`] by name.
pub const fn variant(name: &str) -> &'static Variant {
    let mut i = 0;
    while i < VARIANTS.len() {
        if const_str_eq(VARIANTS[i].name, name) {
            return &VARIANTS[i];
        }
        i += 1;
    }
    panic!("no such variant")
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A row of [`VARIANTS`] as a type, for the kernel's generic code: the step reads the row's
/// properties as constants, so each exported kernel compiles only its own paths.
pub trait Row {
    const V: Variant;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel's generic code assumes of a row, checked for every row on the CPU (the
    /// kernel asserts the same at compile time, for the rows its PTX exports).
    #[test]
    fn every_row_is_a_shape_the_kernel_has() {
        for v in VARIANTS {
            let name = v.name;
            assert_eq!(
                VARIANTS.iter().filter(|w| w.name == name).count(),
                1,
                "{name}"
            );
            assert!([1, PAIR, MAX_PARTS].contains(&v.parts), "{name}");
            // A block holds at most the four 16-row tiles of its tile warps (the offchip
            // kernel's eight warps the whole batch of 128); past 128 rows only four parts:
            // Hopper's two buffers with one hidden layer, one buffer with several.
            assert!(v.tiles() <= tiles(PAIR) || v.offchip(), "{name}");
            assert_eq!(v.parts * v.tiles() * 16, v.most_batch, "{name}");
            if v.most_batch > MAX_BATCH {
                assert!(v.parts == MAX_PARTS, "{name}");
                assert!(v.batch == Batch::Double || v.layers > 1, "{name}");
            }
            assert!([1, 2, 4].contains(&v.n), "{name}");
            // Several hidden layers (the layer engine, from sm_80: `cp.async`): one buffer of
            // a pair's or four parts' rows, at most those of a pair's half of 128, and slices
            // of 8 units, whose partial logits add by `red`, with whole k-tiles a warp of the
            // later layers' inputs, no more than of the first's.
            assert!((1..=MAX_LAYERS).contains(&v.layers), "{name}");
            if v.layers > 1 {
                assert!(v.single() && v.n == 1 && v.tiles() == tiles(PAIR), "{name}");
                assert!(v.archs.min >= 80 && !v.bulk(), "{name}");
                assert!(
                    v.inner.is_multiple_of(16 * WARPS) && v.inner <= MAX_DIM,
                    "{name}"
                );
                assert!(v.inner_tiles() >= 1, "{name}");
            } else {
                assert_eq!(v.inner, 0, "{name}");
            }
            assert!(
                v.has(Accum::F16),
                "{name}: every variant has fp16 accumulators"
            );
            // Only the offchip variant takes the whole batch, and it keeps W1 in global memory.
            assert_eq!(v.parts == 1, v.offchip(), "{name}");
            assert!(!v.offchip() || (v.ring() && v.archs.min >= 90), "{name}");
            // Rings hold between two and six stages; the others none.
            if v.ring() {
                let (fewest, most) = v.stages;
                assert!(MIN_STAGES <= fewest && fewest <= most && most <= MAX_STAGES);
            } else {
                assert_eq!(v.stages, (0, 0), "{name}");
            }
            // Wide slices: Hopper's pairs of one buffer, fp16 only (fp32 accumulators of
            // several n-tiles take more registers than a thread has).
            if v.n > 1 && !v.offchip() {
                assert!(v.single() && v.parts == PAIR && v.archs.min >= 90, "{name}");
            }
            assert!(v.n == 1 || v.accums == [Accum::F16], "{name}");
            // Bulk reductions, and two buffers (one filled by the copy engine while the step
            // reads the other), are Hopper's.
            assert!(!v.bulk() || (v.archs.min >= 90 && !v.ring()), "{name}");
            assert!(v.batch != Batch::Double || v.archs.min >= 90, "{name}");
            // W1's copy in registers: sm_75's quarters, which have no `cp.async`.
            if v.w1_copy_in_registers() {
                assert!(
                    v.single() && v.parts == MAX_PARTS && v.archs == Archs { min: 75, max: 75 }
                );
            }
            // Without `cp.async` (sm_75), a variant copies through registers: a ring of two
            // stages, or one buffer with W1's copy in registers.
            if v.exists_in(Target::SM75) {
                assert!(v.stages == (2, 2) || v.w1_copy_in_registers(), "{name}");
            }
        }
    }

    /// The layer engine has a row of pairs for each depth from two hidden layers to
    /// [`MAX_LAYERS`], first among its depth's, and the rows of a depth differ in the largest
    /// batch they take.
    #[test]
    fn engine_rows_by_depth_and_batch() {
        for layers in 2..=MAX_LAYERS {
            let rows: Vec<_> = VARIANTS.iter().filter(|v| v.layers == layers).collect();
            assert_eq!(rows[0].parts, PAIR, "{layers}");
            for (i, v) in rows.iter().enumerate().skip(1) {
                assert!(v.most_batch > rows[i - 1].most_batch, "{}", v.name);
            }
        }
    }

    /// Each PTX exports one variant of each kind that its generation can run: the quarters and
    /// the ring once each, whatever the architecture.
    #[test]
    fn each_ptx_has_one_quarters_and_one_ring() {
        for target in [Target::SM75, Target::SM80, Target::SM90] {
            let has = |f: fn(&Variant) -> bool| {
                VARIANTS
                    .iter()
                    .filter(|v| v.exists_in(target) && f(v))
                    .count()
            };
            let quarters = |v: &Variant| v.parts == MAX_PARTS && v.single() && v.layers == 1;
            assert_eq!(has(quarters), 1, "{target}");
            assert_eq!(has(|v| v.ring() && !v.offchip()), 1, "{target}");
            assert_eq!(
                has(|v| v.offchip()),
                usize::from(target.clusters()),
                "{target}"
            );
        }
        let names = |t: Target| -> Vec<_> {
            VARIANTS
                .iter()
                .filter(|v| v.exists_in(t))
                .map(|v| v.name)
                .collect()
        };
        assert_eq!(names(Target::SM75), ["quarters_regs", "streamed_regs"]);
        assert_eq!(
            names(Target::SM80),
            ["single", "quarters", "deep", "deep_quartered", "streamed"]
        );
    }

    /// The layouts the host sizes launches by are the kernel's: each variant's is the `Smem`
    /// of its feed (the default model's figures are in `smem.rs`'s tests).
    #[test]
    fn each_variant_lays_out_its_feed() {
        let (b, d) = (128, 784);
        let bytes = |name: &str, stages| variant(name).smem(b, d, stages).bytes;
        assert_eq!(bytes("whole", 0), Smem::whole(b, d, 2, PAIR, false).bytes);
        assert_eq!(bytes("bulk", 0), bytes("whole", 0));
        // A quarter of 256 rows is a half of 128: the same layout.
        assert_eq!(
            variant("quartered").smem(256, d, 0).bytes,
            bytes("whole", 0)
        );
        assert_eq!(bytes("single", 0), Smem::whole(b, d, 1, PAIR, false).bytes);
        assert_eq!(
            bytes("quarters", 0),
            Smem::whole(b, d, 1, MAX_PARTS, false).bytes
        );
        assert_eq!(
            bytes("quarters_regs", 0),
            Smem::whole(b, d, 1, MAX_PARTS, true).bytes
        );
        assert_eq!(bytes("wide4", 0), Smem::wide(b, d, 4).bytes);
        assert_eq!(bytes("streamed", 3), Smem::streamed(b, d, 3).bytes);
        assert_eq!(bytes("offchip", 4), Smem::offchip(b, d, 4, 4).bytes);
        assert!(variant("offchip").smem(b, d, 4).streamed);
    }
}
