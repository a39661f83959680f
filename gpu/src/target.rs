//! The architecture a PTX module is built for, as one type that the kernels (through
//! `BUILT`) and the host (for the module it loads) ask the same questions of: which
//! instructions it has; and [`ARCHS`], what the project knows of each GPU it tunes for. Nothing
//! else in the project compares architecture numbers.

/// An architecture as `GPU_ARCHS` and `--ptx` write it: `sm_80`, or `sm_90a`, the
/// architecture-specific PTX of compute capability 9.0 (`wgmma`), which runs on 9.0 alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Compute capability ×10: 75, 80, 90.
    pub sm: u32,
    pub specific: bool,
}

impl Target {
    /// The portable PTX of each generation the build knows: Turing, Ampere, Hopper.
    pub const SM75: Target = Target::portable(75);
    pub const SM80: Target = Target::portable(80);
    pub const SM90: Target = Target::portable(90);

    /// The portable PTX of compute capability `sm`, which every later GPU runs.
    pub const fn portable(sm: u32) -> Target {
        Target {
            sm,
            specific: false,
        }
    }

    /// Whether PTX for this architecture runs on a device of compute capability `device`: PTX
    /// runs on every later major version, an architecture-specific one on its own alone.
    pub const fn runs_on(self, device: u32) -> bool {
        if self.specific {
            self.sm == device
        } else {
            self.sm <= device
        }
    }

    /// `cp.async` and the `m16n8k16` tensor-core shape (sm_80). Older PTX stages copies
    /// through registers and multiplies in `m16n8k8` steps.
    pub const fn cp_async(self) -> bool {
        self.sm >= 80
    }

    /// Hopper's thread-block clusters with distributed shared memory and `st.async`, bulk
    /// copies and bulk reductions, and `mbarrier` transaction counts (sm_90 at PTX ISA 8.1,
    /// which `build.rs` gives every sm_90 build).
    pub const fn clusters(self) -> bool {
        self.sm >= 90
    }

    /// Programmatic dependent launches (`griddepcontrol`, sm_90): a kernel scheduled while the
    /// one before it drains, which it waits for on the GPU.
    pub const fn dependent_launches(self) -> bool {
        self.sm >= 90
    }

    /// Warpgroup MMA (`wgmma`) fed by tensor copies: the architecture-specific sm_90a PTX.
    pub const fn wgmma(self) -> bool {
        self.specific && self.sm == 90
    }

    /// Whether this architecture is one of `min` to `max` (compute capabilities ×10): the
    /// generations a kernel is compiled for.
    pub const fn among(self, min: u32, max: u32) -> bool {
        min <= self.sm && self.sm <= max
    }
}

/// One GPU the project tunes for: a compute capability, with the facts of it that the host's
/// choices and the kernels' layouts depend on. Devices report these at run time too; the table
/// is what the CPU tests, `host gemm --list` and the per-GPU preferences read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// Compute capability ×10: 75, 80, 86, 89, 90.
    pub sm: u32,
    /// The GPUs of this compute capability, in words.
    pub gpus: &'static str,
    /// Dynamic shared memory one block may have after opting in, in bytes.
    pub smem_per_block: usize,
}

/// Every GPU the project tunes for, oldest first. GPUs that share a PTX (sm_80 PTX runs on
/// all of 80, 86 and 89) differ in shared memory, so the host's choices differ too.
pub const ARCHS: &[Arch] = &[
    Arch {
        sm: 75,
        gpus: "Turing (T4, RTX 20)",
        smem_per_block: 64 * 1024,
    },
    Arch {
        sm: 80,
        gpus: "A100, A30",
        smem_per_block: 163 * 1024,
    },
    Arch {
        sm: 86,
        gpus: "RTX 30, A10, A40",
        smem_per_block: 99 * 1024,
    },
    Arch {
        sm: 89,
        gpus: "Ada (L4, L40, RTX 40)",
        smem_per_block: 99 * 1024,
    },
    Arch {
        sm: 90,
        gpus: "Hopper (H100, H200)",
        smem_per_block: 227 * 1024,
    },
];

impl Arch {
    /// The row of compute capability `sm` (×10). Panics at compile time in a `const` when
    /// there is none, so a layout test names only GPUs of the table.
    pub const fn of(sm: u32) -> &'static Arch {
        let mut i = 0;
        while i < ARCHS.len() {
            if ARCHS[i].sm == sm {
                return &ARCHS[i];
            }
            i += 1;
        }
        panic!("no such GPU in ARCHS")
    }

    /// The row of compute capability `sm` (×10), if the table has one.
    pub fn find(sm: u32) -> Option<&'static Arch> {
        ARCHS.iter().find(|a| a.sm == sm)
    }

    /// Shared memory a block may have, in KiB.
    pub const fn smem_kib(&self) -> usize {
        self.smem_per_block / 1024
    }

    /// Whether PTX built for `target` runs on this GPU.
    pub const fn runs(&self, target: Target) -> bool {
        target.runs_on(self.sm)
    }
}

/// Hopper's shared memory a block may have, in bytes: the room the Hopper-only layouts are
/// sized for.
pub const HOPPER_SMEM: usize = Arch::of(90).smem_per_block;

#[cfg(not(target_arch = "nvptx64"))]
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "sm_{}{}", self.sm, if self.specific { "a" } else { "" })
    }
}

/// The architecture this PTX is built for (`-C target-cpu`, which enables the target features
/// `sm_80`, `sm_90`, `sm_90a`, … up to it).
#[cfg(target_arch = "nvptx64")]
pub const BUILT: Target = Target {
    sm: if cfg!(target_feature = "sm_90") {
        90
    } else if cfg!(target_feature = "sm_80") {
        80
    } else {
        75
    },
    specific: cfg!(target_feature = "sm_90a"),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_architecture_has_the_instructions_of_its_generation() {
        let (t75, t80, t90, t90a) = (
            Target::portable(75),
            Target::portable(80),
            Target::portable(90),
            Target {
                sm: 90,
                specific: true,
            },
        );
        assert!(!t75.cp_async() && t80.cp_async() && t90.cp_async());
        assert!(!t80.clusters() && t90.clusters() && t90a.clusters());
        assert!(!t90.wgmma() && t90a.wgmma());
        assert!(t80.runs_on(86) && t80.runs_on(90) && !t80.runs_on(75));
        assert!(t90a.runs_on(90) && !t90a.runs_on(100));
        assert_eq!(t90a.to_string(), "sm_90a");
    }

    #[test]
    fn the_table_knows_each_gpus_shared_memory_and_ptx() {
        let kib: Vec<_> = ARCHS.iter().map(|a| (a.sm, a.smem_kib())).collect();
        assert_eq!(kib, [(75, 64), (80, 163), (86, 99), (89, 99), (90, 227)]);
        assert_eq!(HOPPER_SMEM, 232_448);
        assert!(Arch::of(86).runs(Target::SM80) && !Arch::of(80).runs(Target::SM90));
        assert!(Arch::find(70).is_none());
        assert!(ARCHS.windows(2).all(|w| w[0].sm < w[1].sm));
    }
}
