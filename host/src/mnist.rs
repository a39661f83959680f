//! MNIST, or any data set in its IDX form (raw or gzip-compressed): every malformation is a
//! clear error.
use crate::mlp::{Dataset, Features, Split};
use anyhow::{Context, Result, bail, ensure};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Normalisation of MNIST pixels (the usual mean and standard deviation of its training set).
pub const MEAN: f32 = 0.1307;
pub const STD: f32 = 0.3081;

/// Reads a file, gunzipping it if it starts with the gzip magic.
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("{} is not a valid gzip file", path.display()))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Parses an IDX file of unsigned bytes with `dims` dimensions; returns the sizes and the data.
pub fn parse_idx(bytes: &[u8], dims: usize, what: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    ensure!(
        bytes.len() >= 4 + 4 * dims,
        "{what}: file too short for an IDX header ({} bytes)",
        bytes.len()
    );
    ensure!(
        bytes[0] == 0 && bytes[1] == 0,
        "{what}: wrong magic number (not an IDX file)"
    );
    ensure!(
        bytes[2] == 0x08,
        "{what}: IDX element type 0x{:02x}, expected 0x08 (unsigned byte)",
        bytes[2]
    );
    ensure!(
        bytes[3] as usize == dims,
        "{what}: IDX file has {} dimensions, expected {dims}",
        bytes[3]
    );
    let sizes: Vec<usize> = (0..dims)
        .map(|d| u32::from_be_bytes(bytes[4 + 4 * d..8 + 4 * d].try_into().unwrap()) as usize)
        .collect();
    let expected = sizes
        .iter()
        .try_fold(1usize, |a, &s| a.checked_mul(s))
        .with_context(|| format!("{what}: IDX sizes {sizes:?} overflow"))?;
    let data = &bytes[4 + 4 * dims..];
    ensure!(
        data.len() == expected,
        "{what}: header promises {expected} bytes of data ({sizes:?}) but the file holds {} (truncated or corrupt)",
        data.len()
    );
    Ok((sizes, data.to_vec()))
}

fn find(dir: &Path, stem: &str) -> Result<PathBuf> {
    for name in [format!("{stem}.gz"), stem.to_string()] {
        let p = dir.join(&name);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("{} has no {stem} (or {stem}.gz)", dir.display())
}

fn load_split(dir: &Path, prefix: &str) -> Result<Split> {
    let ipath = find(dir, &format!("{prefix}-images-idx3-ubyte"))?;
    let lpath = find(dir, &format!("{prefix}-labels-idx1-ubyte"))?;
    let (isz, images) = parse_idx(&read_maybe_gz(&ipath)?, 3, &ipath.display().to_string())?;
    let (lsz, labels) = parse_idx(&read_maybe_gz(&lpath)?, 1, &lpath.display().to_string())?;
    ensure!(
        isz[0] == lsz[0],
        "{} holds {} images but {} holds {} labels",
        ipath.display(),
        isz[0],
        lpath.display(),
        lsz[0]
    );
    ensure!(isz[0] > 0, "{} holds no images", ipath.display());
    ensure!(
        isz[1] * isz[2] > 0,
        "{} holds images of {} × {} pixels",
        ipath.display(),
        isz[1],
        isz[2]
    );
    let features = Features::Pixels {
        data: images,
        mean: MEAN,
        std: STD,
    };
    Ok(Split {
        count: isz[0],
        dim: isz[1] * isz[2],
        features,
        labels,
    })
}

/// Loads `train-*` and `t10k-*` IDX files from `dir`. Labels must lie in `0..10`.
pub fn load(dir: &Path) -> Result<Dataset> {
    ensure!(
        dir.is_dir(),
        "data directory {} {}",
        dir.display(),
        if dir.exists() {
            "is not a directory"
        } else {
            "does not exist"
        }
    );
    let train = load_split(dir, "train")?;
    let test = load_split(dir, "t10k")?;
    ensure!(
        train.dim == test.dim,
        "training images are {} pixels, test images {}",
        train.dim,
        test.dim
    );
    let classes = 10;
    for (name, s) in [("training", &train), ("test", &test)] {
        if let Some((i, &l)) = s
            .labels
            .iter()
            .enumerate()
            .find(|(_, l)| **l as usize >= classes)
        {
            bail!("{name} label {i} is {l}, outside 0..{classes}");
        }
    }
    let name = match dir.file_name().map(|n| n.to_string_lossy().to_string()) {
        Some(n) if n != "mnist" => n,
        _ => "MNIST".into(),
    };
    Ok(Dataset {
        name,
        train,
        test,
        classes,
    })
}

/// The data directory that ships with the repository, from the repository root or `host/`.
pub fn default_dir() -> PathBuf {
    for p in ["data/mnist", "../data/mnist"] {
        if Path::new(p).is_dir() {
            return PathBuf::from(p);
        }
    }
    PathBuf::from("data/mnist")
}

/// The data directory `--data` names (`given`), else [`default_dir`]. Where it is missing the
/// error names `--data`: run from outside the repository, the default is not there.
pub fn data_dir(given: Option<&Path>) -> Result<PathBuf> {
    dir_or(given, default_dir())
}

fn dir_or(given: Option<&Path>, default: PathBuf) -> Result<PathBuf> {
    let Some(dir) = given else {
        ensure!(
            default.is_dir(),
            "no MNIST in {}, the default data directory (the repository's, from its root or \
             host/): give the directory of its IDX files with --data DIR",
            default.display()
        );
        return Ok(default);
    };
    ensure!(
        dir.is_dir(),
        "--data {}: {}",
        dir.display(),
        if dir.exists() {
            "not a directory"
        } else {
            "no such directory"
        }
    );
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_data_directory_names_the_flag() {
        let missing = std::env::temp_dir().join(format!("no-mnist-{}", std::process::id()));
        let e = dir_or(None, missing.clone()).unwrap_err().to_string();
        assert!(
            e.starts_with("no MNIST in ") && e.contains("--data DIR"),
            "{e}"
        );
        let e = dir_or(Some(&missing), default_dir())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--data ") && e.ends_with("no such directory"),
            "{e}"
        );
        let here = std::env::temp_dir();
        assert_eq!(dir_or(Some(&here), missing).unwrap(), here);
    }

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn parses_a_well_formed_file() {
        let (s, d) = parse_idx(&idx(&[2, 2, 3], &[1; 12]), 3, "t").unwrap();
        assert_eq!(s, vec![2, 2, 3]);
        assert_eq!(d.len(), 12);
    }

    #[test]
    fn rejects_malformed_files() {
        let err = |b: &[u8], dims| parse_idx(b, dims, "t").unwrap_err().to_string();
        assert!(err(&[0, 0], 1).contains("too short"));
        let mut bad = idx(&[3], &[1, 2, 3]);
        bad[0] = 7;
        assert!(err(&bad, 1).contains("magic"));
        assert!(err(&idx(&[4], &[1, 2, 3]), 1).contains("truncated"));
        assert!(err(&idx(&[2, 2], &[1; 4]), 1).contains("dimensions"));
        let mut f32s = idx(&[1], &[0; 4]);
        f32s[2] = 0x0d;
        assert!(err(&f32s, 1).contains("element type"));
    }

    fn write_set(dir: &Path, n_img: u32, labels: &[u8], gz: bool) {
        let put = |name: &str, bytes: Vec<u8>| {
            if gz {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::Write::write_all(&mut e, &bytes).unwrap();
                std::fs::write(dir.join(format!("{name}.gz")), e.finish().unwrap()).unwrap();
            } else {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        };
        for p in ["train", "t10k"] {
            put(
                &format!("{p}-images-idx3-ubyte"),
                idx(&[n_img, 2, 2], &vec![9; 4 * n_img as usize]),
            );
            put(
                &format!("{p}-labels-idx1-ubyte"),
                idx(&[labels.len() as u32], labels),
            );
        }
    }

    #[test]
    fn loads_raw_and_gzip_and_checks_consistency() {
        let dir = std::env::temp_dir().join(format!("idx-test-{}", std::process::id()));
        for (gz, sub) in [(false, "raw"), (true, "gz")] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).unwrap();
            write_set(&d, 3, &[0, 9, 4], gz);
            let ds = load(&d).unwrap();
            assert_eq!((ds.train.count, ds.train.dim), (3, 4));
        }
        let d = dir.join("mismatch");
        std::fs::create_dir_all(&d).unwrap();
        write_set(&d, 3, &[0, 1], false);
        let err = load(&d).err().unwrap().to_string();
        assert!(
            err.contains("3 images but") && err.contains("2 labels"),
            "{err}"
        );
        let d = dir.join("range");
        std::fs::create_dir_all(&d).unwrap();
        write_set(&d, 2, &[0, 10], false);
        assert!(load(&d).err().unwrap().to_string().contains("outside"));
        // Images of zero pixels: a header that is consistent but describes nothing to learn.
        let d = dir.join("empty-images");
        std::fs::create_dir_all(&d).unwrap();
        write_set(&d, 3, &[0, 1, 2], false);
        std::fs::write(d.join("train-images-idx3-ubyte"), idx(&[3, 0, 28], &[])).unwrap();
        let err = load(&d).err().unwrap().to_string();
        assert!(err.contains("0 × 28 pixels"), "{err}");
        let file = d.join("train-labels-idx1-ubyte");
        let err = load(&file).err().unwrap().to_string();
        assert!(err.contains("is not a directory"), "{err}");
        assert!(
            load(&dir.join("absent"))
                .err()
                .unwrap()
                .to_string()
                .contains("does not exist")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shipped_mnist_loads() {
        let ds = load(&default_dir()).unwrap();
        assert_eq!(
            (ds.train.count, ds.test.count, ds.train.dim),
            (60000, 10000, 784)
        );
    }
}
