//! The layered step in one persistent launch: the *phased* kernel trains an MLP of any depth by
//! running every operation of many consecutive steps (the GEMMs, the softmax cross-entropy, the
//! bias gradients, each weight's SGD step fused into its gradient's GEMM) inside one kernel.
//!
//! Why: past one hidden layer the one-layer persistent kernel does not apply, and the layered
//! step's chain of dependent kernels costs a launch and a drain each, even replayed from a
//! graph. Here the host writes the step once as a table of [`Op`]s; every block of a
//! cooperative launch walks it, takes its share of each operation's tiles (tile `t` of a phase
//! goes to block `t mod blocks`) and, where the next operation reads what this one writes,
//! meets the others at a grid barrier. The operations and their arithmetic are the layered
//! step's own (`gemm::tensor::gemm` on a block tile, `mlp`'s softmax and bias gradient on a
//! block), so both engines compute the same sums.
//!
//! A step of `n` layers is `2n + 1` phases: the `n` forward products, the softmax (one block:
//! the batch's rows are few), then from the last layer back, layer `l`'s input gradient beside
//! the weight step of layer `l + 1` (whose input gradient, the one reader of its old weights,
//! ran a phase before) and layer `l`'s bias step; the first layer's weight step joins the last
//! phase. The batch is read from the epoch's rows in step order (the shuffle of the
//! one-layer persistent kernel): an operand marked [`Rows`] points into the step's rows.
use crate::gemm::{Args, TileConfig, tile_config};
use crate::params::{BiasGrad, SoftmaxCe};
use crate::target::Target;

/// Threads of a block: the four warps of [`config`]'s block tile.
pub const THREADS: usize = 128;
pub const WARPS: usize = THREADS / 32;

/// The GEMM tile configuration of the phased kernel in PTX built for `target`: 32×32 block
/// tiles, since a batch of 128 rows and a few hundred units make only tens of tiles a product
/// to spread over every SM; six stages deep where `cp.async` has them, as the input layer's
/// long K (784) is a chain of latencies (register staging on sm_75). One configuration, whose
/// code serves every layout: each block runs each phase's code once a step, so the kernel's
/// code must stay within the instruction cache.
pub const fn config(target: Target) -> &'static TileConfig {
    if target.cp_async() {
        tile_config("tc80_32x32x64_16x16_s6")
    } else {
        tile_config("tc75_32x32x32_16x16")
    }
}

/// Operand layouts, as [`Layout`](crate::gemm::Layout) but of a fixed representation.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmLayout {
    Nn,
    Nt,
    Tn,
}

impl GemmLayout {
    /// Whether A and B are stored transposed.
    pub const fn transposed(self) -> (bool, bool) {
        (
            matches!(self, GemmLayout::Tn),
            matches!(self, GemmLayout::Nt),
        )
    }
}

/// A GEMM of the step (`gpu::gemm`) by [`config`]'s tiles: K whole (no split-K), with an SGD
/// step where `args.sgd` has one.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub args: Args,
    pub layout: GemmLayout,
}

/// Operations a step's table holds at most: a model of 16 layers.
pub const MAX_OPS: usize = 63;

/// Bytes of a block's dynamic shared memory before the table ([`table_offset`]) with PTX
/// built for `target`: the GEMM's stages (or its SGD step's staged tile), which the softmax's
/// and bias gradient's scratch reuse.
pub const fn table_offset(target: Target) -> usize {
    let gemm = config(target).smem_bytes_stepping();
    let bias = WARPS * crate::BIAS_GRAD_COLS as usize * 4;
    let work = if gemm > bias { gemm } else { bias };
    work.next_multiple_of(16)
}

/// Dynamic shared memory a block needs with PTX built for `target`: the work area, then the
/// step's table of `ops` operations, copied there once a launch (every block reads every
/// operation of every step).
pub const fn smem_bytes(target: Target, ops: usize) -> usize {
    table_offset(target) + ops * core::mem::size_of::<Op>()
}

/// What an operation computes: one of the layered step's kernels, as its parameters.
#[repr(C, u32)]
#[derive(Clone, Copy, Debug)]
pub enum Work {
    Gemm(Gemm),
    /// Softmax cross-entropy, its gradient and the logits' bias step, by one block.
    SoftmaxCe(SoftmaxCe),
    /// A hidden layer's bias gradient or step, [`crate::BIAS_GRAD_COLS`] columns a tile.
    BiasGrad(BiasGrad),
}

/// Which pointer of an operation reads the step's rows of the shuffled epoch: its value is
/// then a byte offset from the step's first row (0 for the features, the label's offset for
/// the labels).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    None,
    /// The GEMM's A operand: the first layer's forward.
    A,
    /// The GEMM's B operand: the first layer's weight gradient.
    B,
    /// The softmax's labels.
    Labels,
}

/// One operation of the step's table (whole 16-byte words: blocks copy the table by them).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub work: Work,
    pub rows: Rows,
    /// Whether every block meets after it: the operations after it read what it writes (or
    /// write what it reads). The step's last operation ends a phase.
    pub ends_phase: u32,
}

/// The kernel's parameters, by value as one `.param` block, shared with the host.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// The step's operations, `ops` of them ([`Op`]).
    pub ops: u64,
    pub n_ops: u32,
    /// Rows of the batch, and bytes of each in `batches`: the epoch's rows in step order.
    pub batch: u32,
    pub batches: u64,
    pub row_bytes: u32,
    /// This launch runs steps `step0..step0 + steps` of the epoch; each step's loss and correct
    /// count go to element `step` of the softmax's `loss` and `correct`.
    pub step0: u32,
    pub steps: u32,
    /// The grid barrier's arrival count, zeroed by the host before each launch.
    pub counters: u64,
    pub trace: u64,
    pub poll_ns: u32,
}

impl Op {
    /// Tiles of the operation with PTX built for `target`: block tiles of the GEMM's output,
    /// one for the softmax, column groups of the bias gradient.
    pub const fn tiles(&self, target: Target) -> u32 {
        match &self.work {
            Work::Gemm(g) => {
                let (c, a) = (config(target), &g.args);
                a.m.div_ceil(c.block.0 as u32) * a.n.div_ceil(c.block.1 as u32)
            }
            Work::SoftmaxCe(_) => 1,
            Work::BiasGrad(b) => b.cols.div_ceil(crate::BIAS_GRAD_COLS),
        }
    }

    /// The operation at step `step` of the epoch whose step's first row is at `rows`: the
    /// pointer marked [`Rows`] moves into the step's rows, the softmax's sums to the step's
    /// slot.
    pub fn at_step(mut self, rows: u64, step: u32) -> Op {
        let into = |offset: u64| rows + offset;
        match (&mut self.work, self.rows) {
            (Work::Gemm(g), Rows::A) => g.args.a = into(g.args.a as u64) as *const u16,
            (Work::Gemm(g), Rows::B) => g.args.b = into(g.args.b as u64) as *const u16,
            (Work::SoftmaxCe(s), rows_in) => {
                if rows_in == Rows::Labels {
                    s.labels = into(s.labels);
                }
                s.loss += 4 * step as u64;
                s.correct += 4 * step as u64;
            }
            _ => {}
        }
        self
    }
}

#[cfg(target_arch = "nvptx64")]
mod kernel {
    use super::*;
    use crate::arch::{
        Acc, block_x, dynamic_shared, grid_barrier_polling_every, grid_dim_x, ld_global_v4,
        sync_threads, thread_x,
    };
    use crate::mlp::{bias_grad_columns, softmax_ce_block};
    use crate::target::BUILT;

    const C: TileConfig = *config(BUILT);
    const _: () = assert!(C.threads() == THREADS && C.cluster_m == 1 && !C.is_wgmma());

    /// Block tile `tile` (row-major over the output's tiles) of GEMM `g`, K whole.
    #[inline(always)]
    fn gemm_tile<A: Acc>(g: &Gemm, tile: u32) {
        let p = g.args;
        let cols = p.n.div_ceil(C.block.1 as u32);
        let at = (tile % cols, tile / cols, 0);
        crate::gemm::tensor::gemm::<
            A,
            { C.block.0 },
            { C.block.1 },
            { C.block.2 },
            { C.warp.0 / 16 },
            { C.warp.1 / 8 },
            { C.instruction.2 },
            { C.stages },
            { C.is_async() },
            { C.block.0 * C.block.2 / 8 / THREADS },
            { C.block.1 * C.block.2 / 8 / THREADS },
        >(p, core::ptr::null_mut(), p.k, at, g.layout.transposed())
    }

    /// Tile `t` of `op`, by the whole block.
    #[inline(always)]
    fn run<A: Acc>(op: &Op, t: u32) {
        match op.work {
            Work::Gemm(g) => gemm_tile::<A>(&g, t),
            Work::SoftmaxCe(s) => softmax_ce_block(&s),
            Work::BiasGrad(b) => bias_grad_columns(&b, t, WARPS as u32),
        }
    }

    /// Copies the table into shared memory after the work area, by 16-byte words; returns it.
    #[inline(always)]
    fn copy_table(p: &Params) -> *const Op {
        let table = unsafe { dynamic_shared::<u8>().add(table_offset(BUILT)) };
        let words = p.n_ops as usize * core::mem::size_of::<Op>() / 16;
        let mut w = thread_x() as usize;
        while w < words {
            let v = ld_global_v4(unsafe { (p.ops as *const u8).add(16 * w) });
            unsafe { *(table.add(16 * w) as *mut [u32; 4]) = v };
            w += THREADS;
        }
        sync_threads();
        table as *const Op
    }

    /// `p.steps` steps of the table: each operation's tiles, a grid barrier after each phase.
    #[inline(always)]
    unsafe fn train<A: Acc>(p: Params) {
        let ops = copy_table(&p);
        let (me, blocks) = (block_x(), grid_dim_x());
        let counter = p.counters as *mut u32;
        let mut meetings = 0;
        for k in 0..p.steps {
            let step = p.step0 + k;
            let rows = p.batches + step as u64 * p.batch as u64 * p.row_bytes as u64;
            // Tiles of the phase's operations before this one: the phase's tiles are dealt
            // out in turn, so an operation starts on the block after the last one's.
            let mut first = 0;
            for i in 0..p.n_ops as usize {
                let op = unsafe { *ops.add(i) }.at_step(rows, step);
                let tiles = op.tiles(BUILT);
                let mut t = (me + blocks - first % blocks) % blocks;
                while t < tiles {
                    run::<A>(&op, t);
                    // The next tile's copies reuse the shared memory this one read.
                    sync_threads();
                    t += blocks;
                }
                first += tiles;
                if op.ends_phase != 0 {
                    meetings += 1;
                    if p.trace != 0 && me == 0 && thread_x() == 0 {
                        let t: u64;
                        unsafe { core::arch::asm!("mov.u64 {t}, %clock64;", t = out(reg64) t) };
                        unsafe { *(p.trace as *mut u64).add((2 * (meetings as usize % 32))) = t };
                    }
                    grid_barrier_polling_every(counter, meetings * blocks, sync_threads, p.poll_ns);
                    if p.trace != 0 && me == 0 && thread_x() == 0 {
                        let t: u64;
                        unsafe { core::arch::asm!("mov.u64 {t}, %clock64;", t = out(reg64) t) };
                        unsafe {
                            *(p.trace as *mut u64).add((2 * (meetings as usize % 32)) + 1) = t
                        };
                    }
                    first = 0;
                }
            }
        }
    }

    #[unsafe(export_name = "mlp_phased_f16")]
    unsafe extern "ptx-kernel" fn f16(p: Params) {
        unsafe { train::<[u32; 2]>(p) }
    }

    #[unsafe(export_name = "mlp_phased_f32")]
    unsafe extern "ptx-kernel" fn f32(p: Params) {
        unsafe { train::<[f32; 4]>(p) }
    }
}
