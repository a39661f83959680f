//! A row of `tile_configs!` in words, from the row alone (no GPU): `host gemm --list` prints
//! every row with the GPUs it fits, `host gemm --explain ROW` one row's hierarchy from the
//! block tile down to the instructions, the registers and the shared memory
//! (`host gemm --svg` draws it).
use super::prefer::PREFERENCES;
use anyhow::{Result, bail};
use gpu::gemm::{Accum, MAX_ACCUMULATOR_REGISTERS, Mainloop, TILE_CONFIGS, TileConfig, descriptor};
use gpu::layout::{CHUNK, swizzle};
use gpu::target::ARCHS;
use std::fmt::Write;

/// The row named `name`, or an error that names the rows there are.
pub fn row(name: &str) -> Result<&'static TileConfig> {
    match TILE_CONFIGS.iter().find(|c| c.name == name) {
        Some(c) => Ok(c),
        None => {
            let names: Vec<_> = TILE_CONFIGS.iter().map(|c| c.name).collect();
            bail!("no tile row {name:?}; the rows are {}", names.join(", "))
        }
    }
}

/// Warps of the block, as (along M, along N); on `wgmma` rows, consumer warpgroups.
pub fn warp_grid(c: &TileConfig) -> (usize, usize) {
    (c.block.0 / c.warp.0, c.block.1 / c.warp.1)
}

/// Accumulator registers a thread holds with `acc` sums, or `-` where the row has no kernels
/// for them.
fn registers(c: &TileConfig, acc: Accum) -> String {
    if c.has(acc) {
        c.accumulator_registers(acc).to_string()
    } else {
        "-".into()
    }
}

/// One line a row for `host gemm --list`: the GPUs it fits (✓) or not (·), its threads and
/// stages, shared memory, accumulator registers, and the GPUs that prefer it.
pub fn list() -> String {
    let mut s = String::new();
    let gpus: Vec<_> = ARCHS.iter().map(|a| format!("sm_{}", a.sm)).collect();
    let _ = writeln!(
        s,
        "{:<34} {:<9} {:>7} {:>6} {:>9} {:^11}  {}  prefers",
        "row",
        "mainloop",
        "threads",
        "stages",
        "smem B",
        "acc f16/f32",
        gpus.join(" ")
    );
    for c in TILE_CONFIGS {
        let fits: Vec<_> = ARCHS
            .iter()
            .map(|a| format!("{:^5}", if c.fits(a) { "✓" } else { "·" }))
            .collect();
        let prefers: Vec<_> = PREFERENCES
            .iter()
            .filter(|p| p.row == *c)
            .map(|p| format!("sm_{} {:?}", p.sm, p.size))
            .collect();
        let _ = writeln!(
            s,
            "{:<34} {:<9} {:>7} {:>6} {:>9} {:>5}/{:<5}  {}  {}",
            c.name,
            mainloop(c.mainloop),
            c.threads(),
            c.stages,
            c.smem_bytes(),
            registers(c, Accum::F16),
            registers(c, Accum::F32),
            fits.join(" "),
            prefers.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "shared memory a block: {}",
        ARCHS
            .iter()
            .map(|a| format!("sm_{} {} KiB ({})", a.sm, a.smem_kib(), a.gpus))
            .collect::<Vec<_>>()
            .join("; ")
    );
    s
}

fn mainloop(m: Mainloop) -> &'static str {
    match m {
        Mainloop::Staged => "staged",
        Mainloop::CpAsync => "cp_async",
        Mainloop::Wgmma => "wgmma",
        Mainloop::PingPong => "ping_pong",
    }
}

/// `host gemm --explain ROW`: the row's hierarchy, each level from the one above.
pub fn explain(c: &TileConfig) -> String {
    let mut s = String::new();
    let (bm, bn, bk) = c.block;
    let (wm, wn) = c.warp;
    let (gm, gn) = warp_grid(c);
    let _ = writeln!(s, "{} ({} mainloop)", c.name, mainloop(c.mainloop));
    let _ = writeln!(
        s,
        "block tile   {bm}×{bn} of C, K in slices of {bk}; {} threads",
        c.threads()
    );
    if c.is_ping_pong() {
        let _ = writeln!(
            s,
            "schedule     persistent blocks, one an SM, walking the tiles; two consumer warpgroups take them in turn, one's epilogue beside the other's mainloop"
        );
    }
    if c.is_wgmma() {
        explain_wgmma(&mut s, c);
    } else {
        let _ = writeln!(
            s,
            "warp grid    {gm}×{gn} warps (warp w at row w / {gn}, column w % {gn})"
        );
        let _ = writeln!(s, "warp tile    {wm}×{wn}: {}", warp_origins(c));
        explain_mma_sync(&mut s, c);
    }
    let (f16, f32) = (Accum::F16, Accum::F32);
    let sums = if c.has(f32) {
        format!("{} fp32 registers a thread", c.accumulator_registers(f32))
    } else {
        format!(
            "no fp32 kernels (they would take {} registers a thread, past {MAX_ACCUMULATOR_REGISTERS})",
            c.accumulator_registers(f32)
        )
    };
    let _ = writeln!(
        s,
        "accumulators {sums}; {} with fp16 sums, two a register",
        c.accumulator_registers(f16)
    );
    let stage = (bm + bn) * bk * 2;
    let staging = if c.is_ping_pong() {
        match c.staging_areas() {
            1 => format!(" + a staged C tile of {bm}×{bn} fp16, the consumers' in turn"),
            n => format!(" + {n} staged C tiles of {bm}×{bn} fp16, one a consumer"),
        }
    } else {
        String::new()
    };
    let barriers = if c.is_wgmma() {
        format!("{staging} + {} B of mbarriers", c.stages * 16)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "shared       {} stages × ({bm}+{bn})×{bk} fp16 = {} × {stage} B{barriers} = {} B",
        c.stages,
        c.stages,
        c.smem_bytes()
    );
    let fits: Vec<_> = ARCHS
        .iter()
        .filter(|a| c.fits(a))
        .map(|a| format!("sm_{}", a.sm))
        .collect();
    let _ = writeln!(s, "fits         {}", fits.join(", "));
    s
}

/// Where the first warps' tiles start in the block tile, as (row, column).
fn warp_origins(c: &TileConfig) -> String {
    let (_, gn) = warp_grid(c);
    let warps = c.threads() / 32;
    let shown: Vec<_> = (0..warps.min(4))
        .map(|w| {
            format!(
                "warp {w} at ({}, {})",
                (w / gn) * c.warp.0,
                (w % gn) * c.warp.1
            )
        })
        .collect();
    let more = if warps > 4 { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// A warp's instructions a 16-deep k step, and the swizzle of its operands' tiles.
fn explain_mma_sync(s: &mut String, c: &TileConfig) {
    let (wm, wn) = c.warp;
    let (im, inn, ik) = c.instruction;
    let (mi, ni) = (wm / im, wn / inn);
    let per_fragment = 16 / ik;
    let _ = writeln!(
        s,
        "instruction  mma.sync m{im}n{inn}k{ik}: {mi}×{ni} fragments a warp, {} mma a 16-deep k step ({} k steps a slice)",
        mi * ni * per_fragment,
        c.block.2 / 16
    );
    let _ = writeln!(
        s,
        "ldmatrix     {mi} ldmatrix.x4 of A (16×16 each) and {} of B (two n8 fragments each) a k step",
        ni / 2
    );
    let chunks = c.block.2 / CHUNK;
    let rows: Vec<_> = (0..8)
        .map(|r| {
            let p: Vec<_> = (0..chunks)
                .map(|k| swizzle(r, k, chunks).to_string())
                .collect();
            format!("row {r}: {}", p.join(" "))
        })
        .collect();
    let _ = writeln!(
        s,
        "swizzle      a k-contiguous row of {} B holds {chunks} chunks of 16 B; chunk k of row r lands at\n             {}",
        c.block.2 * 2,
        rows.join("\n             ")
    );
}

/// A warpgroup's instructions a 64-deep slice, and the copy engine's swizzle.
fn explain_wgmma(s: &mut String, c: &TileConfig) {
    let (wm, wn) = c.warp;
    let (gm, _) = warp_grid(c);
    let per_group = wm / descriptor::WGMMA_M;
    let consumers = if c.is_ping_pong() {
        format!("2 consumers, each a whole {wm}×{wn} tile of its own, in turn")
    } else {
        format!("{gm} consumers stacked along M, each {wm}×{wn}")
    };
    let _ = writeln!(
        s,
        "warpgroups   {consumers}; one producer warpgroup issues the tensor copies"
    );
    let _ = writeln!(
        s,
        "instruction  wgmma m64n{}k16: {per_group} a consumer each 16-deep k step, {} k steps a slice; A and B from shared memory by descriptor",
        c.instruction.1,
        c.block.2 / 16
    );
    let _ = writeln!(
        s,
        "swizzle      128-byte: each 64-deep row of a tile is one 128 B line whose eight 16 B chunks are XORed with the row's index mod 8"
    );
    if c.cluster_m > 1 {
        let _ = writeln!(
            s,
            "cluster      {} blocks along M share B: each loads {} columns, multicast to all",
            c.cluster_m,
            c.block.1 / c.cluster_m
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_derives_each_level_from_the_row() {
        let e = explain(row("tc80_128x128x32_64x64_s4").unwrap());
        assert!(e.contains("warp grid    2×2 warps"), "{e}");
        assert!(
            e.contains("mma.sync m16n8k16: 4×8 fragments a warp, 32 mma"),
            "{e}"
        );
        assert!(
            e.contains("4 ldmatrix.x4 of A") && e.contains("4 of B"),
            "{e}"
        );
        assert!(e.contains("128 fp32 registers"), "{e}");
        assert!(e.contains("= 65536 B"), "{e}");
        assert!(
            e.contains("row 1: 0 1 2 3") && e.contains("row 2: 1 0 3 2"),
            "{e}"
        );
        let e = explain(row("tc75_64x64x32_32x32").unwrap());
        assert!(e.contains("m16n8k8: 2×4 fragments a warp, 16 mma"), "{e}");
        let e = explain(row("wg90_128x256x64_64x256_s4_c2x1").unwrap());
        assert!(
            e.contains("2 consumers") && e.contains("wgmma m64n256k16"),
            "{e}"
        );
        assert!(e.contains("each loads 128 columns"), "{e}");
        assert!(
            e.contains("4 × 49152 B + 64 B of mbarriers = 196672 B"),
            "{e}"
        );
        let e = explain(row("wg90_128x256x64_128x256_s3_pp").unwrap());
        assert!(
            e.contains("no fp32 kernels (they would take 256 registers"),
            "{e}"
        );
        assert!(e.contains("128 with fp16 sums"), "{e}");
    }

    #[test]
    fn list_has_a_line_a_row_and_marks_what_fits() {
        let l = list();
        assert_eq!(l.lines().count(), TILE_CONFIGS.len() + 2);
        let wg = l.lines().find(|r| r.starts_with("wg90_128x64")).unwrap();
        assert_eq!(wg.matches('✓').count(), 1, "{wg}");
        let tc75 = l.lines().find(|r| r.starts_with("tc75_64x64")).unwrap();
        assert_eq!(tc75.matches('✓').count(), ARCHS.len(), "{tc75}");
        let fp16_only = l
            .lines()
            .find(|r| r.starts_with("wg90_128x256x64_128x256"))
            .unwrap();
        assert!(fp16_only.contains(" 128/-"), "{fp16_only}");
        assert!(
            row("tc99")
                .unwrap_err()
                .to_string()
                .contains("tc75_64x64x32_32x32")
        );
    }
}
