//! The SGD-with-momentum update. Every block of a slice has the same sums of the shares of
//! each gradient ([`Sums`]) and takes the same step, so their copies of the slice's
//! parameters stay identical. W1 is updated in registers by the threads
//! that computed its gradient, its fp16 copy in shared memory; W2 and b2 by the threads of
//! warps 4-7, one element of the dW2 (and db2) fragment each, after their W1 tiles (warp 0 has
//! one tile more); b1 by threads `0..UNITS`.
use super::context::Block;
use super::exchange::Sums;
use super::weights::{W1, set_w2_half, w1_shared};
use super::*;
use crate::arch::*;
use crate::layout::mma_c;
use core::intrinsics::fmaf32;

/// One SGD-with-momentum step of one parameter; returns the new weight.
#[inline(always)]
fn sgd(b: &Block, w: &mut f32, v: &mut f32, g: f32) -> f32 {
    *v = fmaf32(b.args.momentum, *v, g);
    *w = fmaf32(-b.args.lr, *v, *w);
    *w
}

/// The word of the dW2 (and db2) fragment whose element of W2 (and b2) this thread updates,
/// if [`w2_element`] gives it one: threads `128 + j` take word `j`.
#[inline(always)]
pub fn w2_word(b: &Block) -> usize {
    b.tid % 128
}

/// The element of W2 this thread updates, if any, as its flat index `class · UNITS + unit`.
#[inline(always)]
pub fn w2_element(b: &Block) -> Option<usize> {
    let j = w2_word(b);
    let (c, unit) = mma_c(j / 4, j % 4);
    (b.tid >= 128 && c < b.classes).then_some(c * UNITS + unit)
}

/// The step's update of every parameter of the slice, from the slice's gradients.
#[inline(always)]
pub fn sgd_step(b: &Block, w1: &mut W1, sums: &Sums) {
    for i in 0..TILES_PER_WARP {
        let mt = b.warp + WARPS * i;
        if mt < b.ktiles {
            for p in 0..2 {
                // Elements 2p and 2p + 1: one input, two adjacent units, one word of W1.
                let mut nw = [0.0; 2];
                for h in 0..2 {
                    let e = 2 * p + h;
                    let g = sums.dw1[i][e];
                    nw[h] = sgd(b, &mut w1.master[i][e], &mut w1.momentum[i][e], g);
                }
                let (r, c) = mma_c(b.lane, 2 * p);
                st_shared_u32(w1_shared(b, mt, r, c), pack_h2(nw[0], nw[1]));
            }
        }
    }
    let p = b.small();
    if b.tid < UNITS {
        let (t, g) = (b.tid, sums.db1);
        unsafe {
            *p.b1_half.add(t) = round_h(sgd(
                b,
                &mut *p.b1_master.add(t),
                &mut *p.b1_momentum.add(t),
                g,
            ))
        };
    }
    if let Some(i) = w2_element(b) {
        let (gw2, gb2) = (sums.dw2, sums.db2);
        let (c, unit) = (i / UNITS, i % UNITS);
        let nw = unsafe { sgd(b, &mut *p.w2_master.add(i), &mut *p.w2_momentum.add(i), gw2) };
        set_w2_half(b, c, unit, nw);
        if unit == 0 {
            let (m, v) = unsafe { (&mut *p.b2_master.add(c), &mut *p.b2_momentum.add(c)) };
            unsafe { *p.b2_half.add(c) = round_h(sgd(b, m, v, gb2)) };
        }
    }
}
