//! `host info`: the GPU, the embedded PTX chosen for it, the form loaded and its kernels.
use crate::cuda::Gpu;
use crate::ptx;
use anyhow::Result;

/// Prints the GPU's properties, the embedded PTX and cubins, the PTX chosen and the form
/// loaded, the persistent kernel's variants and the module's kernels.
pub fn print(gpu: &Gpu) -> Result<()> {
    let (free, total) = gpu.mem_info()?;
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    println!("GPU:                {}", gpu.name()?);
    println!("compute capability: sm_{}", gpu.sm);
    println!("multiprocessors:    {}", gpu.sm_count());
    println!(
        "memory:             {:.1} GiB total, {:.1} GiB free",
        gib(total),
        gib(free)
    );
    let smem = gpu.max_smem_optin() / 1024;
    match gpu.options.max_smem {
        Some(_) => println!(
            "shared memory:      {smem} KiB per block (capped by --max-smem-kb; the GPU allows {} KiB with opt-in)",
            gpu.device_max_smem_optin() / 1024
        ),
        None => println!("shared memory:      {smem} KiB per block (opt-in)"),
    }
    let built: Vec<_> = ptx::EMBEDDED.iter().map(|p| p.arch).collect();
    let cubins: Vec<_> = ptx::EMBEDDED
        .iter()
        .filter(|p| p.cubin.is_some())
        .map(|p| p.arch)
        .collect();
    println!("embedded PTX:       {}", built.join(", "));
    println!(
        "embedded cubins:    {}",
        if cubins.is_empty() {
            format!("none ({})", ptx::CUBINS_SKIPPED.unwrap_or("not assembled"))
        } else {
            cubins.join(", ")
        }
    );
    if ptx::PHASE_TRACE {
        println!("phase trace:        compiled in (GPU_PHASE_TRACE=1): `mnist --phases` prints it");
    }
    println!(
        "PTX chosen:         {} ({})",
        gpu.ptx.arch,
        gpu.ptx_choice()
    );
    println!("module:             {}", gpu.module_source());
    println!(
        "persistent kernel variants (784 inputs, each its largest batch, in the order the host prefers them):"
    );
    for line in crate::mlp::persistent::describe_variants(gpu) {
        println!("{line}");
    }
    let kernels = ptx::kernels(gpu.ptx.source);
    println!("kernels ({}):", kernels.len());
    for k in kernels {
        println!("  {k}");
    }
    Ok(())
}
