//! A keyed random permutation of `0..n` computed per index, so a GPU can shuffle a data set by
//! gathering `perm(i)` without sorting or storing a permutation.
//!
//! A 4-round Feistel network permutes `0..2^(2h)` for the smallest even bit width covering `n`;
//! values at or above `n` are walked through the permutation again ("cycle walking") until they
//! land below `n`, which keeps it a bijection on `0..n`.

/// A 32-bit mixing function (lowbias32 by Chris Wellons) of a value and a round key.
#[inline(always)]
const fn mix(x: u32, key: u32) -> u32 {
    let mut x = x ^ key;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Position `i` (< `n`) of the permutation of `0..n` chosen by `seed`.
#[inline(always)]
pub const fn permute(i: u32, n: u32, seed: u32) -> u32 {
    let mut bits = 32 - (if n < 2 { 1 } else { n - 1 }).leading_zeros();
    bits += bits & 1;
    let half = bits / 2;
    let mask = (1u32 << half) - 1;
    let mut x = i;
    loop {
        let (mut l, mut r) = (x >> half, x & mask);
        let mut round = 0;
        while round < 4 {
            let f = mix(r, seed.wrapping_mul(0x9e37_79b9).wrapping_add(round)) & mask;
            let t = l ^ f;
            l = r;
            r = t;
            round += 1;
        }
        x = (l << half) | r;
        if x < n {
            return x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_permutation_for_many_sizes() {
        for n in [1u32, 2, 3, 10, 127, 128, 1000, 60000] {
            for seed in [0, 1, 12345] {
                let mut seen = vec![false; n as usize];
                for i in 0..n {
                    let p = permute(i, n, seed);
                    assert!(p < n && !seen[p as usize], "n {n} seed {seed} i {i}");
                    seen[p as usize] = true;
                }
            }
        }
    }

    #[test]
    fn seeds_give_different_orders_and_mix_well() {
        let n = 60000;
        let a: Vec<u32> = (0..n).map(|i| permute(i, n, 1)).collect();
        let b: Vec<u32> = (0..n).map(|i| permute(i, n, 2)).collect();
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 100, "{same} fixed points shared between two seeds");
        // Not close to the identity: few elements stay within 100 of their position.
        let near = a
            .iter()
            .enumerate()
            .filter(|(i, p)| (**p as i64 - *i as i64).abs() < 100)
            .count();
        assert!(near < 1000, "{near} elements barely moved");
    }
}
