//! The PTX modules `build.rs` embedded, one per architecture, with the cubin assembled from
//! each where the build had a ptxas, and the choice among them.
use anyhow::{Context, Result};
use std::io::Read;

/// One embedded PTX module.
#[derive(Debug)]
pub struct EmbeddedPtx {
    /// Architecture it was compiled for, e.g. `sm_80`.
    pub arch: &'static str,
    /// The same as a number: 80.
    pub sm: u32,
    pub source: &'static str,
    /// `source` assembled by ptxas for exactly `arch`, zlib-compressed; `None` where the build
    /// had no ptxas.
    pub cubin: Option<&'static [u8]>,
}

pub use gpu::target::Target;

impl EmbeddedPtx {
    /// The architecture this PTX was built for.
    pub fn target(&self) -> Target {
        Target {
            sm: self.sm,
            specific: self.arch.ends_with('a'),
        }
    }

    /// The compressed cubin of this PTX if one is embedded and its SASS runs on a device of
    /// compute capability `sm`.
    pub fn cubin_for(&self, sm: u32) -> Option<&'static [u8]> {
        self.cubin.filter(|_| sass_runs_on(self.sm, sm))
    }
}

/// Whether SASS assembled for compute capability `built` runs on a device of `device`: the same
/// major version, and a minor not above the device's (an sm_80 cubin runs on sm_86; an sm_90
/// one on sm_90 alone). PTX, unlike SASS, runs on every later major version ([`Target::runs_on`]).
pub fn sass_runs_on(built: u32, device: u32) -> bool {
    built / 10 == device / 10 && built <= device
}

/// A cubin as the build embedded it, decompressed.
pub fn decompress(cubin: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(cubin.len() * 5);
    flate2::read::ZlibDecoder::new(cubin)
        .read_to_end(&mut out)
        .context("the embedded cubin does not decompress")?;
    Ok(out)
}

include!(concat!(env!("OUT_DIR"), "/ptx.rs"));

/// The newest embedded PTX that a device of compute capability `sm` (major·10 + minor) can run:
/// PTX for sm_X runs on any device ≥ X, and newer PTX can use newer instructions; at equal
/// architecture, the architecture-specific PTX, which has more.
pub fn best_for(sm: u32) -> Option<&'static EmbeddedPtx> {
    best_among(EMBEDDED, sm)
}

fn best_among(list: &'static [EmbeddedPtx], sm: u32) -> Option<&'static EmbeddedPtx> {
    list.iter()
        .filter(|p| p.target().runs_on(sm))
        .max_by_key(|p| (p.sm, p.target().specific))
}

/// The embedded PTX to load on a device of compute capability `sm`: architecture `requested`
/// (`--ptx`), or without one the newest the device runs. Errors name what is embedded and
/// what the device is.
pub fn choose(sm: u32, requested: Option<Target>) -> Result<&'static EmbeddedPtx> {
    choose_among(EMBEDDED, sm, requested)
}

/// The architectures of `list`, as an error lists them: `sm_80, sm_90a`.
fn archs_of(list: &[EmbeddedPtx]) -> String {
    let archs: Vec<_> = list.iter().map(|p| p.arch).collect();
    archs.join(", ")
}

/// Refuses a `--ptx` this build did not embed, which is known before any GPU is opened.
pub fn ensure_embedded(want: Target) -> Result<()> {
    ensure_among(EMBEDDED, want)
}

fn ensure_among(list: &[EmbeddedPtx], want: Target) -> Result<()> {
    anyhow::ensure!(
        list.iter().any(|p| p.target() == want),
        "--ptx {want} is not embedded (this build has {}); rebuild with GPU_ARCHS including it",
        archs_of(list)
    );
    Ok(())
}

fn choose_among(
    list: &'static [EmbeddedPtx],
    sm: u32,
    requested: Option<Target>,
) -> Result<&'static EmbeddedPtx> {
    let built = || archs_of(list);
    let Some(want) = requested else {
        return best_among(list, sm).with_context(|| {
            if list.iter().any(|p| p.sm <= sm) {
                format!(
                    "no embedded PTX runs on this GPU (sm_{sm}): {} is specific to its own compute capability; rebuild with GPU_ARCHS including a portable arch such as sm_90",
                    built()
                )
            } else {
                format!(
                    "this GPU is sm_{sm}, older than every embedded PTX ({}); rebuild with GPU_ARCHS including an older arch",
                    built()
                )
            }
        });
    };
    let ptx = list.iter().find(|p| p.target() == want).with_context(|| {
        format!(
            "--ptx {want} is not embedded (this build has {}; the GPU is sm_{sm}); rebuild with GPU_ARCHS including it",
            built()
        )
    })?;
    anyhow::ensure!(
        want.sm <= sm,
        "--ptx {want} is newer than this GPU (sm_{sm}), which cannot run it; embedded: {}",
        built()
    );
    anyhow::ensure!(
        want.runs_on(sm),
        "--ptx {want} is specific to compute capability {}.{} and does not run on this GPU (sm_{sm}); embedded: {}",
        want.sm / 10,
        want.sm % 10,
        built()
    );
    Ok(ptx)
}

/// An architecture as `--ptx` takes it: `sm_80`, or `sm_90a` for an architecture-specific PTX.
pub fn parse_arch(s: &str) -> Result<Target, String> {
    let digits = s.strip_prefix("sm_").unwrap_or("");
    let (digits, specific) = match digits.strip_suffix('a') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    (2..=3)
        .contains(&digits.len())
        .then(|| digits.parse().ok())
        .flatten()
        .map(|sm| Target { sm, specific })
        .ok_or_else(|| format!("an architecture is written like sm_80 or sm_90a, not {s:?}"))
}

/// Names of the kernels (`.entry` functions) in a PTX module.
pub fn kernels(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .map(|l| l.split('(').next().unwrap_or(l).trim())
        .collect()
}

/// The declaration of kernel `name`'s parameters in a PTX module: what is between the
/// parentheses of its `.entry`, trimmed.
pub fn parameters<'p>(ptx: &'p str, name: &str) -> Option<&'p str> {
    let entry = format!(".entry {name}(");
    let after = &ptx[ptx.find(&entry)? + entry.len()..];
    Some(after[..after.find(')')?].trim())
}

/// How PTX declares a kernel whose one parameter is a `T` passed by value.
pub fn one_block<T>(name: &str) -> String {
    format!(
        ".param .align {} .b8 {name}_param_0[{}]",
        std::mem::align_of::<T>(),
        std::mem::size_of::<T>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    static LIST: [EmbeddedPtx; 4] = [
        EmbeddedPtx {
            arch: "sm_75",
            sm: 75,
            source: "",
            cubin: None,
        },
        EmbeddedPtx {
            arch: "sm_90",
            sm: 90,
            source: "",
            cubin: None,
        },
        EmbeddedPtx {
            arch: "sm_80",
            sm: 80,
            source: "",
            cubin: None,
        },
        EmbeddedPtx {
            arch: "sm_90a",
            sm: 90,
            source: "",
            cubin: None,
        },
    ];

    #[test]
    fn a_ptx_not_embedded_is_refused_without_a_gpu() {
        assert!(ensure_among(&LIST, Target::portable(80)).is_ok());
        let e = ensure_among(&LIST, Target::portable(61))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--ptx sm_61 is not embedded (this build has sm_75, sm_90, sm_80, sm_90a); \
             rebuild with GPU_ARCHS including it"
        );
    }

    fn arch(sm: u32) -> Option<Target> {
        Some(Target::portable(sm))
    }

    #[test]
    fn picks_newest_that_the_device_runs() {
        assert_eq!(best_among(&LIST, 90).unwrap().arch, "sm_90a");
        assert_eq!(best_among(&LIST, 100).unwrap().arch, "sm_90");
        assert_eq!(best_among(&LIST, 89).unwrap().arch, "sm_80");
        assert_eq!(best_among(&LIST, 75).unwrap().arch, "sm_75");
        assert!(best_among(&LIST, 70).is_none());
    }

    #[test]
    fn a_requested_arch_must_be_embedded_and_not_newer_than_the_device() {
        assert_eq!(choose_among(&LIST, 90, arch(75)).unwrap().arch, "sm_75");
        assert_eq!(choose_among(&LIST, 86, arch(80)).unwrap().arch, "sm_80");
        assert_eq!(choose_among(&LIST, 90, arch(90)).unwrap().arch, "sm_90");
        assert_eq!(choose_among(&LIST, 90, None).unwrap().arch, "sm_90a");
        let sm_90a = parse_arch("sm_90a").ok();
        assert_eq!(choose_among(&LIST, 90, sm_90a).unwrap().arch, "sm_90a");
        let err = |sm, want| choose_among(&LIST, sm, want).unwrap_err().to_string();
        let e = err(90, arch(86));
        assert!(e.contains("sm_86 is not embedded"), "{e}");
        assert!(
            e.contains("sm_75, sm_90, sm_80, sm_90a") && e.contains("the GPU is sm_90"),
            "{e}"
        );
        let e = err(86, arch(90));
        assert!(e.contains("newer than this GPU (sm_86)"), "{e}");
        assert!(e.contains("sm_75, sm_90, sm_80"), "{e}");
        let e = err(100, sm_90a);
        assert!(e.contains("specific to compute capability 9.0"), "{e}");
        let e = err(70, None);
        assert!(e.contains("sm_70, older than every embedded PTX"), "{e}");
        static SPECIFIC: [EmbeddedPtx; 1] = [EmbeddedPtx {
            arch: "sm_90a",
            sm: 90,
            source: "",
            cubin: None,
        }];
        let e = choose_among(&SPECIFIC, 100, None).unwrap_err().to_string();
        assert!(
            e.contains("no embedded PTX runs on this GPU (sm_100)"),
            "{e}"
        );
        assert!(e.contains("sm_90a is specific"), "{e}");
        assert!(!e.contains('\n') && !err(90, arch(86)).contains('\n'));
    }

    #[test]
    fn architectures_parse_as_sm_and_a_number() {
        assert_eq!(parse_arch("sm_75"), Ok(arch(75).unwrap()));
        assert_eq!(parse_arch("sm_100"), Ok(arch(100).unwrap()));
        let specific = Target {
            sm: 90,
            specific: true,
        };
        assert_eq!(parse_arch("sm_90a"), Ok(specific));
        assert_eq!(specific.to_string(), "sm_90a");
        for bad in [
            "75",
            "sm75",
            "sm_",
            "sm_8",
            "sm_a",
            "sm_90aa",
            "compute_80",
            "",
        ] {
            assert!(parse_arch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sass_runs_on_later_minors_of_its_major_only() {
        assert!(sass_runs_on(80, 80) && sass_runs_on(80, 86) && sass_runs_on(80, 89));
        assert!(sass_runs_on(75, 75) && sass_runs_on(90, 90));
        assert!(!sass_runs_on(86, 80) && !sass_runs_on(80, 90) && !sass_runs_on(75, 80));
        assert!(!sass_runs_on(90, 100) && !sass_runs_on(90, 120));
    }

    /// With a ptxas at build time, every PTX has a cubin: an ELF image for CUDA (OS ABI 0x33,
    /// machine EM_CUDA = 190) once decompressed.
    #[test]
    fn every_embedded_ptx_has_its_cubin_where_the_build_had_ptxas() {
        if let (Some(why), false) = (CUBINS_SKIPPED, PTXAS_SET) {
            eprintln!("skipped: this build embedded no cubins ({why}); set PTXAS to build them");
            return;
        }
        assert!(!EMBEDDED.is_empty());
        for p in EMBEDDED {
            let z = p.cubin.unwrap_or_else(|| panic!("no cubin for {}", p.arch));
            let elf = decompress(z).unwrap();
            assert_eq!(&elf[..4], b"\x7fELF", "{} cubin", p.arch);
            assert_eq!(elf[7], 0x33, "{} cubin: OS ABI", p.arch);
            assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 190, "{}", p.arch);
            assert_eq!(p.cubin_for(p.sm), Some(z));
        }
    }

    #[test]
    fn embedded_ptx_has_the_smoke_kernels() {
        assert!(!EMBEDDED.is_empty());
        for p in EMBEDDED {
            let names = kernels(p.source);
            use crate::kernels::{BLOCK_SUM, MMA_TILE, VEC_ADD};
            for k in [VEC_ADD, BLOCK_SUM, MMA_TILE] {
                assert!(names.contains(&k), "{} lacks {k}", p.arch);
            }
            assert!(p.source.contains(&format!(".target {}", p.arch)));
        }
    }
}
