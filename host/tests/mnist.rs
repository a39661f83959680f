//! MLP training on the GPU against the CPU reference (GPU tests).
use gpu::gemm::Accum;
use half::f16;
use host::cuda::{Arena, Gpu, dptr};
use host::mlp::model::{Init, Mlp, init_params, param_layout};
use host::mlp::{Dataset, Options, reference, train};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn options() -> Options {
    Options {
        hidden: vec![128],
        epochs: 1,
        batch: 128,
        lr: 0.05,
        momentum: 0.9,
        init: Init::Kaiming,
        seed: 3,
        accum: Accum::F16,
        graph: true,
        config: None,
        metrics: None,
        save: None,
        load: None,
        quiet: true,
        print_every: 1,
    }
}

fn mnist() -> Dataset {
    host::mnist::load(&host::mnist::default_dir()).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_step_gradients_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(5);
    for acc in [Accum::F16, Accum::F32] {
        for sizes in [vec![40usize, 24, 10], vec![30, 33, 17, 10]] {
            let rows = 19;
            // fp16-representable parameters and inputs, so both sides see the same operands.
            let params: Vec<f32> = init_params(&sizes, Init::Kaiming, 9)
                .iter()
                .map(|&v| f16::from_f32(v).to_f32())
                .collect();
            let x: Vec<f16> = (0..rows * sizes[0])
                .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
                .collect();
            let labels: Vec<u8> = (0..rows).map(|_| rng.random_range(0..10)).collect();
            let mut measure = Arena::measuring();
            Mlp::new(&g, &mut measure, &sizes, rows, rows, acc, None).unwrap();
            let mut arena = Arena::new(&g, measure.used()).unwrap();
            let m = Mlp::new(&g, &mut arena, &sizes, rows, rows, acc, None).unwrap();
            m.set_params(&params).unwrap();
            let (dx, dy) = (g.upload(&x).unwrap(), g.upload(&labels).unwrap());
            let (loss, correct) = (g.zeros::<f32>(1).unwrap(), g.zeros::<f32>(1).unwrap());
            let s = &g.stream;
            m.forward(dptr(&dx, s), rows).unwrap();
            m.loss(
                dptr(&dy, s),
                rows,
                true,
                dptr(&loss, s),
                dptr(&correct, s),
                0,
            )
            .unwrap();
            m.backward(dptr(&dx, s), rows).unwrap();
            let got: Vec<f32> = g
                .download_buf(m.g16)
                .unwrap()
                .iter()
                .map(|v| v.to_f32())
                .collect();
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let (want_loss, want) = reference::loss_and_grads(&sizes, &params, &xf, &labels, rows);
            let got_loss = g.download(&loss).unwrap()[0];
            assert!(
                (got_loss - want_loss).abs() < 2e-2 * want_loss.abs().max(1.0),
                "loss {got_loss} vs {want_loss}"
            );
            let (offs, _) = param_layout(&sizes);
            for (l, w) in sizes.windows(2).enumerate() {
                for (name, off, len) in [
                    ("weight", offs[l].0, w[0] * w[1]),
                    ("bias", offs[l].1, w[1]),
                ] {
                    let (gg, ww) = (&got[off..off + len], &want[off..off + len]);
                    let scale = ww.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                    assert!(scale > 0.0);
                    for k in 0..len {
                        assert!(
                            (gg[k] - ww[k]).abs() <= 2e-2 * scale,
                            "{acc:?} {sizes:?} layer {l} {name}[{k}]: {} vs {} (scale {scale})",
                            gg[k],
                            ww[k]
                        );
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_epoch_learns_and_graph_replay_matches_eager() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let ds = mnist();
    let graph = train(&g, &options(), &ds).unwrap();
    let eager = train(
        &g,
        &Options {
            graph: false,
            ..options()
        },
        &ds,
    )
    .unwrap();
    let acc = graph[0].test_accuracy;
    assert!(
        acc > 0.93,
        "one epoch reached only {:.2}% test accuracy",
        100.0 * acc
    );
    assert_eq!(
        graph[0].step_losses, eager[0].step_losses,
        "graph replay and eager launches must compute the same steps"
    );
    assert!(graph[0].step_losses.last().unwrap() < &graph[0].step_losses[0]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_input_is_an_error() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let ds = mnist();
    let e = train(
        &g,
        &Options {
            batch: 70000,
            ..options()
        },
        &ds,
    )
    .err()
    .unwrap();
    assert!(
        e.to_string().contains("larger than the training set"),
        "{e}"
    );
    assert!(
        host::mnist::load(std::path::Path::new("no/such/dir"))
            .err()
            .unwrap()
            .to_string()
            .contains("does not exist")
    );
    let e = train(
        &g,
        &Options {
            lr: 1e4,
            epochs: 1,
            ..options()
        },
        &ds,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("diverged"), "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn iris_with_default_flags_reaches_93_percent() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    // The defaults of `host iris`.
    let o = Options {
        hidden: vec![5],
        epochs: 100,
        batch: 16,
        lr: 0.05,
        seed: 0,
        ..options()
    };
    let ds = host::iris::load(host::iris::CSV, 0).unwrap();
    let r = train(&g, &o, &ds).unwrap();
    let acc = r.last().unwrap().test_accuracy;
    assert!(acc >= 0.93, "Iris test accuracy {:.1}%", 100.0 * acc);
}
