//! Weights as safetensors, loadable by PyTorch: `fc{l}.weight` `[out, in]` and `fc{l}.bias`
//! `[out]`, fp32, for l = 1…layers (the names `bench/pytorch/mnist_mlp.py` uses).
use super::params::param_layout;
use anyhow::{Context, Result, bail, ensure};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::path::Path;

fn names(l: usize) -> (String, String) {
    (format!("fc{}.weight", l + 1), format!("fc{}.bias", l + 1))
}

/// Writes the flat parameters as safetensors, through a temporary file and a rename.
pub fn save(path: &Path, sizes: &[usize], params: &[f32]) -> Result<()> {
    let (offs, _) = param_layout(sizes);
    let mut bytes: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
    for (l, w) in sizes.windows(2).enumerate() {
        let (i, o) = (w[0], w[1]);
        let (wn, bn) = names(l);
        let le = |s: &[f32]| s.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        bytes.push((wn, le(&params[offs[l].0..offs[l].0 + o * i]), vec![o, i]));
        bytes.push((bn, le(&params[offs[l].1..offs[l].1 + o]), vec![o]));
    }
    let views: Vec<(String, TensorView)> = bytes
        .iter()
        .map(|(n, b, s)| Ok((n.clone(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<_>>()?;
    let data = safetensors::serialize(views, None)?;
    crate::write_atomic(path, &data)
}

/// Reads parameters saved by [`save`] (or by PyTorch with the same names) for `sizes`.
pub fn load(path: &Path, sizes: &[usize]) -> Result<Vec<f32>> {
    let data = std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
    let st = SafeTensors::deserialize(&data)
        .with_context(|| format!("{} is not a safetensors file", path.display()))?;
    let expected: Vec<String> = (0..sizes.len() - 1)
        .flat_map(|l| <[String; 2]>::from(names(l)))
        .collect();
    if let Some(extra) = st
        .names()
        .into_iter()
        .find(|n| !expected.iter().any(|e| e == n))
    {
        bail!(
            "{} holds {extra}, which the model (layers {sizes:?}) does not have: was it saved for another model?",
            path.display()
        );
    }
    let (offs, n) = param_layout(sizes);
    let mut params = vec![0.0f32; n];
    for (l, w) in sizes.windows(2).enumerate() {
        let (i, o) = (w[0], w[1]);
        let (wn, bn) = names(l);
        for (name, shape, off) in [(wn, vec![o, i], offs[l].0), (bn, vec![o], offs[l].1)] {
            let t = st.tensor(&name).with_context(|| {
                format!(
                    "{} has no tensor {name}: was it saved for this model?",
                    path.display()
                )
            })?;
            ensure!(
                t.dtype() == Dtype::F32,
                "{name} in {} is {:?}, expected F32",
                path.display(),
                t.dtype()
            );
            if t.shape() != shape {
                bail!(
                    "{name} in {} has shape {:?}; the model (layers {sizes:?}) needs {shape:?}",
                    path.display(),
                    t.shape()
                );
            }
            for (k, c) in t.data().as_chunks::<4>().0.iter().enumerate() {
                params[off + k] = f32::from_le_bytes(*c);
            }
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_other_shapes() {
        let sizes = [6, 4, 3];
        let (_, n) = param_layout(&sizes);
        let p: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
        let dir = std::env::temp_dir().join(format!("ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("w.safetensors");
        save(&f, &sizes, &p).unwrap();
        let back = load(&f, &sizes).unwrap();
        let (offs, _) = param_layout(&sizes);
        for (l, w) in sizes.windows(2).enumerate() {
            let (wo, bo) = offs[l];
            assert_eq!(back[wo..wo + w[0] * w[1]], p[wo..wo + w[0] * w[1]]);
            assert_eq!(back[bo..bo + w[1]], p[bo..bo + w[1]]);
        }
        assert!(
            load(&f, &[6, 5, 3])
                .unwrap_err()
                .to_string()
                .contains("shape")
        );
        // A deeper model's file: its first layers fit, its last does not exist here.
        let deeper = [6, 4, 3, 3];
        let g = dir.join("deeper.safetensors");
        save(&g, &deeper, &vec![0.5; param_layout(&deeper).1]).unwrap();
        let err = load(&g, &sizes).unwrap_err().to_string();
        assert!(
            err.contains("fc3.weight") || err.contains("fc3.bias"),
            "{err}"
        );
        std::fs::write(&f, b"junk").unwrap();
        assert!(load(&f, &sizes).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
