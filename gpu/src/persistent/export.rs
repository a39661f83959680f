//! The kernels: every row of [`persistent_variants!`](crate::persistent_variants) that this
//! PTX has, exported to its step loop.
use super::*;

/// Exports every row of [`persistent_variants!`](crate::persistent_variants) that this PTX
/// has (its `from`/`only` column as a `cfg`), one kernel per accumulator of the row, named
/// `mlp_persistent_{name}_{f16|f32}`: the step loop of `layers`, which reads the row's
/// columns as constants, or for W1's state in global memory (`Global`) the offchip kernel's.
macro_rules! export {
    ($(($name:ident, $batch:ident, $parts:tt, $most:tt, $n:tt, $w1:ident, $logits:ident,
        [$($acc:ident)*], $which:ident $sm:tt, $slices:tt, $stages:tt, $layers:tt,
        $inner:tt),)*) => {$(
        export!(@archs ($which $sm) $name, $w1, $($acc)*);
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
    (@row $name:ident, $w1:ident, $($acc:ident)*) => {
        const _: () = {
            struct Kernel;
            impl Row for Kernel {
                const V: Variant = rows::$name;
            }
            $(export!(@kernel $name, $w1, $acc);)*
        };
    };
    (@kernel $name:ident, Global, $acc:ident) => {
        #[unsafe(export_name = concat!("mlp_persistent_", stringify!($name), "_", stringify!($acc)))]
        unsafe extern "ptx-kernel" fn $acc(args: Params) {
            unsafe { super::offchip::train::<Kernel, { Kernel::V.n }>(args) }
        }
    };
    (@kernel $name:ident, $w1:ident, $acc:ident) => {
        #[unsafe(export_name = concat!("mlp_persistent_", stringify!($name), "_", stringify!($acc)))]
        unsafe extern "ptx-kernel" fn $acc(args: Params) {
            unsafe {
                super::layers::train::<
                    accumulator!($acc),
                    Kernel,
                    { Kernel::V.parts },
                    { Kernel::V.tiles() },
                    { Kernel::V.n },
                    { Kernel::V.owned() },
                    { Kernel::V.layers },
                    { Kernel::V.inner_tiles() },
                >(args)
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
