//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
//! counter-based generator cuRAND uses: four 32-bit outputs from a 128-bit counter and a 64-bit
//! key, with no state, so every GPU thread draws its own numbers from its element index.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

#[inline(always)]
const fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

/// The ten rounds of Philox4x32 on `counter` under `key`.
#[inline(always)]
pub const fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    let mut round = 0;
    while round < 10 {
        let (hi0, lo0) = mulhilo(M0, c[0]);
        let (hi1, lo1) = mulhilo(M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        round += 1;
    }
    c
}

/// A uniform float in (0, 1] from 32 random bits (never 0, so its logarithm is finite).
#[inline(always)]
pub fn uniform(bits: u32) -> f32 {
    ((bits >> 8) + 1) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32 10 rounds).
    #[test]
    fn matches_random123_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn uniform_is_in_the_open_closed_unit_interval() {
        assert!(uniform(0) > 0.0);
        assert_eq!(uniform(u32::MAX), 1.0);
        // 400k draws: the mean's standard deviation is 0.289 / sqrt(400k) ≈ 0.00046.
        let n = 100_000u32;
        let sum: f64 = (0..n)
            .flat_map(|i| philox4x32_10([i, 0, 0, 0], [7, 0]))
            .map(|b| uniform(b) as f64)
            .sum();
        let mean = sum / (4 * n) as f64;
        assert!((mean - 0.5).abs() < 0.0025, "{mean}");
    }
}
