//! Where the warpgroup rungs keep their operand tiles in shared memory, how a `wgmma` matrix
//! descriptor points at them, and which accumulator element each thread holds: arithmetic the
//! kernels and the CPU tests share.
//!
//! Every stage holds a BM×64 tile of A and a BN×64 tile of B (64 = the K step, 128 bytes of fp16)
//! as the copy engine writes them with its 128-byte swizzle: rows of 128 bytes, the 16-byte chunk
//! `c` of row `r` stored at chunk `c ^ (r % 8)`, in atoms of 8 rows (1024 bytes) that must start
//! 1024-aligned, since the hardware swizzles absolute address bits.
//! - An operand stored K-major (A as `[M][K]`, B as `[N][K]`) arrives as one box of `rows × 64`:
//!   row `mn` of the tile at `128·mn`.
//! - One stored MN-major (A as `[K][M]`, B as `[K][N]`) arrives as boxes of 64(k) × 64(mn), one
//!   per 64 MN, each [`MN_CHUNK_BYTES`] long: element (mn, k) in chunk `mn / 64`, row `k`.
//!
//! Either way the 64-row block `b` of a tile starts at `b · 8192`, and one `k16` instruction step
//! moves the descriptor by 32 bytes (K-major: along the row, inside the swizzle) or 2048 bytes
//! (MN-major: 16 rows down).

/// fp16 elements along K of one stage: one 128-byte swizzle row.
pub const BK: usize = 64;
/// Bytes of one swizzle atom, 8 rows of 128 bytes; its start must be aligned to them.
pub const ATOM_BYTES: u32 = 1024;
/// Bytes of one 64(k) × 64(mn) box of an MN-major operand.
pub const MN_CHUNK_BYTES: u32 = 64 * 128;
/// Rows (or MN) of the A block one `wgmma` takes: instructions are m64.
pub const WGMMA_M: usize = 64;

/// Bytes of one tensor map (`CUtensorMap`), which must lie 64-byte aligned.
pub const MAP_BYTES: usize = 128;

/// The second parameter of every `wgmma` kernel, by value: the tensor maps of A, B and C, encoded
/// by the host for the problem (`cuTensorMapEncodeTiled`), read in place by the copy engine,
/// which needs them 64-byte aligned. rustc's kernel ABI aligns a parameter to at most 16, so
/// `build.rs` raises this one's `.param` alignment to 64 in the PTX.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct TensorMaps {
    pub a: [u64; MAP_BYTES / 8],
    pub b: [u64; MAP_BYTES / 8],
    /// C in 64 × 64 boxes of [`C_BOX_BYTES`], which the plain-product epilogue stores through;
    /// all zeros where the copy engine cannot address C ([`copy_engine_reaches`]).
    pub c: [u64; MAP_BYTES / 8],
}

/// Whether the copy engine can address the rows of an fp16 matrix at `addr` with a leading
/// dimension of `ld` elements: every row starts 16-byte aligned.
pub const fn copy_engine_reaches(addr: u64, ld: u64) -> bool {
    addr.is_multiple_of(16) && ld.is_multiple_of(8)
}

/// Bytes of one 64 × 64 box of C staged in shared memory for the copy engine: rows of 128
/// bytes with the 128-byte swizzle, as the A and B tiles.
pub const C_BOX_BYTES: u32 = 64 * 128;

/// The 14-bit fields of a descriptor hold byte quantities in units of 16.
const fn field(bytes: u32) -> u64 {
    ((bytes & 0x3_FFFF) >> 4) as u64
}

/// The `wgmma` descriptor of a 128-byte-swizzled operand at shared address `addr`: start
/// address (bits 0-13), leading byte offset (16-29), stride byte offset (32-45), base offset 0
/// (the atoms are 1024-aligned) and the 128-byte swizzle mode, 1 (bits 62-63).
pub const fn descriptor(addr: u32, leading: u32, stride: u32) -> u64 {
    field(addr) | field(leading) << 16 | field(stride) << 32 | 1 << 62
}

/// The descriptor of 64-row block `block`, k16 step `ks`, of the tile at `tile`. K-major: the
/// leading offset is unused for swizzled layouts (set to 16 as CUTLASS does) and 8-row groups
/// are one atom apart. MN-major: the leading offset steps from one 64-wide MN chunk to the next,
/// and 8-row groups of K are one atom apart.
pub const fn operand_descriptor(tile: u32, k_major: bool, block: u32, ks: u32) -> u64 {
    let start = tile + block * MN_CHUNK_BYTES;
    if k_major {
        descriptor(start + 32 * ks, 16, ATOM_BYTES)
    } else {
        descriptor(start + 16 * 128 * ks, MN_CHUNK_BYTES, ATOM_BYTES)
    }
}

/// (row, col) in the warpgroup's 64×N tile of the adjacent pair `j` of accumulators held by
/// `thread` (0..128): fp32 registers `2j` and `2j+1`, or f16x2 register `j`, hold columns `col`
/// and `col + 1`. Each warp holds 16 rows, laid out as the `mma.sync` m16n8 C fragment repeated
/// every 8 columns.
pub const fn accumulator_pair(thread: usize, j: usize) -> (usize, usize) {
    let (warp, lane) = (thread / 32, thread % 32);
    (
        16 * warp + lane / 4 + 8 * (j & 1),
        8 * (j >> 1) + 2 * (lane % 4),
    )
}

/// Where thread `thread` (0..128) of a warpgroup points `stmatrix.x4` for the 16 columns
/// `16t..16t + 16` of 64-row block `mi` of its `bn`-wide tile, in bytes from the warpgroup's
/// staging area: C staged as the copy engine's 64 × 64 boxes (box `(mi, t / 4)` at
/// `(mi·bn/64 + t/4)·C_BOX_BYTES`). Register `q` of the store is accumulator pair `4t + q`,
/// which is the instruction's 8×8 matrix `q`; lane `8q + i` gives its row `i`.
pub const fn staged_c_row(thread: usize, mi: usize, t: usize, bn: usize) -> u32 {
    let (warp, lane) = (thread / 32, thread % 32);
    let row = 16 * warp + lane % 16;
    let chunk = (2 * (t % 4) + lane / 16) ^ (lane % 8);
    ((mi * bn / 64 + t / 4) * C_BOX_BYTES as usize + row * 128 + chunk * 16) as u32
}

/// Where element (r, c) of a warpgroup's `bn`-wide tile lies in its staging area, in bytes, as
/// [`staged_c_row`] stores it: box `(r / 64, c / 64)`, 128-byte rows, the 16-byte chunk swizzled
/// by the row. The four elements from a column that is a multiple of 4 lie in one chunk.
pub const fn staged_c_element(r: usize, c: usize, bn: usize) -> u32 {
    let chunk = ((c % 64) / 8) ^ (r % 8);
    let b = (r / 64) * (bn / 64) + c / 64;
    (b * C_BOX_BYTES as usize + (r % 64) * 128 + chunk * 16 + (c % 8) * 2) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared byte offset, from a tile's start, at which the copy engine's 128-byte
    /// swizzle puts element (mn, k) of a 64-deep tile, as the module's documentation describes
    /// the layout.
    fn swizzled_element(k_major: bool, mn: usize, k: usize) -> usize {
        let (chunk_base, row, col) = if k_major {
            (0, mn, k)
        } else {
            ((mn / 64) * MN_CHUNK_BYTES as usize, k, mn % 64)
        };
        let chunk = (col / 8) ^ (row % 8);
        chunk_base + row * 128 + chunk * 16 + (col % 8) * 2
    }

    #[test]
    fn a_k_major_descriptor_is_the_published_constant() {
        // The descriptor of a K-major 128B-swizzled tile as hand-written Hopper GEMMs build it:
        // 0x4000_0040_0001_0000 | (address >> 4).
        for addr in [0u32, 1024, 0x9400, 0x3_8000] {
            assert_eq!(
                operand_descriptor(addr, true, 0, 0),
                0x4000_0040_0001_0000 | (addr as u64 >> 4)
            );
        }
    }

    #[test]
    fn descriptors_step_through_blocks_and_k() {
        let d = |k_major, block, ks| operand_descriptor(0x1_0000, k_major, block, ks);
        // The address field (bits 0-13) moves by the byte step / 16; nothing else changes.
        assert_eq!(d(true, 0, 3) - d(true, 0, 0), 3 * 32 / 16);
        assert_eq!(d(true, 1, 0) - d(true, 0, 0), 8192 / 16);
        assert_eq!(d(false, 0, 2) - d(false, 0, 0), 2 * 2048 / 16);
        assert_eq!(d(false, 1, 0) - d(false, 0, 0), 8192 / 16);
        assert_eq!(
            (d(false, 0, 0) >> 16) & 0x3fff,
            8192 / 16,
            "leading: next MN chunk"
        );
        assert_eq!(
            (d(true, 0, 0) >> 32) & 0x3fff,
            1024 / 16,
            "stride: next 8-row atom"
        );
        assert_eq!(d(true, 0, 0) >> 62, 1, "128-byte swizzle");
    }

    /// The layout as described is one-to-one, and each (block, ks) descriptor starts where it
    /// puts element (64·block, 16·ks). (This checks the arithmetic against the description;
    /// the GPU tests check both against what the copy engine and `wgmma` do.)
    #[test]
    fn swizzled_tiles_are_one_to_one_and_blocks_start_where_descriptors_point() {
        for k_major in [true, false] {
            let rows = 256;
            let mut seen = vec![false; rows * BK];
            for mn in 0..rows {
                for k in 0..BK {
                    let at = swizzled_element(k_major, mn, k);
                    assert!(at.is_multiple_of(2) && at / 2 < seen.len());
                    assert!(!std::mem::replace(&mut seen[at / 2], true));
                }
            }
            for block in 0..4u32 {
                for ks in 0..4u32 {
                    let d = operand_descriptor(0, k_major, block, ks);
                    let start = (d & 0x3fff) as usize * 16;
                    let (mn, k) = (64 * block as usize, 16 * ks as usize);
                    // Row 0 of an atom is not permuted, so the step lands on the element.
                    assert_eq!(
                        start,
                        swizzled_element(k_major, mn, k),
                        "{k_major} {block} {ks}"
                    );
                }
            }
        }
    }

    /// Every accumulator pair, stored by `stmatrix.x4` from the addresses of
    /// [`staged_c_row`], lands where the copy engine's 64 × 64 box of C holds it, once, which
    /// is where [`staged_c_element`] finds it.
    #[test]
    fn staged_c_is_the_copy_engines_box_layout() {
        for bn in [128, 256] {
            let mut seen = vec![0u8; 2 * 64 * bn * 2];
            for thread in 0..128 {
                let (warp, lane) = (thread / 32, thread % 32);
                for mi in 0..2 {
                    for t in 0..bn / 16 {
                        for q in 0..4 {
                            let (r, c) = accumulator_pair(thread, 4 * t + q);
                            let (r, c) = (64 * mi + r, c);
                            // Lane 8q + i gives row i of matrix q; this thread holds row
                            // lane / 4, columns 2(lane % 4) and + 1.
                            let giver = 32 * warp + 8 * q + lane / 4;
                            let at = staged_c_row(giver, mi, t, bn) as usize + 4 * (lane % 4);
                            let b = (r / 64) * (bn / 64) + c / 64;
                            let chunk = ((c % 64) / 8) ^ (r % 8);
                            let want = b * 8192 + (r % 64) * 128 + chunk * 16 + (c % 8) * 2;
                            assert_eq!(at, want, "bn {bn} thread {thread} mi {mi} t {t} q {q}");
                            assert_eq!(staged_c_element(r, c, bn) as usize, want);
                            seen[at] += 1;
                        }
                    }
                }
            }
            assert!(seen.iter().step_by(4).all(|&s| s == 1), "bn {bn}");
        }
    }

    /// The SGD walk reads a quad of the staged tile as one 8-byte access.
    #[test]
    fn a_staged_quad_is_eight_contiguous_bytes() {
        for r in 0..128 {
            for c in (0..256).step_by(4) {
                let first = staged_c_element(r, c, 256);
                assert_eq!(first % 8, 0);
                for e in 1..4 {
                    assert_eq!(staged_c_element(r, c + e, 256), first + 2 * e as u32);
                }
            }
        }
    }

    #[test]
    fn a_threads_pairs_lie_on_two_rows_eight_columns_apart() {
        for thread in 0..128 {
            for j in 0..256 / 4 {
                let (r, c) = accumulator_pair(thread, j % 2);
                assert_eq!(accumulator_pair(thread, j), (r, c + 8 * (j / 2)));
            }
        }
    }

    #[test]
    fn the_accumulators_of_a_warpgroup_cover_its_tile_once() {
        for n in [64, 128, 256] {
            let mut seen = vec![0u8; WGMMA_M * n];
            for thread in 0..128 {
                for j in 0..n / 4 {
                    let (r, c) = accumulator_pair(thread, j);
                    seen[r * n + c] += 1;
                    seen[r * n + c + 1] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "n = {n}");
        }
    }
}
