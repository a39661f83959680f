//! The roof of the ladder: `mma.sync` with no memory traffic at all. Each warp keeps
//! [`ROOF_CHAINS`](super::ROOF_CHAINS) independent accumulators and issues `iters` rounds of one `mma` per chain
//! on operands held in registers, so the tensor cores never wait on a load or on one chain's
//! latency. What it reaches is the most any `mma.sync` GEMM can reach on the GPU; `host gemm`
//! prints it next to cuBLAS, which on Hopper uses `wgmma` instead.

use super::ROOF_CHAINS;
use crate::arch::*;

/// Every element of every accumulator receives `iters · ROOF_CHAINS` products of the same
/// all-`a` operands; each lane writes the sum over its chains of element 0.
#[inline(always)]
fn roof<A: Acc, const K16: bool>(out: *mut f32, a: u32, iters: u32) {
    let mut acc = [A::ZERO; ROOF_CHAINS];
    for _ in 0..iters {
        for c in &mut acc {
            if K16 {
                c.mma_k16([a; 4], [a; 2]);
            } else {
                c.mma_k8([a; 2], a);
            }
        }
    }
    let sum = acc.iter().map(|c| c.get(0)).sum::<f32>();
    unsafe { *out.add(global_x() as usize) = sum };
}

macro_rules! export_roof {
    ($name:literal, $acc:ty, $k16:literal) => {
        const _: () = {
            #[unsafe(export_name = $name)]
            unsafe extern "ptx-kernel" fn kernel(out: *mut f32, a: u32, iters: u32) {
                roof::<$acc, $k16>(out, a, iters)
            }
        };
    };
}
export_roof!("mma_roof_k8_f16", [u32; 2], false);
export_roof!("mma_roof_k8_f32", [f32; 4], false);
#[cfg(target_feature = "sm_80")]
export_roof!("mma_roof_k16_f16", [u32; 2], true);
#[cfg(target_feature = "sm_80")]
export_roof!("mma_roof_k16_f32", [f32; 4], true);
