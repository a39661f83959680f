//! The SGD-with-momentum update. Both blocks of a slice add the same two shares of each
//! gradient (IEEE addition is commutative: the same sums) and take the same step, so their
//! copies of the slice's parameters stay identical. W1 is updated in registers by the threads
//! that computed its gradient, its fp16 copy in shared memory; W2 and b2 by the threads of
//! warps 4-7, one element of the dW2 (and db2) fragment each, after their W1 tiles (warp 0 has
//! one tile more); b1 by threads `0..UNITS`.
use super::context::Block;
use super::exchange::Theirs;
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

/// The element of W2 this thread updates, if any: its word `j` of the dW2 fragment and its
/// flat index `class · UNITS + unit`.
#[inline(always)]
pub fn w2_element(b: &Block) -> Option<(usize, usize)> {
    let j = b.tid % 128;
    let (c, unit) = mma_c(j / 4, j % 4);
    (b.tid >= 128 && c < b.classes).then_some((j, c * UNITS + unit))
}

/// The step's update of every parameter of the slice, from this block's shares (`dw1`, `db1`,
/// [`Block::own`]) and the partner's.
#[inline(always)]
pub fn sgd_step<A: Acc>(
    b: &Block,
    w1: &mut W1,
    dw1: &[A; TILES_PER_WARP],
    db1: f32,
    theirs: &Theirs,
) {
    // W2's gradient is loaded before W1's update, which hides the loads' latency.
    let w2 = w2_element(b).map(|(j, i)| {
        let own = b.own();
        let (gw2, gb2) = unsafe { (*own.add(j) + theirs.dw2, *own.add(128 + j) + theirs.db2) };
        (i, gw2, gb2)
    });
    for i in 0..TILES_PER_WARP {
        let mt = b.warp + WARPS * i;
        if mt < b.ktiles {
            let share = dw1[i].pairs();
            for p in 0..2 {
                // Elements 2p and 2p + 1: one input, two adjacent units, one word of W1.
                let g = A::add_pairs(share[p], theirs.dw1[i][p]);
                let mut nw = [0.0; 2];
                for h in 0..2 {
                    let e = 2 * p + h;
                    nw[h] = sgd(b, &mut w1.master[i][e], &mut w1.momentum[i][e], g[h]);
                }
                let (r, c) = mma_c(b.lane, 2 * p);
                st_shared_u32(w1_shared(b, mt, r, c), pack_h2(nw[0], nw[1]));
            }
        }
    }
    let p = b.small();
    if b.tid < UNITS {
        let (t, g) = (b.tid, db1 + theirs.db1);
        unsafe {
            *p.b1_half.add(t) = round_h(sgd(
                b,
                &mut *p.b1_master.add(t),
                &mut *p.b1_momentum.add(t),
                g,
            ))
        };
    }
    if let Some((i, gw2, gb2)) = w2 {
        let (c, unit) = (i / UNITS, i % UNITS);
        let nw = unsafe { sgd(b, &mut *p.w2_master.add(i), &mut *p.w2_momentum.add(i), gw2) };
        set_w2_half(b, c, unit, nw);
        if unit == 0 {
            let (m, v) = unsafe { (&mut *p.b2_master.add(c), &mut *p.b2_momentum.add(c)) };
            unsafe { *p.b2_half.add(c) = round_h(sgd(b, m, v, gb2)) };
        }
    }
}
