//! What every phase of a step reads: the launch's parameters, the block's role in the grid and
//! among its warps, and the addresses of its regions of shared memory.
use super::*;
use crate::arch::*;
use crate::target::BUILT;

/// One block of the persistent kernel. Block `P·s + h` owns slice `s` of the hidden units
/// ([`Smem::n`] n-tiles of 8, from `j0`) for part `h` of the `P` parts of the batch (rows
/// `r0..r0 + mine`, possibly none); in the offchip kernel `P` is 1.
#[derive(Clone, Copy)]
pub struct Block {
    pub args: Params,
    /// The hidden layer whose slice the block holds.
    pub layer: Layer,
    pub lay: Smem,
    /// The dynamic shared memory, as a generic pointer and as a `.shared` address.
    pub base: *mut u8,
    pub s0: u32,
    pub tid: usize,
    pub warp: usize,
    pub lane: usize,
    pub blk: u32,
    pub blocks: u32,
    pub slice: u32,
    pub part: usize,
    pub j0: u32,
    /// The first of the n-tiles whose W1 this block updates, and of those its partner does
    /// (the same n-tile with a slice of one: both update it).
    pub own0: usize,
    pub peer0: usize,
    pub r0: usize,
    pub mine: usize,
    /// Warps that own a 16-row tile of the batch: [`TILE_WARPS`], or all with the whole batch.
    /// A constant of the kernel, which bounds the tile warps' code (without it, the wide
    /// kernels spill).
    pub tile_warps: usize,
    pub classes: usize,
    /// 16-wide tiles along the input.
    pub ktiles: usize,
    /// Elements of one step's slot of the logits buffer.
    pub slot: usize,
    /// The partner block's rank in the cluster (on Hopper, of a pair; 0 elsewhere).
    pub peer: u32,
}

impl Block {
    #[inline(always)]
    /// The block of variant `F`'s kernel for hidden layer `layer`.
    pub fn new<F: Row>(args: Params, layer: Layer) -> Block {
        let v = F::V;
        let (batch, dim, parts, n) = (args.batch as usize, layer.dim as usize, v.parts, v.n);
        let lay = v.smem(batch, dim, args.stages as usize);
        let base = dynamic_shared::<u8>();
        let blk = block_x();
        let (slice, part) = (blk / parts as u32, blk as usize % parts);
        let r0 = part * lay.rows;
        let first_owned = |p: usize| if n == 1 { 0 } else { p * owned(n) };
        Block {
            args,
            layer,
            lay,
            base,
            s0: shared_addr(base),
            tid: thread_x() as usize,
            warp: warp_id() as usize,
            lane: lane() as usize,
            blk,
            blocks: grid_dim_x(),
            slice,
            part,
            j0: slice * (n * UNITS) as u32,
            own0: first_owned(part),
            peer0: first_owned(part ^ 1),
            r0,
            mine: (args.batch as usize).saturating_sub(r0).min(lay.rows),
            tile_warps: if parts == 1 { WARPS } else { TILE_WARPS },
            classes: layer.classes as usize,
            ktiles: (layer.dim / 16) as usize,
            slot: logits_slot(args.batch as usize, layer.classes as usize),
            // With the host's clusters of two or four blocks, the partner is the neighbour.
            peer: if v.clustered(BUILT) {
                cluster_rank() ^ 1
            } else {
                0
            },
        }
    }

    /// The block as a step sees it: the values that index arithmetic starts from, passed
    /// through [`opaque`] so that the optimiser redoes that arithmetic each step. Hoisted out
    /// of the step loop, its dozens of invariant offsets would each hold a register for the
    /// whole launch, and push W1's registers into local memory.
    #[inline(always)]
    pub fn for_step(&self) -> Block {
        let v = opaque(0) as usize;
        Block {
            tid: self.tid + v,
            warp: self.warp + v,
            lane: self.lane + v,
            classes: self.classes + v,
            ktiles: self.ktiles + v,
            mine: self.mine + v,
            ..*self
        }
    }

    /// Rows of the batch per block (a multiple of 16; those past `mine` hold zeros).
    #[inline(always)]
    pub fn rows(&self) -> usize {
        self.lay.rows
    }
    /// The most rows a block of this kernel holds, a constant: its tile warps' 16-row tiles.
    #[inline(always)]
    pub fn max_rows(&self) -> usize {
        16 * self.tile_warps
    }
    /// The lane's row group and its column pair in an `mma` fragment (PTX's `groupID` and
    /// `threadID_in_group`).
    #[inline(always)]
    pub fn group(&self) -> usize {
        self.lane / 4
    }
    #[inline(always)]
    pub fn in_group(&self) -> usize {
        self.lane % 4
    }
    /// Whether this warp owns a 16-row tile of the batch with rows in it: warp `w` owns tile
    /// `w` of the block's rows, which are at most half the batch, four tiles, or in the offchip
    /// kernel the whole batch, eight.
    #[inline(always)]
    pub fn has_tile(&self) -> bool {
        self.warp < self.tile_warps && 16 * self.warp < self.mine
    }
    /// The whole-batch buffer step `k` of the launch reads: steps alternate between two, or
    /// take the one.
    #[inline(always)]
    pub fn step_buffer(&self, k: u32) -> usize {
        (k as usize % 2) % self.lay.buffers
    }
    /// Whether the whole-batch kernel has one buffer, refilled after dW1.
    #[inline(always)]
    pub fn single(&self) -> bool {
        !self.lay.streamed && self.lay.buffers == 1
    }

    /// `.shared` addresses of the regions of [`Smem`].
    #[inline(always)]
    pub fn at(&self, offset: usize) -> u32 {
        self.s0 + offset as u32
    }
    /// W1's, H's and dH's plane of n-tile `p`.
    #[inline(always)]
    pub fn w1(&self, p: usize) -> u32 {
        self.at(self.lay.w1 + p * self.lay.w1_plane)
    }
    #[inline(always)]
    pub fn h(&self, p: usize) -> u32 {
        self.at(self.lay.h + p * self.lay.h_plane)
    }
    #[inline(always)]
    pub fn dh(&self, p: usize) -> u32 {
        self.at(self.lay.dh + p * self.lay.h_plane)
    }
    /// Hidden units of the block's slice.
    #[inline(always)]
    pub fn units(&self) -> usize {
        self.lay.n * UNITS
    }
    #[inline(always)]
    pub fn dl(&self) -> u32 {
        self.at(self.lay.dl)
    }
    #[inline(always)]
    pub fn w2_cu(&self) -> u32 {
        self.at(self.lay.w2_cu)
    }
    #[inline(always)]
    pub fn w2_uc(&self) -> u32 {
        self.at(self.lay.w2_uc)
    }
    #[inline(always)]
    pub fn xch(&self) -> u32 {
        self.at(self.lay.xch)
    }
    /// Batch buffer `buf` (of [`Smem::buffers`]).
    #[inline(always)]
    pub fn batch_buffer(&self, buf: usize) -> u32 {
        self.at(self.lay.x + buf * self.rows() * self.lay.buffer_row)
    }
    /// The `mbarrier` of batch buffer 0 or 1, (2) of the partner's shares, or (3) of its new
    /// W1 values.
    #[inline(always)]
    pub fn mbar(&self, i: usize) -> u32 {
        self.at(self.lay.mbar + 8 * i)
    }
    /// The block's own shares of dW2 and db2 (f32), for the threads that update W2 and b2.
    #[inline(always)]
    pub fn own(&self) -> *mut f32 {
        unsafe { self.base.add(self.lay.own) as *mut f32 }
    }
    /// The fields of [`SmallParams`], as pointers to their first elements.
    #[inline(always)]
    pub fn small(&self) -> Small {
        let p = unsafe { self.base.add(self.lay.params) as *mut f32 };
        macro_rules! field {
            ($f:ident) => {
                unsafe { p.add(self.lay.small.$f) }
            };
        }
        Small {
            w2_master: field!(w2_master),
            w2_momentum: field!(w2_momentum),
            b1_master: field!(b1_master),
            b1_momentum: field!(b1_momentum),
            b1_half: field!(b1_half),
            b2_master: field!(b2_master),
            b2_momentum: field!(b2_momentum),
            b2_half: field!(b2_half),
            loss: field!(loss),
            correct: field!(correct),
        }
    }

    /// Sets to zero rows the block does not fill, which stay so for the whole launch: in every
    /// batch buffer (dW1 reads them), and in H and dH up to the 32 rows one `ldmatrix` pair
    /// covers.
    #[inline(always)]
    pub fn clear_unfilled_rows(&self) {
        let zero = |from: usize, to: usize| {
            let mut i = from + 4 * self.tid;
            while i < to {
                unsafe { *(self.base.add(i) as *mut u32) = 0 };
                i += 4 * THREADS;
            }
        };
        let (rows, stride, mine) = (self.rows(), self.lay.buffer_row, self.mine);
        let rows32 = rows.div_ceil(32) * 32;
        for b in 0..self.lay.buffers {
            let buf = self.lay.x + b * rows * stride;
            zero(buf + mine * stride, buf + rows * stride);
        }
        for p in 0..self.lay.n {
            let (h, dh) = (self.lay.h, self.lay.dh);
            let plane = p * self.lay.h_plane;
            zero(h + plane + mine * UNITS * 2, h + plane + rows32 * UNITS * 2);
            zero(
                dh + plane + mine * UNITS * 2,
                dh + plane + rows32 * UNITS * 2,
            );
        }
    }
}

/// Pointers to the fields of [`SmallParams`] in shared memory (W2 flat: `[class][unit]`, over
/// the slice's units).
#[derive(Clone, Copy)]
pub struct Small {
    pub w2_master: *mut f32,
    pub w2_momentum: *mut f32,
    pub b1_master: *mut f32,
    pub b1_momentum: *mut f32,
    pub b1_half: *mut f32,
    pub b2_master: *mut f32,
    pub b2_momentum: *mut f32,
    pub b2_half: *mut f32,
    pub loss: *mut f32,
    pub correct: *mut f32,
}

/// Step `k` of the launch (`index` of the epoch): the batch buffer it reads in the
/// whole-batch kernel (`k % 2`, or the one), and its slot of the logit sums.
#[derive(Clone, Copy)]
pub struct Step {
    pub k: u32,
    pub index: u32,
    /// `.shared` address of the step's batch buffer (whole-batch kernel).
    pub x: u32,
    pub sums: *mut i64,
}

impl Step {
    #[inline(always)]
    pub fn new(b: &Block, k: u32) -> Step {
        let logits = b.args.logits as *mut i64;
        Step {
            k,
            index: b.args.step0 + k,
            x: opaque(b.batch_buffer(b.step_buffer(k))),
            sums: unsafe { logits.add((k as usize % LOGIT_SLOTS) * b.slot) },
        }
    }
    /// Whether the launch has steps after this one.
    #[inline(always)]
    pub fn has_next(&self, steps: u32) -> bool {
        self.k + 1 < steps
    }
}
