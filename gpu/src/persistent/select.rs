//! Elements of the layer engine's small per-layer arrays at an index known only at run time.
//! From four layers the step's phases loop over the later layers, so a layer's index is a
//! run-time value; an array indexed by it would live in local memory. [`pick`] and [`put`]
//! read and write each element at a constant index under a comparison instead, which the
//! optimiser turns into selects of registers.

/// The most elements [`pick`] and [`put`] reach: the parameters' widths of a model of
/// [`MAX_LAYERS`](super::MAX_LAYERS) hidden layers (`[input, hidden…, classes]`).
const MOST: usize = 6;
const _: () = assert!(super::MAX_LAYERS + 2 <= MOST);

/// Runs `$body` with `$j` each of `0..MOST` as a literal (a constant index).
macro_rules! each_index {
    ($j:ident $body:block) => {
        each_index!(@ $j $body [0, 1, 2, 3, 4, 5])
    };
    (@ $j:ident $body:block [$($v:literal),*]) => {
        $({
            let $j: usize = $v;
            $body
        })*
    };
}

/// `a[i]` for a run-time `i < M`.
#[inline(always)]
pub fn pick<T: Copy, const M: usize>(a: &[T; M], i: usize) -> T {
    const { assert!(M >= 1 && M <= MOST) };
    debug_assert!(i < M);
    let mut v = a[0];
    each_index!(j {
        if j > 0 && j < M && i == j {
            v = a[j.min(M - 1)];
        }
    });
    v
}

/// `a[i] = v` for a run-time `i < M`.
#[inline(always)]
pub fn put<T: Copy, const M: usize>(a: &mut [T; M], i: usize, v: T) {
    const { assert!(M >= 1 && M <= MOST) };
    debug_assert!(i < M);
    each_index!(j {
        if j < M && i == j {
            a[j.min(M - 1)] = v;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every index of arrays of one to six elements reads and writes that element alone.
    #[test]
    fn pick_and_put_reach_every_element_alone() {
        fn check<const M: usize>() {
            let a: [usize; M] = core::array::from_fn(|k| 10 * k + 1);
            for i in 0..M {
                assert_eq!(pick(&a, i), a[i], "{M} {i}");
                let mut b = a;
                put(&mut b, i, 99);
                let mut want = a;
                want[i] = 99;
                assert_eq!(b, want, "{M} {i}");
            }
        }
        check::<1>();
        check::<2>();
        check::<3>();
        check::<4>();
        check::<5>();
        check::<6>();
    }
}
