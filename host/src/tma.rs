//! Tensor maps: the descriptors Hopper's copy engine (TMA) reads to move a box of a 2-D tensor
//! between global and shared memory. The driver encodes them on the host
//! (`cuTensorMapEncodeTiled`); the kernels that use them (the `wgmma` rungs of the GEMM ladder)
//! take them by value as a parameter (`gpu::gemm::descriptor::TensorMaps`).
use anyhow::{Result, ensure};
use cudarc::driver::sys::{
    self, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};

/// A row-major fp16 matrix in global memory as the copy engine needs it described.
#[derive(Clone, Copy, Debug)]
pub struct Matrix {
    /// Device address of element (0, 0).
    pub ptr: u64,
    pub rows: usize,
    pub cols: usize,
    /// Elements from one row to the next.
    pub ld: usize,
}

impl Matrix {
    /// Why the copy engine cannot read this matrix, if it cannot: its rows must start 16-byte
    /// aligned (the address, and the leading dimension a multiple of 8 elements).
    pub fn unsupported(&self) -> Option<String> {
        if !self.ptr.is_multiple_of(16) {
            return Some(format!(
                "its address {:#x} is not 16-byte aligned",
                self.ptr
            ));
        }
        if !self.ld.is_multiple_of(8) {
            return Some(format!(
                "its leading dimension {} is not a multiple of 8 elements (16 bytes)",
                self.ld
            ));
        }
        None
    }
}

/// The tensor map of `m` read in boxes of `box_rows` rows × 64 columns (128 bytes, the span of
/// the 128-byte swizzle the `wgmma` tiles are laid out in). Elements outside the matrix arrive
/// as zeros, which is how tiles at the edges are padded.
pub fn tiled_map(m: &Matrix, box_rows: u32) -> Result<CUtensorMap> {
    if let Some(why) = m.unsupported() {
        anyhow::bail!("the copy engine cannot read it: {why}");
    }
    ensure!(
        (1..=256).contains(&box_rows),
        "a tensor-map box has 1 to 256 rows, not {box_rows}"
    );
    let mut map = CUtensorMap { opaque: [0; 16] };
    let dims = [m.cols as u64, m.rows as u64];
    let strides = [(m.ld * 2) as u64];
    let boxes = [64u32, box_rows];
    let elements = [1u32, 1];
    // SAFETY: every pointer addresses an array of the rank (2) the call is given, or rank - 1
    // for the strides; `map` is the 64-byte-aligned output the call writes.
    let status = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            2,
            m.ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elements.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    ensure!(
        status == sys::CUresult::CUDA_SUCCESS,
        "the driver could not encode a tensor map of a {}x{} fp16 matrix (leading dimension {}, box {box_rows}x64): {status:?}",
        m.rows,
        m.cols,
        m.ld
    );
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_map_is_what_the_kernels_parameter_holds() {
        use gpu::gemm::descriptor::{MAP_BYTES, TensorMaps};
        assert_eq!(size_of::<CUtensorMap>(), MAP_BYTES);
        assert_eq!(size_of::<TensorMaps>(), 3 * MAP_BYTES);
    }

    #[test]
    fn rows_the_copy_engine_cannot_address_are_named() {
        let m = |ptr, ld| Matrix {
            ptr,
            rows: 4,
            cols: 4,
            ld,
        };
        assert_eq!(m(0x1000, 8).unsupported(), None);
        let e = m(0x1008, 8).unsupported().unwrap();
        assert!(e.contains("0x1008 is not 16-byte aligned"), "{e}");
        let e = m(0x1000, 12).unsupported().unwrap();
        assert!(e.contains("leading dimension 12"), "{e}");
        let e = tiled_map(&m(0x1000, 4), 64).unwrap_err().to_string();
        assert!(e.contains("the copy engine cannot read it"), "{e}");
    }
}
