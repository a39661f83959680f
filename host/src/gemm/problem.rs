//! A GEMM's problem: its dimensions, layout and leading dimensions, its epilogue, and the checks
//! that reject what the kernels cannot take.
use anyhow::{Result, ensure};
use gpu::gemm::Layout;

/// `C = act(alpha·op(A)·op(B) + beta·C + bias)`, all row-major fp16 (see `gpu::gemm`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub layout: Layout,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub alpha: f32,
    pub beta: f32,
    pub relu: bool,
    /// Slices of K computed by separate blocks and summed by `splitk_reduce` (tensor-core
    /// versions only; needs a workspace, see [`workspace_len`](super::workspace_len)).
    pub split_k: usize,
    /// The SGD step the product is the gradient of, or none: C is then the weights' fp16 copy
    /// and [`Ptrs`](super::Ptrs) gives their master and velocity (see `gpu::gemm::Sgd`); the
    /// product is the plain `alpha·op(A)·op(B)` (no beta, ReLU, bias or gate).
    pub sgd: Option<SgdStep>,
}

/// Learning rate and momentum of an SGD step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    pub lr: f32,
    pub momentum: f32,
}

impl Problem {
    /// Tightly packed operands (leading dimension = stored row length).
    pub fn new(m: usize, n: usize, k: usize, layout: Layout) -> Problem {
        let lda = if layout.trans_a() { m } else { k };
        let ldb = if layout.trans_b() { k } else { n };
        Problem {
            m,
            n,
            k,
            layout,
            lda,
            ldb,
            ldc: n,
            alpha: 1.0,
            beta: 0.0,
            relu: false,
            split_k: 1,
            sgd: None,
        }
    }

    /// Stored (rows, cols) of A and of B.
    pub fn a_dims(&self) -> (usize, usize) {
        if self.layout.trans_a() {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }
    pub fn b_dims(&self) -> (usize, usize) {
        if self.layout.trans_b() {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }
    /// Elements a buffer must hold for each operand.
    pub fn a_len(&self) -> usize {
        let (r, c) = self.a_dims();
        (r - 1) * self.lda + c
    }
    pub fn b_len(&self) -> usize {
        let (r, c) = self.b_dims();
        (r - 1) * self.ldb + c
    }
    pub fn c_len(&self) -> usize {
        (self.m - 1) * self.ldc + self.n
    }
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Rejects an empty dimension, which no kernel's grid can take.
    pub fn ensure_positive(&self) -> Result<()> {
        ensure!(
            self.m > 0 && self.n > 0 && self.k > 0,
            "GEMM dimensions must be positive, got M={} N={} K={}",
            self.m,
            self.n,
            self.k
        );
        Ok(())
    }

    /// Rejects shapes and buffers the kernels cannot take, before anything is launched.
    pub fn validate(
        &self,
        a_len: usize,
        b_len: usize,
        c_len: usize,
        bias_len: Option<usize>,
    ) -> Result<()> {
        self.ensure_positive()?;
        let limit = u32::MAX as usize / 2;
        ensure!(
            self.m.max(self.n).max(self.k) <= limit,
            "GEMM dimension too large for 32-bit indexing"
        );
        let (ar, ac) = self.a_dims();
        let (br, bc) = self.b_dims();
        ensure!(
            self.lda >= ac,
            "lda={} is smaller than A's stored row ({ac})",
            self.lda
        );
        ensure!(
            self.ldb >= bc,
            "ldb={} is smaller than B's stored row ({bc})",
            self.ldb
        );
        ensure!(
            self.ldc >= self.n,
            "ldc={} is smaller than N={}",
            self.ldc,
            self.n
        );
        ensure!(
            a_len >= self.a_len(),
            "A holds {a_len} elements; a {ar}×{ac} operand with lda={} needs {}",
            self.lda,
            self.a_len()
        );
        ensure!(
            b_len >= self.b_len(),
            "B holds {b_len} elements; a {br}×{bc} operand with ldb={} needs {}",
            self.ldb,
            self.b_len()
        );
        ensure!(
            c_len >= self.c_len(),
            "C holds {c_len} elements; M×N={}×{} with ldc={} needs {}",
            self.m,
            self.n,
            self.ldc,
            self.c_len()
        );
        ensure!(
            self.m.max(self.n).max(self.k) * self.lda.max(self.ldb).max(self.ldc)
                <= u32::MAX as usize,
            "GEMM operands too large for 32-bit indexing"
        );
        if let Some(len) = bias_len {
            ensure!(len >= self.n, "bias holds {len} elements, N={}", self.n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rejects_bad_shapes_and_buffers() {
        let p = Problem::new(4, 5, 6, Layout::NN);
        assert!(p.validate(24, 30, 20, None).is_ok());
        assert!(
            p.validate(23, 30, 20, None)
                .unwrap_err()
                .to_string()
                .contains("A holds 23")
        );
        assert!(p.validate(24, 29, 20, None).is_err());
        assert!(p.validate(24, 30, 19, None).is_err());
        assert!(
            p.validate(24, 30, 20, Some(4))
                .unwrap_err()
                .to_string()
                .contains("bias")
        );
        let zero = Problem::new(0, 5, 6, Layout::NN);
        assert!(
            zero.validate(100, 100, 100, None)
                .unwrap_err()
                .to_string()
                .contains("positive")
        );
        let mut narrow = Problem::new(4, 5, 6, Layout::NT);
        narrow.ldb = 5; // B is stored [N][K]: rows of 6
        assert!(
            narrow
                .validate(100, 100, 100, None)
                .unwrap_err()
                .to_string()
                .contains("ldb")
        );
    }

    #[test]
    fn operand_sizes_follow_the_layout() {
        let p = Problem::new(3, 5, 7, Layout::TN);
        assert_eq!(p.a_dims(), (7, 3));
        assert_eq!(p.b_dims(), (7, 5));
        assert_eq!((p.lda, p.ldb, p.ldc), (3, 5, 5));
        let p = Problem::new(3, 5, 7, Layout::NT);
        assert_eq!(p.b_dims(), (5, 7));
        assert_eq!(p.b_len(), 35);
    }
}
