//! The smoke kernels against CPU references (GPU tests: `--include-ignored` on a GPU machine).
use cudarc::driver::LaunchConfig;
use half::f16;
use host::cuda::{Gpu, PushKernelArg, grid_1d};
use host::kernels;

fn gpu() -> Gpu {
    Gpu::new(0).expect("these tests need a CUDA GPU")
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn vec_add_matches_cpu() {
    let g = gpu();
    for n in [1usize, 1000, 1 << 20] {
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        let (da, db) = (g.upload(&a).unwrap(), g.upload(&b).unwrap());
        let mut dc = g.upload(&vec![f32::NAN; n]).unwrap();
        let f = g.function(kernels::VEC_ADD).unwrap();
        let n32 = n as u32;
        let mut l = g.stream.launch_builder(&f);
        l.arg(&da).arg(&db).arg(&mut dc).arg(&n32);
        unsafe { l.launch(grid_1d(n.min(4096), 256)) }.unwrap(); // fewer threads than elements: grid-stride
        let c = g.download(&dc).unwrap();
        for i in 0..n {
            assert_eq!(c[i], a[i] + b[i], "element {i} of {n}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn block_sum_matches_cpu() {
    let g = gpu();
    for (n, threads) in [(1usize, 32u32), (1000, 128), (1_000_003, 256), (77, 96)] {
        let x: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let blocks = 64u32;
        let dx = g.upload(&x).unwrap();
        let mut dp = g.zeros::<f32>(blocks as usize).unwrap();
        let f = g.function(kernels::BLOCK_SUM).unwrap();
        let n32 = n as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: threads.div_ceil(32) * 4,
        };
        let mut l = g.stream.launch_builder(&f);
        l.arg(&dx).arg(&mut dp).arg(&n32);
        unsafe { l.launch(cfg) }.unwrap();
        let partial = g.download(&dp).unwrap();
        // Per block, the CPU sum of exactly the elements that block's grid-stride loop visits.
        let stride = (blocks * threads) as usize;
        for (blk, &got) in partial.iter().enumerate() {
            let mut want = 0.0f64;
            for t in 0..threads as usize {
                let mut i = blk * threads as usize + t;
                while i < n {
                    want += x[i] as f64;
                    i += stride;
                }
            }
            assert_eq!(got as f64, want, "block {blk}, n {n}, {threads} threads");
        }
        let total: f64 = partial.iter().map(|&v| v as f64).sum();
        assert_eq!(total, x.iter().map(|&v| v as f64).sum::<f64>());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_tensor_core_tile_matches_cpu() {
    let g = gpu();
    let a: Vec<f16> = (0..16 * 8)
        .map(|i| f16::from_f32(((i * 13) % 17) as f32 / 8.0 - 1.0))
        .collect();
    let b: Vec<f16> = (0..8 * 8)
        .map(|i| f16::from_f32(((i * 7) % 11) as f32 / 4.0 - 1.25))
        .collect();
    let (da, db) = (g.upload(&a).unwrap(), g.upload(&b).unwrap());
    let mut dd = g.upload(&vec![f32::NAN; 16 * 8]).unwrap();
    let f = g.function(kernels::MMA_TILE).unwrap();
    let mut l = g.stream.launch_builder(&f);
    l.arg(&da).arg(&db).arg(&mut dd);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe { l.launch(cfg) }.unwrap();
    let d = g.download(&dd).unwrap();
    for i in 0..16 {
        for j in 0..8 {
            let want: f32 = (0..8)
                .map(|k| a[i * 8 + k].to_f32() * b[k * 8 + j].to_f32())
                .sum();
            // Products of these fp16 values are exact in fp32, and so are sums of 8 of them.
            assert_eq!(d[i * 8 + j], want, "({i}, {j})");
        }
    }
}

/// The module loads (its cubin wherever one for this device is embedded) and holds every kernel
/// the host names for its architecture, the GEMM ladder included.
#[test]
#[ignore = "needs a CUDA GPU"]
fn module_loads_and_has_every_named_kernel() {
    use host::cuda::ModuleForm;
    use host::gemm::Version;
    let g = gpu();
    eprintln!("module: {}", g.module_source());
    if g.ptx.cubin_for(g.sm).is_some() {
        assert_eq!(g.form, ModuleForm::Cubin, "sm_{} has its cubin", g.sm);
        // Asked to, the driver compiles the PTX instead.
        let jit = host::cuda::GpuOptions {
            jit: true,
            ..Default::default()
        };
        let j = host::cuda::Gpu::with_options(0, &jit).unwrap();
        assert_eq!(j.form, ModuleForm::Ptx);
    }
    let mut names: Vec<String> = kernels::NAMED
        .iter()
        .filter(|&&(_, oldest)| oldest <= g.ptx.sm)
        .map(|&(n, _)| n.to_string())
        .collect();
    for v in Version::all_in(g.ptx.target()) {
        names.extend(v.kernels());
    }
    let missing: Vec<_> = names.iter().filter(|n| g.function(n).is_err()).collect();
    let module = g.module_source();
    assert!(missing.is_empty(), "{module} lacks {missing:?}");
}
