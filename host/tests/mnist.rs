//! MLP training on the GPU against the CPU reference (GPU tests).
mod common;

use common::{mnist, one_epoch};
use cudarc::driver::LaunchConfig;
use gpu::gemm::{Accum, Sgd};
use gpu::params::{BiasGrad, GatherBatch, PersistentShuffle};
use gpu::persistent::{VARIANTS, label_offset, most_batch, row_stride};
use half::f16;
use host::cuda::{Arena, Gpu, GpuOptions, ParamBlock, PushKernelArg, dptr};
use host::kernels;
use host::mlp::model::Mlp;
use host::mlp::params::{Init, init_params, param_layout};
use host::mlp::persistent::{self, Feed, Persistent, Support};
use host::mlp::{Dataset, Options, StepShape, header, reference, train};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Whether the persistent kernel trains the run of `o` on MNIST here, by the check the
/// training loop makes.
fn persistent_support(g: &Gpu, o: &Options, ds: &Dataset) -> Support {
    let sizes = [ds.train.dim, o.hidden[0], ds.classes];
    let steps = ds.train.count / o.batch;
    persistent::support(g, &sizes, o.batch, steps, o.accum).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_step_gradients_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(5);
    // 19 rows: one block of the loss; 600: three, the last part-filled, whose sums the last
    // block to finish adds.
    for (acc, rows) in [(Accum::F16, 19), (Accum::F32, 19), (Accum::F16, 600)] {
        for sizes in [vec![40usize, 24, 10], vec![30, 33, 17, 10]] {
            let one_step = StepShape::new(rows, rows, 1);
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
            Mlp::new(&g, &mut measure, &sizes, &one_step, rows, acc, None).unwrap();
            let mut arena = Arena::new(&g, measure.used()).unwrap();
            let m = Mlp::new(&g, &mut arena, &sizes, &one_step, rows, acc, None).unwrap();
            m.set_params(&params).unwrap();
            let (dx, dy) = (g.upload(&x).unwrap(), g.upload(&labels).unwrap());
            // Slot 2 of three, read from the step counter, which the loss advances.
            let (loss, correct) = (g.zeros::<f32>(3).unwrap(), g.zeros::<f32>(3).unwrap());
            let step = g.upload(&[2u32]).unwrap();
            let s = &g.stream;
            m.forward(dptr(&dx, s), rows).unwrap();
            let sums = (dptr(&loss, s), dptr(&correct, s));
            // The loss into the slot `step` holds, with the logits' gradient.
            let loss_at = |step: u64| {
                let scale = Some(1.0 / rows as f32);
                m.loss(dptr(&dy, s), rows, scale, sums, step, None).unwrap()
            };
            loss_at(dptr(&step, s));
            m.backward(dptr(&dx, s), rows, None).unwrap();
            // Again: the same loss and logits' bias gradient to the bit, whichever block ends
            // last.
            let first = (g.download(&loss).unwrap(), g.download_buf(m.g16).unwrap());
            let again = g.upload(&[2u32]).unwrap();
            loss_at(dptr(&again, s));
            assert_eq!(g.download(&loss).unwrap(), first.0, "{sizes:?} {rows} rows");
            assert_eq!(
                g.download_buf(m.g16).unwrap(),
                first.1,
                "{sizes:?} {rows} rows"
            );
            let got: Vec<f32> = g
                .download_buf(m.g16)
                .unwrap()
                .iter()
                .map(|v| v.to_f32())
                .collect();
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let (want_loss, want) = reference::loss_and_grads(&sizes, &params, &xf, &labels, rows);
            assert_eq!(g.download(&step).unwrap(), [3]);
            let got_loss = g.download(&loss).unwrap()[2];
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

/// The persistent kernel's shuffle against the CPU: row `i` holds example `permute(i)`'s
/// features, its label as a u32 and zeros to the row's stride. MNIST's input width and a small
/// one, row counts that fill no whole block of eight warps, and grids of a warp per row and of
/// three blocks (the grid-stride loop the training loop's smaller grids take).
/// The layered step's batch: row `r` of a step is example `permute(step·step_rows + first + r)`,
/// features and label. MNIST's rows and short odd ones, a replica's share of a step (`first`
/// past 0), features not a multiple of a block's threads.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gathered_batches_match_cpu() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(12);
    for (n, dim, rows, step_rows, first, step, seed) in [
        (1000usize, 784usize, 128usize, 128u32, 0u32, 3u32, 5u32),
        (37, 5, 9, 12, 3, 2, 6),
        (60, 784, 13, 26, 13, 1, 7),
    ] {
        let x: Vec<u16> = (0..n * dim).map(|_| rng.random()).collect();
        let y: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let (dx, dy) = (g.upload(&x).unwrap(), g.upload(&y).unwrap());
        // Filled with a pattern the kernel must overwrite.
        let xb = g.upload(&vec![0xa5a5u16; rows * dim]).unwrap();
        let yb = g.upload(&vec![0xa5u8; rows]).unwrap();
        let (ds, dk) = (g.upload(&[step]).unwrap(), g.upload(&[seed]).unwrap());
        let s = &g.stream;
        let p = GatherBatch {
            x: dptr(&dx, s),
            y: dptr(&dy, s),
            n: n as u32,
            dim: dim as u32,
            xb: dptr(&xb, s),
            yb: dptr(&yb, s),
            rows: rows as u32,
            step_rows,
            first,
            step: dptr(&ds, s),
            seed: dptr(&dk, s),
        };
        host::mlp::launchers::gather_batch(&g, p).unwrap();
        let (gx, gy) = (g.download(&xb).unwrap(), g.download(&yb).unwrap());
        for r in 0..rows {
            let src =
                gpu::shuffle::permute(step * step_rows + first + r as u32, n as u32, seed) as usize;
            assert_eq!(
                &gx[r * dim..(r + 1) * dim],
                &x[src * dim..(src + 1) * dim],
                "{dim} features, row {r}"
            );
            assert_eq!(gy[r], y[src], "{dim} features, row {r}'s label");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn persistent_shuffle_matches_cpu() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let f = g.function(kernels::PERSISTENT_SHUFFLE).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    for (n, dim, count, seed) in [(1000usize, 784usize, 996usize, 5u32), (37, 48, 30, 6)] {
        let x: Vec<u16> = (0..n * dim).map(|_| rng.random()).collect();
        let y: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let stride = row_stride(dim);
        let (dx, dy) = (g.upload(&x).unwrap(), g.upload(&y).unwrap());
        let s = &g.stream;
        for blocks in [count.div_ceil(8) as u32, 3] {
            // Filled with a pattern the kernel must overwrite everywhere, padding included.
            let out = g.upload(&vec![0xa5u8; count * stride]).unwrap();
            let p = ParamBlock(PersistentShuffle {
                x: dptr(&dx, s),
                y: dptr(&dy, s),
                out: dptr(&out, s),
                n: n as u32,
                dim: dim as u32,
                seed,
                count: count as u32,
            });
            let mut l = s.launch_builder(&f);
            l.arg(&p);
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            unsafe { l.launch(cfg) }.unwrap();
            let got = g.download(&out).unwrap();
            for i in 0..count {
                let src = gpu::shuffle::permute(i as u32, n as u32, seed) as usize;
                let mut want = vec![0u8; stride];
                for (k, v) in x[src * dim..(src + 1) * dim].iter().enumerate() {
                    want[2 * k..2 * k + 2].copy_from_slice(&v.to_le_bytes());
                }
                let at = label_offset(dim);
                want[at..at + 4].copy_from_slice(&(y[src] as u32).to_le_bytes());
                assert!(
                    got[i * stride..(i + 1) * stride] == want[..],
                    "n {n} dim {dim}, {blocks} blocks: row {i} (example {src}) differs"
                );
            }
        }
    }
}

/// Several steps of the persistent kernel against the CPU reference stepped by hand: same
/// batches (the GPU's shuffle), fp16 operands, fp32 SGD with momentum. Batches of 120 and 8 rows
/// (not multiples of the 16-row tile), 3 and 4 slices of 8 hidden units, input widths of 48
/// (fewer dW1 tiles than warps) and MNIST's 784 (49 tiles: warp 0 takes a seventh, the others
/// six), with random inputs, so that every input tile carries signal (MNIST's last tile is
/// nearly always blank). The way of feeding the batch this GPU takes for them (on Hopper the
/// whole batch in shared memory).
#[test]
#[ignore = "needs a CUDA GPU"]
fn persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    persistent_steps_against_cpu(&g, None, &SIZES, &BATCHES);
}

/// [`persistent_steps_match_cpu_reference`] with slices of 16 and 32 hidden units (Hopper PTX,
/// fp16 accumulators, the partial logits added by bulk reductions): two slices (one cluster of
/// two pairs) and three (clusters of one pair), at input widths of 49 and 3 dW1 tiles. At
/// batch 8 the second block of each pair has no rows but still updates its half of the slice's
/// W1 and sends it. (MNIST's width is checked at batch 120 only: at batch 8 its 64-unit model
/// flips a ReLU mask against the CPU by fp16 rounding, with slices of 8 units exactly as with
/// these.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn wide_persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    for variant in VARIANTS.iter().filter(|v| v.n > 1 && !v.offchip()) {
        let feed = Feed { variant, stages: 0 };
        if runs(&g, feed) {
            let units = feed.units();
            persistent_steps_against_cpu(&g, Some(feed), &[[784, 2 * units, 10]], &[120]);
            persistent_steps_against_cpu(&g, Some(feed), &[[48, 3 * units, 10]], &BATCHES);
        }
    }
}

/// [`persistent_steps_match_cpu_reference`] for the offchip kernel (Hopper PTX, fp16
/// accumulators), W1's master values and momentum in global memory: one block per slice of 32
/// hidden units holds the whole batch, streamed through two or four stages; two and three
/// slices, at input widths of 49 and 3 dW1 tiles. At batch 8 only the block's first warp has
/// rows.
#[test]
#[ignore = "needs a CUDA GPU"]
fn offchip_persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    for stages in [2, 4] {
        let feed = Feed::ring("offchip", stages);
        if runs(&g, feed) {
            let units = feed.units();
            persistent_steps_against_cpu(&g, Some(feed), &[[784, 2 * units, 10]], &[120]);
            persistent_steps_against_cpu(&g, Some(feed), &[[48, 3 * units, 10]], &BATCHES);
        }
    }
}

/// [`persistent_steps_match_cpu_reference`] with 32 slices of 8 hidden units (256): from 24 on,
/// the two-buffer kernel of Hopper PTX adds the partial logits by bulk reductions (fp16
/// accumulators; fp32 ones still add by `red`). MNIST's width at batch 120 only, as for the wide
/// kernels.
#[test]
#[ignore = "needs a CUDA GPU"]
fn many_slices_persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    persistent_steps_against_cpu(&g, None, &[[784, 256, 10]], &[120]);
    persistent_steps_against_cpu(&g, None, &[[48, 256, 10]], &BATCHES);
}

/// [`persistent_steps_match_cpu_reference`] for the streamed kernels, as older GPUs run them:
/// the `cp.async` rings of the newest embedded PTX this GPU runs (on Hopper with its cluster
/// exchange) and of sm_80 PTX (the exchange through global memory) through 2, 4 and 6 stages,
/// and Turing's (sm_75 PTX: the chunks loaded through registers, two stages). Input widths of
/// one partial chunk (48) and of six whole chunks and a partial one (784).
#[test]
#[ignore = "needs a CUDA GPU"]
fn streamed_persistent_steps_match_cpu_reference() {
    for ptx in [None, Some(80), Some(75)] {
        let Some(g) = open_with_ptx(ptx) else {
            continue;
        };
        for (name, stages) in [2, 4, 6]
            .map(|s| ("streamed", s))
            .into_iter()
            .chain([("streamed_regs", 2)])
        {
            let feed = Feed::ring(name, stages);
            if runs(&g, feed) {
                persistent_steps_against_cpu(&g, Some(feed), &SIZES, &BATCHES);
            }
        }
    }
    let Some(g) = open_with_ptx(Some(75)) else {
        return;
    };
    // Its registers hold one chunk ahead: more stages are refused, as are the two-buffer
    // kernel and the one-buffer kernel of half the batch, which need sm_80.
    let mut arena = Arena::measuring();
    for feed in [
        Feed::ring("streamed_regs", 4),
        Feed::of("whole"),
        Feed::of("single"),
    ] {
        let p = Persistent::new(&g, &mut arena, &[48, 24, 10], (8, 4), Accum::F16, feed);
        assert!(p.is_err(), "{feed:?}");
    }
}

/// [`persistent_steps_match_cpu_reference`] with one whole-batch buffer, refilled after dW1:
/// of half the batch, as an A100 runs it, and of a quarter (four blocks a slice, exchanging
/// through global memory, W1's fp16 copy in registers), as 99 KiB cards and Turing do; by the
/// bulk copy on Hopper PTX, by every thread's `cp.async` on sm_80 PTX, through registers on
/// sm_75 PTX (a quarter only). A block's part is rounded up to whole 16-row tiles: at batch
/// 120 the quarters hold 32, 32, 32 and 24 rows (a partial second tile), at batch 8 the first
/// holds all 8 and three hold none.
/// Hopper's batches past 128: four parts of up to 64 rows, each in two buffers, at 256 and at
/// 200 (the last part short).
#[test]
#[ignore = "needs a CUDA GPU"]
fn quartered_persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let feed = Feed::of("quartered");
    if runs(&g, feed) {
        persistent_steps_against_cpu(&g, Some(feed), &SIZES, &[256, 200]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn single_buffer_persistent_steps_match_cpu_reference() {
    for ptx in [None, Some(80), Some(75)] {
        let Some(g) = open_with_ptx(ptx) else {
            continue;
        };
        for feed in ["single", "quarters", "quarters_regs"].map(Feed::of) {
            if runs(&g, feed) {
                persistent_steps_against_cpu(&g, Some(feed), &SIZES, &BATCHES);
            }
        }
    }
}

/// [`persistent_steps_match_cpu_reference`] with two hidden layers (fp16 accumulators), on
/// the newest PTX this GPU runs (on Hopper the pairs are clusters) and on sm_80 PTX (the
/// exchange through global memory): the second as wide as the first (128: MNIST's, 16
/// slices) and narrower (the slices past its n-tiles are shadows), of a width that ends in
/// half a k-step (24, 40, 136), at input widths of 3 and 49 dW1 tiles; H1 and dZ2 as flagged
/// lines (a first layer of up to 128 units) and as counted planes (144).
#[test]
#[ignore = "needs a CUDA GPU"]
fn deep_persistent_steps_match_cpu_reference() {
    let sizes = [
        [48, 32, 24, 10],
        [784, 128, 128, 10],
        [784, 48, 40, 10],
        [784, 144, 136, 10],
    ];
    let feed = Feed::of("deep");
    for g in newest_and_sm80_with(feed) {
        steps_against_cpu(&g, Some(feed), &sizes, &BATCHES, Draw::Grid);
        persistent_steps_against_cpu(&g, Some(feed), &sizes, &BATCHES);
        for batch in BATCHES {
            steps_repeat_across_launches(&g, feed, &[784, 256, 128, 10], batch);
        }
        // What it does not take is refused with the reason.
        for (sizes, batch, why) in [
            (vec![48, 32, 40, 10], 64, "wider than the one before"),
            (vec![48, 40, 40, 10], 64, "not a multiple of 16"),
            (vec![48, 32, 32, 10], 300, "above 256"),
            (vec![784, 272, 128, 10], 256, "above 256, the widest input"),
        ] {
            match persistent::support(&g, &sizes, batch, 4, Accum::F16).unwrap() {
                Support::No(reason) => assert!(reason.contains(why), "{sizes:?}: {reason}"),
                Support::Yes(feed) => panic!("{sizes:?} batch {batch} taken by {feed:?}"),
            }
        }
    }
}

/// [`deep_persistent_steps_match_cpu_reference`] with the batch in four parts, whose shares
/// meet through global memory: batches past 128 (256, and 200 with the last part short),
/// which the host gives this row, and 120 and 8 rows in quarters (32 rows a block, and one
/// block with all 8), on the newest PTX and on sm_80 PTX. One step on integer data
/// and four steps across launches, as for three layers: four steps of random data, with four
/// parts' fp16 shares summed, move some weights 4% of the largest change away from the CPU's
/// (784-128-128-10 at batch 256), as far as a flipped ReLU does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn quartered_deep_persistent_steps_match_cpu_reference() {
    let sizes = [[48, 32, 24, 10], [784, 128, 128, 10], [784, 144, 136, 10]];
    let feed = Feed::of("deep_quartered");
    for g in newest_and_sm80_with(feed) {
        let batches = [256, 200, 120, 8];
        steps_against_cpu(&g, Some(feed), &sizes, &batches, Draw::Grid);
        for batch in batches {
            steps_repeat_across_launches(&g, feed, &[784, 128, 128, 10], batch);
        }
    }
}

/// The layer engine at three hidden layers (Hopper PTX, fp16 accumulators) against
/// the CPU reference, one step on integer data ([`Draw::Grid`]: through this many layers of
/// fp16 accumulators, steps of random data are as far from the CPU's as the ReLUs they flip),
/// and four steps across launches, bit for bit: layers of equal width (MNIST's
/// 784-256-256-256, whose plan nearly fills a block's shared memory) and narrowing ones (the
/// slices past a layer's n-tiles are its shadows), the last of half a k-step past a whole one
/// (24, 40); planes flagged (a first layer of up to 128 units) and counted (144).
#[test]
#[ignore = "needs a CUDA GPU"]
fn three_layer_persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let sizes = [
        [48, 32, 32, 24, 10],
        [784, 256, 256, 256, 10],
        [784, 144, 96, 40, 10],
    ];
    if engine_steps_match(&g, Feed::of("deep3"), &sizes) {
        refused_models_say_why(&g);
    }
}

/// [`three_layer_persistent_steps_match_cpu_reference`] at four hidden layers, whose planes
/// are all flagged (its later layers take inputs of up to 128 units).
#[test]
#[ignore = "needs a CUDA GPU"]
fn four_layer_persistent_steps_match_cpu_reference() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let sizes = [
        [48, 32, 32, 32, 24, 10],
        [784, 128, 112, 96, 40, 10],
        [784, 128, 128, 128, 128, 10],
    ];
    engine_steps_match(&g, Feed::of("deep4"), &sizes);
}

/// One step of the layer engine's `feed` on integer data against the CPU reference, and four
/// steps bit-identical across launches, at each of `sizes` and [`BATCHES`]; false, having
/// said why, where the PTX has no such kernel.
fn engine_steps_match<const L: usize>(g: &Gpu, feed: Feed, sizes: &[[usize; L]]) -> bool {
    if !feed.variant.exists_in(g.ptx.target()) {
        eprintln!("skipped: {feed:?} is not in {}", g.describe_ptx());
        return false;
    }
    steps_against_cpu(g, Some(feed), sizes, &BATCHES, Draw::Grid);
    for s in sizes {
        for batch in BATCHES {
            steps_repeat_across_launches(g, feed, s, batch);
        }
    }
    true
}

/// The models the layer engine does not take are refused with the reason.
fn refused_models_say_why(g: &Gpu) {
    for (sizes, why) in [
        (vec![784, 512, 256, 128, 10], "above 256"),
        (vec![784, 256, 256, 256, 256, 10], "above 128"),
        (vec![784, 640, 640, 10], "shared memory"),
        (vec![784, 64, 64, 64, 64, 64, 10], "one to 4 hidden layers"),
        (vec![784, 64, 80, 64, 10], "wider than the one before"),
    ] {
        match persistent::support(g, &sizes, 128, 4, Accum::F16).unwrap() {
            Support::No(reason) => assert!(reason.contains(why), "{sizes:?}: {reason}"),
            Support::Yes(feed) => panic!("{sizes:?} taken by {feed:?}"),
        }
    }
}

/// GPU 0 with the newest PTX it runs, and with sm_80 PTX where that is other PTX, each where
/// it exports `feed` (the others said to be skipped).
fn newest_and_sm80_with(feed: Feed) -> Vec<Gpu> {
    let exports = |g: &Gpu| {
        let has = feed.variant.exists_in(g.ptx.target());
        if !has {
            eprintln!("skipped: {feed:?} is not in {}", g.describe_ptx());
        }
        has
    };
    let mut gpus: Vec<Gpu> = [None, Some(80)]
        .into_iter()
        .filter_map(open_with_ptx)
        .filter(exports)
        .collect();
    gpus.dedup_by_key(|g| g.ptx.target());
    gpus
}

/// GPU 0 with embedded PTX `ptx` (by default the newest it runs); `None`, having said why the
/// check is skipped, where the build embeds no such PTX or the GPU is older than it.
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

/// Whether `g` runs `feed` for the CPU-reference sizes (MNIST's width at batch 120, the
/// largest); if not, says it is skipped.
fn runs(g: &Gpu, feed: Feed) -> bool {
    let ok = feed.runs_with(g.ptx.target(), g.max_smem_optin(), 120, 784);
    if !ok {
        eprintln!(
            "skipped in part: {feed:?} does not run on {}",
            g.describe_ptx()
        );
    }
    ok
}

/// The CPU-reference sizes of slices of 8 units: three slices of hidden units (on Hopper, with
/// the batch in halves, clusters of one slice) and four (of two), at input widths of 3 and of
/// 49 dW1 tiles.
const SIZES: [[usize; 3]; 3] = [[48, 24, 10], [48, 32, 10], [784, 32, 10]];
/// Batches of the CPU-reference checks: one that every block has rows of, one that only the
/// first block of a slice has.
const BATCHES: [usize; 2] = [120, 8];

/// How a CPU-reference check draws its examples and initial weights, and how many steps it
/// takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Draw {
    /// Inputs uniform in [-1, 1), Kaiming weights; four steps in two launches.
    Random,
    /// Inputs 0 or 1, weights -1, 0 or 1 (about six nonzero a unit), biases 0; one step. Every
    /// sum of the forward is then a small integer, which fp16 accumulators hold exactly, so no
    /// pre-activation lands on the other side of a ReLU from the CPU's. Through several layers
    /// that matters: one flipped ReLU moves a whole row of every gradient below it, by a
    /// `1/batch` share, and fp16 accumulators flip a few among thousands each step.
    Grid,
}

impl Draw {
    fn steps(self) -> usize {
        match self {
            Draw::Random => 4,
            Draw::Grid => 1,
        }
    }
}

/// Examples (`n` of `dim` inputs) and the initial parameters of `sizes` drawn as `draw`.
fn draw_case(rng: &mut StdRng, draw: Draw, sizes: &[usize], n: usize) -> (Vec<f16>, Vec<f32>) {
    let x = (0..n * sizes[0]).map(|_| match draw {
        Draw::Random => rng.random_range(-1.0..1.0),
        Draw::Grid => f32::from(rng.random_bool(0.5)),
    });
    let x = x.map(f16::from_f32).collect();
    let mut init = init_params(sizes, Init::Kaiming, 9);
    if draw == Draw::Grid {
        let (offs, _) = param_layout(sizes);
        for (l, s) in sizes.windows(2).enumerate() {
            let nonzero = (6.0 / s[0] as f64).min(1.0);
            for k in 0..s[0] * s[1] {
                let sign = if rng.random_bool(0.5) { 1.0 } else { -1.0 };
                init[offs[l].0 + k] = if rng.random_bool(nonzero) { sign } else { 0.0 };
            }
            init[offs[l].1..offs[l].1 + s[1]].fill(0.0);
        }
    }
    (x, init)
}

/// Steps of the persistent kernel on `g` against the CPU reference, drawn as `draw`, for each
/// of `sizes` and `batches` and each accumulator the feed has a kernel for, the batch fed as
/// `feed` (by default as `g` chooses).
fn persistent_steps_against_cpu<const L: usize>(
    g: &Gpu,
    feed: Option<Feed>,
    sizes: &[[usize; L]],
    batches: &[usize],
) {
    steps_against_cpu(g, feed, sizes, batches, Draw::Random);
}

fn steps_against_cpu<const L: usize>(
    g: &Gpu,
    feed: Option<Feed>,
    sizes: &[[usize; L]],
    batches: &[usize],
    draw: Draw,
) {
    let mut rng = StdRng::seed_from_u64(7);
    let (steps, seed, lr, mu) = (draw.steps(), 77u32, 0.05f32, 0.9f32);
    // Examples: 500, or an epoch of the largest batch.
    let n = batches.iter().map(|b| b * steps).fold(500, usize::max);
    let (mut ok, mut report) = (true, Vec::new());
    for &sizes in sizes {
        let (x, init) = draw_case(&mut rng, draw, &sizes, n);
        let labels: Vec<u8> = (0..n).map(|_| rng.random_range(0..10)).collect();
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        let round =
            |p: &[f32]| -> Vec<f32> { p.iter().map(|&v| f16::from_f32(v).to_f32()).collect() };
        for acc in [Accum::F16, Accum::F32] {
            for &batch in batches {
                let feed = match persistent::support(g, &sizes, batch, steps, acc).unwrap() {
                    Support::Yes(chosen) => feed.unwrap_or(chosen),
                    // The feed asked for has no such kernel (the two-layer kernel's fp32).
                    Support::No(_) if feed.is_some_and(|f| !f.variant.has(acc)) => continue,
                    Support::No(why) => panic!("{sizes:?} batch {batch} is refused: {why}"),
                };
                if !(feed.variant.exists_in(g.ptx.target()) && feed.variant.has(acc)) {
                    continue;
                }
                let carve = |arena: &mut Arena| {
                    let shape = StepShape {
                        batch,
                        rows: batch,
                        steps,
                    };
                    let m = Mlp::new(g, arena, &sizes, &shape, batch, acc, None).unwrap();
                    let p = Persistent::new(g, arena, &sizes, (batch, steps), acc, feed).unwrap();
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
                // Shuffled on a stream of its own into the second buffer, as the training loop
                // does for each next epoch.
                let mark = p.mark_shuffle_ahead(g).unwrap();
                p.shuffle(g, (dptr(&dx, st), dptr(&dy, st), n), seed, 1, Some(mark))
                    .unwrap();
                // Two launches (steps 0..1, then 1..4): state must carry over between them.
                for (step0, count) in [(0, 1), (1, steps - 1)].into_iter().filter(|l| l.1 > 0) {
                    p.run(
                        g,
                        &m,
                        1,
                        (dptr(&loss, st), dptr(&correct, st)),
                        (step0, count),
                        lr,
                        mu,
                    )
                    .unwrap();
                }
                let got = m.params().unwrap();
                let got_loss = g.download(&loss).unwrap();
                // The fp16 copy that evaluation and the layered step read: the master values
                // rounded, as each kernel writes it back at the end of its launch.
                let half = g.download_buf(m.w16).unwrap();
                let stale = (0..got.len()).find(|&k| half[k] != f16::from_f32(got[k]));
                assert_eq!(
                    stale, None,
                    "{acc:?} {sizes:?} batch {batch}: fp16 copy ≠ master"
                );
                // A set smaller than the epoch, or steps past it, are refused, never launched.
                let ptrs = (dptr(&dx, st), dptr(&dy, st));
                assert!(
                    p.shuffle(g, (ptrs.0, ptrs.1, steps * batch - 1), seed, 0, None)
                        .is_err()
                );
                let sums = (dptr(&loss, st), dptr(&correct, st));
                assert!(p.run(g, &m, 1, sums, (steps - 1, 2), lr, mu).is_err());

                let (mut w, mut v) = (init.clone(), vec![0.0f32; init.len()]);
                for (step, &got) in got_loss.iter().enumerate() {
                    let rows: Vec<usize> = (0..batch)
                        .map(|r| {
                            gpu::shuffle::permute((step * batch + r) as u32, n as u32, seed)
                                as usize
                        })
                        .collect();
                    let xb: Vec<f32> = rows
                        .iter()
                        .flat_map(|&r| xf[r * sizes[0]..(r + 1) * sizes[0]].to_vec())
                        .collect();
                    let yb: Vec<u8> = rows.iter().map(|&r| labels[r]).collect();
                    let (l, grads) = reference::loss_and_grads(&sizes, &round(&w), &xb, &yb, batch);
                    let close = (got - l).abs() < 1e-2 * l.max(1.0);
                    if !close {
                        report.push(format!(
                            "{acc:?} {sizes:?} batch {batch} step {step}: loss {got} vs {l}"
                        ));
                    }
                    ok &= close;
                    for k in 0..w.len() {
                        v[k] = mu * v[k] + grads[k];
                        w[k] -= lr * v[k];
                    }
                }
                // Compare what training changed, relative to the largest change of each tensor.
                let (offs, _) = param_layout(&sizes);
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
                        let over = (0..len)
                            .filter(|&k| (delta(&got, k) - delta(&w, k)).abs() > 0.02 * scale)
                            .count();
                        report.push(format!(
                            "{acc:?} {sizes:?} batch {batch} layer {l} {name}: worst {worst:.4} of the largest change at [{k}] (moved {} vs {}); {over} of {len} off by over 2%",
                            delta(&got, k),
                            delta(&w, k)
                        ));
                        // fp32 accumulation matches to rounding, but a pre-activation within
                        // rounding of zero can still fall on the other side of the ReLU: the
                        // shares sum in another order than the CPU's (two parts, or four), and
                        // one row's term in one unit's gradient, ~1/batch of it, moves that
                        // unit's weights by up to ~2% of the largest change (seen with the
                        // batch in quarters). fp16 accumulation moves pre-activations by ~1e-3,
                        // enough to flip a few ReLU masks in four steps; on sm_75 each k = 16
                        // step is two m16n8k8, twice the fp16 roundings.
                        // On the grid only the backward's fp16 roundings remain.
                        ok &= worst
                            <= match (draw, acc) {
                                (Draw::Grid, _) => 2e-2,
                                (_, Accum::F32) => 2e-2,
                                (_, Accum::F16) if g.ptx.sm < 80 => 0.15,
                                (_, Accum::F16) => 0.1,
                            };
                    }
                }
            }
        }
    }
    assert!(
        ok,
        "persistent kernel ({}, {feed:?}) vs CPU reference:\n{}",
        g.describe_ptx(),
        report.join("\n")
    );
    // What the kernel does not cover is refused with a reason, never launched.
    for (sizes, batch) in [
        (vec![48, 24, 24, 10], 64),
        (vec![48, 20, 10], 64),
        (vec![40, 24, 10], 64),
        (vec![48, 24, 10], most_batch(g.ptx.target()) + 1),
    ] {
        assert!(
            matches!(
                persistent::support(g, &sizes, batch, 4, Accum::F16).unwrap(),
                Support::No(_)
            ),
            "{sizes:?} batch {batch}"
        );
    }
}

/// Four steps of `feed` on `g` in one launch, in two (one, then three) and in four give the
/// same parameters and losses bit for bit: a step later in a launch computes what the first
/// step of a launch does from the same state (its buffers, flags and copies alternate by step
/// within a launch, and a launch starts them afresh).
fn steps_repeat_across_launches(g: &Gpu, feed: Feed, sizes: &[usize], batch: usize) {
    let (steps, seed, lr, mu) = (4, 77u32, 0.05f32, 0.9f32);
    let mut rng = StdRng::seed_from_u64(11);
    let n = (batch * steps).max(500);
    let (x, init) = draw_case(&mut rng, Draw::Random, sizes, n);
    let labels: Vec<u8> = (0..n).map(|_| rng.random_range(0..10)).collect();
    let acc = Accum::F16;
    let carve = |arena: &mut Arena| {
        let shape = StepShape {
            batch,
            rows: batch,
            steps,
        };
        let m = Mlp::new(g, arena, sizes, &shape, batch, acc, None).unwrap();
        let p = Persistent::new(g, arena, sizes, (batch, steps), acc, feed).unwrap();
        (m, p)
    };
    let mut measure = Arena::measuring();
    carve(&mut measure);
    let mut arena = Arena::new(g, measure.used()).unwrap();
    let (m, p) = carve(&mut arena);
    let (dx, dy) = (g.upload(&x).unwrap(), g.upload(&labels).unwrap());
    let (loss, correct) = (
        g.zeros::<f32>(steps).unwrap(),
        g.zeros::<f32>(steps).unwrap(),
    );
    let st = &g.stream;
    p.shuffle(g, (dptr(&dx, st), dptr(&dy, st), n), seed, 0, None)
        .unwrap();
    let sums = (dptr(&loss, st), dptr(&correct, st));
    let mut runs = Vec::new();
    for launches in [
        &[(0, 4)][..],
        &[(0, 1), (1, 3)],
        &[(0, 1), (1, 1), (2, 1), (3, 1)],
    ] {
        m.set_params(&init).unwrap();
        for &(step0, count) in launches {
            p.run(g, &m, 0, sums, (step0, count), lr, mu).unwrap();
        }
        let bits = |v: Vec<f32>| -> Vec<u32> { v.iter().map(|x| x.to_bits()).collect() };
        runs.push((bits(m.params().unwrap()), bits(g.download(&loss).unwrap())));
    }
    for (i, run) in runs.iter().enumerate().skip(1) {
        assert!(
            *run == runs[0],
            "{sizes:?} batch {batch}: launches {i} differ from one launch of four steps"
        );
    }
}

/// Epochs after the first train on rows shuffled ahead (on a stream of their own, into the
/// buffer the previous epoch did not read): each step must still get the batch the layered
/// path gathers for it, by the same keyed permutation. The two engines differ only in rounding,
/// so each step's loss is much closer to the layered path's same step than to its neighbour's;
/// a batch off by a step, or an epoch's stale rows, would not be.
#[test]
#[ignore = "needs a CUDA GPU"]
fn persistent_later_epochs_take_the_layered_batches() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let ds = mnist();
    if let Support::No(why) = persistent_support(&g, &one_epoch(), &ds) {
        eprintln!("skipped: the persistent kernel does not train this run on this GPU: {why}");
        return;
    }
    let epochs = 3;
    let layered = train(
        &g,
        &Options {
            epochs,
            layered: true,
            ..one_epoch()
        },
        &ds,
    )
    .unwrap();
    let persistent = train(
        &g,
        &Options {
            epochs,
            ..one_epoch()
        },
        &ds,
    )
    .unwrap();
    for e in 0..epochs {
        let (a, b) = (&layered[e].step_losses, &persistent[e].step_losses);
        assert_eq!(a.len(), b.len());
        let mean_gap = |shift: usize| {
            let n = a.len() - shift;
            (0..n).map(|k| (a[k + shift] - b[k]).abs()).sum::<f32>() / n as f32
        };
        let (same, next) = (mean_gap(0), mean_gap(1));
        assert!(
            same < 0.5 * next,
            "epoch {}: mean loss gap to the layered path's same step {same}, to its next {next}",
            e + 1
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_epoch_learns_and_graph_replay_matches_eager() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let ds = mnist();
    let layered = Options {
        layered: true,
        ..one_epoch()
    };
    let graph = train(&g, &layered, &ds).unwrap();
    let eager = train(
        &g,
        &Options {
            graph: false,
            ..layered
        },
        &ds,
    )
    .unwrap();
    // The default run: the persistent kernel where it applies, else the layered engine.
    let support = persistent_support(&g, &one_epoch(), &ds);
    let first_line = header(&g, &one_epoch(), &ds).unwrap();
    let persistent = train(&g, &one_epoch(), &ds).unwrap();
    for (name, run) in [("layered", &graph), ("persistent", &persistent)] {
        let acc = run[0].test_accuracy;
        assert!(
            acc > 0.93,
            "{name}: one epoch reached only {:.2}% test accuracy",
            100.0 * acc
        );
        assert!(run[0].step_losses.last().unwrap() < &run[0].step_losses[0]);
    }
    assert_eq!(
        graph[0].step_losses, eager[0].step_losses,
        "graph replay and eager launches must compute the same steps"
    );
    let Support::No(why) = support else {
        assert!(first_line.contains("persistent kernel ("), "{first_line}");
        // Same batches, same init: the two paths differ only in rounding.
        let (a, b) = (graph[0].train_loss, persistent[0].train_loss);
        assert!(
            (a - b).abs() < 0.05 * a,
            "mean train loss of the epoch: layered {a}, persistent {b}"
        );
        return;
    };
    // Where the persistent kernel does not apply (an sm_75 build, or too little shared
    // memory), the default run says why and trains on the layered engine: the same steps.
    let said = format!("the persistent kernel does not apply: {why}");
    assert!(first_line.contains(&said), "{first_line}");
    assert_eq!(
        graph[0].step_losses, persistent[0].step_losses,
        "the default run falls back to the layered engine ({why})"
    );
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
            ..one_epoch()
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
            ..one_epoch()
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
        ..one_epoch()
    };
    let ds = host::iris::load(host::iris::CSV, 0).unwrap();
    let r = train(&g, &o, &ds).unwrap();
    let acc = r.last().unwrap().test_accuracy;
    assert!(acc >= 0.93, "Iris test accuracy {:.1}%", 100.0 * acc);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bias_gradients_match_cpu_column_sums() {
    let g = Gpu::new(0).expect("this test needs a CUDA GPU");
    let mut rng = StdRng::seed_from_u64(11);
    let mut uniform =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    // A few columns over many rows; one past a group of columns; a leading dimension that
    // rules out vector loads; several slices of rows, the last partly filled; one row of many
    // columns. Rows are padded past the columns as the model lays them out. Each shape stores
    // the gradient, then takes an SGD step by it.
    for (rows, cols, ld) in [
        (512, 10, 16),
        (19, 257, 264),
        (600, 65, 65),
        (1100, 131, 136),
        (2048, 520, 520),
        (1, 4096, 4096),
    ] {
        let d: Vec<f16> = uniform(rows * ld).into_iter().map(f16::from_f32).collect();
        let (master, velocity) = (uniform(cols), uniform(cols));
        let (dd, db) = (g.upload(&d).unwrap(), g.zeros::<f16>(cols).unwrap());
        let (dm, dv) = (g.upload(&master).unwrap(), g.upload(&velocity).unwrap());
        let (n_partials, n_done) = gpu::bias_grad_scratch(rows, cols);
        let partials = g.zeros::<f32>(n_partials.max(1)).unwrap();
        let done = g.zeros::<u32>(n_done.max(1)).unwrap();
        let s = &g.stream;
        let step = Sgd {
            master: dptr(&dm, s) as *mut f32,
            velocity: dptr(&dv, s) as *mut f32,
            lr: 0.05,
            momentum: 0.9,
        };
        let launch = |sgd| {
            let p = BiasGrad {
                dy: dptr(&dd, s),
                rows: rows as u32,
                cols: cols as u32,
                ld: ld as u32,
                db: dptr(&db, s),
                sgd,
                partials: dptr(&partials, s),
                done: dptr(&done, s),
            };
            host::mlp::launchers::bias_grad(&g, &g.stream, p).unwrap();
            g.download(&db).unwrap()
        };
        let sums = launch(Sgd::NONE);
        // The slices are added in one order, whichever block ends last.
        assert_eq!(
            launch(Sgd::NONE),
            sums,
            "{rows}×{cols} differs between calls"
        );
        let stepped = launch(step);
        let (m1, v1) = (g.download(&dm).unwrap(), g.download(&dv).unwrap());
        for j in 0..cols {
            let want: f32 = (0..rows).map(|i| d[i * ld + j].to_f32()).sum();
            // The gradient stored, and the one the step took.
            let taken = v1[j] - step.momentum * velocity[j];
            for got in [sums[j].to_f32(), taken] {
                assert!(
                    (got - want).abs() <= 1e-3 * want.abs().max(1.0),
                    "{rows}×{cols} column {j}: {got} vs {want}"
                );
            }
            let w1 = master[j] - step.lr * v1[j];
            assert!((m1[j] - w1).abs() <= 1e-6, "{rows}×{cols} column {j}");
            assert_eq!(stepped[j], f16::from_f32(m1[j]), "{rows}×{cols} column {j}");
        }
    }
}
