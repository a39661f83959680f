//! The slice's parameters into the launch and out of it. W1's fp32 master values and momentum
//! stay in registers for the whole launch (each thread keeps the elements of the dW1ᵀ
//! fragments it computes), their fp16 copy in shared memory or (the quarters of the batch on
//! sm_75, [`W1State::RegistersWithCopy`]) in registers as the forward's B fragments; W2, b1
//! and b2 in shared memory.
use super::context::Block;
use super::*;
use crate::arch::*;
use crate::layout::mma_c;
use core::marker::PhantomData;

/// The thread's elements of W1 of the `O` n-tiles the block updates (from [`Block::own0`]):
/// element `e` of the accumulator fragment of dW1ᵀ tile `warp + WARPS·i`, for variant `F`.
/// Where it keeps the fp16 copy in registers, so is the copy, as the B fragments of the
/// forward's k-step `warp + WARPS·i`.
pub struct W1<const O: usize, F: Row, const K: usize = TILES_PER_WARP> {
    pub master: [[[f32; 4]; O]; K],
    pub momentum: [[[f32; 4]; O]; K],
    pub half: [[[u32; 2]; O]; K],
    variant: PhantomData<F>,
}

/// Element (input `16·mt + r`, unit `c` of n-tile `p`) of the slice's W1: its index in the
/// parameter buffers.
#[inline(always)]
pub fn w1_index(b: &Block, p: usize, mt: usize, r: usize, c: usize) -> usize {
    (b.layer.o_w1 + (b.j0 + (UNITS * p + c) as u32) * b.layer.dim) as usize + 16 * mt + r
}

/// The same element's address in the fp16 copy in shared memory (`[n-tile][input][unit]`).
#[inline(always)]
pub fn w1_shared(b: &Block, p: usize, mt: usize, r: usize, c: usize) -> u32 {
    b.w1(p) + (((16 * mt + r) * UNITS + c) * 2) as u32
}

impl<const O: usize, F: Row, const K: usize> W1<O, F, K> {
    /// Whether the fp16 copy is in registers.
    const R: bool = F::V.w1_copy_in_registers();

    /// Zeros: the state of a layer the kernel does not have.
    pub const fn zero() -> W1<O, F, K> {
        W1 {
            master: [[[0.0; 4]; O]; K],
            momentum: [[[0.0; 4]; O]; K],
            half: [[[0; 2]; O]; K],
            variant: PhantomData,
        }
    }

    /// The master values and momentum of the block's n-tiles into registers, and the fp16
    /// copy of every n-tile of the slice into shared memory (or registers).
    #[inline(always)]
    pub fn load(b: &Block) -> W1<O, F, K> {
        const { assert!(!Self::R || O == 1, "W1 in registers: slices of one n-tile") };
        let (w32, vel) = (b.args.w32 as *const f32, b.args.vel as *const f32);
        let mut w1 = W1::zero();
        for i in 0..K {
            let mt = b.warp + WARPS * i;
            if mt < b.ktiles {
                for e in 0..4 {
                    let (r, c) = mma_c(b.lane, e);
                    for g in 0..O {
                        let k = w1_index(b, b.own0 + g, mt, r, c);
                        unsafe {
                            w1.master[i][g][e] = *w32.add(k);
                            w1.momentum[i][g][e] = *vel.add(k);
                        }
                    }
                    if !Self::R {
                        for p in 0..b.lay.n {
                            let m = unsafe { *w32.add(w1_index(b, p, mt, r, c)) };
                            st_shared_u16(w1_shared(b, p, mt, r, c), f2h(m));
                        }
                    }
                }
                if Self::R {
                    for p in 0..2 {
                        let m = w1.master[i][0];
                        w1.set_half(b, i, 0, p, pack_h2(m[2 * p], m[2 * p + 1]));
                    }
                }
            }
        }
        w1
    }

    /// Word `p` of the thread's fp16 values of tile `warp + WARPS·i` of n-tile `own0 + g`
    /// (elements `2p`, `2p + 1` of its accumulator fragment: one input, two adjacent units):
    /// into the B fragments (where they are in registers; every lane of the warp takes part), else into shared
    /// memory, whose address is returned.
    #[inline(always)]
    pub fn set_half(&mut self, b: &Block, i: usize, g: usize, p: usize, word: u32) -> u32 {
        if Self::R {
            // Inputs 8p..8p + 8 of the tile: B register p of its k = 16 step.
            self.half[i][g][p] = transpose_b16(b.lane, word);
            0
        } else {
            let (r, c) = mma_c(b.lane, 2 * p);
            let at = w1_shared(b, b.own0 + g, b.warp + WARPS * i, r, c);
            st_shared_u32(at, word);
            at
        }
    }

    #[inline(always)]
    pub fn store(&self, b: &Block) {
        for i in 0..K {
            let mt = b.warp + WARPS * i;
            if mt < b.ktiles {
                for e in 0..4 {
                    let (r, c) = mma_c(b.lane, e);
                    for g in 0..O {
                        let (m, v) = (self.master[i][g][e], self.momentum[i][g][e]);
                        put(b, w1_index(b, b.own0 + g, mt, r, c), m, v);
                    }
                }
            }
        }
    }
}

/// Writes parameter `k` out: fp32 master, momentum and the fp16 copy the layered kernels read.
#[inline(always)]
fn put(b: &Block, k: usize, m: f32, v: f32) {
    unsafe {
        *(b.args.w32 as *mut f32).add(k) = m;
        *(b.args.vel as *mut f32).add(k) = v;
        *(b.args.w16 as *mut u16).add(k) = f2h(m);
    }
}

/// Stores the fp16 value of W2's element (class `c`, unit `j` of the slice) in both of its
/// layouts.
#[inline(always)]
pub fn set_w2_half(b: &Block, c: usize, j: usize, v: f32) {
    st_shared_u16(b.w2_cu() + ((c * b.units() + j) * 2) as u32, f2h(v));
    st_shared_u16(b.w2_uc() + ((j * MAX_CLASSES + c) * 2) as u32, f2h(v));
}

/// W2's columns of the slice, b1's entries and b2 into shared memory, padded with zeros to
/// [`MAX_CLASSES`].
#[inline(always)]
pub fn load_small(b: &Block) {
    let (w32, vel) = (b.args.w32 as *const f32, b.args.vel as *const f32);
    let (tid, cn, p, units) = (b.tid, b.classes, b.small(), b.units());
    let mut i = tid;
    while i < MAX_CLASSES * units {
        let (c, j) = (i / units, i % units);
        let (mut m, mut v) = (0.0, 0.0);
        if c < cn {
            let k = (b.layer.o_w2 + c as u32 * b.layer.hidden + b.j0) as usize + j;
            unsafe { (m, v) = (*w32.add(k), *vel.add(k)) };
        }
        unsafe { (*p.w2_master.add(i), *p.w2_momentum.add(i)) = (m, v) };
        set_w2_half(b, c, j, m);
        i += THREADS;
    }
    if tid < units {
        let k = (b.layer.o_b1 + b.j0) as usize + tid;
        unsafe {
            *p.b1_master.add(tid) = *w32.add(k);
            *p.b1_momentum.add(tid) = *vel.add(k);
            *p.b1_half.add(tid) = round_h(*p.b1_master.add(tid));
        }
    }
    if tid < MAX_CLASSES {
        let (mut m, mut v) = (0.0, 0.0);
        if tid < cn {
            let k = b.layer.o_b2 as usize + tid;
            unsafe { (m, v) = (*w32.add(k), *vel.add(k)) };
        }
        unsafe {
            *p.b2_master.add(tid) = m;
            *p.b2_momentum.add(tid) = v;
            *p.b2_half.add(tid) = round_h(m);
        }
    }
}

/// W2's columns, b1's entries and (block 0) b2 out of the launch.
#[inline(always)]
pub fn store_small(b: &Block) {
    let (tid, cn, p, units) = (b.tid, b.classes, b.small(), b.units());
    let mut i = tid;
    while i < cn * units {
        let (c, j) = (i / units, i % units);
        let k = (b.layer.o_w2 + c as u32 * b.layer.hidden + b.j0) as usize + j;
        unsafe { put(b, k, *p.w2_master.add(i), *p.w2_momentum.add(i)) };
        i += THREADS;
    }
    if tid < units {
        let k = (b.layer.o_b1 + b.j0) as usize + tid;
        unsafe { put(b, k, *p.b1_master.add(tid), *p.b1_momentum.add(tid)) };
    }
    if b.blk == 0 && tid < cn {
        let k = b.layer.o_b2 as usize + tid;
        unsafe { put(b, k, *p.b2_master.add(tid), *p.b2_momentum.add(tid)) };
    }
}
