//! A one-hidden-layer MLP trained by one persistent kernel: batch gather, forward, softmax
//! cross-entropy, backward and the SGD update of many consecutive steps run inside one launch.
//!
//! Why: at MNIST size (784-128-10, batch 128) a step is about 50 MFLOP, a few microseconds of
//! tensor-core work, while a step of a dozen dependent kernels spends most of its time launching
//! and draining them. Here a step costs one grid-wide barrier.
//!
//! Decomposition: block `b` owns hidden units `8b..8b+8` (one n = 8 `mma` tile): those rows of
//! W1, entries of b1 and columns of W2. Everything but the logits is block-local:
//! - forward, `H[:, own] = relu(X·W1[own]ᵀ + b1[own])`, needs the batch and the block's weights;
//! - the logits `H·W2ᵀ` are a sum over blocks: each block writes its partial product, all meet
//!   at the step's barrier, and each sums the partials in the same order, so every block holds
//!   the same logits and computes the same softmax gradient;
//! - from it, each block derives its dW2 columns, `dH[:, own]`, db1 and
//!   `dW1[own] = dH[:, own]ᵀ·X`, and updates what it owns (every block updates b2 alike).
//!
//! The batch stays in shared memory (fp16) from the forward to dW1, so a step reads it from
//! global memory once, and the next batch is requested as soon as dW1 is done with it. W1's
//! fp32 master values and momentum live in registers for the whole launch; the fp16 copy the
//! tensor cores read lives in shared memory.

/// Hidden units per block: one n = 8 `mma` tile.
pub const UNITS: usize = 8;
/// Threads per block: 8 warps, one 16-row tile of the batch each in the forward.
pub const THREADS: usize = 256;
/// Limits of the kernel: the batch fits one 16-row tile per warp, the input width fits seven
/// 16-wide tiles of dW1ᵀ per warp, and each thread sums at most two groups of logits.
pub const MAX_BATCH: usize = 128;
pub const MAX_DIM: usize = 896;
pub const MAX_CLASSES: usize = 16;

/// Byte offsets of the kernel's dynamic shared memory for one (batch, input width, classes).
/// The host sizes the launch with it, the kernel finds its buffers with it.
#[derive(Clone, Copy, Debug)]
pub struct Smem {
    /// Batch rows rounded up to the 16 of an `mma` tile (the extra rows hold zeros).
    pub rows: usize,
    /// Bytes per row of the batch and of W1: an odd number of 16-byte chunks, so the eight rows
    /// one `ldmatrix` phase reads fall in eight different bank groups.
    pub stride: usize,
    /// The batch, fp16 `[rows][stride]`.
    pub x: usize,
    /// The block's rows of W1, fp16 `[UNITS][stride]`.
    pub w1: usize,
    /// `dH[:, own]`, fp16 `[rows rounded to 32][UNITS]`.
    pub dh: usize,
    /// `H[:, own]` after ReLU (fp16-rounded values), f32 `[rows][UNITS]`.
    pub h: usize,
    /// Logits, then their gradient, f32 `[batch][classes]`.
    pub logits: usize,
    /// Source example of each row of the next batch, u32 `[rows]`.
    pub src: usize,
    /// Labels of the current and the next batch, u32 `[2][rows]`.
    pub labels: usize,
    /// Small parameters, f32: W2 columns (master, momentum, fp16 value, each `[classes][UNITS]`),
    /// b1 (the same three, `[UNITS]`), b2 (`[classes]`), then the W2/b2 gradients
    /// (`[classes][UNITS + 1]`) and one value per warp for block sums.
    pub params: usize,
    pub bytes: usize,
}

const fn align16(x: usize) -> usize {
    x.div_ceil(16) * 16
}

impl Smem {
    pub const fn new(batch: usize, dim: usize, classes: usize) -> Smem {
        let rows = batch.div_ceil(16) * 16;
        let stride = ((dim * 2).div_ceil(16) | 1) * 16;
        let x = 0;
        let w1 = x + rows * stride;
        let dh = w1 + UNITS * stride;
        let h = dh + rows.div_ceil(32) * 32 * UNITS * 2;
        let logits = h + rows * UNITS * 4;
        let src = align16(logits + batch * classes * 4);
        let labels = src + rows * 4;
        let params = labels + 2 * rows * 4;
        let floats = 3 * classes * UNITS + 3 * UNITS + 3 * classes + classes * (UNITS + 1) + 8;
        Smem {
            rows,
            stride,
            x,
            w1,
            dh,
            h,
            logits,
            src,
            labels,
            params,
            bytes: align16(params + floats * 4),
        }
    }
}

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
mod kernel {
    use super::*;
    use crate::device::*;
    use crate::gemm::Acc;
    use crate::layout::{Operand, ldmatrix_lane, mma_c};
    use crate::mlp::{LN_2, LOG2_E, exp2, log2};
    use crate::mma::*;
    use crate::shuffle::permute;
    use core::arch::asm;

    const WARPS: usize = THREADS / 32;
    /// 16-wide tiles of dW1ᵀ (along the input) per warp.
    const TILES_PER_WARP: usize = MAX_DIM / 16 / WARPS;
    /// Independent accumulators for the forward's single column of tiles along K, so the
    /// tensor cores are not waiting on one long dependent chain.
    const CHAINS: usize = 4;

    /// Every block of the grid arrives; returns when `counter` reaches `target` (the number of
    /// blocks times the steps done so far: the host zeroes it before each launch). All blocks
    /// must be resident at once: the host launches cooperatively.
    #[inline(always)]
    fn grid_barrier(counter: *mut u32, target: u32) {
        sync_threads();
        if thread_x() == 0 {
            unsafe {
                asm!("fence.acq_rel.gpu;", "red.relaxed.gpu.global.add.u32 [{c}], 1;",
                     c = in(reg64) counter, options(nostack));
                loop {
                    let v: u32;
                    asm!("ld.relaxed.gpu.global.u32 {v}, [{c}];",
                         v = out(reg32) v, c = in(reg64) counter, options(nostack));
                    if v >= target {
                        break;
                    }
                }
                asm!("fence.acq_rel.gpu;", options(nostack));
            }
        }
        sync_threads();
    }

    /// A load that bypasses L1: the value was written by another SM during this launch.
    #[inline(always)]
    fn ld_cg(p: *const f32) -> f32 {
        let v: f32;
        unsafe {
            asm!("ld.global.cg.f32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p,
                 options(readonly, nostack));
        }
        v
    }

    #[inline(always)]
    fn lds_u32(addr: u32) -> u32 {
        let v: u32;
        unsafe {
            asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr,
                 options(readonly, nostack));
        }
        v
    }

    #[inline(always)]
    fn sts_u16(addr: u32, v: u16) {
        unsafe {
            asm!("st.shared.u16 [{a}], {v};", a = in(reg32) addr, v = in(reg16) v,
                 options(nostack));
        }
    }

    /// `x` rounded to fp16 and back: the value the tensor cores and the layered path see.
    #[inline(always)]
    fn round_h(x: f32) -> f32 {
        h2f(f2h(x))
    }

    /// One SGD-with-momentum step of one parameter; returns the new weight.
    #[inline(always)]
    fn sgd(w: &mut f32, v: &mut f32, g: f32, lr: f32, momentum: f32) -> f32 {
        *v = momentum * *v + g;
        *w -= lr * *v;
        *w
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn train<A: Acc>(
        x: *const u16,
        y: *const u8,
        n: u32,
        dim: u32,
        hidden: u32,
        classes: u32,
        batch: u32,
        w32: *mut f32,
        w16: *mut u16,
        vel: *mut f32,
        o_w1: u32,
        o_b1: u32,
        o_w2: u32,
        o_b2: u32,
        lr: f32,
        momentum: f32,
        loss: *mut f32,
        correct: *mut f32,
        step0: u32,
        steps: u32,
        seed: u32,
        partials: *mut f32,
        counter: *mut u32,
    ) {
        let lay = Smem::new(batch as usize, dim as usize, classes as usize);
        let base = dynamic_shared::<u8>();
        let sbase = shared_addr(base);
        let f32_at = |off: usize| unsafe { base.add(off) as *mut f32 };
        let u32_at = |off: usize| unsafe { base.add(off) as *mut u32 };
        let (sx, sw1, sdh) = (
            sbase + lay.x as u32,
            sbase + lay.w1 as u32,
            sbase + lay.dh as u32,
        );
        let stride = lay.stride as u32;
        let (h, lg, src, labels) = (
            f32_at(lay.h),
            f32_at(lay.logits),
            u32_at(lay.src),
            u32_at(lay.labels),
        );
        let cn = classes as usize;
        let p = f32_at(lay.params);
        let (w2m, w2v, w2h) = unsafe { (p, p.add(cn * UNITS), p.add(2 * cn * UNITS)) };
        let b1m = unsafe { p.add(3 * cn * UNITS) };
        let (b1v, b1h) = unsafe { (b1m.add(UNITS), b1m.add(2 * UNITS)) };
        let b2m = unsafe { b1m.add(3 * UNITS) };
        let (b2v, b2h) = unsafe { (b2m.add(cn), b2m.add(2 * cn)) };
        let gw = unsafe { b2m.add(3 * cn) };
        let scratch = unsafe { gw.add(cn * (UNITS + 1)) };

        let tid = thread_x() as usize;
        let (w, l) = (warp_id() as usize, lane() as usize);
        let (blk, blocks) = (block_x(), grid_dim_x());
        let j0 = blk * UNITS as u32;
        let (rows, bn) = (lay.rows, batch as usize);
        let dh_rows = rows.div_ceil(32) * 32;
        let ktiles = (dim / 16) as usize;
        let slot = bn * cn;

        // Parameters in: W1 master and momentum into registers (each thread keeps the elements
        // of the dW1ᵀ fragments it computes), their fp16 copy into shared memory; the small
        // ones into shared memory.
        let mut wm = [[0.0f32; 4]; TILES_PER_WARP];
        let mut wv = [[0.0f32; 4]; TILES_PER_WARP];
        for i in 0..TILES_PER_WARP {
            let mt = w + WARPS * i;
            if mt < ktiles {
                for e in 0..4 {
                    let (r, c) = mma_c(l, e);
                    let k = (o_w1 + (j0 + c as u32) * dim) as usize + 16 * mt + r;
                    unsafe {
                        wm[i][e] = *w32.add(k);
                        wv[i][e] = *vel.add(k);
                    }
                    sts_u16(
                        sw1 + c as u32 * stride + ((16 * mt + r) * 2) as u32,
                        f2h(wm[i][e]),
                    );
                }
            }
        }
        if tid < cn * UNITS {
            let (c, j) = (tid / UNITS, tid % UNITS);
            let k = (o_w2 + c as u32 * hidden + j0) as usize + j;
            unsafe {
                *w2m.add(tid) = *w32.add(k);
                *w2v.add(tid) = *vel.add(k);
                *w2h.add(tid) = round_h(*w2m.add(tid));
            }
        }
        if tid < UNITS {
            let k = (o_b1 + j0) as usize + tid;
            unsafe {
                *b1m.add(tid) = *w32.add(k);
                *b1v.add(tid) = *vel.add(k);
                *b1h.add(tid) = round_h(*b1m.add(tid));
            }
        }
        if tid < cn {
            let k = o_b2 as usize + tid;
            unsafe {
                *b2m.add(tid) = *w32.add(k);
                *b2v.add(tid) = *vel.add(k);
                *b2h.add(tid) = round_h(*b2m.add(tid));
            }
        }
        // Rows past the batch stay zero for the whole launch (dW1 reads them).
        let pad_words = (rows - bn) * lay.stride / 4;
        let pad = u32_at(lay.x + bn * lay.stride);
        let mut i = tid;
        while i < pad_words {
            unsafe { *pad.add(i) = 0 };
            i += THREADS;
        }
        // The first batch: its rows' sources, then the copy.
        let gather = |step: u32, buf: usize| {
            if tid < bn {
                let s = permute(step * batch + tid as u32, n, seed);
                unsafe {
                    *src.add(tid) = s;
                    *labels.add(buf * rows + tid) = *y.add(s as usize) as u32;
                }
            }
        };
        let load_batch = || {
            let chunks = (dim / 8) as usize;
            let mut r = w;
            while r < bn {
                let s = unsafe { *src.add(r) } as usize;
                let mut ch = l;
                while ch < chunks {
                    let from = unsafe { x.add(s * dim as usize + 8 * ch) } as *const u8;
                    cp_async_16(sx + (r * lay.stride + 16 * ch) as u32, from, 16);
                    ch += 32;
                }
                r += WARPS;
            }
            cp_async_commit();
        };
        gather(step0, 0);
        sync_threads();
        load_batch();

        for k in 0..steps {
            let step = step0 + k;
            let cur = (k % 2) as usize;
            cp_async_wait::<0>();
            sync_threads();

            // Forward: warp w computes H rows 16w..16w+16 of the block's 8 units.
            if 16 * w < rows {
                let mut acc = [A::ZERO; CHAINS];
                let (mm, kk) = ldmatrix_lane(l, Operand::A, true);
                let a0 = sx + ((16 * w + mm) * lay.stride + 2 * kk) as u32;
                let b0 = sw1 + (l / 4) as u32 * stride + 4 * (l % 4) as u32;
                let mut ks = 0;
                let tile = |acc: &mut A, ks: usize| {
                    let a = ldmatrix_x4(a0 + 32 * ks as u32);
                    let b = [
                        lds_u32(b0 + 32 * ks as u32),
                        lds_u32(b0 + 32 * ks as u32 + 16),
                    ];
                    acc.mma_k16(a, b);
                };
                while ks + CHAINS <= ktiles {
                    for c in 0..CHAINS {
                        tile(&mut acc[c], ks + c);
                    }
                    ks += CHAINS;
                }
                while ks < ktiles {
                    tile(&mut acc[0], ks);
                    ks += 1;
                }
                for e in 0..4 {
                    let (r, c) = mma_c(l, e);
                    let mut s = 0.0;
                    for a in &acc {
                        s += a.get(e);
                    }
                    let v = s + unsafe { *b1h.add(c) };
                    // ReLU that lets NaN through, so a diverged run shows in the loss.
                    let v = if v < 0.0 { 0.0 } else { v };
                    unsafe { *h.add((16 * w + r) * UNITS + c) = round_h(v) };
                }
            }
            sync_threads();

            // This block's share of the logits, to its slot of this step's partials.
            let part =
                |b: u32| unsafe { partials.add(((cur as u32 * blocks + b) as usize) * slot) };
            let mine = part(blk);
            let mut o = tid;
            while o < slot {
                let (r, c) = (o / cn, o % cn);
                let mut s = 0.0;
                for j in 0..UNITS {
                    s += unsafe { *h.add(r * UNITS + j) * *w2h.add(c * UNITS + j) };
                }
                unsafe { *mine.add(o) = s };
                o += THREADS;
            }
            // Sources and labels of the next batch, while the barrier waits.
            if k + 1 < steps {
                gather(step + 1, 1 - cur);
            }
            grid_barrier(counter, blocks * (k + 1));

            // Full logits: the partials of every block, summed in block order.
            let mut o = tid;
            while o < slot {
                let mut s = 0.0;
                let mut b = 0;
                while b + 8 <= blocks {
                    // Eight loads in flight before the first add.
                    let mut v = [0.0f32; 8];
                    for i in 0..8 {
                        v[i] = ld_cg(unsafe { part(b + i as u32).add(o) });
                    }
                    for i in 0..8 {
                        s += v[i];
                    }
                    b += 8;
                }
                while b < blocks {
                    s += ld_cg(unsafe { part(b).add(o) });
                    b += 1;
                }
                unsafe { *lg.add(o) = s + *b2h.add(o % cn) };
                o += THREADS;
            }
            sync_threads();

            // Softmax cross-entropy, one row per thread; the logits become their gradient.
            let (mut l_sum, mut c_sum) = (0.0f32, 0.0f32);
            if tid < bn {
                let z = unsafe { lg.add(tid * cn) };
                let label = unsafe { *labels.add(cur * rows + tid) } as usize;
                let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
                for c in 0..cn {
                    let v = unsafe { *z.add(c) };
                    if v > max {
                        max = v;
                        arg = c;
                    }
                }
                let mut sum = 0.0;
                for c in 0..cn {
                    sum += exp2((unsafe { *z.add(c) } - max) * LOG2_E);
                }
                l_sum = log2(sum) * LN_2 - (unsafe { *z.add(label) } - max);
                c_sum = (arg == label) as u32 as f32;
                let scale = 1.0 / (sum * batch as f32);
                for c in 0..cn {
                    let e = exp2((unsafe { *z.add(c) } - max) * LOG2_E) * scale;
                    let g = e - (c == label) as u32 as f32 / batch as f32;
                    unsafe { *z.add(c) = g };
                }
            }
            let l_total = unsafe { block_sum_f32(l_sum, scratch) };
            let c_total = unsafe { block_sum_f32(c_sum, scratch) };
            if blk == 0 && tid == 0 {
                unsafe {
                    *loss.add(step as usize) = l_total / batch as f32;
                    *correct.add(step as usize) = c_total;
                }
            }

            // dH = dlogits·W2[:, own], through the ReLU, fp16 for the tensor cores.
            let mut o = tid;
            while o < dh_rows * UNITS {
                let (r, j) = (o / UNITS, o % UNITS);
                let mut s = 0.0;
                if r < bn && unsafe { *h.add(o) } > 0.0 {
                    for c in 0..cn {
                        s += unsafe { *lg.add(r * cn + c) * *w2h.add(c * UNITS + j) };
                    }
                }
                sts_u16(sdh + 2 * o as u32, f2h(s));
                o += THREADS;
            }
            // dW2[:, own] and db2: one warp per sum over the batch.
            let mut q = w;
            while q < cn * (UNITS + 1) {
                let (c, j) = (q / (UNITS + 1), q % (UNITS + 1));
                let mut s = 0.0;
                let mut r = l;
                while r < bn {
                    let d = unsafe { *lg.add(r * cn + c) };
                    s += if j < UNITS {
                        d * unsafe { *h.add(r * UNITS + j) }
                    } else {
                        d
                    };
                    r += 32;
                }
                let s = warp_sum_f32(s);
                if l == 0 {
                    unsafe { *gw.add(q) = s };
                }
                q += WARPS;
            }
            sync_threads();

            // Updates of W2[:, own] and b2 (every block alike), then db1 and b1.
            if tid < cn * (UNITS + 1) {
                let (c, j) = (tid / (UNITS + 1), tid % (UNITS + 1));
                let g = unsafe { *gw.add(tid) };
                unsafe {
                    if j < UNITS {
                        let i = c * UNITS + j;
                        *w2h.add(i) =
                            round_h(sgd(&mut *w2m.add(i), &mut *w2v.add(i), g, lr, momentum));
                    } else {
                        *b2h.add(c) =
                            round_h(sgd(&mut *b2m.add(c), &mut *b2v.add(c), g, lr, momentum));
                    }
                }
            }
            {
                let j = w; // one warp per unit
                let dh = unsafe { base.add(lay.dh) as *const u16 };
                let mut s = 0.0;
                let mut r = l;
                while r < bn {
                    s += h2f(unsafe { *dh.add(r * UNITS + j) });
                    r += 32;
                }
                let s = warp_sum_f32(s);
                if l == 0 {
                    unsafe {
                        *b1h.add(j) =
                            round_h(sgd(&mut *b1m.add(j), &mut *b1v.add(j), s, lr, momentum));
                    }
                }
            }

            // dW1[own]ᵀ = Xᵀ·dH[:, own]: warp w owns input tiles w, w+8, …; then their update.
            let ksteps = rows / 16;
            let mut bf = [[0u32; 2]; MAX_BATCH / 16];
            for pair in 0..MAX_BATCH / 32 {
                if 2 * pair < ksteps {
                    let r = ldmatrix_x4_trans(sdh + ((32 * pair + l) * UNITS * 2) as u32);
                    bf[2 * pair] = [r[0], r[1]];
                    bf[2 * pair + 1] = [r[2], r[3]];
                }
            }
            let mut acc = [A::ZERO; TILES_PER_WARP];
            let (mm, kk) = ldmatrix_lane(l, Operand::A, false);
            for ks in 0..MAX_BATCH / 16 {
                if ks < ksteps {
                    for i in 0..TILES_PER_WARP {
                        let mt = w + WARPS * i;
                        if mt < ktiles {
                            let a = ldmatrix_x4_trans(
                                sx + ((16 * ks + kk) * lay.stride + (16 * mt + mm) * 2) as u32,
                            );
                            acc[i].mma_k16(a, bf[ks]);
                        }
                    }
                }
            }
            for i in 0..TILES_PER_WARP {
                let mt = w + WARPS * i;
                if mt < ktiles {
                    for e in 0..4 {
                        let (r, c) = mma_c(l, e);
                        let nw = sgd(&mut wm[i][e], &mut wv[i][e], acc[i].get(e), lr, momentum);
                        sts_u16(
                            sw1 + c as u32 * stride + ((16 * mt + r) * 2) as u32,
                            f2h(nw),
                        );
                    }
                }
            }
            sync_threads();
            if k + 1 < steps {
                load_batch();
            }
        }

        // Parameters out: fp32 master, momentum and the fp16 copy the layered kernels read.
        for i in 0..TILES_PER_WARP {
            let mt = w + WARPS * i;
            if mt < ktiles {
                for e in 0..4 {
                    let (r, c) = mma_c(l, e);
                    let k = (o_w1 + (j0 + c as u32) * dim) as usize + 16 * mt + r;
                    unsafe {
                        *w32.add(k) = wm[i][e];
                        *vel.add(k) = wv[i][e];
                        *w16.add(k) = f2h(wm[i][e]);
                    }
                }
            }
        }
        let put = |k: usize, m: f32, v: f32| unsafe {
            *w32.add(k) = m;
            *vel.add(k) = v;
            *w16.add(k) = f2h(m);
        };
        if tid < cn * UNITS {
            let (c, j) = (tid / UNITS, tid % UNITS);
            let k = (o_w2 + c as u32 * hidden + j0) as usize + j;
            put(k, unsafe { *w2m.add(tid) }, unsafe { *w2v.add(tid) });
        }
        if tid < UNITS {
            put(
                (o_b1 + j0) as usize + tid,
                unsafe { *b1m.add(tid) },
                unsafe { *b1v.add(tid) },
            );
        }
        if blk == 0 && tid < cn {
            put(o_b2 as usize + tid, unsafe { *b2m.add(tid) }, unsafe {
                *b2v.add(tid)
            });
        }
    }

    macro_rules! export {
        ($name:literal, $acc:ty) => {
            const _: () = {
                #[unsafe(export_name = $name)]
                #[allow(clippy::too_many_arguments)]
                unsafe extern "ptx-kernel" fn kernel(
                    x: *const u16,
                    y: *const u8,
                    n: u32,
                    dim: u32,
                    hidden: u32,
                    classes: u32,
                    batch: u32,
                    w32: *mut f32,
                    w16: *mut u16,
                    vel: *mut f32,
                    o_w1: u32,
                    o_b1: u32,
                    o_w2: u32,
                    o_b2: u32,
                    lr: f32,
                    momentum: f32,
                    loss: *mut f32,
                    correct: *mut f32,
                    step0: u32,
                    steps: u32,
                    seed: u32,
                    partials: *mut f32,
                    counter: *mut u32,
                ) {
                    unsafe {
                        train::<$acc>(
                            x, y, n, dim, hidden, classes, batch, w32, w16, vel, o_w1, o_b1, o_w2,
                            o_b2, lr, momentum, loss, correct, step0, steps, seed, partials,
                            counter,
                        )
                    }
                }
            };
        };
    }
    export!("mlp1_persistent_f16", [u32; 2]);
    export!("mlp1_persistent_f32", [f32; 4]);
}
