//! `host gemm --tune`: after the table, each size's tile rows ranked by time, how far the host's
//! choice is from the winner, and the line for the per-GPU preference table
//! (`host/src/gemm/prefer.rs`) that would make the winner the choice on this GPU.
use super::Row;
use crate::cuda::Gpu;
use crate::gemm::{Size, Version};
use gpu::gemm::Accum;
use std::fmt::Write;

/// Rows each size's ranking shows.
const SHOWN: usize = 3;

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
    tiles.sort_by(|a, b| a.ms.total_cmp(&b.ms));
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
