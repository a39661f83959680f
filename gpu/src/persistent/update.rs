//! The SGD-with-momentum update. Every block of a slice has the same sums of the shares of
//! each gradient ([`Sums`]) and takes the same step, so their copies of the slice's
//! parameters stay identical (with slices of several n-tiles, each block of the pair updates
//! the W1 of half of them and sends the other its new values). W1 is updated in registers by
//! the threads that computed its gradient, its fp16 copy where [`W1`] keeps it; W2 and b2 by the
//! threads of warps 4-7, one element of each n-tile's dW2 (and of the db2) fragment each, after
//! their W1 tiles (warp 0 has one tile more); b1 by the bias warp ([`bias_unit`]).
use super::context::{Block, Step};
use super::exchange::{Outbox, Sums, splits_w1};
use super::owners::{bias_unit, w2_element};
use super::weights::{W1, set_w2_half};
use super::*;
use crate::arch::*;
use crate::gemm::momentum_step;

/// One SGD-with-momentum step of one parameter ([`momentum_step`], the rule of every engine);
/// returns the new weight.
#[inline(always)]
pub fn sgd(b: &Block, w: &mut f32, v: &mut f32, g: f32) -> f32 {
    (*w, *v) = momentum_step(b.args.lr, b.args.momentum, *w, *v, g);
    *w
}

/// The step's update of every parameter of the slice this block updates, from the slice's
/// gradients; with slices of several n-tiles each new fp16 word of W1 also goes to the partner
/// (`out`), whose forward of the next step reads it.
#[inline(always)]
pub fn sgd_step<F: Row, const N: usize, const O: usize, const K: usize>(
    b: &Block,
    s: &Step,
    w1: &mut W1<O, F, K>,
    sums: &Sums<N, O, K>,
    out: &Outbox,
) {
    let send = splits_w1(b) && s.has_next(b.args.steps);
    for i in 0..K {
        let mt = b.warp + WARPS * i;
        if mt < b.ktiles {
            for g in 0..O {
                for p in 0..2 {
                    // Elements 2p and 2p + 1: one input, two adjacent units, one word of W1.
                    let mut nw = [0.0; 2];
                    for h in 0..2 {
                        let e = 2 * p + h;
                        let (w, v) = (&mut w1.master[i][g][e], &mut w1.momentum[i][g][e]);
                        nw[h] = sgd(b, w, v, sums.dw1[i][g][e]);
                    }
                    let word = pack_h2(nw[0], nw[1]);
                    let at = w1.set_half(b, i, g, p, word);
                    if send {
                        out.send_w1(b, at, word);
                    }
                }
            }
        }
    }
    let b1 = bias_unit(b).map(|t| (t, sums.db1));
    small_sgd::<N>(b, b1, |n| if n < N { sums.dw2[n] } else { sums.db2 });
}

/// The SGD step of the slice's b1, W2 and b2, each element on the thread that owns it: b1's
/// entry `t` where `b1` is `Some((t, its gradient))`; where [`w2_element`] gives the thread an
/// element, W2's of each n-tile `n` by the gradient `g2(n)` and, on unit 0, b2's of its class
/// by `g2(N)`.
#[inline(always)]
pub fn small_sgd<const N: usize>(b: &Block, b1: Option<(usize, f32)>, g2: impl Fn(usize) -> f32) {
    let p = b.small();
    if let Some((t, g)) = b1 {
        let (m, v) = unsafe { (&mut *p.b1_master.add(t), &mut *p.b1_momentum.add(t)) };
        unsafe { *p.b1_half.add(t) = round_h(sgd(b, m, v, g)) };
    }
    if let Some((c, unit)) = w2_element(b) {
        for n in 0..N {
            let j = UNITS * n + unit;
            let i = c * b.units() + j;
            let (m, v) = unsafe { (&mut *p.w2_master.add(i), &mut *p.w2_momentum.add(i)) };
            set_w2_half(b, c, j, sgd(b, m, v, g2(n)));
        }
        if unit == 0 {
            let (m, v) = unsafe { (&mut *p.b2_master.add(c), &mut *p.b2_momentum.add(c)) };
            unsafe { *p.b2_half.add(c) = round_h(sgd(b, m, v, g2(N))) };
        }
    }
}
