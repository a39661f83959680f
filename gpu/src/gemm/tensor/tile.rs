//! The copier: one operand's tile from global to swizzled shared memory, by `cp.async`
//! (sm_80+) or through registers (sm_75).
use crate::arch::*;
use crate::gemm::Args;
use crate::layout::{CHUNK, swizzled_offset};

/// This thread's chunks of one K slice of A and of B, held in registers (register staging).
pub(super) type Staged<const CA: usize, const CB: usize> = ([[u32; 4]; CA], [[u32; 4]; CB]);

/// A block's two operand tiles in their storage orientation, A's (`[M][K]`, or `[K][M]` if
/// transposed) and B's (`[N][K]` if transposed, else `[K][N]`), and where each K slice of them
/// starts. "k-contiguous" tiles are read by plain `ldmatrix`, the others by `.trans`.
pub(super) struct Operands {
    a: Tile,
    b: Tile,
    /// Whether A's and B's tiles are k-contiguous.
    ka: bool,
    kb: bool,
    /// The block tile's first row (A's m) and first column (B's n) of C.
    bm0: u32,
    bn0: u32,
    threads: usize,
}

impl Operands {
    #[inline(always)]
    pub(super) fn new<const BM: usize, const BN: usize, const BK: usize>(
        p: &Args,
        (ka, kb): (bool, bool),
        (bm0, bn0): (u32, u32),
        threads: usize,
    ) -> Operands {
        Operands {
            a: Tile::operand(p.a, p.lda, p.m, p.k, BM, BK, ka),
            b: Tile::operand(p.b, p.ldb, p.n, p.k, BN, BK, kb),
            ka,
            kb,
            bm0,
            bn0,
            threads,
        }
    }

    /// The origins (row, col), in storage orientation, of A's and B's K slice starting at `k0`.
    #[inline(always)]
    fn origins(&self, k0: u32) -> ((u32, u32), (u32, u32)) {
        let at = |k_contiguous: bool, mn0: u32| if k_contiguous { (mn0, k0) } else { (k0, mn0) };
        (at(self.ka, self.bm0), at(self.kb, self.bn0))
    }

    /// Issues `cp.async` for both operands' K slice at `k0` into the stage whose tiles start
    /// at `(a, b)`.
    #[inline(always)]
    pub(super) fn copy_async(&self, (a, b): (u32, u32), k0: u32) {
        let ((ra, ca), (rb, cb)) = self.origins(k0);
        self.a.copy_async(a, ra, ca, self.threads);
        self.b.copy_async(b, rb, cb, self.threads);
    }

    /// This thread's chunks of both operands' K slice at `k0`, into registers.
    #[inline(always)]
    pub(super) fn fetch<const CA: usize, const CB: usize>(&self, k0: u32) -> Staged<CA, CB> {
        let ((ra, ca), (rb, cb)) = self.origins(k0);
        let a = load_regs(&self.a, ra, ca, self.threads);
        (a, load_regs(&self.b, rb, cb, self.threads))
    }

    /// Chunks from [`fetch`](Self::fetch) into the stage whose tiles start at `(a, b)`.
    #[inline(always)]
    pub(super) fn store<const CA: usize, const CB: usize>(
        &self,
        (a, b): (u32, u32),
        (ra, rb): &Staged<CA, CB>,
    ) {
        store_regs(&self.a, a, self.threads, ra);
        store_regs(&self.b, b, self.threads, rb);
    }
}

/// One operand's tile in shared memory and the global matrix it is copied from.
///
/// The tile keeps the storage orientation of the global matrix, so every copy moves whole
/// 16-byte chunks: `rows × row_len` elements, row-major, swizzled by 16-byte chunk.
#[derive(Clone, Copy)]
struct Tile {
    /// Global matrix in storage orientation: `rows × cols`, leading dimension `ld`.
    src: *const u16,
    ld: u32,
    rows: u32,
    cols: u32,
    /// Whether every full chunk can be copied as one aligned 16-byte access.
    vector: bool,
    /// Tile shape in shared memory.
    tile_rows: usize,
    row_len: usize,
}

impl Tile {
    fn new(
        src: *const u16,
        ld: u32,
        rows: u32,
        cols: u32,
        tile_rows: usize,
        row_len: usize,
    ) -> Tile {
        let vector = ld.is_multiple_of(CHUNK as u32) && (src as usize).is_multiple_of(16);
        Tile {
            src,
            ld,
            rows,
            cols,
            vector,
            tile_rows,
            row_len,
        }
    }

    /// The tile of an `mn × k` operand at block size `tile_mn` and slice `bk`, stored
    /// k-contiguous (`[mn][k]`) or mn-contiguous (`[k][mn]`).
    #[inline(always)]
    fn operand(
        src: *const u16,
        ld: u32,
        mn: u32,
        k: u32,
        tile_mn: usize,
        bk: usize,
        k_contiguous: bool,
    ) -> Tile {
        if k_contiguous {
            Tile::new(src, ld, mn, k, tile_mn, bk)
        } else {
            Tile::new(src, ld, k, mn, bk, tile_mn)
        }
    }

    const fn chunks(&self) -> usize {
        self.tile_rows * self.row_len / CHUNK
    }

    /// Global (row, col) and shared byte offset of chunk `id` for a tile at (r0, c0).
    #[inline(always)]
    fn chunk(&self, id: usize, r0: u32, c0: u32) -> (u32, u32, u32) {
        let per_row = self.row_len / CHUNK;
        let (row, ch) = (id / per_row, id % per_row);
        let off = swizzled_offset(row, ch * CHUNK, self.row_len) * 2;
        (r0 + row as u32, c0 + (ch * CHUNK) as u32, off as u32)
    }

    /// Whether the chunk at (gr, gc) is in bounds and can move as one 16-byte access.
    #[inline(always)]
    fn whole(&self, gr: u32, gc: u32) -> bool {
        self.vector && gr < self.rows && gc + CHUNK as u32 <= self.cols
    }

    /// The chunk at (gr, gc) element by element, zero outside the matrix.
    #[inline(always)]
    fn load_partial(&self, gr: u32, gc: u32) -> [u32; 4] {
        let mut v = [0u32; 4];
        if gr < self.rows {
            for e in 0..CHUNK {
                let c = gc + e as u32;
                if c < self.cols {
                    let h = unsafe { *self.src.add((gr * self.ld + c) as usize) } as u32;
                    v[e / 2] |= h << (16 * (e % 2));
                }
            }
        }
        v
    }

    #[inline(always)]
    fn load_chunk(&self, gr: u32, gc: u32) -> [u32; 4] {
        if self.whole(gr, gc) {
            ld_global_v4(unsafe { self.src.add((gr * self.ld + gc) as usize) } as *const u8)
        } else {
            self.load_partial(gr, gc)
        }
    }

    /// Whether the whole tile at (r0, c0) lies inside the matrix and every chunk can move as
    /// one aligned 16-byte access: then no chunk needs a bounds check.
    #[inline(always)]
    fn inside(&self, r0: u32, c0: u32) -> bool {
        self.vector
            && r0 + self.tile_rows as u32 <= self.rows
            && c0 + self.row_len as u32 <= self.cols
    }

    /// Issues `cp.async` for this thread's chunks of the tile at (r0, c0) into `dst`. Tiles
    /// inside the matrix (all of them, away from the edges) take a path without per-chunk
    /// bounds checks: with them, the copies took about as many instructions as the `mma`s.
    #[inline(always)]
    fn copy_async(&self, dst: u32, r0: u32, c0: u32, threads: usize) {
        let per_row = self.row_len / CHUNK;
        let passes = self.chunks().is_multiple_of(threads) && threads.is_multiple_of(per_row);
        if self.inside(r0, c0) && passes {
            // Each pass of the block copies `threads` chunks, `threads / per_row` whole rows,
            // and a thread keeps its chunk column: one pointer, advanced by a fixed stride,
            // and shared offsets the compiler folds to constants.
            let tid = thread_x() as usize;
            let (row0, ch) = (tid / per_row, tid % per_row);
            let rows_per_pass = threads / per_row;
            let first = (r0 + row0 as u32) * self.ld + c0 + (ch * CHUNK) as u32;
            let src = unsafe { self.src.add(first as usize) } as *const u8;
            // Opaque, so the per-pass offsets are not hoisted out of the K loop into registers.
            let stride = 2 * opaque(rows_per_pass as u32 * self.ld) as usize;
            for pass in 0..self.chunks() / threads {
                let row = row0 + pass * rows_per_pass;
                let off = (swizzled_offset(row, ch * CHUNK, self.row_len) * 2) as u32;
                cp_async_16_whole(dst + off, unsafe { src.add(pass * stride) });
            }
            return;
        }
        let mut id = thread_x() as usize;
        while id < self.chunks() {
            let (gr, gc, off) = self.chunk(id, r0, c0);
            if self.whole(gr, gc) {
                let src = unsafe { self.src.add((gr * self.ld + gc) as usize) } as *const u8;
                cp_async_16(dst + off, src, 16);
            } else if gr >= self.rows || gc >= self.cols {
                cp_async_16(dst + off, self.src as *const u8, 0); // zero fill, reads nothing
            } else {
                st_shared_v4(dst + off, self.load_partial(gr, gc));
            }
            id += threads;
        }
    }
}

/// This thread's `N` chunks of the tile at (r0, c0), into registers (register staging).
#[inline(always)]
fn load_regs<const N: usize>(t: &Tile, r0: u32, c0: u32, threads: usize) -> [[u32; 4]; N] {
    let mut regs = [[0; 4]; N];
    let inside = t.inside(r0, c0);
    for (i, r) in regs.iter_mut().enumerate() {
        let (gr, gc, _) = t.chunk(thread_x() as usize + i * threads, r0, c0);
        *r = if inside {
            ld_global_v4(unsafe { t.src.add((gr * t.ld + gc) as usize) } as *const u8)
        } else {
            t.load_chunk(gr, gc)
        };
    }
    regs
}

#[inline(always)]
fn store_regs<const N: usize>(t: &Tile, dst: u32, threads: usize, regs: &[[u32; 4]; N]) {
    for (i, r) in regs.iter().enumerate() {
        let (_, _, off) = t.chunk(thread_x() as usize + i * threads, 0, 0);
        st_shared_v4(dst + off, *r);
    }
}
