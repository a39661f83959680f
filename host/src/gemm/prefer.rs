//! Per-GPU preferences: on this compute capability, for products of this size, take this row of
//! `tile_configs!`. The host's choice reads them before its general procedure
//! ([`choose_config`](super::choose_config)); `host gemm --tune` on the GPU itself prints the
//! lines to paste here. A preference applies only where the row could run anyway: its PTX is
//! loaded, its stages fit the block's shared memory, it has kernels for the accumulators
//! asked for, and the product's usage allows it; and the product takes no SGD step, which the
//! lines are not timed with. Where a GPU has several lines for a size, the first that applies
//! is taken.
use super::usage::Usage;
use gpu::gemm::{Accum, TILE_CONFIGS, TileConfig, rows};
use gpu::target::Target;

/// Which products a preference covers, by their output's size ([`Size::CLASSES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// M·N from 2048 × 4096: with 128×128 tiles, about four an SM of a 132-SM GPU, enough
    /// for a persistent block to overlap one tile's epilogue with the next one's mainloop.
    Medium,
    /// M·N from 4096 × 4096, where every SM has tiles to spare at any row's tile size and
    /// the mainloop, not the grid, sets the pace.
    Large,
}

impl Size {
    /// Each class with the fewest output elements it covers, largest first; a class ends
    /// where the one before it begins.
    pub const CLASSES: [(Size, usize); 2] =
        [(Size::Large, 4096 * 4096), (Size::Medium, 2048 * 4096)];

    /// The size class of an M×N output, if it has one.
    pub fn of(m: usize, n: usize) -> Option<Size> {
        Self::CLASSES
            .iter()
            .find(|(_, from)| m * n >= *from)
            .map(|(size, _)| *size)
    }

    /// The fewest output elements any class covers.
    pub fn smallest() -> usize {
        Self::CLASSES[Self::CLASSES.len() - 1].1
    }
}

/// One line of [`PREFERENCES`]: GPU `sm` takes `row` for products of `size`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preference {
    /// Compute capability ×10 of the GPU, as the device reports it (not the PTX it loads).
    pub sm: u32,
    pub size: Size,
    pub row: TileConfig,
}

const fn prefer(sm: u32, size: Size, row: TileConfig) -> Preference {
    Preference { sm, size, row }
}

/// The per-GPU preferences, each measured by `host gemm --tune` on that GPU (docs/gemm.md,
/// "Tuning a GPU"). A GPU with no line takes the general procedure.
pub const PREFERENCES: &[Preference] = &[
    // Hopper: the 128×256 ping-pong row won both square4096 and square8192 on an H200
    // (`host gemm --tune --sizes square4096,square8192`). It sums in fp16 alone; with fp32
    // sums, the 128×256 tile in clusters of two blocks sharing B, the winner before it.
    prefer(90, Size::Large, rows::wg90_128x256x64_128x256_s3_pp),
    prefer(90, Size::Large, rows::wg90_128x256x64_64x256_s4_c2x1),
    // Hopper, from 2048 × 4096 (the first layer at batch 2048 of 784-4096-10): the ping-pong
    // row won 2048x4096x784 on an H200 and ran at 97% of the winner at 2048x4096x4096
    // (`host gemm --tune --sizes 2048x4096x784,2048x4096x4096`).
    prefer(90, Size::Medium, rows::wg90_128x128x64_128x128_s5_pp),
];

/// The row GPU `sm` prefers for an M×N×K product of `usage` accumulating in `acc`, with PTX
/// `target` and `smem` bytes of shared memory a block, if it has one that runs there. A product
/// that takes an SGD step has none: the lines are timed on products without one.
pub fn preferred(
    (sm, target, smem): (u32, Target, usize),
    (m, n, k): (usize, usize, usize),
    usage: Usage,
    acc: Accum,
) -> Option<&'static TileConfig> {
    if usage.steps {
        return None;
    }
    let size = Size::of(m, n)?;
    let runs = |c: &TileConfig| c.in_ptx(target) && c.smem_bytes() <= smem && c.has(acc);
    let row = PREFERENCES
        .iter()
        .filter(|p| p.sm == sm && p.size == size)
        .map(|p| p.row)
        .find(|c| runs(c) && usage.admits(c, k))?;
    TILE_CONFIGS.iter().find(|c| **c == row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu::target::{ARCHS, Arch};

    /// Every line names a GPU of the table and a row of `tile_configs!` that GPU runs.
    #[test]
    fn every_preference_is_a_row_its_gpu_runs() {
        for p in PREFERENCES {
            let arch = Arch::find(p.sm).unwrap_or_else(|| panic!("sm_{} is not in ARCHS", p.sm));
            assert!(TILE_CONFIGS.contains(&p.row), "{}", p.row.name);
            assert!(p.row.fits(arch), "{} on sm_{}", p.row.name, p.sm);
        }
        assert!(
            ARCHS
                .iter()
                .any(|a| PREFERENCES.iter().any(|p| p.sm == a.sm))
        );
    }

    #[test]
    fn each_output_falls_in_the_class_it_reaches() {
        assert_eq!(Size::of(4096, 4096), Some(Size::Large));
        assert_eq!(Size::of(8192, 2048), Some(Size::Large));
        assert_eq!(Size::of(4096, 4095), Some(Size::Medium));
        assert_eq!(Size::of(2048, 4096), Some(Size::Medium));
        assert_eq!(Size::of(2048, 4095), None);
        assert_eq!(Size::smallest(), 2048 * 4096);
    }

    #[test]
    fn a_preference_applies_where_its_row_can_run() {
        let sm90a = Target {
            sm: 90,
            specific: true,
        };
        let hopper = (90, sm90a, Arch::of(90).smem_per_block);
        let big = (8192, 8192, 8192);
        let aligned = Usage::aligned(8192, 8192);
        let f16 = Accum::F16;
        let line = |i: usize| TILE_CONFIGS.iter().find(|c| **c == PREFERENCES[i].row);
        assert_eq!(preferred(hopper, big, aligned, f16), line(0));
        // fp32 sums: the next line for the size, whose row has them.
        assert!(!PREFERENCES[0].row.has(Accum::F32));
        assert_eq!(preferred(hopper, big, aligned, Accum::F32), line(1));
        let medium = (2048, 4096, 784);
        assert_eq!(
            preferred(hopper, medium, Usage::aligned(784, 4096), f16),
            line(2)
        );
        // Small outputs, portable PTX, a capped block, another GPU, unaligned operands, an
        // SGD step: the general procedure.
        assert_eq!(preferred(hopper, (1024, 1024, 8192), aligned, f16), None);
        assert_eq!(
            preferred((90, Target::SM90, hopper.2), big, aligned, f16),
            None
        );
        assert_eq!(preferred((90, sm90a, 64 * 1024), big, aligned, f16), None);
        assert_eq!(
            preferred((80, Target::SM80, hopper.2), big, aligned, f16),
            None
        );
        assert_eq!(preferred(hopper, big, Usage::default(), f16), None);
        let steps = Usage {
            steps: true,
            ..aligned
        };
        assert_eq!(preferred(hopper, big, steps, f16), None);
    }
}
