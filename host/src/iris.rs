//! Fisher's Iris (150 rows, 4 features, 3 species), embedded in the binary: a stratified 80/20
//! split by seed, features standardised with the training split's statistics.
use crate::mlp::{Dataset, Features, Split};
use anyhow::{Result, bail, ensure};
use rand::seq::SliceRandom;
use rand::{SeedableRng, rngs::StdRng};

/// `data/iris/iris.csv`, as shipped in the repository.
pub const CSV: &str = include_str!("../../data/iris/iris.csv");
pub const SPECIES: [&str; 3] = ["setosa", "versicolor", "virginica"];
const HEADER: &str = "sepal_length,sepal_width,petal_length,petal_width,species";

/// Parses the CSV: a header, then rows of four numbers and a species name.
pub fn parse(text: &str) -> Result<(Vec<[f32; 4]>, Vec<u8>)> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, h)) if h.trim() == HEADER => {}
        Some((_, h)) => bail!("Iris CSV: header is {h:?}, expected {HEADER:?}"),
        None => bail!("Iris CSV is empty"),
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for (i, line) in lines {
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        ensure!(
            cols.len() == 5,
            "Iris CSV line {}: {} columns, expected 5: {line:?}",
            i + 1,
            cols.len()
        );
        let mut row = [0.0f32; 4];
        for (k, c) in cols[..4].iter().enumerate() {
            row[k] = match c.parse::<f32>() {
                Ok(v) if v.is_finite() => v,
                _ => bail!("Iris CSV line {}: {c:?} is not a number", i + 1),
            };
        }
        let Some(label) = SPECIES.iter().position(|s| *s == cols[4]) else {
            bail!(
                "Iris CSV line {}: unknown species {:?} (expected one of {SPECIES:?})",
                i + 1,
                cols[4]
            );
        };
        x.push(row);
        y.push(label as u8);
    }
    ensure!(!x.is_empty(), "Iris CSV has no rows");
    Ok((x, y))
}

/// The data set: per species, a seeded shuffle puts 80% in training and the rest in test;
/// features are standardised by the training split's mean and standard deviation.
pub fn load(text: &str, seed: u64) -> Result<Dataset> {
    let (x, y) = parse(text)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for c in 0..SPECIES.len() as u8 {
        let mut idx: Vec<usize> = (0..y.len()).filter(|&i| y[i] == c).collect();
        ensure!(
            idx.len() >= 2,
            "Iris CSV has {} rows of {}, need at least 2",
            idx.len(),
            SPECIES[c as usize]
        );
        idx.shuffle(&mut rng);
        let n_train = (idx.len() * 4).div_ceil(5).min(idx.len() - 1);
        train.extend_from_slice(&idx[..n_train]);
        test.extend_from_slice(&idx[n_train..]);
    }
    train.shuffle(&mut rng);
    let mut mean = [0.0f64; 4];
    let mut var = [0.0f64; 4];
    for &i in &train {
        for k in 0..4 {
            mean[k] += x[i][k] as f64 / train.len() as f64;
        }
    }
    for &i in &train {
        for k in 0..4 {
            var[k] += (x[i][k] as f64 - mean[k]).powi(2) / train.len() as f64;
        }
    }
    let standard =
        |i: usize, k: usize| ((x[i][k] as f64 - mean[k]) / var[k].sqrt().max(1e-12)) as f32;
    let split = |idx: &[usize]| Split {
        features: Features::Values(
            idx.iter()
                .flat_map(|&i| (0..4).map(move |k| standard(i, k)))
                .collect(),
        ),
        labels: idx.iter().map(|&i| y[i]).collect(),
        count: idx.len(),
        dim: 4,
    };
    Ok(Dataset {
        name: "Iris".into(),
        train: split(&train),
        test: split(&test),
        classes: SPECIES.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_csv_splits_stratified_and_standardised() {
        let ds = load(CSV, 0).unwrap();
        assert_eq!((ds.train.count, ds.test.count, ds.classes), (120, 30, 3));
        for c in 0..3u8 {
            assert_eq!(ds.test.labels.iter().filter(|&&l| l == c).count(), 10);
        }
        let Features::Values(v) = &ds.train.features else {
            panic!()
        };
        for k in 0..4 {
            let col: Vec<f64> = v.iter().skip(k).step_by(4).map(|&a| a as f64).collect();
            let m = col.iter().sum::<f64>() / col.len() as f64;
            let s = (col.iter().map(|a| (a - m).powi(2)).sum::<f64>() / col.len() as f64).sqrt();
            assert!(
                m.abs() < 1e-5 && (s - 1.0).abs() < 1e-4,
                "feature {k}: mean {m}, std {s}"
            );
        }
        let (Features::Values(a), Features::Values(b)) =
            (&ds.test.features, &load(CSV, 1).unwrap().test.features)
        else {
            panic!()
        };
        assert_ne!(a, b, "the seed picks the split");
    }

    #[test]
    fn malformed_input_is_an_error() {
        let e = |t: &str| parse(t).unwrap_err().to_string();
        assert!(e("").contains("empty"));
        assert!(e("a,b\n").contains("header"));
        assert!(e(&format!("{HEADER}\n1,2,3,setosa\n")).contains("columns"));
        assert!(e(&format!("{HEADER}\n1,2,x,4,setosa\n")).contains("not a number"));
        assert!(e(&format!("{HEADER}\n1,2,3,4,rose\n")).contains("unknown species"));
        assert!(e(&format!("{HEADER}\n")).contains("no rows"));
    }
}
