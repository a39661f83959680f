//! An SVG of a row of `tile_configs!`, generated from the row: the block tile of C, its warp (or
//! warpgroup) tiles, each labelled, and the instruction tiles of the first one, which one warp's
//! `mma.sync` (or one warpgroup's `wgmma`) accumulates. `host gemm --explain ROW --svg FILE`
//! writes it; the drawings in `docs/tiles.md` are its output.
use super::anatomy::warp_grid;
use gpu::gemm::TileConfig;
use std::fmt::Write;

/// Width of the drawing's longer side of the block tile, in pixels.
const SIDE: f64 = 480.0;
/// Margin around the block tile, for the labels.
const MARGIN: f64 = 40.0;
/// Width the title line needs, in pixels, however narrow the block.
const TITLE_WIDTH: f64 = 640.0;

/// The SVG document for row `c`.
pub fn svg(c: &TileConfig) -> String {
    let (bm, bn, _) = c.block;
    let (wm, wn) = c.warp;
    let (gm, gn) = warp_grid(c);
    let scale = SIDE / bm.max(bn) as f64;
    let (w, h) = (bn as f64 * scale, bm as f64 * scale);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="monospace" font-size="12">"#,
        (w + 2.0 * MARGIN).max(TITLE_WIDTH),
        h + 2.0 * MARGIN + 20.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{MARGIN}" y="20">{}: block {bm}×{bn}, {} {wm}×{wn}</text>"#,
        c.name,
        if c.is_wgmma() {
            "warpgroup tiles"
        } else {
            "warp tiles"
        }
    );
    let at = |x: f64, y: f64| (MARGIN + x * scale, MARGIN + 20.0 + y * scale);
    // The instruction tiles of the first warp tile, under the warp tiles' outlines.
    let (im, inn) = (c.instruction.0, c.instruction.1);
    for fi in 0..wm / im {
        for fj in 0..wn / inn {
            let (x, y) = at((fj * inn) as f64, (fi * im) as f64);
            let _ = writeln!(
                s,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="#dde8f6" stroke="#7a9cc6" stroke-width="0.5"/>"##,
                inn as f64 * scale,
                im as f64 * scale
            );
        }
    }
    for gi in 0..gm {
        for gj in 0..gn {
            let (x, y) = at((gj * wn) as f64, (gi * wm) as f64);
            let _ = writeln!(
                s,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#1f3b63" stroke-width="2"/>"##,
                wn as f64 * scale,
                wm as f64 * scale
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                x + 4.0,
                y + 14.0,
                tile_label(c, gi * gn + gj)
            );
        }
    }
    let (x, y) = at(0.0, bm as f64);
    let fragments = (wm / im) * (wn / inn);
    let _ = writeln!(
        s,
        r#"<text x="{x:.1}" y="{:.1}">shaded: the first tile's {fragments} instruction tile{} of {im}×{inn}</text>"#,
        y + 16.0,
        if fragments == 1 { "" } else { "s" }
    );
    s.push_str("</svg>\n");
    s
}

/// The label of warp (or warpgroup) tile `i`; on a ping-pong row both consumer warpgroups
/// compute the whole block tile, a tile each in turn.
fn tile_label(c: &TileConfig, i: usize) -> String {
    if c.is_ping_pong() {
        "wg0, wg1: a whole tile each, in turn".to_string()
    } else if c.is_wgmma() {
        format!("wg{i}")
    } else {
        format!("w{i}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::anatomy::row;
    use super::*;

    #[test]
    fn the_drawing_has_a_box_per_warp_tile_and_per_fragment_of_the_first() {
        let c = row("tc80_128x128x32_64x64_s4").unwrap();
        let d = svg(c);
        assert!(d.starts_with("<svg") && d.ends_with("</svg>\n"));
        assert_eq!(d.matches(r#"stroke-width="2""#).count(), 4);
        assert_eq!(d.matches("#dde8f6").count(), 4 * 8);
        assert!(d.contains(">w3<"));
        let wg = svg(row("wg90_256x128x64_128x128_s4").unwrap());
        assert_eq!(wg.matches(r#"stroke-width="2""#).count(), 2);
        assert_eq!(wg.matches("#dde8f6").count(), 2);
        let pp = svg(row("wg90_128x128x64_128x128_s5_pp").unwrap());
        assert_eq!(pp.matches(r#"stroke-width="2""#).count(), 1);
        assert!(pp.contains(">wg0, wg1: a whole tile each, in turn<"));
    }
}
