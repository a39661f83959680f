//! The model's parameters as the GPU holds them: one flat buffer, each layer's weights and
//! bias at aligned offsets, and their initial values.

/// Weight initialisation schemes (biases start at zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Init {
    /// He: N(0, 2/fan_in), for ReLU layers.
    Kaiming,
    /// Glorot: U(±√(6/(fan_in+fan_out))).
    Xavier,
    /// Standard normal N(0, 1), the study's bad example.
    Normal,
}

/// Offsets (in elements) of each layer's weight `[out][in]` and bias `[out]` in the flat buffer,
/// each aligned to 64 elements so the GEMMs take the 16-byte vector path.
pub fn param_layout(sizes: &[usize]) -> (Vec<(usize, usize)>, usize) {
    let align = |x: usize| x.div_ceil(64) * 64;
    let mut off = 0;
    let mut v = Vec::new();
    for w in sizes.windows(2) {
        let wo = off;
        off = align(off + w[0] * w[1]);
        let bo = off;
        off = align(off + w[1]);
        v.push((wo, bo));
    }
    (v, off)
}

/// Initial fp32 parameters in the flat layout.
pub fn init_params(sizes: &[usize], init: Init, seed: u64) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Normal};
    let (offs, n) = param_layout(sizes);
    let mut p = vec![0.0f32; n];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for (l, w) in sizes.windows(2).enumerate() {
        let (fan_in, fan_out) = (w[0], w[1]);
        let dst = &mut p[offs[l].0..offs[l].0 + fan_in * fan_out];
        match init {
            Init::Kaiming => {
                let d = Normal::new(0.0, (2.0 / fan_in as f32).sqrt()).unwrap();
                dst.iter_mut().for_each(|x| *x = d.sample(&mut rng));
            }
            Init::Xavier => {
                let a = (6.0 / (fan_in + fan_out) as f32).sqrt();
                dst.iter_mut().for_each(|x| *x = rng.random_range(-a..a));
            }
            Init::Normal => {
                let d = Normal::new(0.0, 1.0).unwrap();
                dst.iter_mut().for_each(|x| *x = d.sample(&mut rng));
            }
        }
    }
    p
}
