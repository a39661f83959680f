//! The one-hidden-layer step loop ([`train`]) and the exports of every row of
//! [`persistent_variants!`](crate::persistent_variants), each to its loop: this one, the layer
//! engine's for several hidden layers (`layers.rs`) or W1's state in global memory
//! (`offchip.rs`).
use super::context::{Block, Step};
use super::exchange::Outbox;
use super::fetch::Copies;
use super::stream::Ring;
use super::trace::Trace;
use super::weights::W1;
use super::*;
use crate::arch::{Acc, sync_threads, sync_warp};
use crate::target::BUILT;

/// What the one-layer loop assumes of its row `v` on this PTX.
const fn assert_one_layer_row(v: &Variant) {
    assert!(v.parts >= PAIR && v.parts <= MAX_PARTS && v.exists_in(BUILT));
    assert!(
        !v.ring() || v.parts == PAIR,
        "the ring loads a half of the batch"
    );
    assert!(
        v.w1_copy_in_registers() == (v.single() && v.parts == MAX_PARTS && !BUILT.cp_async()),
        "W1's copy in registers: the quarters on sm_75"
    );
    assert!(
        BUILT.cp_async() || v.ring() || v.w1_copy_in_registers(),
        "sm_75 copies through registers: the ring, or one buffer of a quarter"
    );
    assert!(
        v.n == 1 || (BUILT.clusters() && v.single() && v.parts == PAIR),
        "wide slices: one buffer, a pair of blocks in a cluster"
    );
    assert!(
        !v.bulk() || (BUILT.clusters() && !v.ring()),
        "bulk reductions: Hopper, whole rows"
    );
    assert!(
        !matches!(v.batch, Batch::Double) || BUILT.clusters(),
        "two buffers: the next batch by the copy engine (Hopper)"
    );
}

/// The training loop of one block of variant `F` (a row of [`VARIANTS`]): `args.steps`
/// steps, each the phases in order. A block is one of the `P` parts of a slice, holds `T`
/// 16-row tiles of the batch at most and a slice of `N` n-tiles, of which it updates `O`:
/// the row's `parts`, [`Variant::tiles`], `n` and [`Variant::owned`], passed as parameters
/// because they size the register arrays and bound their loops.
#[inline(always)]
pub(super) unsafe fn train<
    A: Acc,
    F: Row,
    const P: usize,
    const T: usize,
    const N: usize,
    const O: usize,
>(
    args: Params,
) {
    const {
        let v = F::V;
        assert!(P == v.parts && T == v.tiles() && N == v.n && O == v.owned());
        assert_one_layer_row(&v);
    };
    let ring_fed = F::V.ring();
    let block = Block::new::<F>(args, args.layer(0));
    let mut w1 = W1::<O, F>::load(&block);
    weights::load_small(&block);
    block.clear_unfilled_rows();
    exchange::open::<P>(&block);
    let mut ring = Ring::start(&block, ring_fed);
    let mut copies = if ring_fed {
        Copies::idle()
    } else {
        fetch::start(&block)
    };
    for k in 0..args.steps {
        let b = block.for_step();
        let s = Step::new(&b, k);
        // One mark a phase of `trace::ONE_LAYER`.
        let mut t = Trace::start(&args, k);
        if !ring_fed {
            fetch::wait(&b, &s, &copies);
        }
        exchange::wait_w1(&b, &s);
        t.mark();
        let h = forward::hidden::<A, F, T, N, O, TILES_PER_WARP>(&b, &s, &mut ring, &w1);
        t.mark();
        logits::add_partials::<A, T, N>(&b, &s, &h, F::V.bulk());
        t.mark();
        logits::exchange(&b, &s);
        t.mark();
        let part = softmax::cross_entropy::<F>(&b, &s);
        t.mark();
        backward::hidden_grad(&b, &h);
        let out = Outbox::new::<P>(&b);
        let db1 = backward::bias_share::<T, N>(&b, &out);
        t.mark();
        backward::output_grads::<T, N>(&b, &out);
        t.mark();
        let send = |theirs: &_| out.send_dw1(&b, theirs, b.peer0);
        let dw1 = backward::dw1_shares::<A, F, T, N, O, TILES_PER_WARP>(&b, &s, &mut ring, send);
        t.mark();
        softmax::loss_sums::<F>(&b, part);
        t.mark();
        let sums = exchange::receive::<A, P, N, O, TILES_PER_WARP>(&b, &s, (&dw1, db1), || {
            if !ring_fed {
                fetch::after_dw1(&b, &s, &mut copies);
            }
        });
        t.mark();
        softmax::record_loss::<F>(&b, &s);
        update::sgd_step(&b, &s, &mut w1, &sums, &out);
        if const { forward::reads_own_w1_rows::<A>(F::V.ring(), T) } {
            sync_warp();
        } else {
            sync_threads();
        }
        t.mark();
    }
    // The last step's update before the write-back reads it.
    sync_threads();
    // Each block writes back what it updates; one block of each slice the rest.
    if N > 1 || block.part == 0 {
        w1.store(&block);
    }
    if block.part == 0 {
        weights::store_small(&block);
    }
}

/// Exports every row of [`persistent_variants!`](crate::persistent_variants) that this PTX
/// has (its `from`/`only` column as a `cfg`), one kernel per accumulator of the row, named
/// `mlp_persistent_{name}_{f16|f32}`: [`train`], for W1's state in global memory the
/// offchip kernel's loop, for several hidden layers the layer engine's (`layers`).
macro_rules! export {
    ($(($name:ident, $batch:ident, $parts:tt, $most:tt, $n:tt, $w1:ident, $logits:ident,
        [$($acc:ident)*], $which:ident $sm:tt, $slices:tt, $stages:tt, $layers:tt,
        $inner:tt),)*) => {$(
        export!(@archs ($which $sm) $name, $w1, $layers, $($acc)*);
    )*};
    (@archs (from 75) $($row:tt)*) => { export!(@row $($row)*); };
    (@archs (from 80) $($row:tt)*) => {
        #[cfg(target_feature = "sm_80")]
        export!(@row $($row)*);
    };
    (@archs (from 90) $($row:tt)*) => {
        #[cfg(all(target_feature = "sm_90", target_feature = "ptx81"))]
        export!(@row $($row)*);
    };
    (@archs (only 75) $($row:tt)*) => {
        #[cfg(not(target_feature = "sm_80"))]
        export!(@row $($row)*);
    };
    (@row $name:ident, $w1:ident, $layers:tt, $($acc:ident)*) => {
        const _: () = {
            struct Kernel;
            impl Row for Kernel {
                const V: Variant = rows::$name;
            }
            $(export!(@kernel $name, $w1, $layers, $acc);)*
        };
    };
    (@kernel $name:ident, Global, 1, $acc:ident) => {
        #[unsafe(export_name = concat!("mlp_persistent_", stringify!($name), "_", stringify!($acc)))]
        unsafe extern "ptx-kernel" fn $acc(args: Params) {
            unsafe { super::offchip::train::<Kernel, { Kernel::V.n }>(args) }
        }
    };
    (@kernel $name:ident, $w1:ident, 1, $acc:ident) => {
        #[unsafe(export_name = concat!("mlp_persistent_", stringify!($name), "_", stringify!($acc)))]
        unsafe extern "ptx-kernel" fn $acc(args: Params) {
            unsafe {
                train::<accumulator!($acc), Kernel, { Kernel::V.parts }, { Kernel::V.tiles() }, { Kernel::V.n }, { Kernel::V.owned() }>(args)
            }
        }
    };
    (@kernel $name:ident, $w1:ident, $layers:tt, $acc:ident) => {
        #[unsafe(export_name = concat!("mlp_persistent_", stringify!($name), "_", stringify!($acc)))]
        unsafe extern "ptx-kernel" fn $acc(args: Params) {
            unsafe {
                super::layers::train::<accumulator!($acc), Kernel, { Kernel::V.parts }, { Kernel::V.tiles() }, { Kernel::V.layers }, { Kernel::V.inner_tiles() }>(args)
            }
        }
    };
}
/// The accumulator type of a row's `f16`/`f32` column.
macro_rules! accumulator {
    (f16) => {
        [u32; 2]
    };
    (f32) => {
        [f32; 4]
    };
}
crate::persistent_variants!(export);
