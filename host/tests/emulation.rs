//! An older architecture's path on a newer GPU: GPU 0 opened with an older embedded PTX
//! (`--ptx`) and a cap on its shared memory per block (`--max-smem-kb`) (GPU tests).
mod common;

use common::{mnist, one_epoch};
use gpu::gemm::{Accum, Layout, TILE_CONFIGS, TileConfig};
use host::cuda::{Gpu, GpuOptions, ModuleForm};
use host::gemm::{self, Problem, Ptrs, Usage, Version};
use host::mlp::persistent::{self, Feed, Support};
use host::mlp::{Options, header, train};
use host::ptx::Target;

const KIB_64: usize = 64 * 1024;

/// GPU 0 opened with the oldest embedded PTX from sm_`oldest` to sm_`newest` that it runs, its
/// shared memory capped at `max_smem`; or `None`, having said why the test is skipped, where
/// the build embeds no such PTX, the GPU is older than it, or has less shared memory than the
/// cap.
fn open(oldest: u32, newest: u32, max_smem: Option<usize>) -> Option<Gpu> {
    let device = Gpu::new(0).expect("this test needs a CUDA GPU");
    let embedded: Vec<_> = host::ptx::EMBEDDED.iter().map(|p| p.arch).collect();
    let arch = host::ptx::EMBEDDED
        .iter()
        .map(|p| p.sm)
        .filter(|&sm| (oldest..=newest).contains(&sm) && sm <= device.sm)
        .min();
    let has = device.device_max_smem_optin();
    let why = match arch {
        None => {
            let newer = if oldest == newest { "" } else { " or newer" };
            format!(
                "it needs sm_{oldest} PTX{newer} that this GPU (sm_{}) runs, this build embeds {embedded:?}",
                device.sm
            )
        }
        Some(_) if max_smem.is_some_and(|cap| cap > has) => {
            let cap = max_smem.unwrap_or_default();
            format!("it caps shared memory at {cap} B per block, this GPU has only {has} B")
        }
        Some(arch) => {
            let o = GpuOptions {
                ptx: Some(Target::portable(arch)),
                max_smem,
                ..GpuOptions::default()
            };
            return Some(Gpu::with_options(0, &o).unwrap());
        }
    };
    eprintln!("skipped: {why}");
    None
}

/// The sm_75 path on a newer GPU, as Turing runs it: the sm_75 PTX (its cubin only where that
/// SASS runs here) capped at Turing's 64 KiB, only sm_75 GEMM configurations, and MNIST
/// trained by the persistent kernel with one buffer of a quarter of the batch a block, as its
/// first line says; at hidden 512 the quarters' 256 blocks are not all resident, and the batch
/// streams through two stages.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sm75_ptx_trains_mnist_on_the_persistent_kernel() {
    let Some(g) = open(75, 75, Some(KIB_64)) else {
        return;
    };
    assert_eq!(g.ptx.arch, "sm_75");
    let form = match g.ptx.cubin_for(g.sm) {
        Some(_) => ModuleForm::Cubin,
        None => ModuleForm::Ptx,
    };
    assert_eq!(g.form, form, "sm_75 module on sm_{}", g.sm);
    assert_eq!(g.ptx_choice(), "chosen with --ptx");
    let newer = |v: &Version| v.min_sm() > 75;
    assert!(!Version::all_for(&g).iter().any(newer));
    assert_eq!(
        gemm::choose_config(&g, (128, 128, 784), Usage::default(), Accum::F16)
            .unwrap()
            .min_sm(),
        75
    );
    let ds = mnist();
    let first_line = header(&g, &one_epoch(), &ds).unwrap();
    for said in [
        "(sm_75 PTX, chosen with --ptx, shared memory capped at 64 KiB per block)",
        "persistent kernel (64 blocks, one batch buffer refilled after dW1, the batch in 4 parts)",
    ] {
        assert!(first_line.contains(said), "{first_line}");
    }
    let (wide, steps) = ([ds.train.dim, 512, ds.classes], ds.train.count / 128);
    let support = persistent::support(&g, &wide, 128, steps, Accum::F16).unwrap();
    assert_eq!(support, Support::Yes(Feed::ring("streamed_regs", 2)));
    let run = train(&g, &one_epoch(), &ds).unwrap();
    let acc = run[0].test_accuracy;
    assert!(acc > 0.9, "one epoch reached only {:.2}%", 100.0 * acc);
}

/// Tensor-core configurations of `g`'s PTX that need more than 64 KiB per block.
fn over_64_kib(g: &Gpu) -> Vec<&'static TileConfig> {
    let arch = g.ptx.target();
    let big: Vec<_> = TILE_CONFIGS
        .iter()
        .filter(|c| c.in_ptx(arch) && c.smem_bytes() > KIB_64)
        .collect();
    assert!(
        !big.is_empty(),
        "the tile table has no configuration over 64 KiB"
    );
    big
}

/// With sm_80 PTX (or the oldest newer one embedded) and shared memory capped, MNIST's batch
/// of 128 takes one whole-batch buffer of half the batch in 163 KiB, of a quarter in 99 KiB,
/// and streams through two stages in 64 KiB (W1's copy stays in shared memory on sm_80); at
/// hidden 512 the quarters' 256 blocks are not all resident (one a multiprocessor) and the
/// batch streams through four stages instead. Under 48 KiB not even two stages fit, and the
/// run trains on the layered engine, saying why.
#[test]
#[ignore = "needs a CUDA GPU"]
fn smem_cap_streams_the_batch_or_refuses_what_does_not_fit() {
    let ds = mnist();
    let (o, sizes) = (one_epoch(), [ds.train.dim, 128, ds.classes]);
    let steps = ds.train.count / o.batch;
    let single = "one batch buffer refilled after dW1";
    let two = "the batch streamed in 128-input chunks through 2 stages)";
    for (kib, feed, said) in [
        (163, Feed::of("single"), format!("{single})")),
        (
            99,
            Feed::of("quarters"),
            format!("{single}, the batch in 4 parts)"),
        ),
        (64, Feed::ring("streamed", 2), two.into()),
    ] {
        let Some(g) = open(80, u32::MAX, Some(kib * 1024)) else {
            return;
        };
        assert_eq!(g.max_smem_optin(), kib * 1024);
        let support = persistent::support(&g, &sizes, o.batch, steps, Accum::F16).unwrap();
        assert_eq!(support, Support::Yes(feed), "{kib} KiB");
        let first_line = header(&g, &o, &ds).unwrap();
        assert!(first_line.contains(&said), "{first_line}");
        if kib == 99 {
            let wide = [ds.train.dim, 512, ds.classes];
            let support = persistent::support(&g, &wide, o.batch, steps, Accum::F16).unwrap();
            assert_eq!(support, Support::Yes(Feed::ring("streamed", 4)));
        }
    }
    let Some(g) = open(80, u32::MAX, Some(48 * 1024)) else {
        return;
    };
    let cap = "--max-smem-kb caps a block at 49152 B";
    match persistent::support(&g, &sizes, o.batch, steps, Accum::F16).unwrap() {
        Support::No(why) => assert!(
            why.contains("of shared memory a block at the least") && why.contains(cap),
            "{why}"
        ),
        Support::Yes(feed) => {
            panic!("the persistent kernel was taken under a 48 KiB cap: {feed:?}")
        }
    }
    match persistent::support(&g, &[48, 32, 10], 8, 4, Accum::F16).unwrap() {
        Support::Yes(feed) => {
            assert!(feed.smem(8, 48).bytes <= 48 * 1024, "{feed:?}")
        }
        Support::No(why) => panic!("a block that fits the cap is refused: {why}"),
    }
    let first_line = header(&g, &o, &ds).unwrap();
    let capped = format!(
        "({} PTX, chosen with --ptx, shared memory capped at 48 KiB per block)",
        g.ptx.arch
    );
    for said in [
        capped.as_str(),
        "the persistent kernel does not apply: a batch of 128 × 784 needs",
    ] {
        assert!(first_line.contains(said), "{first_line}");
    }
    let run = train(&g, &o, &ds).unwrap();
    let acc = run[0].test_accuracy;
    assert!(acc > 0.9, "one epoch reached only {:.2}%", 100.0 * acc);
}

/// With sm_80 PTX and an A100's 163 KiB a block, two hidden layers take the layer engine:
/// MNIST's 784-128-128 in pairs at batch 128 and in four parts at 256; 784-512-256 needs more
/// shared memory and is refused with the reason, as are three hidden layers, whose kernels are
/// Hopper's. In 99 KiB (sm_86 and sm_89 cards) 784-128-128 takes the four parts at batch 128
/// too, where a pair's plan does not fit.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_hidden_layers_take_the_layer_engine_from_sm_80() {
    let ds = mnist();
    let (dim, classes) = (ds.train.dim, ds.classes);
    let two = [dim, 128, 128, classes];
    let support = |g: &Gpu, sizes: &[usize], batch: usize| {
        let steps = ds.train.count / batch;
        persistent::support(g, sizes, batch, steps, Accum::F16).unwrap()
    };
    let Some(g) = open(80, 80, Some(163 * 1024)) else {
        return;
    };
    assert_eq!(support(&g, &two, 128), Support::Yes(Feed::of("deep")));
    assert_eq!(
        support(&g, &two, 256),
        Support::Yes(Feed::of("deep_quartered"))
    );
    for (sizes, why) in [
        (vec![dim, 512, 256, classes], "shared memory a block"),
        (vec![dim, 128, 128, 128, classes], "PTX from sm_90 on"),
    ] {
        match support(&g, &sizes, 128) {
            Support::No(reason) => assert!(reason.contains(why), "{sizes:?}: {reason}"),
            Support::Yes(feed) => panic!("{sizes:?} taken by {feed:?}"),
        }
    }
    let Some(g) = open(80, 80, Some(99 * 1024)) else {
        return;
    };
    assert_eq!(
        support(&g, &two, 128),
        Support::Yes(Feed::of("deep_quartered"))
    );
}

/// With sm_80 PTX (or the oldest newer one embedded) and shared memory capped at 64 KiB, no
/// GEMM configuration over the cap is run, chosen or forced; without the cap the same GPU
/// chooses one for a large square.
#[test]
#[ignore = "needs a CUDA GPU"]
fn smem_cap_refuses_gemm_configs_that_need_more() {
    let Some(g) = open(80, u32::MAX, Some(KIB_64)) else {
        return;
    };
    let runs = Version::all_for(&g);
    let none = Ptrs::default();
    let p = Problem::new(256, 256, 256, Layout::NN);
    let ds = mnist();
    for c in over_64_kib(&g) {
        let v = Version::Tensor(c, Accum::F16);
        assert!(!runs.contains(&v), "{} is listed", c.name);
        let e = gemm::launch(&g, v, &p, none).unwrap_err().to_string();
        assert!(
            e.contains("shared memory") && e.contains("--max-smem-kb"),
            "{e}"
        );
        // As `--config` forces it for training.
        let o = Options {
            config: Some(v),
            ..one_epoch()
        };
        let e = train(&g, &o, &ds).err().unwrap().to_string();
        assert!(
            e.contains("shared memory") && e.contains("--max-smem-kb"),
            "{e}"
        );
    }
    for (m, n, k) in [(4096, 4096, 4096), (128, 128, 784), (128, 784, 128)] {
        let c = gemm::choose_config(&g, (m, n, k), Usage::default(), Accum::F16).unwrap();
        assert!(
            c.smem_bytes() <= KIB_64 && c.min_sm() == 80,
            "{m}×{n}×{k}: {}",
            c.name
        );
    }
    let uncapped = GpuOptions {
        max_smem: None,
        ..g.options.clone()
    };
    let full = Gpu::with_options(0, &uncapped).unwrap();
    let c = gemm::choose_config(&full, (4096, 4096, 4096), Usage::default(), Accum::F16).unwrap();
    assert!(c.smem_bytes() > KIB_64, "uncapped, 4096³ takes {}", c.name);
}

/// Options the GPU or the build cannot honour are one-line errors that say what is embedded
/// and what the GPU is.
#[test]
#[ignore = "needs a CUDA GPU"]
fn options_the_gpu_cannot_honour_are_errors() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let error = |o: GpuOptions| Gpu::with_options(0, &o).err().unwrap().to_string();
    let real = g.device_max_smem_optin();
    for cap in [0, real + 1024] {
        let e = error(GpuOptions {
            max_smem: Some(cap),
            ..GpuOptions::default()
        });
        assert!(e.contains("--max-smem-kb") && !e.contains('\n'), "{e}");
    }
    let e = error(GpuOptions {
        ptx: Some(Target::portable(61)),
        ..GpuOptions::default()
    });
    let device = format!("the GPU is sm_{}", g.sm);
    assert!(
        e.contains("sm_61 is not embedded") && e.contains(&device),
        "{e}"
    );
    assert!(e.contains(g.ptx.arch) && !e.contains('\n'), "{e}");
    if let Some(p) = host::ptx::EMBEDDED.iter().find(|p| p.sm > g.sm) {
        let e = error(GpuOptions {
            ptx: Some(p.target()),
            ..GpuOptions::default()
        });
        let newer = format!("newer than this GPU (sm_{})", g.sm);
        assert!(e.contains(&newer), "{e}");
    }
    let same = Gpu::with_options(0, &GpuOptions::default()).unwrap();
    assert_eq!((same.ptx.arch, same.max_smem_optin()), (g.ptx.arch, real));
}
