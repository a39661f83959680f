//! PTX builder: compiles the `gpu` crate for `nvptx64-nvidia-cuda`, once per architecture, and
//! embeds each PTX in the host binary (`$OUT_DIR/ptx.rs`, included by `host/src/ptx.rs`).
//!
//! Architectures come from `GPU_ARCHS` (comma-separated, default `sm_75,sm_80,sm_90`, so the
//! main command gets each GPU's best kernels; `GPU_ARCHS=sm_90` builds only Hopper's). Each is
//! built by a nested `cargo rustc` in its own target directory (`target/ptx/<arch>`), so it
//! never waits on the outer build's lock, with
//! `-Zbuild-std=core` (no prebuilt std exists for the target) and `-C target-cpu=<arch>`, which
//! also enables `target_feature = "sm_80"` etc. for kernels that need newer instructions.
use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Loops over warp tiles must unroll fully, or the accumulator arrays they index live in
/// local memory; LLVM's default threshold gives up on the tensor-core inner loop.
const UNROLL: &str = "-C llvm-args=-unroll-threshold=50000";

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest
        .parent()
        .expect("host/ lives in the workspace root");
    let gpu = root.join("gpu");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=GPU_ARCHS");
    println!("cargo:rerun-if-changed={}", gpu.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        gpu.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-changed={}", root.join("build.rs").display());

    let archs = env::var("GPU_ARCHS").unwrap_or_else(|_| "sm_75,sm_80,sm_90".into());
    let mut table = String::from("pub static EMBEDDED: &[EmbeddedPtx] = &[\n");
    for arch in archs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let sm: u32 = arch
            .strip_prefix("sm_")
            .and_then(|n| n.trim_end_matches('a').parse().ok())
            .unwrap_or_else(|| panic!("GPU_ARCHS entry {arch:?} is not of the form sm_NN"));
        let ptx = build_ptx(root, &gpu, arch, sm);
        let dest = out.join(format!("gpu_{arch}.ptx"));
        std::fs::copy(&ptx, &dest).unwrap();
        writeln!(
            table,
            "    EmbeddedPtx {{ arch: {arch:?}, sm: {sm}, source: include_str!({:?}) }},",
            dest.display()
        )
        .unwrap();
    }
    table.push_str("];\n");
    std::fs::write(out.join("ptx.rs"), table).unwrap();
}

/// Hopper's bulk copies and mbarrier transaction counts need PTX 8.0, and `st.async` (the
/// persistent kernel's messages to its partner block) 8.1; rustc's default for sm_90 is 7.8.
fn build_ptx(root: &Path, gpu: &Path, arch: &str, sm: u32) -> PathBuf {
    let ptx_isa = if sm >= 90 {
        " -C target-feature=+ptx81"
    } else {
        ""
    };
    let target_dir = root.join("target").join("ptx").join(arch);
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(gpu)
        .args([
            "rustc",
            "--release",
            "--target",
            "nvptx64-nvidia-cuda",
            "-Zbuild-std=core",
        ])
        .args(["--crate-type", "cdylib", "--target-dir"])
        .arg(&target_dir)
        .env(
            "RUSTFLAGS",
            format!("-C target-cpu={arch}{ptx_isa} {UNROLL}"),
        );
    // What the outer build set for itself must not leak into the nested one (clippy's wrapper,
    // the host's flags and target).
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
    ] {
        cmd.env_remove(var);
    }
    let output = cmd.output().expect("could not run cargo to build the PTX");
    if !output.status.success() {
        panic!(
            "building gpu/ for {arch} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    target_dir.join("nvptx64-nvidia-cuda/release/gpu.ptx")
}
