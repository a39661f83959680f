//! CPU fp32 reference of one forward/backward pass, for testing the GPU's gradients.
use super::params::param_layout;

/// Mean softmax cross-entropy of `x` (`rows × sizes[0]`) and its gradient for every parameter,
/// in the flat layout of [`param_layout`]. Weights are used as given (pass fp16-rounded values
/// to match the GPU's operands).
pub fn loss_and_grads(
    sizes: &[usize],
    params: &[f32],
    x: &[f32],
    labels: &[u8],
    rows: usize,
) -> (f32, Vec<f32>) {
    let (offs, n) = param_layout(sizes);
    let layers = sizes.len() - 1;
    let mut acts = vec![x.to_vec()];
    for l in 0..layers {
        let (i, o) = (sizes[l], sizes[l + 1]);
        let (w, b) = (&params[offs[l].0..], &params[offs[l].1..]);
        let a = &acts[l];
        let mut out = vec![0.0f32; rows * o];
        for r in 0..rows {
            for j in 0..o {
                let mut s = b[j];
                for k in 0..i {
                    s += a[r * i + k] * w[j * i + k];
                }
                out[r * o + j] = if l + 1 < layers { s.max(0.0) } else { s };
            }
        }
        acts.push(out);
    }
    let c = sizes[layers];
    let mut d = vec![0.0f32; rows * c];
    let mut loss = 0.0;
    for r in 0..rows {
        let z = &acts[layers][r * c..(r + 1) * c];
        let max = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = z.iter().map(|v| (v - max).exp()).sum();
        loss += sum.ln() - (z[labels[r] as usize] - max);
        for j in 0..c {
            let p = (z[j] - max).exp() / sum;
            d[r * c + j] = (p - (j == labels[r] as usize) as u32 as f32) / rows as f32;
        }
    }
    let mut grads = vec![0.0f32; n];
    for l in (0..layers).rev() {
        let (i, o) = (sizes[l], sizes[l + 1]);
        let a = &acts[l];
        for j in 0..o {
            for k in 0..i {
                grads[offs[l].0 + j * i + k] = (0..rows).map(|r| d[r * o + j] * a[r * i + k]).sum();
            }
            grads[offs[l].1 + j] = (0..rows).map(|r| d[r * o + j]).sum();
        }
        if l > 0 {
            let w = &params[offs[l].0..];
            let mut dp = vec![0.0f32; rows * i];
            for r in 0..rows {
                for k in 0..i {
                    let s: f32 = (0..o).map(|j| d[r * o + j] * w[j * i + k]).sum();
                    dp[r * i + k] = if a[r * i + k] > 0.0 { s } else { 0.0 };
                }
            }
            d = dp;
        }
    }
    (loss / rows as f32, grads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analytic gradient agrees with central finite differences of the loss.
    #[test]
    fn gradients_match_finite_differences() {
        let sizes = [5, 4, 3];
        let (_, n) = param_layout(&sizes);
        let params: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let x: Vec<f32> = (0..2 * 5)
            .map(|i| ((i * 31) % 11) as f32 / 5.0 - 1.0)
            .collect();
        let labels = [2u8, 0];
        let (_, g) = loss_and_grads(&sizes, &params, &x, &labels, 2);
        let (offs, _) = param_layout(&sizes);
        let idx = [
            offs[0].0,
            offs[0].0 + 7,
            offs[0].1 + 1,
            offs[1].0 + 5,
            offs[1].1 + 2,
        ];
        for &k in &idx {
            let h = 1e-3;
            let mut p = params.clone();
            p[k] += h;
            let (lp, _) = loss_and_grads(&sizes, &p, &x, &labels, 2);
            p[k] -= 2.0 * h;
            let (lm, _) = loss_and_grads(&sizes, &p, &x, &labels, 2);
            let fd = (lp - lm) / (2.0 * h);
            assert!(
                (fd - g[k]).abs() < 2e-3,
                "param {k}: finite difference {fd}, analytic {}",
                g[k]
            );
        }
    }
}
