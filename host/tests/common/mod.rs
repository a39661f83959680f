//! What the GPU test files share: the MNIST data set and the options of a short run.
use host::mlp::{Dataset, Options};

/// MNIST as `host mnist` finds it (`data/mnist`).
pub fn mnist() -> Dataset {
    host::mnist::load(&host::mnist::default_dir()).unwrap()
}

/// One epoch of the default MNIST run (784-128-10, batch 128), seed 3, printing nothing.
pub fn one_epoch() -> Options {
    Options {
        epochs: 1,
        seed: 3,
        quiet: true,
        ..Options::default()
    }
}
