//! The blocks of a slice exchange their shares of the gradients (each holds its part of the
//! batch's), so that every one adds the same shares in the same order (part 0's first) and
//! takes the same SGD step. Words go in fragment order, so both the writes and the reads
//! coalesce: dW1 as fp16 pairs (`[tile][lane][pair]`: a lane's two pairs are one message, a
//! warp's 256 bytes contiguous), then f32 words of dW2 and db2 (`[lane][element]` each: a
//! lane's four words are one message), then db1.
//! - On Hopper the two blocks of a pair are a thread-block cluster: the shares go straight into
//!   the partner's shared memory as `st.async` messages, which its `mbarrier` counts until all
//!   have arrived (dW1 into the partner's fp16 W1 copy, which is free from its forward until
//!   its update; the rest into its [`Smem::xch`]).
//! - With slices of several n-tiles (the wide kernels, Hopper) each block of the pair updates
//!   half of them: it sends the partner only its share of the partner's n-tiles, and after the
//!   update the new fp16 values of its own, which a fourth `mbarrier` counts and the partner
//!   waits for before its next forward.
//! - Elsewhere, and for more than two parts, they go to the block's area of the global
//!   exchange buffer, and the slice's blocks meet at a counter there: each hidden layer has
//!   areas and counters of its own, since the layer engine exchanges every layer's shares in
//!   one step.
use super::context::{Block, Step};
use super::owners::{bias_unit, db1_at, w2_word};
use super::*;
use crate::arch::*;

/// Word of a dW1 share: tile `mt`, the lane's pair `p`.
#[inline(always)]
fn dw1_word(b: &Block, mt: usize, p: usize) -> usize {
    (mt * 32 + b.lane) * 2 + p
}

/// Where the small shares (dW2, db2, db1) start among a block's words.
const SMALL_AT: usize = WARPS * TILES_PER_WARP * 2 * 32;
/// Where slice 0's blocks leave their warps' sums of the step's loss, then of the correct
/// count, where the batch is in four parts ([`loss_in_parts`]).
const LOSS_AT: usize = SMALL_AT + small_shares(1);
const _: () = assert!(LOSS_AT + 2 * WARPS == EXCHANGE);
/// The partner's shares of the next step have this many bytes (Hopper): dW1's of the n-tiles
/// this block updates, and the small ones (db1's alone where the block has no classes: a layer
/// of the layer engine whose next layer is not the logits).
#[inline(always)]
fn share_bytes(b: &Block) -> u32 {
    let small = if b.classes > 0 {
        small_shares(b.lay.n)
    } else {
        b.lay.n * UNITS
    };
    ((b.ktiles * 2 * 32 * owned(b.lay.n) + small) * 4) as u32
}

/// The partner's new W1 values of a step have this many bytes (wide kernels): its n-tiles'
/// planes, 16 bytes an input.
#[inline(always)]
fn w1_bytes(b: &Block) -> u32 {
    (b.ktiles * 16 * 16 * owned(b.lay.n)) as u32
}

/// Whether the blocks of a pair send each other their new W1 values (slices of several
/// n-tiles, of which each block updates half).
#[inline(always)]
pub fn splits_w1(b: &Block) -> bool {
    b.lay.n > 1
}

/// On Hopper, the mbarrier that counts the partner's shares, initialised, and the barrier of
/// the cluster before the first step. The partner writes into this block's shared memory only
/// after a grid barrier, by which this block has long started; the cluster barrier says so
/// where a checker can see it (compute-sanitizer cannot follow a barrier polled in global
/// memory). The first step's shares are announced after it: straight after the init the JIT
/// makes the init a uniform (warp-wide) instruction, which racecheck reports against thread
/// 0's arrive on the same mbarrier. Each step's shares are then counted there.
#[inline(always)]
pub fn open<const P: usize>(b: &Block) {
    if in_cluster(P) {
        if b.tid == 0 {
            mbar_init(b.mbar(2), 1);
            mbar_init(b.mbar(3), 1);
        }
        cluster_sync();
        if b.tid == 0 {
            expect_shares(b);
            if splits_w1(b) && b.args.steps > 1 {
                mbar_expect(b.mbar(3), w1_bytes(b));
            }
        }
    }
}

/// With slices of several n-tiles, from the second step on: waits for the partner's new W1
/// values of the step before (its n-tiles' planes, which this block's forward reads), then
/// announces those of this step if another follows. The first step's come from the launch.
#[inline(always)]
pub fn wait_w1(b: &Block, s: &Step) {
    if splits_w1(b) && s.k > 0 {
        mbar_wait::<true>(b.mbar(3), (s.k - 1) % 2);
        if b.tid == 0 && s.has_next(b.args.steps) {
            mbar_expect(b.mbar(3), w1_bytes(b));
        }
    }
}

/// Announces the partner's shares of a step at their mbarrier (Hopper): they follow the grid
/// barrier, which this block reaches after announcing them.
#[inline(always)]
fn expect_shares(b: &Block) {
    mbar_expect(b.mbar(2), share_bytes(b));
}

/// Whether the `parts` blocks of a slice exchange their shares within a cluster: on Hopper,
/// the two of a pair. More parts exchange through global memory there too.
const fn in_cluster(parts: usize) -> bool {
    HOPPER && parts == PAIR
}

/// The first word of block `blk`'s exchange area for `b`'s layer: the areas are
/// `[layer][block]`.
#[inline(always)]
fn area_of(b: &Block, blk: usize) -> usize {
    (b.layer.index as usize * b.blocks as usize + blk) * EXCHANGE
}

/// Whether the parts of a slice of row `v` add their shares of the loss through the exchange
/// area, in part order: four parts' fp32 adds into one word in the order they arrive would not
/// give the same bits every run (two do, in either order). The layer engine's do; the one-layer
/// kernels' quarters keep the adds, since the part-order sum's registers cost `quartered` 4%
/// of its step at batch 256.
pub const fn loss_in_parts(v: &Variant) -> bool {
    v.parts == MAX_PARTS && v.layers > 1
}

/// Warp `b.warp`'s sums of the step's loss and correct count into the block's exchange area
/// ([`loss_in_parts`]), before the slice's barrier.
#[inline(always)]
pub fn put_loss(b: &Block, (loss, correct): (f32, f32)) {
    let area = (b.args.exchange as *mut f32).wrapping_add(area_of(b, b.blk as usize) + LOSS_AT);
    unsafe {
        *area.add(b.warp) = loss;
        *area.add(WARPS + b.warp) = correct;
    }
}

/// The step's loss and correct count of the `parts` parts of `b`'s slice, from their exchange
/// areas after the slice's barrier: each part's warps in order, the parts in order.
#[inline(always)]
pub fn parts_loss(b: &Block, parts: usize) -> (f32, f32) {
    let exchange = b.args.exchange as *const u32;
    let (mut loss, mut correct) = (0.0, 0.0);
    for q in 0..parts {
        let area = exchange.wrapping_add(area_of(b, b.slice as usize * parts + q) + LOSS_AT);
        for w in 0..WARPS {
            loss += f32::from_bits(ld_global_cg_u32(area.wrapping_add(w)));
            correct += f32::from_bits(ld_global_cg_u32(area.wrapping_add(WARPS + w)));
        }
    }
    (loss, correct)
}

/// Where this block's shares go.
#[derive(Clone, Copy)]
pub struct Outbox {
    /// Whether they go to the partner in the cluster ([`in_cluster`]).
    cluster: bool,
    /// Within a cluster the partner's share mbarrier and W1 mbarrier (0 elsewhere).
    partner_bar: u32,
    partner_w1_bar: u32,
    /// The block's exchange area in global memory (not used within a cluster).
    area: *mut u32,
}

impl Outbox {
    #[inline(always)]
    pub fn new<const P: usize>(b: &Block) -> Outbox {
        let exchange = b.args.exchange as *mut u32;
        Outbox {
            cluster: in_cluster(P),
            partner_bar: if in_cluster(P) {
                peer_addr(b.mbar(2), b.peer)
            } else {
                0
            },
            partner_w1_bar: if in_cluster(P) && splits_w1(b) {
                peer_addr(b.mbar(3), b.peer)
            } else {
                0
            },
            // Exchange areas exist only where the slice has no cluster (the host allocates none
            // otherwise): wrapping arithmetic, since the address is formed but never used there.
            area: opaque_ptr(exchange.wrapping_add(area_of(b, b.blk as usize))),
        }
    }

    /// Word `j` of the small shares.
    #[inline(always)]
    pub fn small(&self, b: &Block, j: usize, v: f32) {
        if self.cluster {
            let to = peer_addr(b.xch() + 4 * j as u32, b.peer);
            st_async_u32(to, v.to_bits(), self.partner_bar);
        } else {
            unsafe { *self.area.add(SMALL_AT + j) = v.to_bits() };
        }
    }

    /// Words `j..j + 4` of the small shares, as one message within a cluster.
    #[inline(always)]
    pub fn small4(&self, b: &Block, j: usize, v: [f32; 4]) {
        if self.cluster {
            let to = peer_addr(b.xch() + 4 * j as u32, b.peer);
            st_async_v4(to, v.map(f32::to_bits), self.partner_bar);
        } else {
            for e in 0..4 {
                self.small(b, j + e, v[e]);
            }
        }
    }

    /// The warp's dW1 tiles of the `O` n-tiles from `plane0` as fp16 pairs (the layered path
    /// keeps weight gradients in fp16 too), into the partner's planes of those n-tiles; through
    /// global memory only slices of one n-tile exchange.
    #[inline(always)]
    pub fn send_dw1<A: Acc, const O: usize, const K: usize>(
        &self,
        b: &Block,
        dw1: &[[A; O]; K],
        plane0: usize,
    ) {
        for i in 0..K {
            let mt = b.warp + WARPS * i;
            if mt < b.ktiles {
                for g in 0..O {
                    let pairs = dw1[i][g].pairs();
                    if self.cluster {
                        let at = b.w1(plane0 + g) + 4 * dw1_word(b, mt, 0) as u32;
                        st_async_v2(peer_addr(at, b.peer), pairs, self.partner_bar);
                    } else {
                        for p in 0..2 {
                            unsafe { *self.area.add(dw1_word(b, mt, p)) = pairs[p] };
                        }
                    }
                }
            }
        }
    }

    /// A new fp16 word of W1 at `at` (a plane of this block's n-tiles) into the partner's copy,
    /// counted at its W1 mbarrier.
    #[inline(always)]
    pub fn send_w1(&self, b: &Block, at: u32, word: u32) {
        st_async_u32(peer_addr(at, b.peer), word, self.partner_w1_bar);
    }
}

/// The slice's gradients as this thread updates them: every block's share, summed in part
/// order, so the blocks of a slice get the same sums.
pub struct Sums<const N: usize, const O: usize, const K: usize = TILES_PER_WARP> {
    /// The thread's dW1 elements of each of its tiles of the n-tiles it updates, in fragment
    /// order (as [`Acc::pairs`] packs them).
    pub dw1: [[[f32; 4]; O]; K],
    /// dW2's elements of the thread's [`update::w2_element`] of each n-tile, db2's of its
    /// class, db1's entry of its [`bias_unit`].
    pub dw2: [f32; N],
    pub db2: f32,
    pub db1: f32,
}

/// Waits until the other blocks' shares of step `s` can be read: within a cluster until the
/// partner's bytes have arrived (announcing the next step's at once), elsewhere at the slice's
/// counter barrier.
#[inline(always)]
fn wait_for_shares<const P: usize>(b: &Block, s: &Step) {
    if in_cluster(P) {
        mbar_wait::<true>(b.mbar(2), s.k % 2);
        if b.tid == 0 && s.has_next(b.args.steps) {
            expect_shares(b);
        }
    } else {
        let slices = b.blocks as usize / P;
        let at = exchange_counter(b.layer.index as usize, slices, b.slice as usize);
        let count = (b.args.counters as *mut u32).wrapping_add(at);
        grid_barrier(count, P as u32 * (s.k + 1), sync_threads);
    }
}

/// The sums of dW1's shares of the first `parts` parts, from their words in part order.
#[inline(always)]
fn dw1_sums<A: Acc, const O: usize, const K: usize>(
    parts: usize,
    words: &[[[[u32; 2]; O]; K]; MAX_PARTS],
) -> [[[f32; 4]; O]; K] {
    let mut sums = [[[0.0; 4]; O]; K];
    for i in 0..K {
        for g in 0..O {
            for p in 0..2 {
                let v = A::sum_pairs(parts, |q| words[q][i][g][p]);
                sums[i][g][2 * p] = v[0];
                sums[i][g][2 * p + 1] = v[1];
            }
        }
    }
    sums
}

/// Waits for the other blocks' shares and sums them with this block's (`dw1`, `db1` and
/// [`Block::own`]), all loads requested before any sum needs them. Within a cluster the
/// partner's have all arrived once their bytes have (no barrier of the pair: the grid barrier
/// already orders the reuse of the buffers), and the next step's are announced at once; then a
/// block barrier, after which the update may overwrite the dW1 shares (in W1's copy) and the
/// output warp's own shares are visible to the threads that update W2. Elsewhere the slice's
/// counter barrier holds those block barriers. `freed` runs as soon as a block barrier shows
/// every warp past dW1: the batch buffer is free.
#[inline(always)]
pub fn receive<A: Acc, const P: usize, const N: usize, const O: usize, const K: usize>(
    b: &Block,
    s: &Step,
    (dw1, db1): (&[[A; O]; K], f32),
    mut freed: impl FnMut(),
) -> Sums<N, O, K> {
    let parts = P;
    let exchange = b.args.exchange as *mut u32;
    let first = b.slice as usize * parts;
    let area = |q: usize| opaque_ptr(exchange.wrapping_add(area_of(b, first + q))) as *const u32;
    wait_for_shares::<P>(b, s);
    // Word `i` of part `q`'s shares, where this block's is `own`: the others' in the exchange
    // area or, within a cluster, the partner's in this block's shared memory at `shared`. No
    // load is under a branch, so that the loads of a sum are all in flight before it waits.
    let word = |q: usize, i: usize, own: u32, shared: u32| {
        if in_cluster(P) {
            let theirs = ld_shared_u32(shared);
            if q == b.part { own } else { theirs }
        } else {
            ld_global_cg_u32_if(area(q).wrapping_add(i), q != b.part, own)
        }
    };
    // The small words of the thread's update (dW2's of its W2 element of each n-tile, db2's,
    // db1's entry), this block's after the barrier above, of every part. From global memory
    // they are requested before dW1's sums wait for theirs; within a cluster, after the block
    // barrier that lets this block's own be read.
    let w2_words: [usize; N] = core::array::from_fn(|n| 128 * n + w2_word(b));
    let bias_words = [128 * N + w2_word(b), db1_at(N) + bias_unit(b).unwrap_or(0)];
    let small_of = |q: usize| {
        let own = b.own();
        let small =
            |j: usize, mine: f32| word(q, SMALL_AT + j, mine.to_bits(), b.xch() + 4 * j as u32);
        let w2: [u32; N] = w2_words.map(|j| small(j, unsafe { *own.add(j) }));
        let bias = [
            small(bias_words[0], unsafe { *own.add(bias_words[0]) }),
            small(bias_words[1], db1),
        ];
        (w2, bias)
    };
    let mut small = [([0u32; N], [0u32; 2]); MAX_PARTS];
    if !in_cluster(P) {
        for q in 0..parts {
            small[q] = small_of(q);
        }
    }
    // dW1's words of every part, all requested before the batch copy (`freed`, from global
    // memory) is issued, which would otherwise delay them; held until summed.
    let mut words = [[[[0u32; 2]; O]; K]; MAX_PARTS];
    for q in 0..parts {
        words[q] = core::array::from_fn(|i| {
            // A warp past its last tile repeats it, branch-free (the update skips those sums).
            let mt = (b.warp + WARPS * i).min(b.ktiles - 1);
            core::array::from_fn(|g| {
                core::array::from_fn(|p| {
                    let j = dw1_word(b, mt, p);
                    word(q, j, dw1[i][g].pairs()[p], b.w1(b.own0 + g) + 4 * j as u32)
                })
            })
        });
    }
    // The copies into the freed buffer: `cp.async` before the sums wait for the words (the
    // copies delay the words' loads if issued first); sm_75's loads into registers after
    // them, since beside every part's words they take more registers than a thread has.
    let copies_early = cfg!(target_feature = "sm_80");
    if !in_cluster(P) && copies_early {
        freed();
    }
    let mut sums = Sums {
        dw1: dw1_sums::<A, O, K>(parts, &words),
        dw2: [0.0; N],
        db2: 0.0,
        db1: 0.0,
    };
    if !in_cluster(P) && !copies_early {
        freed();
    }
    if in_cluster(P) {
        sync_threads();
        freed();
        for q in 0..PAIR {
            small[q] = small_of(q);
        }
    }
    let sum = |v: [u32; MAX_PARTS]| (0..parts).fold(0.0, |s, q| s + f32::from_bits(v[q]));
    for n in 0..N {
        sums.dw2[n] = sum(core::array::from_fn(|q| small[q].0[n]));
    }
    sums.db2 = sum(core::array::from_fn(|q| small[q].1[0]));
    sums.db1 = sum(core::array::from_fn(|q| small[q].1[1]));
    sums
}
