//! `host regression`'s report: every variant at each point count, timed against the roofline
//! of the copy bandwidth, checked to agree, printed as tables and written as CSV.
use super::{B0, Options, Outcome, Regression, Trace, Variant, W0};
use crate::cuda::Gpu;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Point counts of a sweep when none are given.
const SWEEP_POINTS: [usize; 5] = [1_000_000, 5_000_000, 10_000_000, 50_000_000, 100_000_000];

/// What `host regression` runs and writes, as its flags give it.
pub struct Report {
    /// Options of every run (`points` the data set's size unless sweeping).
    pub options: Options,
    /// Run only this variant (default: all four); also the one traced (default: unfused).
    pub variant: Option<Variant>,
    /// Time every variant at each of `sweep_points` instead of at `options.points`, without the
    /// per-op times.
    pub sweep: bool,
    /// Point counts of the sweep (empty: 1M, 5M, 10M, 50M and 100M).
    pub sweep_points: Vec<usize>,
    /// Where to write a Chrome trace (Perfetto) of one run of the traced variant.
    pub trace: Option<PathBuf>,
    /// Where to write the results as CSV.
    pub csv: Option<PathBuf>,
}

impl Report {
    /// The point counts the report runs: the sweep's, or the one data set's.
    fn point_counts(&self) -> Vec<usize> {
        match (self.sweep, self.sweep_points.is_empty()) {
            (true, true) => SWEEP_POINTS.to_vec(),
            (true, false) => self.sweep_points.clone(),
            (false, _) => vec![self.options.points],
        }
    }

    /// What can be checked without a GPU: the options at every point count the report runs,
    /// and the directories of the files it writes.
    pub fn validate(&self) -> Result<()> {
        for points in self.point_counts() {
            let o = Options {
                points,
                ..self.options.clone()
            };
            let checked = super::validate(&o);
            match self.sweep {
                true => checked.with_context(|| format!("--sweep-points {points}"))?,
                false => checked?,
            }
        }
        for (flag, path) in [("--trace", &self.trace), ("--csv", &self.csv)] {
            if let Some(path) = path {
                crate::ensure_output_path(flag, path)?;
            }
        }
        Ok(())
    }

    /// Runs every variant at every point count on `gpu`, printing the tables, and writes the
    /// trace and the CSV asked for. An error where the variants disagree.
    pub fn run(&self, gpu: &Gpu) -> Result<()> {
        let o = &self.options;
        let sizes = self.point_counts();
        let bw = copy_bandwidth(gpu)?;
        println!(
            "linear regression on {}: {} epochs, lr {}, init w={} b={}, data y = {}·x + {} + N(0, {}²), seed {}",
            gpu.name()?,
            o.epochs,
            o.lr,
            W0,
            B0,
            o.w,
            o.b,
            o.noise,
            o.seed
        );
        println!(
            "device-to-device copy bandwidth (read + write): {:.0} GB/s",
            bw / 1e9
        );
        let mut csv = String::from(CSV_HEADER);
        for &n in &sizes {
            csv += &self.points(gpu, n, bw)?;
        }
        if let Some(path) = &self.csv {
            crate::write_atomic(path, csv.as_bytes())?;
            println!("wrote {}", path.display());
        }
        Ok(())
    }

    /// The table of `n` points (at copy bandwidth `bw`), with the per-op times unless sweeping
    /// and the trace if asked for; returns its CSV rows.
    fn points(&self, gpu: &Gpu, n: usize, bw: f64) -> Result<String> {
        let epochs = self.options.epochs;
        let variants: Vec<Variant> = self
            .variant
            .map(|v| vec![v])
            .unwrap_or_else(|| Variant::ALL.to_vec());
        let o = Options {
            points: n,
            ..self.options.clone()
        };
        let reg = Regression::new(gpu, &o)?;
        let roof = roofline_ms(reg.n_train, epochs, bw);
        println!(
            "\n{n} points ({} train, {} test); roofline {roof:.3} ms ({} epochs × 8 B × {} train points at the copy bandwidth)",
            reg.n_train, reg.n_test, epochs, reg.n_train
        );
        println!(
            "{:<8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}",
            "variant", "total_ms", "ms/epoch", "w", "b", "train_loss", "test_loss", "×roofline"
        );
        let mut csv = String::new();
        let mut outcomes = Vec::new();
        for &v in &variants {
            reg.run(v, None)?; // warm-up (module load, graph instantiation paths)
            let out = reg.run(v, None)?;
            println!(
                "{:<8} {:>10.3} {:>10.4} {:>10.6} {:>10.6} {:>12.6} {:>12.6} {:>10.2}",
                v.name(),
                out.ms,
                out.ms / epochs as f64,
                out.w,
                out.b,
                out.train_loss,
                out.test_loss,
                out.ms / roof
            );
            csv += &csv_row(n, &out, epochs, roof);
            outcomes.push(out);
        }
        let same = outcomes
            .windows(2)
            .all(|p| p[0].w == p[1].w && p[0].b == p[1].b && p[0].history == p[1].history);
        if outcomes.len() > 1 {
            println!(
                "all variants computed the same w, b and loss history: {}",
                if same { "yes" } else { "NO" }
            );
            anyhow::ensure!(
                same,
                "variants disagree: {:?}",
                outcomes
                    .iter()
                    .map(|o| (o.variant.name(), o.w, o.b))
                    .collect::<Vec<_>>()
            );
        }
        if !self.sweep {
            let ops = reg.op_times()?;
            let line: Vec<String> = ops
                .iter()
                .map(|(op, ms)| format!("{op} {ms:.4} ms"))
                .collect();
            println!("per-op time of one unfused epoch: {}", line.join(", "));
        }
        if let Some(path) = &self.trace {
            let v = self.variant.unwrap_or(Variant::Unfused);
            let mut t = Trace::default();
            reg.run(v, Some(&mut t))?;
            t.write_chrome(path, v.name())?;
            println!(
                "wrote a Chrome trace of the {} variant to {}",
                v.name(),
                path.display()
            );
        }
        Ok(csv)
    }
}

/// Device-to-device copy bandwidth in bytes/s (bytes read plus written), for the roofline.
fn copy_bandwidth(gpu: &Gpu) -> Result<f64> {
    let (free, _) = gpu.mem_info()?;
    let bytes = (free / 8).min(1 << 30);
    let src = gpu.zeros::<u8>(bytes)?;
    let mut dst = gpu.zeros::<u8>(bytes)?;
    let t = gpu.timer()?;
    gpu.stream.memcpy_dtod(&src, &mut dst)?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        t.start()?;
        gpu.stream.memcpy_dtod(&src, &mut dst)?;
        best = best.min(t.stop_ms()? as f64);
    }
    Ok(2.0 * bytes as f64 / (best / 1000.0))
}

/// The least time `epochs` epochs can take: each must read x and y of every training point.
fn roofline_ms(n_train: usize, epochs: usize, bandwidth: f64) -> f64 {
    epochs as f64 * 8.0 * n_train as f64 / bandwidth * 1000.0
}

/// One CSV line per outcome (`n,variant,total_ms,ms_per_epoch,w,b,train_loss,test_loss,roofline_ms`).
fn csv_row(n: usize, o: &Outcome, epochs: usize, roofline: f64) -> String {
    format!(
        "{n},{},{:.4},{:.6},{},{},{:.6},{:.6},{:.4}\n",
        o.variant.name(),
        o.ms,
        o.ms / epochs as f64,
        o.w,
        o.b,
        o.train_loss,
        o.test_loss,
        roofline
    )
}

const CSV_HEADER: &str = "n,variant,total_ms,ms_per_epoch,w,b,train_loss,test_loss,roofline_ms\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline_counts_x_and_y_once_per_epoch() {
        assert_eq!(roofline_ms(1_000_000, 200, 8e11), 2.0);
    }
}
