//! `host gemm --tune`: after the table, each size's tile rows ranked by time, how far the host's
//! choice is from the winner, and the line for the per-GPU preference table
//! (`host/src/gemm/prefer.rs`) that would make the winner the choice on this GPU.
use super::Row;
use crate::cuda::Gpu;
use crate::gemm::{Size, Version};
use anyhow::Result;
use gpu::gemm::Accum;
use std::fmt::Write;

/// Rows each size's ranking shows.
const SHOWN: usize = 3;
/// Tile rows within this fraction of the fastest correct one are timed again in alternation,
/// at most [`MOST_CLOSE`] of them: a single pass leaves rows a few percent apart to noise.
const CLOSE: f64 = 0.05;
const MOST_CLOSE: usize = 6;
/// Rounds of the alternation: each times every close row once, in turn; a row keeps the
/// median of its rounds.
const ROUNDS: usize = 5;

/// Of one shape's launched rows (each an index in `rows` with what relaunches it), the
/// correct tile rows within [`CLOSE`] of the fastest, fastest first, at most [`MOST_CLOSE`];
/// none where fewer than two are that close.
pub(super) fn close_rows<T: Copy>(rows: &[Row], launched: &[(usize, T)]) -> Vec<(usize, T)> {
    let mut tiles: Vec<(usize, T)> = launched
        .iter()
        .copied()
        .filter(|&(i, _)| rows[i].ok && tile_row(&rows[i].version).is_some())
        .collect();
    tiles.sort_by(|a, b| rows[a.0].ms.total_cmp(&rows[b.0].ms));
    let Some(&(best, _)) = tiles.first() else {
        return Vec::new();
    };
    let limit = rows[best].ms * (1.0 + CLOSE);
    tiles.retain(|&(i, _)| rows[i].ms <= limit);
    tiles.truncate(MOST_CLOSE);
    if tiles.len() < 2 {
        tiles.clear();
    }
    tiles
}

/// The median time of each of `n` rows over [`ROUNDS`] rounds, each round timing every row
/// once, in turn, with `time(row)`.
pub(super) fn alternate(n: usize, mut time: impl FnMut(usize) -> Result<f64>) -> Result<Vec<f64>> {
    let mut samples = vec![Vec::with_capacity(ROUNDS); n];
    for _ in 0..ROUNDS {
        for (j, s) in samples.iter_mut().enumerate() {
            s.push(time(j)?);
        }
    }
    Ok(samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect())
}

/// `r` timed again in alternation: its time `ms`, cuBLAS's `cublas_ms` in the same rounds.
pub(super) fn retimed(r: &mut Row, ms: f64, cublas_ms: f64) {
    r.tflops *= r.ms / ms;
    r.vs_cublas = 100.0 * cublas_ms / ms;
    r.ms = ms;
    r.alternated = true;
}

/// The ranking of `rows`, as a table run on `gpu` measured them.
pub fn report(gpu: &Gpu, rows: &[Row]) -> String {
    let mut s = String::from("\n## tuning\n");
    if gpu.options.ptx.is_some() || gpu.options.max_smem.is_some() {
        let wrong = rows.iter().filter(|r| !r.ok).count();
        let _ = writeln!(
            s,
            "--ptx and --max-smem-kb emulate another GPU on this one: the times are this GPU's, so nothing is ranked. {} rows ran, {wrong} wrong.",
            rows.len()
        );
        return s;
    }
    let mut shapes: Vec<&str> = Vec::new();
    for r in rows {
        if !shapes.contains(&r.shape.as_str()) {
            shapes.push(&r.shape);
        }
    }
    for shape in shapes {
        rank(&mut s, gpu.sm, rows.iter().filter(|r| r.shape == shape));
    }
    s
}

/// One size's lines: its fastest correct tile rows, the host's choice against the winner, and
/// the preference line where the size has a class.
fn rank<'a>(s: &mut String, sm: u32, rows: impl Iterator<Item = &'a Row>) {
    let rows: Vec<&Row> = rows.collect();
    let mut tiles: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| r.ok && tile_row(&r.version).is_some())
        .collect();
    // Rows timed again in alternation first: the first pass put them within a few percent of
    // each other and the rest further behind, and their times come from other rounds.
    tiles.sort_by(|a, b| (b.alternated.cmp(&a.alternated)).then(a.ms.total_cmp(&b.ms)));
    let Some(best) = tiles.first() else {
        return;
    };
    let _ = writeln!(s, "{} ({}×{}×{}):", best.shape, best.m, best.n, best.k);
    for r in tiles.iter().take(SHOWN) {
        let _ = writeln!(
            s,
            "  {:<44} {:>9.4} ms {:>5.0}% of cuBLAS",
            r.version, r.ms, r.vs_cublas
        );
    }
    if let Some(choice) = rows.iter().find(|r| r.chosen) {
        let _ = writeln!(
            s,
            "  the host's choice {} runs at {:.0}% of the winner's speed",
            choice.version,
            100.0 * best.ms / choice.ms
        );
    }
    let winner = tile_row(&best.version).filter(|_| !best.version.contains("_splitk"));
    match (Size::of(best.m, best.n), winner) {
        (Some(size), Some(name)) => {
            let _ = writeln!(
                s,
                "  preference line: prefer({sm}, Size::{size:?}, rows::{name}),"
            );
        }
        (None, _) => {
            let _ = writeln!(
                s,
                "  no preference line: outputs under {} elements have no size class",
                Size::smallest()
            );
        }
        (_, None) => {
            let _ = writeln!(
                s,
                "  no preference line: the winner splits K, which a preference does not carry"
            );
        }
    }
}

/// The tile row a version label (`<row>_<acc>`, perhaps `_splitk<N>` after it, as
/// [`Version::label`] and the split rows print it) was run with.
fn tile_row(label: &str) -> Option<&'static str> {
    let unsplit = label.split("_splitk").next()?;
    match Version::parse(unsplit, Accum::F16) {
        Ok(Version::Tensor(c, _)) => Some(c.name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(version: &str, ms: f64, chosen: bool) -> Row {
        Row {
            version: version.into(),
            shape: "square8192".into(),
            m: 8192,
            n: 8192,
            k: 8192,
            ms,
            tflops: 0.0,
            vs_cublas: 100.0,
            max_err: 0.0,
            ok: true,
            chosen,
            alternated: false,
        }
    }

    #[test]
    fn the_fastest_correct_row_wins_and_gets_a_line() {
        let rows = [
            timed("cublas_f16", 1.0, false),
            timed("wg90_128x256x64_64x256_s4_c2x1_f16", 1.5, false),
            Row {
                ok: false,
                ..timed("wg90_128x128x64_64x128_s4_f16", 1.1, false)
            },
            timed("wg90_256x128x64_128x128_s4_c2x1_f16", 2.0, true),
        ];
        let mut s = String::new();
        rank(&mut s, 90, rows.iter());
        assert!(
            s.lines()
                .nth(1)
                .unwrap()
                .contains("128x256x64_64x256_s4_c2x1"),
            "{s}"
        );
        assert!(
            !s.contains("128x128x64_64x128"),
            "a wrong row is not ranked: {s}"
        );
        assert!(s.contains("runs at 75% of the winner's speed"), "{s}");
        assert!(
            s.contains("prefer(90, Size::Large, rows::wg90_128x256x64_64x256_s4_c2x1),"),
            "{s}"
        );
    }

    /// The correct tile rows within 5% of the fastest are timed again, fastest first; cuBLAS
    /// and wrong rows never; a shape with one close row, not at all.
    #[test]
    fn close_rows_are_the_correct_tile_rows_near_the_fastest() {
        let rows = [
            timed("cublas_f16", 0.9, false),
            timed("wg90_128x256x64_64x256_s4_c2x1_f16", 1.04, false),
            timed("wg90_128x128x64_64x128_s4_f16", 1.0, false),
            Row {
                ok: false,
                ..timed("wg90_128x128x64_64x128_s3_f16", 1.01, false)
            },
            timed("wg90_256x128x64_128x128_s4_c2x1_f16", 1.06, true),
            timed("tc80_128x128x32_64x64_s4_f16", 1.02, false),
            timed("tc80_128x128x64_64x64_s3_f16", 1.03, false),
            timed("tc80_64x64x32_32x32_s4_f16", 1.045, false),
        ];
        let launched: Vec<(usize, ())> = (0..rows.len()).map(|i| (i, ())).collect();
        let close: Vec<usize> = close_rows(&rows, &launched).iter().map(|c| c.0).collect();
        assert_eq!(close, [2, 5, 6, 1, 7]);
        let alone = [
            timed("cublas_f16", 0.9, false),
            timed("wg90_128x128x64_64x128_s4_f16", 1.0, false),
            timed("wg90_256x128x64_128x128_s4_c2x1_f16", 1.06, true),
        ];
        assert!(close_rows(&alone, &[(0, ()), (1, ()), (2, ())]).is_empty());
    }

    /// Each round times every row once, in turn, and each row keeps its median.
    #[test]
    fn alternation_takes_turns_and_keeps_medians() {
        let mut calls = Vec::new();
        let times = alternate(2, |j| {
            calls.push(j);
            let round = (calls.len() - 1) / 2;
            Ok([[5.0, 1.0, 3.0, 9.0, 2.0], [4.0, 4.0, 8.0, 4.0, 0.5]][j][round])
        })
        .unwrap();
        assert_eq!(calls, [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(times, [3.0, 4.0]);
        let mut r = timed("wg90_128x128x64_64x128_s4_f16", 2.0, false);
        r.tflops = 100.0;
        retimed(&mut r, 1.0, 1.5);
        assert_eq!((r.ms, r.tflops, r.vs_cublas), (1.0, 200.0, 150.0));
        assert!(r.alternated);
    }

    /// Rows timed again in alternation rank before rows timed once, whatever their times.
    #[test]
    fn alternated_rows_rank_first() {
        let mut slow = timed("wg90_128x128x64_64x128_s4_f16", 2.0, false);
        slow.alternated = true;
        let rows = [
            timed("wg90_256x128x64_128x128_s4_c2x1_f16", 1.0, false),
            slow,
        ];
        let mut s = String::new();
        rank(&mut s, 90, rows.iter());
        assert!(
            s.lines().nth(1).unwrap().contains("128x128x64_64x128_s4"),
            "{s}"
        );
    }

    #[test]
    fn labels_name_their_rows() {
        assert_eq!(
            tile_row("tc80_64x64x32_32x32_s4_f32_splitk8"),
            Some("tc80_64x64x32_32x32_s4")
        );
        assert_eq!(tile_row("cublas_f16"), None);
        assert_eq!(tile_row("direct"), None);
    }
}
