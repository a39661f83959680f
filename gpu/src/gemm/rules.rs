//! The rules a row of [`tile_configs!`](crate::tile_configs) keeps, as one `const fn` that the
//! table checks when it compiles, for the host as for every PTX: a row that breaks one does not
//! build, and the error names the rule. The kernels assume each rule; nothing checks them
//! again at run time.
//!
//! ```compile_fail,E0080
//! use gpu::gemm::{Accum, Mainloop, TileConfig};
//! // A 16-deep K slice: the cp.async pipeline moves two 16-wide k steps a slice.
//! const ROW: TileConfig = TileConfig {
//!     name: "tc80_64x64x16_32x32_s4",
//!     block: (64, 64, 16),
//!     warp: (32, 32),
//!     instruction: (16, 8, 16),
//!     stages: 4,
//!     cluster_m: 1,
//!     mainloop: Mainloop::CpAsync,
//!     accums: &[Accum::F16, Accum::F32],
//! };
//! const _: () = ROW.assert_valid();
//! ```
use super::descriptor;
use super::{Mainloop, TileConfig};
use crate::target::{ARCHS, Arch};

/// Most stages of the `cp.async` pipeline: it waits until `stages − 2` groups remain, and
/// `cp.async.wait_group` is given that count as a constant up to 3.
pub const CP_ASYNC_MAX_STAGES: usize = 5;

/// Deepest K slice of an `mma.sync` row: fragment offsets are kept for at most 4 k steps.
pub const MMA_SYNC_MAX_BK: usize = 64;

/// Most accumulator registers a thread of a row's kernel holds: a thread has 255 (a
/// ping-pong consumer 232), and past 128 ptxas runs out of registers for the rest of the
/// kernel (it serialises the `wgmma` of a 128×256 ping-pong tile's 256 fp32 sums).
pub const MAX_ACCUMULATOR_REGISTERS: usize = 128;

impl TileConfig {
    /// The first rule of its row kind this row breaks, in words, or `Ok`.
    pub const fn check(&self) -> Result<(), &'static str> {
        let (bm, bn, _) = self.block;
        let (wm, wn) = self.warp;
        if wm == 0 || wn == 0 || !bm.is_multiple_of(wm) || !bn.is_multiple_of(wn) {
            return Err("the warp tile divides the block tile");
        }
        if self.threads() > 1024 {
            return Err("a block has at most 1024 threads");
        }
        if !self.fits_some_gpu() {
            return Err("the stages fit the shared memory of a GPU whose PTX has the mainloop");
        }
        if let Err(rule) = self.check_accums() {
            return Err(rule);
        }
        match self.mainloop {
            Mainloop::Wgmma => self.check_wgmma(),
            Mainloop::PingPong => self.check_ping_pong(),
            _ => self.check_mma_sync(),
        }
    }

    /// Panics with the rule [`TileConfig::check`] finds broken: in a `const`, a compile error.
    pub const fn assert_valid(&self) {
        if let Err(rule) = self.check() {
            panic!("{}", rule)
        }
    }

    /// The accumulators: some, and none that takes a thread more than
    /// [`MAX_ACCUMULATOR_REGISTERS`].
    const fn check_accums(&self) -> Result<(), &'static str> {
        if self.accums.is_empty() {
            return Err("a row has kernels for fp16 or fp32 accumulators, or both");
        }
        let mut i = 0;
        while i < self.accums.len() {
            if self.accumulator_registers(self.accums[i]) > MAX_ACCUMULATOR_REGISTERS {
                return Err("a thread holds at most 128 accumulator registers");
            }
            i += 1;
        }
        Ok(())
    }

    /// Whether some GPU of [`ARCHS`] that runs this row's PTX has room for its stages.
    pub const fn fits_some_gpu(&self) -> bool {
        let mut i = 0;
        while i < ARCHS.len() {
            if self.fits(&ARCHS[i]) {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Whether GPU `arch` runs this row: its PTX has the mainloop, and a block's shared memory
    /// holds the stages.
    pub const fn fits(&self, arch: &Arch) -> bool {
        arch.runs(self.mainloop.oldest_ptx()) && self.smem_bytes() <= arch.smem_per_block
    }

    /// `mma.sync` rows: warp tiles of whole fragments, the instruction the kernel issues, a K
    /// slice the copies and fragment loads split evenly, and the stages its mainloop waits on.
    const fn check_mma_sync(&self) -> Result<(), &'static str> {
        let (bm, bn, bk) = self.block;
        let (wm, wn) = self.warp;
        let (im, inn, ik) = self.instruction;
        let cp_async = matches!(self.mainloop, Mainloop::CpAsync);
        if im != 16 || inn != 8 {
            return Err("an mma.sync row's instruction is m16n8 (the kernel issues no other)");
        }
        if ik != if cp_async { 16 } else { 8 } {
            return Err("k8 with register staging (sm_75), k16 with cp.async (sm_80)");
        }
        if !wm.is_multiple_of(16) || !wn.is_multiple_of(16) {
            return Err("the warp tile is whole m16 fragments by whole pairs of n8 fragments");
        }
        if !bk.is_multiple_of(16) || bk > MMA_SYNC_MAX_BK {
            return Err("the K slice is whole 16-deep ldmatrix blocks, at most 64");
        }
        if cp_async && !bk.is_multiple_of(32) {
            return Err("the cp.async pipeline moves an even number of 16-wide k steps a slice");
        }
        if !cp_async && self.stages != 2 {
            return Err("register staging is a double buffer: 2 stages");
        }
        if cp_async && (self.stages < 2 || self.stages > CP_ASYNC_MAX_STAGES) {
            return Err("the cp.async pipeline has 2 to 5 stages");
        }
        if self.cluster_m != 1 {
            return Err("mma.sync blocks form no clusters");
        }
        // Each thread copies whole 16-byte chunks of both tiles, in either storage order.
        let threads = self.threads();
        if !(bm * bk / 8).is_multiple_of(threads) || !(bn * bk / 8).is_multiple_of(threads) {
            return Err("each thread copies the same number of 16-byte chunks of A and of B");
        }
        Ok(())
    }

    /// `wgmma` rows: 64-deep 128-byte swizzle rows, warpgroups stacked along M over the whole
    /// block N, an instruction N the kernel has accumulators for, whole 64-wide boxes of B for
    /// each block of a cluster, and a box of at most 256 rows of A.
    const fn check_wgmma(&self) -> Result<(), &'static str> {
        let (bm, bn, bk) = self.block;
        let (wm, wn) = self.warp;
        if bk != descriptor::BK {
            return Err("a wgmma row's K slice is one 64-deep 128-byte swizzle row");
        }
        if wn != bn || !wm.is_multiple_of(descriptor::WGMMA_M) {
            return Err("warpgroups split M only, in whole 64-row wgmma tiles");
        }
        if !matches!(bn, 64 | 128 | 256) {
            return Err("a wgmma row's N is 64, 128 or 256, the accumulators the kernel has");
        }
        let (im, inn, ik) = self.instruction;
        if im != descriptor::WGMMA_M || inn != bn || ik != 16 {
            return Err("a wgmma row's instruction is m64nNk16, N the block's");
        }
        if bm > 256 || !bm.is_multiple_of(64) {
            return Err("A's block is one copy box of at most 256 rows");
        }
        if self.stages < 2 {
            return Err("the copy engine's ring has at least 2 stages");
        }
        if !matches!(self.cluster_m, 1 | 2 | 4) || !(bn / self.cluster_m).is_multiple_of(64) {
            return Err("a cluster of at most 4 blocks shares B in whole 64-wide boxes");
        }
        Ok(())
    }
}

impl TileConfig {
    /// Ping-pong rows: a `wgmma` row whose one warpgroup tile is the whole block tile (each
    /// consumer computes a tile of its own), without clusters.
    const fn check_ping_pong(&self) -> Result<(), &'static str> {
        if self.warp.0 != self.block.0 {
            return Err("a ping-pong warpgroup computes a whole block tile");
        }
        if self.cluster_m != 1 {
            return Err("ping-pong blocks form no clusters");
        }
        self.check_wgmma()
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl TileConfig {
    /// The name a row's fields give it: `tc` (`mma.sync`) or `wg` (`wgmma`) and the oldest
    /// compute capability whose PTX has it, the block tile, the warp tile, the stages where
    /// the mainloop has a choice, a cluster of more than one block, and `_pp` on ping-pong rows.
    pub fn name_from_fields(&self) -> String {
        let (bm, bn, bk) = self.block;
        let (wm, wn) = self.warp;
        let kind = if self.is_wgmma() { "wg" } else { "tc" };
        let stages = match self.mainloop {
            Mainloop::Staged => String::new(),
            _ => format!("_s{}", self.stages),
        };
        let cluster = match self.cluster_m {
            1 => String::new(),
            m => format!("_c{m}x1"),
        };
        let schedule = if self.is_ping_pong() { "_pp" } else { "" };
        format!(
            "{kind}{}_{bm}x{bn}x{bk}_{wm}x{wn}{stages}{cluster}{schedule}",
            self.min_sm()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Accum, TILE_CONFIGS};
    use super::*;

    fn row(name: &str) -> TileConfig {
        *TILE_CONFIGS.iter().find(|c| c.name == name).unwrap()
    }

    /// The rule a changed row breaks, for a row of each kind.
    fn broken(c: TileConfig) -> &'static str {
        c.check().unwrap_err()
    }

    /// Each row breaks the rule whose sentence holds its text.
    fn each_breaks(cases: &[(TileConfig, &str)]) {
        for &(c, rule) in cases {
            assert!(broken(c).contains(rule), "{c:?}: {}", broken(c));
        }
    }

    #[test]
    fn every_row_keeps_every_rule_and_is_named_by_its_fields() {
        for c in TILE_CONFIGS {
            assert_eq!(c.check(), Ok(()), "{}", c.name);
            assert_eq!(c.name, c.name_from_fields());
        }
        let four = TileConfig {
            stages: 4,
            ..row("tc80_64x64x64_32x32_s3")
        };
        assert_eq!(four.name_from_fields(), "tc80_64x64x64_32x32_s4");
    }

    /// The row `docs/tiles.md`'s recipe adds for sm_86 keeps the rules and fits 99 KiB.
    #[test]
    fn the_recipes_sm86_row_is_valid() {
        // The table's three-stage row with a fourth stage.
        let c = TileConfig {
            name: "tc80_128x256x32_64x64_s4",
            stages: 4,
            ..row("tc80_128x256x32_64x64_s3")
        };
        assert_eq!(c.check(), Ok(()));
        assert_eq!(c.name, c.name_from_fields());
        assert_eq!(c.smem_bytes(), 96 * 1024);
        let fits: Vec<_> = ARCHS.iter().filter(|a| c.fits(a)).map(|a| a.sm).collect();
        assert_eq!(fits, [80, 86, 89, 90]);
        assert_eq!(c.threads(), 256);
    }

    #[test]
    fn each_mma_sync_rule_rejects_the_row_that_breaks_it() {
        let base = row("tc80_64x64x32_32x32_s4");
        let cases: [(TileConfig, &str); 9] = [
            (
                TileConfig {
                    warp: (48, 32),
                    ..base
                },
                "divides",
            ),
            (
                TileConfig {
                    instruction: (16, 16, 16),
                    ..base
                },
                "m16n8",
            ),
            (
                TileConfig {
                    instruction: (16, 8, 8),
                    ..base
                },
                "k8 with",
            ),
            (
                TileConfig {
                    block: (64, 64, 16),
                    ..base
                },
                "even number",
            ),
            (
                TileConfig {
                    block: (64, 64, 128),
                    ..base
                },
                "at most 64",
            ),
            (TileConfig { stages: 6, ..base }, "2 to 5"),
            (TileConfig { stages: 1, ..base }, "2 to 5"),
            (
                TileConfig {
                    cluster_m: 2,
                    ..base
                },
                "no clusters",
            ),
            (
                TileConfig {
                    block: (64, 64, 64),
                    stages: 200,
                    ..base
                },
                "shared memory",
            ),
        ];
        each_breaks(&cases);
        let staged = row("tc75_64x64x32_32x32");
        let three = TileConfig {
            stages: 3,
            ..staged
        };
        assert!(broken(three).contains("double buffer"));
        let wide = TileConfig {
            warp: (16, 8),
            ..staged
        };
        assert!(broken(wide).contains("pairs of n8"));
        let threads = TileConfig {
            block: (256, 256, 32),
            warp: (16, 16),
            ..staged
        };
        assert!(broken(threads).contains("1024 threads"));
    }

    #[test]
    fn each_wgmma_rule_rejects_the_row_that_breaks_it() {
        let base = row("wg90_128x128x64_64x128_s4");
        let cases: [(TileConfig, &str); 6] = [
            (
                TileConfig {
                    block: (128, 128, 32),
                    ..base
                },
                "swizzle row",
            ),
            (
                TileConfig {
                    warp: (64, 64),
                    ..base
                },
                "split M only",
            ),
            (
                TileConfig {
                    instruction: (64, 64, 16),
                    ..base
                },
                "m64nNk16",
            ),
            (
                TileConfig {
                    block: (512, 128, 64),
                    warp: (128, 128),
                    stages: 2,
                    ..base
                },
                "256 rows",
            ),
            (
                TileConfig {
                    cluster_m: 4,
                    ..base
                },
                "whole 64-wide boxes",
            ),
            (TileConfig { stages: 1, ..base }, "at least 2"),
        ];
        each_breaks(&cases);
    }

    /// A ping-pong row keeps the `wgmma` rules, a warpgroup a whole block tile and no
    /// clusters; its shared memory holds a C tile a consumer where two fit beside the ring,
    /// else one they take in turn: five stages of 128×128 with two, six with one, and seven
    /// do not fit Hopper.
    #[test]
    fn each_ping_pong_rule_rejects_the_row_that_breaks_it() {
        let base = row("wg90_128x128x64_128x128_s5_pp");
        assert_eq!(base.threads(), 384);
        assert_eq!(base.staging_areas(), 2);
        assert_eq!(
            base.smem_bytes(),
            2 * 128 * 128 * 2 + 5 * 256 * 64 * 2 + 5 * 16
        );
        let six = TileConfig { stages: 6, ..base };
        assert_eq!(six.staging_areas(), 1);
        assert_eq!(six.smem_bytes(), 128 * 128 * 2 + 6 * 256 * 64 * 2 + 6 * 16);
        assert_eq!(six.check(), Ok(()));
        assert_eq!(row("wg90_128x256x64_128x256_s3_pp").staging_areas(), 1);
        let cases: [(TileConfig, &str); 4] = [
            (
                TileConfig {
                    warp: (64, 128),
                    ..base
                },
                "whole block tile",
            ),
            (
                TileConfig {
                    cluster_m: 2,
                    ..base
                },
                "no clusters",
            ),
            (
                TileConfig {
                    instruction: (64, 64, 16),
                    ..base
                },
                "m64nNk16",
            ),
            (TileConfig { stages: 7, ..base }, "fit the shared memory"),
        ];
        each_breaks(&cases);
    }

    /// A 128×256 ping-pong tile holds its sums as fp16 (128 registers a thread), not fp32
    /// (256); a row has some accumulators.
    #[test]
    fn a_row_has_only_the_accumulators_a_thread_holds() {
        let wide = row("wg90_128x256x64_128x256_s3_pp");
        assert!(wide.has(Accum::F16) && !wide.has(Accum::F32));
        assert_eq!(wide.accumulator_registers(Accum::F16), 128);
        assert_eq!(wide.accumulator_registers(Accum::F32), 256);
        let both = &[Accum::F16, Accum::F32];
        each_breaks(&[
            (
                TileConfig {
                    accums: both,
                    ..wide
                },
                "at most 128 accumulator",
            ),
            (
                TileConfig {
                    accums: &[],
                    ..wide
                },
                "fp16 or fp32",
            ),
        ]);
        let warp = row("tc80_128x128x32_64x64_s4");
        assert_eq!(warp.accumulator_registers(Accum::F32), 128);
        assert!(warp.has(Accum::F16) && warp.has(Accum::F32));
    }

    /// A row fits a GPU whose PTX has its mainloop and whose block holds its stages: sm_75
    /// rows every GPU, sm_80 rows none on Turing, four stages of 128×128×64 (128 KiB) an A100
    /// and Hopper but not the 99 KiB of sm_86 and sm_89, and `wgmma` rows Hopper alone.
    #[test]
    fn a_row_fits_the_gpus_that_run_its_ptx_and_hold_its_stages() {
        let fits = |c: TileConfig, sm| c.fits(Arch::of(sm));
        let staged = row("tc75_64x64x32_32x32");
        assert!(ARCHS.iter().all(|a| staged.fits(a)));
        assert!(!fits(row("tc80_64x64x32_32x32_s4"), 75));
        let deep = TileConfig {
            stages: 4,
            ..row("tc80_128x128x64_64x64_s3")
        };
        assert_eq!(deep.smem_bytes(), 128 * 1024);
        assert!(fits(deep, 80) && fits(deep, 90) && !fits(deep, 86) && !fits(deep, 89));
        let wgmma = row("wg90_128x128x64_64x128_s4");
        assert!(fits(wgmma, 90) && !fits(wgmma, 89) && !fits(wgmma, 80));
    }
}
