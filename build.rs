//! PTX builder: compiles the `gpu` crate for `nvptx64-nvidia-cuda`, once per architecture, and
//! embeds each PTX in the host binary (`$OUT_DIR/ptx.rs`, included by `host/src/ptx.rs`).
//! Where a `ptxas` is found (`PTXAS`, else `ptxas` on `PATH`), each PTX is also assembled into a
//! cubin for its architecture and embedded zlib-compressed beside it, so a GPU that runs that
//! SASS loads the module without the driver's JIT compile (tens of seconds for the GEMM ladder
//! on an empty driver cache).
//!
//! Architectures come from `GPU_ARCHS` (comma-separated, default `sm_75,sm_80,sm_90,sm_90a`, so
//! the main command gets each GPU's best kernels; `GPU_ARCHS=sm_90` builds only Hopper's
//! portable PTX). An `a` suffix builds the architecture-specific PTX (`wgmma`), which runs on
//! that compute capability alone. Each is
//! built by a nested `cargo rustc` in its own target directory (`target/ptx/<arch>`), so it
//! never waits on the outer build's lock, with
//! `-Zbuild-std=core` (no prebuilt std exists for the target) and `-C target-cpu=<arch>`, which
//! also enables `target_feature = "sm_80"` etc. for kernels that need newer instructions.
use flate2::{Compression, write::ZlibEncoder};
use std::env;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
    println!("cargo:rerun-if-env-changed=GPU_PHASE_TRACE");
    println!("cargo:rerun-if-env-changed=PTXAS");
    println!("cargo:rerun-if-changed={}", gpu.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        gpu.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-changed={}", root.join("build.rs").display());

    let ptxas = find_ptxas();
    if let Err(why) = &ptxas {
        println!(
            "cargo:warning=cubins skipped, PTX only (the driver JIT-compiles it at first run): {why}"
        );
    }
    let archs = env::var("GPU_ARCHS").unwrap_or_else(|_| "sm_75,sm_80,sm_90,sm_90a".into());
    // Each ptxas runs while the next architecture's PTX builds.
    let mut built = Vec::new();
    for arch in archs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let sm: u32 = arch
            .strip_prefix("sm_")
            .and_then(|n| n.trim_end_matches('a').parse().ok())
            .unwrap_or_else(|| panic!("GPU_ARCHS entry {arch:?} is not of the form sm_NN"));
        let ptx = out.join(format!("gpu_{arch}.ptx"));
        let source = std::fs::read_to_string(build_ptx(root, &gpu, arch, sm)).unwrap();
        std::fs::write(
            &ptx,
            declare_ping_pong_registers(&align_tensor_maps(&source)),
        )
        .unwrap();
        let ptxas_run = ptxas.as_ref().ok().map(|p| assemble(p, arch, &ptx));
        built.push((arch, sm, ptx, ptxas_run));
    }
    let mut table = String::from("pub static EMBEDDED: &[EmbeddedPtx] = &[\n");
    for (arch, sm, ptx, ptxas_run) in built {
        let cubin = match ptxas_run {
            Some(run) => format!("Some(include_bytes!({:?}))", compress(arch, run).display()),
            None => "None".into(),
        };
        writeln!(
            table,
            "    EmbeddedPtx {{ arch: {arch:?}, sm: {sm}, source: include_str!({:?}), cubin: {cubin} }},",
            ptx.display()
        )
        .unwrap();
    }
    table.push_str("];\n");
    write_build_facts(&mut table, &ptxas);
    std::fs::write(out.join("ptx.rs"), table).unwrap();
}

/// Hopper's bulk copies and mbarrier transaction counts need PTX 8.0, and `st.async` (the
/// persistent kernel's messages to its partner block) 8.1; rustc's default for sm_90 is 7.8.
fn build_ptx(root: &Path, gpu: &Path, arch: &str, sm: u32) -> PathBuf {
    let ptx_isa = if gpu::target::Target::portable(sm).clusters() {
        " -C target-feature=+ptx81"
    } else {
        ""
    };
    // A traced build has a target directory of its own, so that switching does not rebuild.
    let (trace_cfg, dir) = if phase_trace() {
        (" --cfg phase_trace", format!("{arch}-trace"))
    } else {
        ("", arch.to_string())
    };
    let target_dir = root.join("target").join("ptx").join(dir);
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
            format!("-C target-cpu={arch}{ptx_isa} {UNROLL}{trace_cfg}"),
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

/// The copy engine reads a tensor map in place only at a 64-byte-aligned address, but rustc's
/// kernel ABI aligns a by-value parameter to at most 16 bytes: the `wgmma` kernels' tensor maps
/// (`gpu::gemm::descriptor::TensorMaps`, their second parameter) are declared
/// `.align 64` here. A host test checks every `wgmma` kernel's declaration.
fn align_tensor_maps(ptx: &str) -> String {
    let maps = format!(
        "_param_1[{}]",
        size_of::<gpu::gemm::descriptor::TensorMaps>()
    );
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with(".param .align 16 .b8 gemm_wg") && t.contains(&maps) {
            out.push_str(&line.replacen(".align 16", ".align 64", 1));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Each ping-pong kernel's entry declares the registers a thread it starts with
/// (`gpu::gemm::PING_PONG_REGISTERS`), which its warpgroups then trade by `setmaxnreg`: PTX
/// has `.maxnreg` after the parameter list, and rustc no attribute for it.
fn declare_ping_pong_registers(ptx: &str) -> String {
    let kernels: Vec<_> = gpu::gemm::TILE_CONFIGS
        .iter()
        .filter(|c| c.is_ping_pong())
        .map(|c| format!(".entry gemm_{}_", c.name))
        .collect();
    let maxnreg = format!(".maxnreg {}\n", gpu::gemm::PING_PONG_REGISTERS.entry);
    let mut out = String::with_capacity(ptx.len());
    let mut in_entry = false;
    for line in ptx.split_inclusive('\n') {
        in_entry |= kernels.iter().any(|k| line.contains(k.as_str()));
        out.push_str(line);
        // The parameter list closes on a line of its own, maybe with a comment after it.
        if in_entry && line.split("//").next().is_some_and(|l| l.trim() == ")") {
            out.push_str(&maxnreg);
            in_entry = false;
        }
    }
    out
}

/// The ptxas to assemble cubins with: `PTXAS` where it is set (a build error if it does not
/// run: it was asked for), else `ptxas` on `PATH`. `Err` says why there is none.
fn find_ptxas() -> Result<PathBuf, String> {
    let runs = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
    };
    match env::var_os("PTXAS") {
        Some(p) if p.is_empty() => Err("PTXAS is set to the empty string".into()),
        Some(p) => {
            let p = PathBuf::from(p);
            match runs(&p) {
                Ok(true) => Ok(p),
                Ok(false) => panic!("PTXAS={} fails on --version", p.display()),
                Err(e) => panic!("PTXAS={} does not run: {e}", p.display()),
            }
        }
        None => match runs(Path::new("ptxas")) {
            Ok(true) => Ok("ptxas".into()),
            _ => Err("no ptxas on PATH and PTXAS is not set".into()),
        },
    }
}

/// A ptxas run assembling `ptx` into SASS for exactly `arch`, started in the background.
struct Assembly {
    child: Child,
    cubin: PathBuf,
}

fn assemble(ptxas: &Path, arch: &str, ptx: &Path) -> Assembly {
    let cubin = ptx.with_extension("cubin");
    let child = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-O3")
        .arg("-v")
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", ptxas.display()));
    Assembly { child, cubin }
}

/// Waits for `run` and writes its cubin zlib-compressed (SASS compresses to about a fifth), to
/// the path it returns. A `wgmma` pipeline that ptxas serialises (warnings C7510, C7511, C7515:
/// a call, too few registers, or another instruction writing the accumulators inside it) fails
/// the build: the kernel would run, several times slower. So does a GEMM kernel whose registers
/// its block cannot have ([`over_register_file`]).
fn compress(arch: &str, run: Assembly) -> PathBuf {
    let output = run.child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!("ptxas failed on the {arch} PTX:\n{log}");
    }
    let serialised: Vec<_> = log
        .lines()
        .filter(|l| ["C7510", "C7511", "C7515"].iter().any(|w| l.contains(w)))
        .collect();
    if !serialised.is_empty() {
        panic!(
            "ptxas serialises wgmma in the {arch} PTX:\n{}",
            serialised.join("\n")
        );
    }
    let over = over_register_file(&log);
    if !over.is_empty() {
        panic!(
            "ptxas gives GEMM kernels of the {arch} PTX more registers than their blocks may have \
             (65536 an SM; the launch would fail):\n{}",
            over.join("\n")
        );
    }
    let cubin = std::fs::read(&run.cubin).unwrap();
    let mut z = ZlibEncoder::new(Vec::new(), Compression::best());
    z.write_all(&cubin).unwrap();
    let dest = run.cubin.with_extension("cubin.zz");
    std::fs::write(&dest, z.finish().unwrap()).unwrap();
    dest
}

/// The tensor-core GEMM kernels in ptxas's `-v` report whose block would need more of the
/// SM's 65536 registers than there are: ptxas knows no kernel's thread count (rustc declares
/// none), so it allocates up to 255 a thread, and a block of 384 threads that needs more than
/// 168 fails at launch. Registers are allocated per warp in units of 256. The thread count of
/// `gemm_<config>_<layout>_<acc>` is its tile-table row's.
fn over_register_file(log: &str) -> Vec<String> {
    let mut over = Vec::new();
    let mut kernel = None;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            kernel = rest.split('\'').next().map(str::to_owned);
        } else if let (Some(name), Some(rest)) = (&kernel, line.split("Used ").nth(1)) {
            let regs: usize = rest.split(' ').next().unwrap().parse().unwrap();
            let Some(config) = gemm_config(name) else {
                continue;
            };
            let threads = config.threads();
            let needed = (regs * 32).next_multiple_of(256) * threads.div_ceil(32);
            if needed > 65536 {
                over.push(format!(
                    "{name}: {regs} registers × {threads} threads need {needed}"
                ));
            }
        }
    }
    over
}

/// The tile-table row of the GEMM kernel `name` (`gemm_<config>_<layout>_<acc>`), if it is one.
fn gemm_config(name: &str) -> Option<&'static gpu::gemm::TileConfig> {
    let config = name.strip_prefix("gemm_")?.rsplitn(3, '_').nth(2)?;
    gpu::gemm::TILE_CONFIGS.iter().find(|c| c.name == config)
}

/// Whether `GPU_PHASE_TRACE=1` asks for the persistent kernels' phase trace
/// (`gpu/src/persistent/trace.rs`); off by default, and then the kernels are untouched.
fn phase_trace() -> bool {
    env::var("GPU_PHASE_TRACE").is_ok_and(|v| v == "1")
}

/// What the build did about cubins, for the tests: a build with `PTXAS` set must embed one per
/// PTX, and one without ptxas says why it has none; and whether the PTX has the phase trace.
fn write_build_facts(table: &mut String, ptxas: &Result<PathBuf, String>) {
    let set = env::var_os("PTXAS").is_some_and(|p| !p.is_empty());
    let skipped = ptxas.as_ref().err();
    let trace = phase_trace();
    writeln!(
        table,
        "/// Whether `PTXAS` named a ptxas for this build.\n\
         pub const PTXAS_SET: bool = {set};\n\
         /// Why this build embedded no cubins, or `None` where it assembled one per PTX.\n\
         pub const CUBINS_SKIPPED: Option<&str> = {skipped:?};\n\
         /// Whether the persistent kernels record the phase trace (`GPU_PHASE_TRACE=1`).\n\
         pub const PHASE_TRACE: bool = {trace};"
    )
    .unwrap();
}
