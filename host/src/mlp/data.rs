//! A data set as training takes it: two splits of labelled examples. `mnist` and `iris` make
//! them.

/// Features of one split as they reach the GPU.
pub enum Features {
    /// Raw pixels (0–255), normalised on the GPU with the data set's mean and standard deviation.
    Pixels { data: Vec<u8>, mean: f32, std: f32 },
    /// Values already standardised on the host.
    Values(Vec<f32>),
}

impl Features {
    pub fn len(&self) -> usize {
        match self {
            Features::Pixels { data, .. } => data.len(),
            Features::Values(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `count` examples of `dim` features with one label each.
pub struct Split {
    /// `count` rows of `dim` features, row after row.
    pub features: Features,
    /// A class in `0..classes` for each example.
    pub labels: Vec<u8>,
    pub count: usize,
    pub dim: usize,
}

/// A classification data set as training takes it, from [`mnist::load`](crate::mnist::load) or
/// [`iris::load`](crate::iris::load): the input width of the model is `train.dim`, its output
/// width `classes`.
pub struct Dataset {
    /// What a run's first line calls it.
    pub name: String,
    pub train: Split,
    pub test: Split,
    pub classes: usize,
}
