//! Linear regression on the GPU against an f64 CPU reference (GPU tests).
use host::cuda::Gpu;
use host::regression::{Options, Regression, Variant, reference};

fn opts(points: usize, epochs: usize, noise: f32) -> Options {
    Options {
        points,
        epochs,
        lr: 0.01,
        seed: 11,
        noise,
        w: 2.0,
        b: 1.0,
        streams: 3,
    }
}

fn gpu() -> Gpu {
    Gpu::new(0).expect("this test needs a CUDA GPU")
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn small_runs_match_the_f64_reference() {
    let g = gpu();
    for (n, epochs) in [(5usize, 30usize), (1003, 50), (100_003, 20)] {
        let reg = Regression::new(&g, &opts(n, epochs, 0.5)).unwrap();
        let x = g.download_buf(reg.x).unwrap();
        let y = g.download_buf(reg.y).unwrap();
        let (xt, yt) = (&x[..reg.n_train], &y[..reg.n_train]);
        let (w, b, hist) = reference(xt, yt, epochs, 0.01);
        for v in Variant::ALL {
            let out = reg.run(v, None).unwrap();
            assert!(
                (out.w as f64 - w).abs() < 1e-5 * w.abs().max(1.0),
                "{v:?} n={n}: w {} vs {w}",
                out.w
            );
            assert!(
                (out.b as f64 - b).abs() < 1e-5 * b.abs().max(1.0),
                "{v:?} n={n}: b {} vs {b}",
                out.b
            );
            for (e, (&got, &want)) in out.history.iter().zip(&hist).enumerate() {
                assert!(
                    (got as f64 - want).abs() < 1e-5 * want.max(1e-3),
                    "{v:?} n={n} epoch {e}: loss {got} vs {want}"
                );
            }
            // Final losses of the final parameters, on both splits.
            let mse = |xs: &[f32], ys: &[f32]| {
                xs.iter()
                    .zip(ys)
                    .map(|(&a, &c)| (out.w as f64 * a as f64 + out.b as f64 - c as f64).powi(2))
                    .sum::<f64>()
                    / xs.len() as f64
            };
            assert!((out.train_loss - mse(xt, yt)).abs() < 1e-4 * out.train_loss.max(1e-3));
            assert!(
                (out.test_loss - mse(&x[reg.n_train..], &y[reg.n_train..])).abs()
                    < 1e-4 * out.test_loss.max(1e-3)
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn variants_agree_exactly_and_runs_repeat() {
    let g = gpu();
    let reg = Regression::new(&g, &opts(300_007, 15, 1.0)).unwrap();
    let outs: Vec<_> = Variant::ALL
        .iter()
        .map(|&v| reg.run(v, None).unwrap())
        .collect();
    for o in &outs[1..] {
        assert_eq!(
            (o.w, o.b, &o.history),
            (outs[0].w, outs[0].b, &outs[0].history),
            "{:?} differs from unfused",
            o.variant
        );
    }
    let again = Regression::new(&g, &opts(300_007, 15, 1.0))
        .unwrap()
        .run(Variant::Fused, None)
        .unwrap();
    assert_eq!((again.w, again.b), (outs[0].w, outs[0].b));
    let other_seed = Regression::new(
        &g,
        &Options {
            seed: 12,
            ..opts(300_007, 15, 1.0)
        },
    )
    .unwrap()
    .run(Variant::Fused, None)
    .unwrap();
    assert_ne!(other_seed.w, outs[0].w);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn generated_data_is_the_line_plus_gaussian_noise() {
    let g = gpu();
    let n = 200_000;
    let reg = Regression::new(&g, &opts(n, 1, 1.0)).unwrap();
    let x = g.download_buf(reg.x).unwrap();
    let y = g.download_buf(reg.y).unwrap();
    // Every evenly spaced x appears exactly once.
    let mut idx: Vec<usize> = x
        .iter()
        .map(|&v| (v as f64 * n as f64 / 10.0).round() as usize)
        .collect();
    idx.sort_unstable();
    assert!(idx.iter().enumerate().all(|(i, &j)| i == j));
    let noise: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| b as f64 - (2.0 * a as f64 + 1.0))
        .collect();
    let mean = noise.iter().sum::<f64>() / n as f64;
    let std = (noise.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
    assert!(
        mean.abs() < 0.01 && (std - 1.0).abs() < 0.01,
        "noise mean {mean}, std {std}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn noiseless_data_recovers_w_and_b() {
    let g = gpu();
    let out = Regression::new(&g, &opts(20_000, 6000, 0.0))
        .unwrap()
        .run(Variant::Graph, None)
        .unwrap();
    assert!(
        (out.w - 2.0).abs() < 1e-4 && (out.b - 1.0).abs() < 1e-3,
        "w {} b {}",
        out.w,
        out.b
    );
    assert!(out.train_loss < 1e-6, "{}", out.train_loss);
}
