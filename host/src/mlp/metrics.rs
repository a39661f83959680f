//! What a run records as it trains besides its printed lines: the `--metrics` CSV and the
//! progress bar of each epoch.
use anyhow::Result;
use indicatif::ProgressBar;
use std::path::Path;

/// The bar of an epoch's steps, hidden for a quiet run.
pub(super) fn progress_bar(quiet: bool, steps: usize) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(steps as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "epoch {prefix:>3} [{bar:30}] {pos}/{len} {per_sec} {msg}",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    bar
}

/// The `--metrics` CSV: a line per step's loss and one per epoch's test accuracy.
pub(super) struct Metrics {
    csv: String,
    steps: usize,
}

impl Metrics {
    /// An empty CSV for epochs of `steps` steps: its steps are numbered over the whole run.
    pub fn new(steps: usize) -> Metrics {
        Metrics {
            csv: String::from("epoch,step,loss,accuracy,time_s\n"),
            steps,
        }
    }

    /// A line for each of an epoch's step losses, at `t` seconds into the run.
    pub fn add_steps(&mut self, epoch: usize, losses: &[f32], t: f64) {
        for (k, l) in losses.iter().enumerate() {
            let step = (epoch - 1) * self.steps + k + 1;
            self.csv.push_str(&format!("{epoch},{step},{l},,{t:.4}\n"));
        }
    }

    pub fn add_epoch(&mut self, epoch: usize, test_accuracy: f32, t: f64) {
        let step = epoch * self.steps;
        self.csv += &format!("{epoch},{step},,{test_accuracy},{t:.4}\n");
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        crate::write_atomic(path, self.csv.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_numbered_over_the_run_and_epochs_end_on_their_last() {
        let mut m = Metrics::new(3);
        m.add_steps(2, &[0.5, 0.25], 1.0);
        m.add_epoch(2, 0.75, 2.0);
        assert_eq!(
            m.csv,
            "epoch,step,loss,accuracy,time_s\n2,4,0.5,,1.0000\n2,5,0.25,,1.0000\n2,6,,0.75,2.0000\n"
        );
    }
}
