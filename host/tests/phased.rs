//! The phased kernel (the layered step's operations, many steps in one launch) against the CPU
//! reference, and the engine a run of several hidden layers takes (GPU tests).
mod common;

use common::{mnist, one_epoch};
use gpu::gemm::Accum;
use half::f16;
use host::cuda::{Arena, Gpu, GpuOptions, dptr};
use host::gemm::SgdStep;
use host::mlp::model::{Init, Mlp, init_params, param_layout};
use host::mlp::phased::Phased;
use host::mlp::{Options, StepShape, header, reference, train};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// The GPU, and with `Some(sm)` the GPU loading that older architecture's PTX (`None` where it is
/// not embedded).
fn open_with_ptx(ptx: Option<u32>) -> Option<Gpu> {
    let device = Gpu::new(0).expect("this test needs a CUDA GPU");
    let Some(sm) = ptx else {
        return Some(device);
    };
    if sm > device.sm || !host::ptx::EMBEDDED.iter().any(|p| p.sm == sm) {
        eprintln!("skipped in part: sm_{sm} PTX is not embedded or is newer than this GPU");
        return None;
    }
    let o = GpuOptions {
        ptx: Some(host::ptx::Target::portable(sm)),
        ..GpuOptions::default()
    };
    Some(Gpu::with_options(0, &o).unwrap())
}

/// Models of one to three hidden layers, widths that are not multiples of the 32-wide tiles
/// nor of the 64-deep K slices, inputs of 40 and of 784.
const SIZES: [&[usize]; 3] = [&[40, 24, 10], &[48, 24, 40, 10], &[784, 72, 24, 24, 10]];
/// Batches: a few rows, one that is no multiple of the tile, one past the persistent kernel's
/// 128.
const BATCHES: [usize; 3] = [8, 120, 200];

/// Four steps (in two launches) of the phased kernel on `g` against the CPU reference, for
/// every model of [`SIZES`], batch of [`BATCHES`] and accumulator.
fn phased_steps_against_cpu(g: &Gpu) {
    let (mut ok, mut report) = (true, Vec::new());
    for sizes in SIZES {
        for acc in [Accum::F16, Accum::F32] {
            for batch in BATCHES {
                let (got, worst, lines) = four_steps(g, sizes, batch, acc);
                report.extend(lines);
                // Every tile of a phase reads only what earlier phases wrote: a second run
                // repeats the first bit for bit.
                let (again, _, _) = four_steps(g, sizes, batch, acc);
                assert!(got == again, "{acc:?} {sizes:?} batch {batch}: runs differ");
                // Activations and gradients are stored in fp16 between layers (as the layered
                // step stores them), and a pre-activation within rounding of zero can fall on
                // the other side of a ReLU: each layer's roundings move the layers before it,
                // by a few percent of their change over three hidden layers and four steps;
                // fp16 accumulation adds ~1e-3 to each pre-activation (m16n8k8 on sm_75:
                // twice the roundings).
                ok &= worst
                    <= match acc {
                        Accum::F32 => 0.08,
                        Accum::F16 if g.ptx.sm < 80 => 0.2,
                        Accum::F16 => 0.15,
                    };
            }
        }
    }
    assert!(
        ok,
        "phased kernel ({}) vs CPU reference:\n{}",
        g.describe_ptx(),
        report.join("\n")
    );
}

/// Four steps of `sizes` at `batch` with `acc`: the parameters, the worst parameter change
/// against the CPU's, relative to each tensor's largest, and a line per tensor.
fn four_steps(g: &Gpu, sizes: &[usize], batch: usize, acc: Accum) -> (Vec<f32>, f32, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(7);
    let (n, steps, seed) = (900usize, 4usize, 77u32);
    let step = SgdStep {
        lr: 0.05,
        momentum: 0.9,
    };
    let x: Vec<f16> = (0..n * sizes[0])
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let labels: Vec<u8> = (0..n).map(|_| rng.random_range(0..10)).collect();
    let init = init_params(sizes, Init::Kaiming, 9);
    let carve = |arena: &mut Arena| {
        let shape = StepShape {
            batch,
            rows: batch,
            steps,
        };
        let m = Mlp::new(g, arena, sizes, &shape, batch, acc, None).unwrap();
        let layers = sizes.len() - 1;
        let p = Phased::new(g, arena, (sizes[0], layers), (batch, steps), acc).unwrap();
        (m, p)
    };
    let mut measure = Arena::measuring();
    carve(&mut measure);
    let mut arena = Arena::new(g, measure.used()).unwrap();
    let (m, p) = carve(&mut arena);
    m.set_params(&init).unwrap();
    let (dx, dy) = (g.upload(&x).unwrap(), g.upload(&labels).unwrap());
    let (loss, correct) = (
        g.zeros::<f32>(steps).unwrap(),
        g.zeros::<f32>(steps).unwrap(),
    );
    let st = &g.stream;
    let rows = p.rows();
    let mark = rows.mark_shuffle_ahead(g).unwrap();
    rows.shuffle(g, (dptr(&dx, st), dptr(&dy, st), n), seed, 1, Some(mark))
        .unwrap();
    let sums = (dptr(&loss, st), dptr(&correct, st));
    // Two launches (steps 0..1, then 1..4): the state carries over between them.
    for part in [(0, 1), (1, steps - 1)] {
        p.run(g, &m, 1, sums, part, step).unwrap();
    }
    let got = m.params().unwrap();
    let got_loss = g.download(&loss).unwrap();
    let half = g.download_buf(m.w16).unwrap();
    let stale = (0..got.len()).find(|&k| half[k] != f16::from_f32(got[k]));
    assert_eq!(
        stale, None,
        "{acc:?} {sizes:?} batch {batch}: fp16 copy ≠ master"
    );
    // Steps past the epoch are refused, never launched.
    assert!(p.run(g, &m, 1, sums, (steps - 1, 2), step).is_err());

    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    let round = |p: &[f32]| -> Vec<f32> { p.iter().map(|&v| f16::from_f32(v).to_f32()).collect() };
    let (mut w, mut v) = (init.clone(), vec![0.0f32; init.len()]);
    let mut lines = Vec::new();
    for (k, &got) in got_loss.iter().enumerate() {
        let rows: Vec<usize> = (0..batch)
            .map(|r| gpu::shuffle::permute((k * batch + r) as u32, n as u32, seed) as usize)
            .collect();
        let xb: Vec<f32> = rows
            .iter()
            .flat_map(|&r| xf[r * sizes[0]..(r + 1) * sizes[0]].to_vec())
            .collect();
        let yb: Vec<u8> = rows.iter().map(|&r| labels[r]).collect();
        let (l, grads) = reference::loss_and_grads(sizes, &round(&w), &xb, &yb, batch);
        assert!(
            (got - l).abs() < 1e-2 * l.max(1.0),
            "{acc:?} {sizes:?} batch {batch} step {k}: loss {got} vs {l}"
        );
        for i in 0..w.len() {
            v[i] = step.momentum * v[i] + grads[i];
            w[i] -= step.lr * v[i];
        }
    }
    let (offs, _) = param_layout(sizes);
    let mut worst_all = 0.0f32;
    for (l, s) in sizes.windows(2).enumerate() {
        for (name, off, len) in [
            ("weight", offs[l].0, s[0] * s[1]),
            ("bias", offs[l].1, s[1]),
        ] {
            let delta = |p: &[f32], k: usize| p[off + k] - init[off + k];
            let scale = (0..len).fold(0.0f32, |a, k| a.max(delta(&w, k).abs()));
            assert!(scale > 0.0);
            let (worst, k) = (0..len)
                .map(|k| ((delta(&got, k) - delta(&w, k)).abs() / scale, k))
                .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
            lines.push(format!(
                "{acc:?} {sizes:?} batch {batch} layer {l} {name}: worst {worst:.4} of the largest change at [{k}]"
            ));
            worst_all = worst_all.max(worst);
        }
    }
    (got, worst_all, lines)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn phased_steps_match_cpu_reference() {
    phased_steps_against_cpu(&Gpu::new(0).expect("this test needs a CUDA GPU"));
}

/// Turing's path: register-staged m16n8k8 tiles.
#[test]
#[ignore = "needs a CUDA GPU"]
fn phased_steps_match_cpu_reference_on_sm75_ptx() {
    if let Some(g) = open_with_ptx(Some(75)) {
        phased_steps_against_cpu(&g);
    }
}

/// Two hidden layers take the phased kernel by default, and learn MNIST in one epoch as the
/// layered step does: the two engines compute the same step, so their accuracies agree.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_hidden_layers_train_by_the_phased_kernel() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let ds = mnist();
    let o = Options {
        hidden: vec![256, 128],
        ..one_epoch()
    };
    let first = header(&g, &o, &ds).unwrap();
    assert!(first.contains("phased kernel ("), "{first}");
    assert!(first.contains("7 phases a step"), "{first}");
    let phased = train(&g, &o, &ds).unwrap();
    let layered = train(
        &g,
        &Options {
            layered: true,
            ..o.clone()
        },
        &ds,
    )
    .unwrap();
    let (a, b) = (phased[0].test_accuracy, layered[0].test_accuracy);
    assert!(a > 0.94, "phased: {a}");
    assert!((a - b).abs() < 0.005, "phased {a} vs layered {b}");
    // A forced phased run of a model the persistent kernel takes says so, and no reason.
    let forced = Options {
        phased: true,
        ..one_epoch()
    };
    let first = header(&g, &forced, &ds).unwrap();
    assert!(
        first.contains("phased kernel (") && !first.contains("does not apply"),
        "{first}"
    );
}
