//! The kernel that lays out an epoch's rows for the training kernel.
use super::{WARPS, row_stride};
use crate::arch::*;
use crate::params::PersistentShuffle;
use crate::shuffle::permute;

/// Writes rows `0..count` of an epoch's shuffled training set (`n` examples of `dim` fp16
/// features, u8 labels) in the layout the training kernel copies: row `i` is example
/// `permute(i, n, seed)`, its features, its label as a u32 at [`label_offset`](super::label_offset) and zeros to
/// [`row_stride`]. Each block's rows of a step are then one run of memory, which one bulk
/// copy fetches, labels included. A warp per row (grid-stride, so any grid covers them), 16
/// bytes a lane and access; `dim` is a multiple of 16, as the training kernel needs (then
/// the stride is the features and one 16-byte piece for the label).
#[unsafe(export_name = "mlp_persistent_shuffle")]
unsafe extern "ptx-kernel" fn shuffle(p: PersistentShuffle) {
    let (x, y, out) = (p.x as *const u16, p.y as *const u8, p.out as *mut u8);
    let (n, dim, seed, count) = (p.n, p.dim, p.seed, p.count);
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct Chunk([u32; 4]);
    let chunks = dim as usize / 8;
    let mut row = block_x() * WARPS as u32 + warp_id();
    while row < count {
        let s = permute(row, n, seed) as usize;
        let from = unsafe { x.add(s * dim as usize) } as *const Chunk;
        let to = unsafe { out.add(row as usize * row_stride(dim as usize)) } as *mut Chunk;
        let mut c = lane() as usize;
        while c <= chunks {
            let v = if c < chunks {
                unsafe { *from.add(c) }
            } else {
                Chunk([unsafe { *y.add(s) } as u32, 0, 0, 0])
            };
            unsafe { *to.add(c) = v };
            c += 32;
        }
        row += grid_dim_x() * WARPS as u32;
    }
}
