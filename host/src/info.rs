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
    println!("tile preferences:   {}", tile_preferences(gpu.sm));
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

/// What the GEMM tile tables say of a GPU of compute capability `sm`: its row of `ARCHS` and
/// its lines of `PREFERENCES`, or that it has none (`docs/tiles.md`).
fn tile_preferences(sm: u32) -> String {
    let Some(arch) = gpu::target::Arch::find(sm) else {
        return format!("sm_{sm} is not in the GPU table: the general procedure chooses tiles");
    };
    let rows: Vec<_> = crate::gemm::PREFERENCES
        .iter()
        .filter(|p| p.sm == sm)
        .map(|p| format!("{:?} outputs {}", p.size, p.row.name))
        .collect();
    let rows = if rows.is_empty() {
        "none (the general procedure)".to_string()
    } else {
        rows.join("; ")
    };
    format!("{} ({} KiB a block): {rows}", arch.gpus, arch.smem_kib())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpus_preferences_are_named_or_their_absence_said() {
        let hopper = tile_preferences(90);
        assert!(
            hopper.contains("227 KiB") && hopper.contains("Large outputs wg90_"),
            "{hopper}"
        );
        assert!(tile_preferences(86).contains("none (the general procedure)"));
        assert!(tile_preferences(70).contains("sm_70 is not in the GPU table"));
    }
}
