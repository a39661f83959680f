//! Index arithmetic shared by the kernels and the CPU tests: where each element of an `mma.sync`
//! fragment lives, which row each lane hands to `ldmatrix`, and the shared-memory swizzle.
//!
//! Notation (PTX ISA, "Matrix fragments for mma.m16n8k16"): `g = lane / 4` is the group and
//! `t = lane % 4` the thread in group. Fragments of a 16×8×16 (or 16×8×8) product hold:
//! - A (16×16, row-major): register `i`, half `h` → row `g + 8·(i & 1)`, col `2t + h + 8·(i >> 1)`.
//!   The k8 shape uses registers 0 and 1 only.
//! - B (16×8, "col"): register `i`, half `h` → k `2t + h + 8·i`, n `g`. The k8 shape uses register 0.
//! - C/D (16×8): element `e` (0..4, fp32; or register `e / 2`, half `e % 2` for f16x2) →
//!   row `g + 8·(e >> 1)`, col `2t + (e & 1)`.

/// Elements of one 16-byte shared-memory chunk (8 × f16): the unit of copies and `ldmatrix` rows.
pub const CHUNK: usize = 8;

/// (row, col) of A-fragment register `i`, half `h`, held by `lane`.
pub const fn mma_a(lane: usize, i: usize, h: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (g + 8 * (i & 1), 2 * t + h + 8 * (i >> 1))
}

/// (k, n) of B-fragment register `i`, half `h`, held by `lane`.
pub const fn mma_b(lane: usize, i: usize, h: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (2 * t + h + 8 * i, g)
}

/// (row, col) of accumulator element `e` held by `lane`.
pub const fn mma_c(lane: usize, e: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (g + 8 * (e >> 1), 2 * t + (e & 1))
}

/// Where `lane` finds its word of the transpose of an 8×8 matrix of 16-bit values held as an
/// accumulator fragment (lane `4g + t` holds row `g`, columns `2t` and `2t + 1`, as one word):
/// half `h` of the words of lanes `a` and `b`, returned as `(a, b, h)`. The transpose's word
/// of lane `4g + t` is column `g`, rows `2t` and `2t + 1` of the matrix: a B fragment of the
/// k8 shape whose k runs along the matrix's rows.
pub const fn transpose_sources(lane: usize) -> (usize, usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (8 * t + g / 2, 8 * t + 4 + g / 2, g % 2)
}

/// Which operand of `A·B` a shared-memory tile holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Operand {
    A,
    B,
}

/// The `(mn, k)` offset, inside a 16(mn)×16(k) block, of the 8-element row whose address `lane`
/// passes to `ldmatrix.x4`, such that the four registers come back as
/// - A: the four registers of one m16×k16 A fragment;
/// - B: `[b0, b1]` of the n-fragment at mn 0..8, then `[b0, b1]` of the one at mn 8..16.
///
/// `k_contiguous` says how the tile is stored: rows along mn with k contiguous (loaded as is),
/// or rows along k with mn contiguous (loaded with `.trans`). The returned pair is the element
/// at which the lane's 8 contiguous elements start.
pub const fn ldmatrix_lane(lane: usize, op: Operand, k_contiguous: bool) -> (usize, usize) {
    let (j, r) = (lane / 8, lane % 8);
    // Which half of the block matrix j covers, along mn and along k.
    let (mn_hi, k_hi) = match op {
        Operand::A => (j & 1, j >> 1),
        Operand::B => (j >> 1, j & 1),
    };
    if k_contiguous {
        (r + 8 * mn_hi, 8 * k_hi)
    } else {
        (8 * mn_hi, r + 8 * k_hi)
    }
}

/// XOR swizzle of 16-byte chunks in a shared-memory tile whose rows hold `chunks` chunks.
///
/// `ldmatrix` reads eight rows at the same logical chunk column in one phase. Without a swizzle
/// rows `chunks·16` bytes apart land in the same banks when that is a multiple of 128; XOR-ing
/// the chunk index with a few row bits spreads those eight 16-byte reads over all 32 banks.
/// A row of 2, 4 or ≥ 8 chunks changes its pattern every 4, 2 or 1 rows respectively.
pub const fn swizzle(row: usize, chunk: usize, chunks: usize) -> usize {
    let span = if chunks >= 8 { 8 } else { chunks };
    let rows_per_step = 8 / span; // rows sharing one 128-byte line
    chunk ^ ((row / rows_per_step) % span)
}

/// Element offset of `(row, col)` in a swizzled tile with `row_len` elements per row.
pub const fn swizzled_offset(row: usize, col: usize, row_len: usize) -> usize {
    let chunks = row_len / CHUNK;
    row * row_len + swizzle(row, col / CHUNK, chunks) * CHUNK + col % CHUNK
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ldmatrix.x4` (optionally `.trans`) returns in register `reg`, half `h`, of `lane`,
    /// given the per-lane row addresses (as a function returning the stored element at
    /// `(row_start, i)` for the 8 elements of the row a lane addressed).
    fn simulate_ldmatrix(
        lane: usize,
        reg: usize,
        h: usize,
        trans: bool,
        row_elem: impl Fn(usize, usize) -> (usize, usize),
    ) -> (usize, usize) {
        // Matrix `reg` is formed by the rows addressed by lanes 8·reg .. 8·reg+8.
        let (g, t) = (lane / 4, lane % 4);
        if trans {
            row_elem(8 * reg + 2 * t + h, g)
        } else {
            row_elem(8 * reg + g, 2 * t + h)
        }
    }

    /// Checks that the lane addressing plus the ldmatrix semantics give exactly the mma fragment.
    fn check(op: Operand, k_contiguous: bool) {
        for lane in 0..32 {
            for reg in 0..4 {
                for h in 0..2 {
                    // Logical (mn, k) of element i of the row addressed by lane `l`.
                    let row_elem = |l: usize, i: usize| {
                        let (mn, k) = ldmatrix_lane(l, op, k_contiguous);
                        if k_contiguous {
                            (mn, k + i)
                        } else {
                            (mn + i, k)
                        }
                    };
                    let got = simulate_ldmatrix(lane, reg, h, !k_contiguous, row_elem);
                    let want = match op {
                        Operand::A => mma_a(lane, reg, h),
                        Operand::B => {
                            let (k, n) = mma_b(lane, reg % 2, h);
                            (n + 8 * (reg / 2), k)
                        }
                    };
                    assert_eq!(
                        got, want,
                        "{op:?} k_contiguous={k_contiguous} lane {lane} reg {reg} half {h}"
                    );
                }
            }
        }
    }

    /// Each lane's word gathered by [`transpose_sources`] holds, as the B fragment of the k8
    /// shape says (k along the matrix's rows, n along its columns), the elements of the matrix
    /// whose accumulator fragment the lanes held.
    #[test]
    fn transposed_accumulator_words_are_b_fragments() {
        // Each half of a word names its element: row * 8 + column.
        let word = |lane: usize| {
            let [(r0, c0), (r1, c1)] = [0, 1].map(|e| mma_c(lane, e));
            [r0 * 8 + c0, r1 * 8 + c1]
        };
        for lane in 0..32 {
            let (a, b, h) = transpose_sources(lane);
            let got = [word(a)[h], word(b)[h]];
            let want = [0, 1].map(|h| {
                let (k, n) = mma_b(lane, 0, h);
                k * 8 + n
            });
            assert_eq!(got, want, "lane {lane}");
        }
    }

    #[test]
    fn ldmatrix_addressing_yields_mma_fragments() {
        for op in [Operand::A, Operand::B] {
            for kc in [true, false] {
                check(op, kc);
            }
        }
    }

    #[test]
    fn fragments_cover_each_tile_element_once() {
        let mut a = [[0; 16]; 16];
        let mut b = [[0; 8]; 16];
        let mut c = [[0; 8]; 16];
        for lane in 0..32 {
            for i in 0..4 {
                for h in 0..2 {
                    let (r, k) = mma_a(lane, i, h);
                    a[r][k] += 1;
                }
                let (r, n) = mma_c(lane, i);
                c[r][n] += 1;
            }
            for i in 0..2 {
                for h in 0..2 {
                    let (k, n) = mma_b(lane, i, h);
                    b[k][n] += 1;
                }
            }
        }
        assert!(a.iter().flatten().all(|&x| x == 1));
        assert!(b.iter().flatten().all(|&x| x == 1));
        assert!(c.iter().flatten().all(|&x| x == 1));
    }

    #[test]
    fn swizzle_is_a_permutation_of_each_row() {
        for chunks in [2, 4, 8, 16] {
            for row in 0..64 {
                let mut seen = vec![false; chunks];
                for c in 0..chunks {
                    let s = swizzle(row, c, chunks);
                    assert!(s < chunks && !seen[s]);
                    seen[s] = true;
                }
            }
        }
    }

    #[test]
    fn ldmatrix_phases_are_bank_conflict_free() {
        // One phase: 8 consecutive rows at one logical chunk. Each 16-byte chunk spans four
        // 4-byte banks; conflict-free means the 8 chunks fall in 8 distinct 16-byte bank groups.
        for chunks in [2, 4, 8, 16] {
            for base in (0..64).step_by(8) {
                for c in 0..chunks {
                    let mut groups = [false; 8];
                    for r in base..base + 8 {
                        let g = (r * chunks + swizzle(r, c, chunks)) % 8;
                        assert!(!groups[g], "chunks {chunks} rows {base}.. col {c}");
                        groups[g] = true;
                    }
                }
            }
        }
    }
}
