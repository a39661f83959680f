//! Every GEMM version × configuration × layout against the CPU reference, on shapes that are
//! not multiples of any tile, with every epilogue option (GPU tests).
use gpu::gemm::{Accum, Layout, SGD_DEEP, SGD_SHALLOW};
use half::f16;
use host::cuda::{Gpu, dptr};
use host::gemm::{self, Problem, Ptrs, SgdStep, Usage, Version};
use host::gemm_bench::reference::{self, EpilogueInputs, Weights, accum_of};
use rand::{Rng, SeedableRng, rngs::StdRng};

const SHAPES: [(usize, usize, usize); 6] = [
    (1, 1, 1),
    (17, 33, 65),
    (128, 784, 128),
    (1000, 777, 333),
    (64, 10, 128),
    (130, 260, 40),
];

/// `p` as version `v` takes it: the `wgmma` rungs read operands through the copy engine, whose
/// rows start 16-byte aligned, so their leading dimensions are rounded up to multiples of 8
/// (`warpgroup_rungs_wrap_their_stages_and_refuse_unaligned_rows` checks the refusal of the
/// rest).
fn as_read_by(v: Version, p: Problem) -> Problem {
    match v {
        Version::Tensor(c, _) if c.is_wgmma() => Problem {
            lda: p.lda.next_multiple_of(8),
            ldb: p.ldb.next_multiple_of(8),
            ..p
        },
        _ => p,
    }
}

/// The version and problem a failure message names.
fn describe(v: Version, p: &Problem) -> String {
    format!("{} {:?} M={} N={} K={}", v.label(), p.layout, p.m, p.n, p.k)
}

fn random(n: usize, rng: &mut StdRng) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect()
}

/// Runs `v` on `p` with fresh random operands and a NaN-poisoned C (or a random C when beta≠0),
/// and checks every element. Where `p` has the ReLU, a bias and a random gate (half of it not
/// positive) go with it.
fn check_one(g: &Gpu, v: Version, p: &Problem, rng: &mut StdRng) {
    check_at(g, v, p, rng, None, p.relu);
}

/// [`check_one`], checking only the elements at `samples` where given, and with the ReLU a
/// random gate only where `gated`.
fn check_at(
    g: &Gpu,
    v: Version,
    p: &Problem,
    rng: &mut StdRng,
    samples: Option<&[(usize, usize)]>,
    gated: bool,
) {
    let a = random(p.a_len(), rng);
    let b = random(p.b_len(), rng);
    let bias = random(p.n, rng);
    let gate = random(p.c_len(), rng);
    let c0: Vec<f16> = if p.beta != 0.0 {
        random(p.c_len(), rng)
    } else {
        vec![f16::NAN; p.c_len()]
    };
    let (da, db, dbias, dgate, dc) = (
        g.upload(&a).unwrap(),
        g.upload(&b).unwrap(),
        g.upload(&bias).unwrap(),
        g.upload(&gate).unwrap(),
        g.upload(&c0).unwrap(),
    );
    let s = &g.stream;
    let full = p.relu;
    let ws = g.zeros::<f32>(gemm::workspace_len(v, p).max(1)).unwrap();
    let ptrs = Ptrs {
        a: dptr(&da, s),
        b: dptr(&db, s),
        c: dptr(&dc, s),
        bias: if full { dptr(&dbias, s) } else { 0 },
        gate: if full && gated { dptr(&dgate, s) } else { 0 },
        ws: dptr(&ws, s),
        ..Ptrs::default()
    };
    let inputs = EpilogueInputs {
        c_old: &c0,
        bias: full.then_some(&bias[..]),
        gate: (full && gated).then_some(&gate[..]),
    };
    p.validate(a.len(), b.len(), c0.len(), Some(bias.len()))
        .unwrap();
    gemm::launch(g, v, p, ptrs).unwrap();
    let got = g.download(&dc).unwrap();
    let c = reference::check(p, accum_of(v), &a, &b, inputs, &got, samples);
    assert_eq!(
        c.failures,
        0,
        "{} beta={} relu={}: first bad (i, j, got, want) = {:?}",
        describe(v, p),
        p.beta,
        p.relu,
        c.first_failure
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_version_layout_and_shape_matches_cpu() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(1);
    for v in Version::all_for(&g) {
        for layout in Layout::ALL {
            for (m, n, k) in SHAPES {
                let p = as_read_by(v, Problem::new(m, n, k, layout));
                check_one(&g, v, &p, &mut rng);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn epilogues_and_padded_leading_dimensions() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(2);
    for v in Version::all_for(&g) {
        for layout in Layout::ALL {
            // bias + ReLU, alpha scaling
            let mut p = Problem::new(100, 72, 96, layout);
            p.relu = true;
            p.alpha = 0.5;
            check_one(&g, v, &as_read_by(v, p), &mut rng);
            // accumulate into C
            let mut p = Problem::new(33, 40, 24, layout);
            p.beta = 1.0;
            check_one(&g, v, &as_read_by(v, p), &mut rng);
            // whole block tiles inside C, for every tile size: the inline epilogue (bias,
            // ReLU, alpha) and, with beta = 1, the general one
            let mut p = Problem::new(256, 256, 96, layout);
            p.relu = true;
            p.alpha = 0.5;
            check_one(&g, v, &as_read_by(v, p), &mut rng);
            let mut p = Problem::new(256, 256, 64, layout);
            p.beta = 1.0;
            check_one(&g, v, &as_read_by(v, p), &mut rng);
            // bias and ReLU without a gate, as a forward layer's: the `wgmma` rungs apply them
            // as they stage C for the copy engine; tiles past M and N, an odd N (the last
            // column's bias alone) in rows the copy engine can address
            let mut p = Problem::new(200, 135, 200, layout);
            p.ldc = 136;
            p.relu = true;
            p.alpha = 0.5;
            check_at(&g, v, &as_read_by(v, p), &mut rng, None, false);
            // leading dimensions wider than the rows, odd ones included (the wgmma rungs' A and
            // B rounded up to whole 16-byte rows)
            let mut p = Problem::new(50, 70, 90, layout);
            p.lda += 8;
            p.ldb += 3;
            p.ldc += 5;
            check_one(&g, v, &as_read_by(v, p), &mut rng);
        }
    }
}

/// Runs `v` on `p` (which has an SGD step) from random master weights and velocity, and checks
/// the step every element took.
fn check_sgd(g: &Gpu, v: Version, p: &Problem, rng: &mut StdRng) {
    let a = random(p.a_len(), rng);
    let b = random(p.b_len(), rng);
    let uniform = |rng: &mut StdRng| -> Vec<f32> {
        (0..p.c_len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect()
    };
    let (master, velocity) = (uniform(rng), uniform(rng));
    let up = |x: &[f16]| g.upload(x).unwrap();
    let (da, db) = (up(&a), up(&b));
    let dc = up(&vec![f16::NAN; p.c_len()]);
    let (dm, dv) = (g.upload(&master).unwrap(), g.upload(&velocity).unwrap());
    let s = &g.stream;
    let ws = g.zeros::<f32>(gemm::workspace_len(v, p).max(1)).unwrap();
    let ptrs = Ptrs {
        a: dptr(&da, s),
        b: dptr(&db, s),
        c: dptr(&dc, s),
        ws: dptr(&ws, s),
        master: dptr(&dm, s),
        velocity: dptr(&dv, s),
        ..Ptrs::default()
    };
    p.validate(a.len(), b.len(), p.c_len(), None).unwrap();
    gemm::launch(g, v, p, ptrs).unwrap();
    let before = Weights {
        master: &master,
        velocity: &velocity,
    };
    let (m1, v1) = (g.download(&dm).unwrap(), g.download(&dv).unwrap());
    let after = Weights {
        master: &m1,
        velocity: &v1,
    };
    let got = g.download(&dc).unwrap();
    let c = reference::check_sgd(p, accum_of(v), (&a, &b), before, after, &got, None);
    assert_eq!(
        c.failures,
        0,
        "{} ldc={} split={}: first bad (i, j, gradient, want) = {:?}",
        describe(v, p),
        p.ldc,
        p.split_k,
        c.first_failure
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sgd_epilogue_steps_the_weights_on_every_version() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(4);
    let step = Some(SgdStep {
        lr: 0.05,
        momentum: 0.9,
    });
    for v in Version::all_for(&g) {
        let splits = matches!(v, Version::Tensor(c, _) if !c.is_wgmma());
        for layout in Layout::ALL {
            if !v.takes_sgd_step(layout) {
                let p = Problem {
                    sgd: step,
                    ..Problem::new(64, 64, 64, layout)
                };
                let e = gemm::launch(&g, v, &p, Ptrs::default()).unwrap_err();
                assert!(e.to_string().contains("takes no SGD step"), "{e}");
                continue;
            }
            // Whole quads in whole tiles; rows of quads with a partial one at the right edge
            // (N = 70 in rows of 72); rows not aligned for vectors (ldc 70); the MLP's first
            // layer at hidden 128.
            for (m, n, k, ldc) in [
                (256, 256, 64, 256),
                (100, 70, 96, 72),
                (33, 70, 40, 70),
                (128, 784, 128, 784),
            ] {
                let p = Problem {
                    ldc,
                    alpha: 0.5,
                    sgd: step,
                    ..Problem::new(m, n, k, layout)
                };
                check_sgd(&g, v, &as_read_by(v, p), &mut rng);
            }
            if splits {
                let p = Problem {
                    split_k: 3,
                    sgd: step,
                    ..Problem::new(64, 40, 1000, layout)
                };
                check_sgd(&g, v, &p, &mut rng);
            }
            // Several tiles a persistent block, which its two consumers step in turn, the last
            // ones partial.
            if matches!(v, Version::Tensor(c, _) if c.is_ping_pong()) {
                let rows = 128 * (2 * g.sm_count() as usize + 1) - 37;
                let p = Problem {
                    alpha: 0.5,
                    sgd: step,
                    ..Problem::new(rows, 250, 64, layout)
                };
                check_sgd(&g, v, &as_read_by(v, p), &mut rng);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn split_k_matches_cpu() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(3);
    for v in Version::all_for(&g)
        .into_iter()
        .filter(|v| matches!(v, Version::Tensor(c, _) if !c.is_wgmma()))
    {
        for layout in Layout::ALL {
            // K not a multiple of the slices, slices not a multiple of K steps, epilogue on.
            for (m, n, k, split) in [(128, 10, 4096, 8), (17, 33, 1000, 3), (64, 40, 130, 4)] {
                let mut p = Problem::new(m, n, k, layout);
                p.split_k = split;
                p.relu = true;
                check_one(&g, v, &p, &mut rng);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_configs_are_errors() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let none = Ptrs::default();
    let p = Problem::new(0, 4, 4, Layout::NN);
    assert!(gemm::launch(&g, Version::Simt("naive"), &p, none).is_err());
    // Split-K without a workspace, and on a SIMT version.
    let mut p = Problem::new(64, 64, 4096, Layout::NN);
    p.split_k = 4;
    let v = Version::all_for(&g)
        .into_iter()
        .find(|v| matches!(v, Version::Tensor(..)))
        .unwrap();
    assert!(
        gemm::launch(&g, v, &p, none)
            .unwrap_err()
            .to_string()
            .contains("workspace")
    );
    assert!(
        gemm::launch(&g, Version::Simt("naive"), &p, none)
            .unwrap_err()
            .to_string()
            .contains("split-K")
    );
    // A configuration that needs more shared memory than the device allows, made up here, of
    // the oldest architecture so that every PTX would hold it.
    let huge: &'static gpu::gemm::TileConfig = Box::leak(Box::new(gpu::gemm::TileConfig {
        name: "tc75_huge",
        block: (256, 256, 256),
        warp: (64, 64),
        instruction: (16, 8, 8),
        stages: 4,
        cluster_m: 1,
        mainloop: gpu::gemm::Mainloop::Staged,
        accums: &[gpu::gemm::Accum::F16],
    }));
    let p = Problem::new(64, 64, 64, Layout::NN);
    let e = gemm::launch(&g, Version::Tensor(huge, gpu::gemm::Accum::F16), &p, none).unwrap_err();
    assert!(e.to_string().contains("shared memory"), "{e}");
    // A configuration the loaded PTX lacks (there is one unless it is sm_90a).
    let arch = g.ptx.target();
    for c in gpu::gemm::TILE_CONFIGS.iter().filter(|c| !c.in_ptx(arch)) {
        let v = Version::Tensor(c, gpu::gemm::Accum::F16);
        let e = gemm::launch(&g, v, &p, none).unwrap_err().to_string();
        let a = if c.is_wgmma() { "a" } else { "" };
        let needs = format!(
            "needs sm_{}{a} PTX, but the {} PTX is loaded",
            c.min_sm(),
            g.ptx.arch
        );
        assert!(e.contains(&needs), "{e}");
    }
    // On sm_90a, the portable sm_90 PTX of the same GPU lacks the wgmma rows.
    let portable = host::ptx::Target::portable(90);
    if arch.specific && host::ptx::EMBEDDED.iter().any(|p| p.target() == portable) {
        let o = host::cuda::GpuOptions {
            ptx: Some(portable),
            ..Default::default()
        };
        let g90 = Gpu::with_options(0, &o).unwrap();
        let c = gpu::gemm::TILE_CONFIGS
            .iter()
            .find(|c| c.is_wgmma())
            .unwrap();
        let v = Version::Tensor(c, gpu::gemm::Accum::F16);
        let e = gemm::launch(&g90, v, &p, none).unwrap_err().to_string();
        assert!(
            e.contains("needs sm_90a PTX, but the sm_90 PTX is loaded"),
            "{e}"
        );
    }
}

/// The `wgmma` rungs (sm_90a PTX) on K deep enough for the ring of stages to wrap several times
/// (the barriers' parities flip), on about two output tiles per SM (the last ones partial;
/// checked at sampled elements), and shapes whose rows are not 16-byte aligned refused with
/// the reason.
#[test]
#[ignore = "needs a CUDA GPU"]
fn warpgroup_rungs_wrap_their_stages_and_refuse_unaligned_rows() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let wgmma: Vec<_> = Version::all_for(&g)
        .into_iter()
        .filter(|v| matches!(v, Version::Tensor(c, _) if c.is_wgmma()))
        .collect();
    if wgmma.is_empty() {
        eprintln!(
            "skipped: wgmma needs sm_90a PTX, and the {} PTX is loaded",
            g.ptx.arch
        );
        return;
    }
    let mut rng = StdRng::seed_from_u64(4);
    for &v in &wgmma {
        for layout in Layout::ALL {
            let mut p = Problem::new(192, 320, 1000, layout);
            p.relu = true;
            check_one(&g, v, &as_read_by(v, p), &mut rng);
            let Version::Tensor(c, _) = v else { continue };
            let rows = (2 * g.sm_count() as usize).div_ceil(3);
            let (m, n) = (c.block.0 * rows - 5, 2 * c.block.1 + 8);
            let samples: Vec<_> = (0..4096)
                .map(|_| (rng.random_range(0..m), rng.random_range(0..n)))
                .collect();
            let p = as_read_by(v, Problem::new(m, n, 136, layout));
            check_at(&g, v, &p, &mut rng, Some(&samples), p.relu);
            if c.is_ping_pong() {
                // Six tiles a persistent block: each consumer warpgroup takes three in turn,
                // its staging area and the ring reused across them.
                let (m, n) = (c.block.0 * g.sm_count() as usize - 3, 5 * c.block.1 + 8);
                let samples: Vec<_> = (0..4096)
                    .map(|_| (rng.random_range(0..m), rng.random_range(0..n)))
                    .collect();
                let mut p = as_read_by(v, Problem::new(m, n, 200, layout));
                p.relu = true;
                check_at(&g, v, &p, &mut rng, Some(&samples), false);
            }
        }
        let p = Problem::new(64, 64, 100, Layout::NN);
        let e = gemm::launch(&g, v, &p, Ptrs::default()).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("reads A through a tensor map: the copy engine cannot read it")
                && e.contains("leading dimension 100 is not a multiple of 8"),
            "{e}"
        );
        let why = gemm::refuses(v, &p, Ptrs::default()).unwrap();
        assert!(why.starts_with("A: its leading dimension 100"), "{why}");
        let mut p = Problem::new(64, 64, 128, Layout::NN);
        p.split_k = 2;
        let e = gemm::launch(&g, v, &p, Ptrs::default()).unwrap_err();
        assert!(e.to_string().contains("does not split K"), "{e}");
    }
}

/// A product of one K step (the MLP's input gradient through its output layer) runs on the
/// direct rung where the PTX holds it, unless it takes an SGD step; the rung matches the CPU on
/// such products in every layout: whole 16-byte chunks with the gate and bias (K = 10, 1, 16),
/// edges that are not multiples of its warp tile, padded or odd leading dimensions, and beta.
#[test]
#[ignore = "needs a CUDA GPU"]
fn products_of_one_k_step_take_the_direct_rung() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(8);
    let chosen = |k, steps| {
        let usage = Usage {
            steps,
            ..Usage::default()
        };
        gemm::choose_version(&g, (128, 4096, k), usage, Accum::F16)
            .unwrap()
            .0
    };
    if !Version::all_for(&g).contains(&Version::Direct) {
        assert!(matches!(chosen(10, false), Version::Tensor(..)));
        return;
    }
    assert_eq!(chosen(10, false), Version::Direct);
    assert_eq!(chosen(16, false), Version::Direct);
    assert!(matches!(chosen(17, false), Version::Tensor(..)));
    assert!(matches!(chosen(10, true), Version::Tensor(..)));
    let v = Version::Direct;
    for layout in Layout::ALL {
        for (m, n, k) in [(128, 4096, 10), (64, 256, 1), (96, 160, 16), (130, 100, 10)] {
            let p = Problem {
                relu: true,
                ..Problem::new(m, n, k, layout)
            };
            check_one(&g, v, &p, &mut rng);
        }
        let mut p = Problem::new(70, 96, 9, layout);
        (p.lda, p.ldb, p.ldc) = (p.lda + 3, p.ldb + 1, p.ldc + 8);
        p.relu = true;
        check_one(&g, v, &p, &mut rng);
        let p = Problem {
            beta: 1.0,
            ..Problem::new(64, 64, 12, layout)
        };
        check_one(&g, v, &p, &mut rng);
    }
}

/// Tiles under 64×64 give a small output more blocks; a GEMM beside another kernel takes them
/// only where they number at most half the SMs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gemms_beside_another_kernel_take_small_tiles_on_half_the_sms_at_most() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let sms = g.sm_count() as usize;
    let area = |shape, beside| {
        let usage = Usage {
            beside,
            ..Usage::default()
        };
        let c = gemm::choose_config(&g, shape, usage, Accum::F16).unwrap();
        c.block.0 * c.block.1
    };
    // 32×32 tiles for half the SMs, and for one more.
    let half = sms / 2;
    for (tiles, small_beside) in [(half, true), (half + 1, false)] {
        let shape = (32, 32 * tiles, 128);
        assert!(area(shape, false) < 64 * 64, "{shape:?}");
        assert_eq!(area(shape, true) < 64 * 64, small_beside, "{shape:?}");
    }
    // 64×64 tiles for all but four SMs, which 32×32 ones fill: four to an SM.
    let shape = (64, 64 * (sms - 4), 128);
    assert!(area(shape, false) < 64 * 64, "{shape:?}");
    assert!(area(shape, true) >= 64 * 64, "{shape:?}");
}

/// On sm_90a PTX a product the copy engine can read, without a step, takes among the `wgmma`
/// tiles whose blocks leave at most an eighth of the SMs without one those of which two blocks
/// fit an SM, then the largest, and so does one that steps; a product whose operands the copy
/// engine cannot read, or which no `wgmma` tile fills, an `mma.sync` one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn products_the_copy_engine_reads_take_wgmma_tiles_on_sm_90a() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let sms = g.sm_count() as usize;
    let wgmma_in_ptx = Version::all_for(&g)
        .iter()
        .any(|v| matches!(v, Version::Tensor(c, _) if c.is_wgmma()));
    let readable = Usage::aligned(784, 784);
    let chosen = |shape, usage| gemm::choose_config(&g, shape, usage, Accum::F16).unwrap();
    // 128×64 tiles for every SM; 64×64 ones for every SM; 64×64 ones for 3/4 of them.
    for (shape, block) in [
        ((128, 64 * sms, 784), Some((128, 64))),
        ((128, 32 * sms, 784), Some((64, 64))),
        ((64, 48 * sms, 784), None),
        // 256×128 tiles fill the GPU too, one block an SM; 128×128 ones of three stages, two.
        ((2048, 4096, 784), Some((128, 128))),
    ] {
        let c = chosen(shape, readable);
        let want = block.filter(|_| wgmma_in_ptx);
        assert_eq!(c.is_wgmma(), want.is_some(), "{shape:?}: {}", c.name);
        if let Some(block) = want {
            assert_eq!((c.block.0, c.block.1), block, "{shape:?}: {}", c.name);
        }
    }
    let steps = Usage {
        steps: true,
        ..readable
    };
    // The step kernels' registers leave two blocks an SM to the 64×64 tile alone.
    let stepping = chosen((4096, 784, 128), steps);
    assert_eq!(stepping.is_wgmma(), wgmma_in_ptx, "{}", stepping.name);
    if wgmma_in_ptx {
        assert_eq!((stepping.block.0, stepping.block.1), (64, 64));
    }
    let shape = (128, 64 * sms, 784);
    for usage in [Usage::aligned(784, 100), Usage::default()] {
        assert!(!chosen(shape, usage).is_wgmma(), "{usage:?}");
    }
    assert!(
        !chosen((128, 64 * sms, 40), readable).is_wgmma(),
        "K under 64"
    );
}

/// A GEMM that takes an SGD step runs on a tile whose threads keep the deep epilogue's quads in
/// flight, where the largest tile that fills the GPU has the shallow one (hidden 8192's dW1).
#[test]
#[ignore = "needs a CUDA GPU"]
fn stepping_gemms_take_tiles_with_the_deep_epilogue() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let steps = Usage {
        steps: true,
        ..Usage::default()
    };
    for shape in [
        (8192, 784, 128),
        (4096, 784, 128),
        (10, 8192, 128),
        (128, 784, 128),
    ] {
        let c = gemm::choose_config(&g, shape, steps, Accum::F16).unwrap();
        assert_eq!(c.sgd_quads_in_flight(), SGD_DEEP, "{shape:?}: {}", c.name);
    }
    if g.ptx.sm >= 80 {
        let plain =
            gemm::choose_config(&g, (8192, 784, 128), Usage::default(), Accum::F16).unwrap();
        assert_eq!(plain.sgd_quads_in_flight(), SGD_SHALLOW, "{}", plain.name);
    }
}

/// For a small output the host picks the tile with the most blocks, and among rows of that
/// tile the deepest K slice that K fills, or the shallowest when K fills none; for an output
/// that fills the GPU, the largest tile, and a K slice that K fills where one does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn automatic_choice_fits_the_k_slice_to_k() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let depths = |c: &gpu::gemm::TileConfig| -> Vec<usize> {
        gpu::gemm::TILE_CONFIGS
            .iter()
            .filter(|r| (r.block.0, r.block.1, r.mainloop) == (c.block.0, c.block.1, c.mainloop))
            .map(|r| r.block.2)
            .collect()
    };
    for k in [10, 40, 784] {
        let c = gemm::choose_config(&g, (128, 128, k), Usage::default(), Accum::F16).unwrap();
        let depths = depths(c);
        let fitting = depths.iter().copied().filter(|&bk| bk <= k).max();
        let want = fitting.unwrap_or_else(|| *depths.iter().min().unwrap());
        assert_eq!(
            c.block.2, want,
            "K={k}: chose {} among depths {depths:?}",
            c.name
        );
    }
    // One 64×64 tile per SM (sm_80 and later PTX has rows of it 32 and 64 deep).
    let rows = 64 * g.sm_count() as usize;
    for k in [10, 40, 784] {
        let c = gemm::choose_config(&g, (rows, 64, k), Usage::default(), Accum::F16).unwrap();
        let depths = depths(c);
        let shallowest = *depths.iter().min().unwrap();
        assert!(
            c.block.2 <= k || c.block.2 == shallowest,
            "K={k}: chose {} among depths {depths:?}",
            c.name
        );
    }
}

/// The roof kernels do every product `host gemm` counts for them: with all operands 1, each
/// lane's sum over its chains is exactly chains × rounds × K (integers this small are exact
/// in fp16), against the count computed here.
#[test]
#[ignore = "needs a CUDA GPU"]
fn roof_kernels_count_every_product() {
    let g = Gpu::new(0).unwrap();
    let (blocks, threads, iters) = (3u32, 96u32, 7u32);
    let sums = g.zeros::<f32>((blocks * threads) as usize).unwrap();
    let kernels = gemm::roof_kernels(&g);
    assert!(!kernels.is_empty());
    for (name, k, _) in kernels {
        gemm::launch_roof(
            &g,
            name,
            (blocks, threads),
            f16::ONE,
            iters,
            dptr(&sums, &g.stream),
        )
        .unwrap();
        let want = (gpu::gemm::ROOF_CHAINS * iters as usize * k) as f32;
        for (i, got) in g.download(&sums).unwrap().into_iter().enumerate() {
            assert_eq!(got, want, "{name}, thread {i}");
        }
    }
}
