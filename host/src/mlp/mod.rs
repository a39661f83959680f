//! The MLP training stack shared by every data set: the model on the GPU and its GEMMs, its
//! checkpoints, a CPU reference of one step, and the training run (its options, the shape of its
//! steps, its engine, its arena, its loop and what it records). Data sets come from `mnist` and
//! `iris`.
mod arena;
pub mod checkpoint;
pub mod data;
mod engine;
pub mod launched;
pub mod launchers;
pub mod layer;
mod metrics;
pub mod model;
pub mod options;
pub mod parallel;
pub mod params;
pub mod persistent;
mod plans;
pub mod reduce;
pub mod reference;
pub mod shape;
pub mod split;
pub mod train;

pub use data::{Dataset, Features, Split};
pub use launched::Launched;
pub use options::{Options, validate};
pub use parallel::{train_data_parallel, train_launched};
pub use shape::StepShape;
pub use train::{Epoch, header, summary, train};
