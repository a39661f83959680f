//! A row of [`tile_configs!`](crate::tile_configs) as the host and the kernels read it: the
//! tiles at each level of the hierarchy, the stages, and what follows from them (threads,
//! shared memory, accumulator registers).
use super::{Accum, Mainloop, STAGED_PAD, sgd_quads_in_flight};
use crate::target::{HOPPER_SMEM, Target};

/// One tensor-core kernel configuration, named as CUTLASS names the GEMM hierarchy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TileConfig {
    pub name: &'static str,
    /// Threadblock tile (M, N, K): the C tile one block computes and the K slice it stages.
    pub block: (usize, usize, usize),
    /// Warp tile (M, N): the part of the block tile one warp computes; K is the block's. On
    /// `wgmma` rows, the warpgroup tile: what one warpgroup of 4 warps computes.
    pub warp: (usize, usize),
    /// Instruction shape (M, N, K): one `mma.sync`, 16×8×8 (sm_75) or 16×8×16 (sm_80+), or one
    /// `wgmma`, 64×N×16 (sm_90a).
    pub instruction: (usize, usize, usize),
    /// Shared-memory stages. 2 with register staging on sm_75, ≥ 2 with `cp.async` on sm_80+ or
    /// the copy engine's tensor copies on sm_90a.
    pub stages: usize,
    /// Blocks of a cluster along M (`wgmma` rows; 1 elsewhere), which need the same B tiles:
    /// each loads a share, which the copy engine multicasts to all of them.
    pub cluster_m: usize,
    /// How the mainloop stages and multiplies the tiles, which decides the PTX it needs.
    pub mainloop: Mainloop,
    /// The accumulators it has kernels for: fp32 sums of the widest warpgroup tiles take more
    /// registers than a thread may hold
    /// ([`MAX_ACCUMULATOR_REGISTERS`](super::MAX_ACCUMULATOR_REGISTERS)).
    pub accums: &'static [Accum],
}

impl TileConfig {
    /// A warpgroup rung: `wgmma` fed by tensor copies, which needs sm_90a PTX.
    pub const fn is_wgmma(&self) -> bool {
        matches!(self.mainloop, Mainloop::Wgmma | Mainloop::PingPong)
    }
    /// The ping-pong rung: persistent blocks, a tile a consumer warpgroup.
    pub const fn is_ping_pong(&self) -> bool {
        matches!(self.mainloop, Mainloop::PingPong)
    }
    /// Whether it has kernels accumulating in `acc`.
    pub const fn has(&self, acc: Accum) -> bool {
        acc.among(self.accums)
    }
    /// Accumulator registers a thread holds with `acc` sums: a warp's (or warpgroup's) tile
    /// spread over its 32 (or 128) threads, two fp16 sums a register.
    pub const fn accumulator_registers(&self, acc: Accum) -> usize {
        let threads = if self.is_wgmma() { 128 } else { 32 };
        let f32s = self.warp.0 * self.warp.1 / threads;
        match acc {
            Accum::F16 => f32s / 2,
            Accum::F32 => f32s,
        }
    }
    /// Lowest compute capability (×10) whose PTX holds the kernel.
    pub const fn min_sm(&self) -> u32 {
        self.mainloop.min_sm()
    }
    /// Warps, or on `wgmma` rows consumer warpgroups, of a block.
    const fn warp_tiles(&self) -> usize {
        (self.block.0 / self.warp.0) * (self.block.1 / self.warp.1)
    }
    /// Quads of the SGD step each thread of an `mma.sync` row has in flight
    /// ([`sgd_quads_in_flight`]; the `wgmma` rows' step kernels keep `SGD_DEEP` at any tile).
    pub const fn sgd_quads_in_flight(&self) -> usize {
        let fragments = (self.warp.0 / self.instruction.0) * (self.warp.1 / self.instruction.1);
        sgd_quads_in_flight(fragments)
    }
    /// Block tiles of an M×N output.
    pub const fn tiles(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.block.0) * n.div_ceil(self.block.1)
    }
    /// Threads of a block: its warps, or on `wgmma` rows its consumer warpgroups (two on
    /// ping-pong rows) and the producer warpgroup that issues the copies.
    pub const fn threads(&self) -> usize {
        if self.is_ping_pong() {
            128 * 3
        } else if self.is_wgmma() {
            128 * (self.warp_tiles() + 1)
        } else {
            32 * self.warp_tiles()
        }
    }
    /// Dynamic shared memory the kernel needs, in bytes: the stages, and on `wgmma` rows an
    /// `mbarrier` pair per stage (full, empty) after them; ping-pong rows first stage fp16 C
    /// tiles ([`TileConfig::staging_areas`]).
    pub const fn smem_bytes(&self) -> usize {
        if self.is_ping_pong() {
            self.staging_areas() * self.c_tile_bytes() + self.ring_bytes()
        } else if self.is_wgmma() {
            self.ring_bytes()
        } else {
            self.stages * self.stage_bytes()
        }
    }
    /// Areas a ping-pong row stages its fp16 C tiles in: one a consumer warpgroup where two
    /// fit Hopper's block beside the ring, else one that the consumers take in turn.
    pub const fn staging_areas(&self) -> usize {
        if 2 * self.c_tile_bytes() + self.ring_bytes() <= HOPPER_SMEM {
            2
        } else {
            1
        }
    }
    /// An A tile and a B tile of one K slice, fp16.
    const fn stage_bytes(&self) -> usize {
        (self.block.0 + self.block.1) * self.block.2 * 2
    }
    /// A `wgmma` row's ring: its stages, and an `mbarrier` pair (full, empty) a stage.
    const fn ring_bytes(&self) -> usize {
        self.stages * (self.stage_bytes() + 16)
    }
    /// The block tile of C in fp16.
    const fn c_tile_bytes(&self) -> usize {
        self.block.0 * self.block.1 * 2
    }
    /// Dynamic shared memory an `mma.sync` kernel that takes an SGD step needs: at least the
    /// fp16 C tile its epilogue stages there, rows padded by [`STAGED_PAD`]. Only then: on
    /// Turing, the larger size would fit one block an SM where two fit.
    pub const fn smem_bytes_stepping(&self) -> usize {
        let staged = self.block.0 * (self.block.1 + STAGED_PAD) * 2;
        if staged > self.smem_bytes() {
            staged
        } else {
            self.smem_bytes()
        }
    }
    /// Whether PTX built for `target` holds the kernel (`wgmma` exists in sm_90a PTX alone).
    pub const fn in_ptx(&self, target: Target) -> bool {
        self.mainloop.in_ptx(target)
    }
    /// Copies without staging through registers (`cp.async`, or the copy engine).
    pub const fn is_async(&self) -> bool {
        !matches!(self.mainloop, Mainloop::Staged)
    }
}
