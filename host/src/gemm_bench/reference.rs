//! The CPU reference of a GEMM's output, in f64, and the checks of a GPU result against it.
use crate::gemm::{Problem, Version};
use gpu::gemm::Accum;
use half::f16;

/// What the epilogue reads besides the product: C before the GEMM (read where beta ≠ 0), the
/// bias and the gate, as in [`Ptrs`](crate::gemm::Ptrs).
#[derive(Clone, Copy, Debug, Default)]
pub struct EpilogueInputs<'a> {
    pub c_old: &'a [f16],
    pub bias: Option<&'a [f16]>,
    pub gate: Option<&'a [f16]>,
}

/// CPU reference of one output element in f64, and the sum of |products| that bounds its
/// rounding error.
pub fn reference_at(
    p: &Problem,
    a: &[f16],
    b: &[f16],
    e: EpilogueInputs,
    i: usize,
    j: usize,
) -> (f64, f64) {
    let (mut acc, mut mag) = (0.0f64, 0.0f64);
    for kk in 0..p.k {
        let av = if p.layout.trans_a() {
            a[kk * p.lda + i]
        } else {
            a[i * p.lda + kk]
        }
        .to_f64();
        let bv = if p.layout.trans_b() {
            b[j * p.ldb + kk]
        } else {
            b[kk * p.ldb + j]
        }
        .to_f64();
        acc += av * bv;
        mag += (av * bv).abs();
    }
    let mut v = p.alpha as f64 * acc;
    mag *= p.alpha.abs() as f64;
    if p.beta != 0.0 {
        let cv = e.c_old[i * p.ldc + j].to_f64() * p.beta as f64;
        v += cv;
        mag += cv.abs();
    }
    if let Some(bias) = e.bias {
        v += bias[j].to_f64();
        mag += bias[j].to_f64().abs();
    }
    if p.relu {
        v = v.max(0.0);
    }
    if e.gate.is_some_and(|g| g[i * p.ldc + j].to_f64() <= 0.0) {
        v = 0.0;
    }
    (v, mag)
}

/// Error allowed at one element: rounding of the accumulation (fp16 accumulators round at
/// every step, so the bound grows with the sum of |products|) plus the final rounding to fp16.
pub fn tolerance(acc: Accum, value: f64, magnitude: f64) -> f64 {
    let unit = match acc {
        Accum::F16 => 2f64.powi(-11),
        Accum::F32 => 2f64.powi(-18),
    };
    // fp16 operands are exact in either accumulator; a few ulps of the running sum per step
    // grows like sqrt(K) in practice, but the bound below is the linear worst case / 8.
    8.0 * unit * magnitude + 2f64.powi(-10) * value.abs() + 1e-6
}

/// Compares a GPU result with the reference at `samples` (all elements when `None`).
/// Returns the largest |error| and the number of elements over tolerance (NaN counts as over).
pub struct Check {
    pub max_err: f64,
    pub failures: usize,
    pub first_failure: Option<(usize, usize, f64, f64)>,
}

pub fn check(
    p: &Problem,
    acc: Accum,
    a: &[f16],
    b: &[f16],
    e: EpilogueInputs,
    got: &[f16],
    samples: Option<&[(usize, usize)]>,
) -> Check {
    let mut out = Check {
        max_err: 0.0,
        failures: 0,
        first_failure: None,
    };
    let visit = |i: usize, j: usize| {
        let (want, mag) = reference_at(p, a, b, e, i, j);
        let g = got[i * p.ldc + j].to_f64();
        let err = (g - want).abs();
        let within = err <= tolerance(acc, want, mag); // false for NaN
        if !within {
            out.failures += 1;
            out.first_failure.get_or_insert((i, j, g, want));
        }
        if err.is_finite() {
            out.max_err = out.max_err.max(err);
        } else {
            out.max_err = f64::INFINITY;
        }
    };
    visit_elements(p, samples, visit);
    out
}

/// Calls `visit` on each of `samples`, or on every element of C.
fn visit_elements(
    p: &Problem,
    samples: Option<&[(usize, usize)]>,
    mut visit: impl FnMut(usize, usize),
) {
    match samples {
        Some(s) => s.iter().for_each(|&(i, j)| visit(i, j)),
        None => (0..p.m).for_each(|i| (0..p.n).for_each(|j| visit(i, j))),
    }
}

/// The fp32 master weights and velocity of an SGD-epilogue GEMM, laid out as C.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    pub master: &'a [f32],
    pub velocity: &'a [f32],
}

/// Compares an SGD-epilogue GEMM's results (`after`, and C as `got`) with the reference at
/// `samples` or every element: the gradient the step took, recovered from the velocity as
/// `v₁ − momentum·v₀`, within the product's tolerance; the master weight moved by exactly
/// `−lr·v₁`; C its fp16 copy. `max_err` is the gradient's; a failure's values are the gradient
/// taken and the reference's.
pub fn check_sgd(
    p: &Problem,
    acc: Accum,
    (a, b): (&[f16], &[f16]),
    before: Weights,
    after: Weights,
    got: &[f16],
    samples: Option<&[(usize, usize)]>,
) -> Check {
    let step = p.sgd.expect("an SGD problem");
    let mut out = Check {
        max_err: 0.0,
        failures: 0,
        first_failure: None,
    };
    visit_elements(p, samples, |i, j| {
        let k = i * p.ldc + j;
        let (want, mag) = reference_at(p, a, b, EpilogueInputs::default(), i, j);
        let v1 = after.velocity[k];
        let g = v1 as f64 - step.momentum as f64 * before.velocity[k] as f64;
        // The velocity's own fp32 rounding, besides the gradient's.
        let slack = 2f64.powi(-22) * (v1.abs() as f64 + g.abs());
        let err = (g - want).abs();
        let w1 = before.master[k] - step.lr * v1;
        let stepped = (after.master[k] - w1).abs() <= 2f32.powi(-22) * w1.abs().max(1e-30)
            && got[k] == f16::from_f32(after.master[k]);
        if !(err <= tolerance(acc, want, mag) + slack && stepped) {
            out.failures += 1;
            out.first_failure.get_or_insert((i, j, g, want));
        }
        out.max_err = out
            .max_err
            .max(if err.is_finite() { err } else { f64::INFINITY });
    });
    out
}

/// Accumulator precision a version uses, for its tolerance (SIMT versions accumulate in f32).
pub fn accum_of(v: Version) -> Accum {
    match v {
        Version::Simt(_) | Version::Direct => Accum::F32,
        Version::Tensor(_, a) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::SgdStep;
    use gpu::gemm::Layout;

    #[test]
    fn reference_and_tolerance() {
        // A = [[1, 2]], B = [[3], [4]] → 11; with bias 1 and ReLU.
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let mut p = Problem::new(1, 1, 2, Layout::NN);
        p.relu = true;
        let bias = h(&[-20.0]);
        let e = EpilogueInputs {
            bias: Some(&bias),
            ..EpilogueInputs::default()
        };
        let (v, mag) = reference_at(&p, &h(&[1.0, 2.0]), &h(&[3.0, 4.0]), e, 0, 0);
        assert_eq!((v, mag), (0.0, 31.0));
        // A gate that is not positive zeroes the output; a positive one passes it.
        p.relu = false;
        for (g, want) in [(-0.0, 0.0), (0.5, 11.0)] {
            let gate = h(&[g]);
            let e = EpilogueInputs {
                gate: Some(&gate),
                ..EpilogueInputs::default()
            };
            let (v, _) = reference_at(&p, &h(&[1.0, 2.0]), &h(&[3.0, 4.0]), e, 0, 0);
            assert_eq!(v, want, "gate {g}");
        }
        // 1·3 + 2·4 = 11: a wrong value fails, and NaN never passes.
        for got in [12.0, f32::NAN] {
            let c = check(
                &Problem::new(1, 1, 2, Layout::NN),
                Accum::F16,
                &h(&[1.0, 2.0]),
                &h(&[3.0, 4.0]),
                EpilogueInputs::default(),
                &h(&[got]),
                None,
            );
            assert_eq!(c.failures, 1, "{got} must fail");
        }
    }

    /// The SGD check passes the step the kernels take and fails a wrong gradient, a master
    /// weight not moved by `−lr·v`, and a C that is not the master's fp16 copy.
    #[test]
    fn sgd_check_follows_the_step() {
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let step = SgdStep {
            lr: 0.5,
            momentum: 0.9,
        };
        let p = Problem {
            sgd: Some(step),
            ..Problem::new(1, 1, 2, Layout::NN)
        };
        let (a, b) = (h(&[1.0, 2.0]), h(&[3.0, 4.0]));
        let (w0, v0) = ([2.0f32], [1.0f32]);
        let before = Weights {
            master: &w0,
            velocity: &v0,
        };
        let run = |g: f32, nudge: f32, c: Option<f32>| {
            let v1 = [step.momentum * v0[0] + g];
            let w1 = [w0[0] - step.lr * v1[0] + nudge];
            let after = Weights {
                master: &w1,
                velocity: &v1,
            };
            let got = h(&[c.unwrap_or(w1[0])]);
            check_sgd(&p, Accum::F32, (&a, &b), before, after, &got, None).failures
        };
        assert_eq!(run(11.0, 0.0, None), 0);
        assert_eq!(run(11.5, 0.0, None), 1, "a wrong gradient");
        assert_eq!(run(11.0, 1e-3, None), 1, "a master weight moved otherwise");
        assert_eq!(
            run(11.0, 0.0, Some(1.0)),
            1,
            "a C that is not the master's copy"
        );
    }
}
