//! The PTX modules `build.rs` embedded, one per architecture, and the choice among them.

/// One embedded PTX module.
#[derive(Debug)]
pub struct EmbeddedPtx {
    /// Architecture it was compiled for, e.g. `sm_80`.
    pub arch: &'static str,
    /// The same as a number: 80.
    pub sm: u32,
    pub source: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/ptx.rs"));

/// The newest embedded PTX that a device of compute capability `sm` (major·10 + minor) can run:
/// PTX for sm_X runs on any device ≥ X, and newer PTX can use newer instructions.
pub fn best_for(sm: u32) -> Option<&'static EmbeddedPtx> {
    best_among(EMBEDDED, sm)
}

fn best_among(list: &'static [EmbeddedPtx], sm: u32) -> Option<&'static EmbeddedPtx> {
    list.iter().filter(|p| p.sm <= sm).max_by_key(|p| p.sm)
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

    static LIST: [EmbeddedPtx; 3] = [
        EmbeddedPtx {
            arch: "sm_75",
            sm: 75,
            source: "",
        },
        EmbeddedPtx {
            arch: "sm_90",
            sm: 90,
            source: "",
        },
        EmbeddedPtx {
            arch: "sm_80",
            sm: 80,
            source: "",
        },
    ];

    #[test]
    fn picks_newest_that_the_device_runs() {
        assert_eq!(best_among(&LIST, 90).unwrap().arch, "sm_90");
        assert_eq!(best_among(&LIST, 89).unwrap().arch, "sm_80");
        assert_eq!(best_among(&LIST, 75).unwrap().arch, "sm_75");
        assert!(best_among(&LIST, 70).is_none());
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
