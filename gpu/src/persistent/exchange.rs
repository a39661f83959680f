//! The two blocks of a slice exchange their shares of the gradients (each holds its half of
//! the batch's), so that both add the same two shares (IEEE addition is commutative) and take
//! the same SGD step. Words go in fragment order, so both the writes and the reads coalesce:
//! dW1 as fp16 pairs (`[tile][lane][pair]`: a lane's two pairs are one message, a warp's
//! 256 bytes contiguous), then f32 words of dW2 and db2 (`[lane][element]` each: a lane's four
//! words are one message), then db1.
//! - On Hopper the pair is a thread-block cluster: the shares go straight into the partner's
//!   shared memory as `st.async` messages, which its `mbarrier` counts until all have arrived
//!   (dW1 into the partner's fp16 W1 copy, which is free from its forward until its update;
//!   the rest into its [`Smem::xch`]).
//! - Elsewhere they go to the block's area of the global exchange buffer, and the pair meets
//!   at a counter there.
use super::context::{Block, Step};
use super::update;
use super::*;
use crate::arch::*;

/// Word of a dW1 share: tile `mt`, the lane's pair `p`.
#[inline(always)]
fn dw1_word(b: &Block, mt: usize, p: usize) -> usize {
    (mt * 32 + b.lane) * 2 + p
}

/// Where the small shares (dW2, db2, db1) start among a block's words.
const SMALL_AT: usize = WARPS * TILES_PER_WARP * 2 * 32;
/// Words of the db1 share, after dW2's and db2's.
pub const DB1_AT: usize = OWN_SHARES;

/// The partner's shares of the next step have this many bytes (Hopper).
#[inline(always)]
fn share_bytes(b: &Block) -> u32 {
    ((b.ktiles * 2 * 32 + SMALL_SHARES) * 4) as u32
}

/// On Hopper, the mbarrier that counts the partner's shares, initialised, and the barrier of
/// the cluster before the first step. The partner writes into this block's shared memory only
/// after a grid barrier, by which this block has long started; the cluster barrier says so
/// where a checker can see it (compute-sanitizer cannot follow a barrier polled in global
/// memory). The first step's shares are announced after it: straight after the init the JIT
/// makes the init a uniform (warp-wide) instruction, which racecheck reports against thread
/// 0's arrive on the same mbarrier. Each step's shares are then counted there.
#[inline(always)]
pub fn open(b: &Block) {
    if HOPPER {
        if b.tid == 0 {
            mbar_init(b.mbar(2), 1);
        }
        cluster_sync();
        if b.tid == 0 {
            expect_shares(b);
        }
    }
}

/// Announces the partner's shares of a step at their mbarrier (Hopper): they follow the grid
/// barrier, which this block reaches after announcing them.
#[inline(always)]
fn expect_shares(b: &Block) {
    mbar_expect(b.mbar(2), share_bytes(b));
}

/// Where this block's shares go.
pub struct Outbox {
    /// On Hopper the partner's share mbarrier; elsewhere the block's exchange area.
    partner_bar: u32,
    area: *mut u32,
}

impl Outbox {
    #[inline(always)]
    pub fn new(b: &Block) -> Outbox {
        let exchange = b.args.exchange as *mut u32;
        Outbox {
            partner_bar: if HOPPER {
                peer_addr(b.mbar(2), b.peer)
            } else {
                0
            },
            // Exchange areas exist only off Hopper (the host allocates none there): wrapping
            // arithmetic, since the address is formed but never used there.
            area: opaque_ptr(exchange.wrapping_add(b.blk as usize * EXCHANGE)),
        }
    }

    /// Word `j` of the small shares.
    #[inline(always)]
    pub fn small(&self, b: &Block, j: usize, v: f32) {
        if HOPPER {
            let to = peer_addr(b.xch() + 4 * j as u32, b.peer);
            st_async_u32(to, v.to_bits(), self.partner_bar);
        } else {
            unsafe { *self.area.add(SMALL_AT + j) = v.to_bits() };
        }
    }

    /// Words `j..j + 4` of the small shares, as one message on Hopper.
    #[inline(always)]
    pub fn small4(&self, b: &Block, j: usize, v: [f32; 4]) {
        if HOPPER {
            let to = peer_addr(b.xch() + 4 * j as u32, b.peer);
            st_async_v4(to, v.map(f32::to_bits), self.partner_bar);
        } else {
            for e in 0..4 {
                self.small(b, j + e, v[e]);
            }
        }
    }

    /// The warp's dW1 tiles as fp16 pairs (the layered path keeps weight gradients in fp16 too).
    #[inline(always)]
    pub fn send_dw1<A: Acc>(&self, b: &Block, dw1: &[A; TILES_PER_WARP]) {
        for i in 0..TILES_PER_WARP {
            let mt = b.warp + WARPS * i;
            if mt < b.ktiles {
                let pairs = dw1[i].pairs();
                if HOPPER {
                    let to = peer_addr(b.w1() + 4 * dw1_word(b, mt, 0) as u32, b.peer);
                    st_async_v2(to, pairs, self.partner_bar);
                } else {
                    for p in 0..2 {
                        unsafe { *self.area.add(dw1_word(b, mt, p)) = pairs[p] };
                    }
                }
            }
        }
    }
}

/// The partner's shares, as this thread needs them for the update.
pub struct Theirs {
    /// The pairs of the thread's dW1 elements, as [`Outbox::send_dw1`] sent them.
    pub dw1: [[u32; 2]; TILES_PER_WARP],
    /// The words of dW2 and db2 of the thread's [`update::w2_element`], db1's entry `tid`.
    pub dw2: f32,
    pub db2: f32,
    pub db1: f32,
}

/// Waits for the partner's shares and loads them, all requested before any is used. On Hopper
/// they have all arrived once their bytes have (no barrier of the pair: the grid barrier
/// already orders the reuse of the buffers), and the next step's are announced at once; then a
/// block barrier, after which the update may overwrite the dW1 shares (in W1's copy) and the
/// output warp's own shares ([`Block::own`]) are visible to the threads that update W2.
#[inline(always)]
pub fn receive(b: &Block, s: &Step) -> Theirs {
    let area = b.args.exchange as *mut u32;
    let area = opaque_ptr(area.wrapping_add((b.blk ^ 1) as usize * EXCHANGE));
    if HOPPER {
        mbar_wait::<true>(b.mbar(2), s.k % 2);
        if b.tid == 0 && s.has_next(b.args.steps) {
            expect_shares(b);
        }
    } else {
        let pair_count = (b.args.counters as *mut u32).wrapping_add(1 + b.slice as usize);
        grid_barrier(pair_count, PARTS as u32 * (s.k + 1), sync_threads);
    }
    let global = |i: usize| ld_global_cg_u32(unsafe { area.add(i) });
    let small = |j: usize| {
        f32::from_bits(if HOPPER {
            ld_shared_u32(b.xch() + 4 * j as u32)
        } else {
            global(SMALL_AT + j)
        })
    };
    let mut theirs = Theirs {
        dw1: [[0u32; 2]; TILES_PER_WARP],
        dw2: 0.0,
        db2: 0.0,
        db1: 0.0,
    };
    for i in 0..TILES_PER_WARP {
        let mt = b.warp + WARPS * i;
        if mt < b.ktiles {
            for p in 0..2 {
                theirs.dw1[i][p] = if HOPPER {
                    ld_shared_u32(b.w1() + 4 * dw1_word(b, mt, p) as u32)
                } else {
                    global(dw1_word(b, mt, p))
                };
            }
        }
    }
    if HOPPER {
        sync_threads();
    }
    if let Some((j, _)) = update::w2_element(b) {
        theirs.dw2 = small(j);
        theirs.db2 = small(128 + j);
    }
    if b.tid < UNITS {
        theirs.db1 = small(DB1_AT + b.tid);
    }
    theirs
}
