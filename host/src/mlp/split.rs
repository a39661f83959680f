//! How several GPUs share a training step. Data parallel splits the batch: each replica holds the
//! whole model, and the gradients of every parameter are summed at every step. Tensor parallel
//! splits the hidden layer of a one-hidden-layer MLP: each GPU holds its block of the layer's
//! units (W1's rows, b1, W2's columns) and takes the whole batch, so its gradients are its own
//! parameters' and nothing but the logits is summed, rows × classes values a step instead of
//! every parameter. Rank 0 alone holds the logits' bias (the others hold zeros, which they never
//! step), so the sum of the ranks' partial logits adds it once.
use super::params::param_layout;

/// Rank `rank`'s block of a one-hidden-layer model split over `world` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub rank: usize,
    pub world: usize,
}

impl Split {
    /// The widths of this rank's model: the hidden layer's block of units.
    pub fn local_sizes(&self, sizes: &[usize]) -> Vec<usize> {
        vec![sizes[0], sizes[1] / self.world, sizes[2]]
    }

    /// The first hidden unit of this rank's block.
    fn first_unit(&self, sizes: &[usize]) -> usize {
        self.rank * sizes[1] / self.world
    }

    /// This rank's parameters (in its own flat layout) out of the whole model's `full`.
    pub fn local_params(&self, sizes: &[usize], full: &[f32]) -> Vec<f32> {
        let local = self.local_sizes(sizes);
        let (lo, n) = param_layout(&local);
        let mut p = vec![0.0; n];
        self.each_parameter(sizes, |whole, own| p[own] = full[whole]);
        if self.rank == 0 {
            let (fo, _) = param_layout(sizes);
            let classes = sizes[2];
            p[lo[1].1..lo[1].1 + classes].copy_from_slice(&full[fo[1].1..fo[1].1 + classes]);
        }
        p
    }

    /// Calls `f(whole, own)` for every parameter of this rank's block but the logits' bias: its
    /// index in the whole model's flat layout and in this rank's.
    fn each_parameter(&self, sizes: &[usize], mut f: impl FnMut(usize, usize)) {
        let (inputs, units, classes) = (sizes[0], sizes[1] / self.world, sizes[2]);
        let ((fo, _), (lo, _)) = (param_layout(sizes), param_layout(&self.local_sizes(sizes)));
        let first = self.first_unit(sizes);
        for u in 0..units {
            for i in 0..inputs {
                f(fo[0].0 + (first + u) * inputs + i, lo[0].0 + u * inputs + i);
            }
            f(fo[0].1 + first + u, lo[0].1 + u);
            for c in 0..classes {
                f(fo[1].0 + c * sizes[1] + first + u, lo[1].0 + c * units + u);
            }
        }
    }
}

/// The whole model's parameters from every rank's, `locals` (rank `r`'s `n` at `r · n`, as an
/// all-gather leaves them): the logits' bias is rank 0's.
pub fn join(sizes: &[usize], world: usize, locals: &[f32]) -> Vec<f32> {
    let (fo, n) = param_layout(sizes);
    let mut full = vec![0.0; n];
    let n_local = locals.len() / world;
    for rank in 0..world {
        let own = &locals[rank * n_local..(rank + 1) * n_local];
        Split { rank, world }.each_parameter(sizes, |whole, mine| full[whole] = own[mine]);
    }
    let local = Split { rank: 0, world }.local_sizes(sizes);
    let bias = param_layout(&local).0[1].1;
    let classes = sizes[2];
    full[fo[1].1..fo[1].1 + classes].copy_from_slice(&locals[bias..bias + classes]);
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_units_join_into_the_whole_model() {
        let sizes = [30, 12, 5];
        let n = param_layout(&sizes).1;
        let full: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
        for world in [1, 2, 3, 4] {
            let locals: Vec<f32> = (0..world)
                .flat_map(|rank| Split { rank, world }.local_params(&sizes, &full))
                .collect();
            let joined = join(&sizes, world, &locals);
            // The parameters, not the padding between the layout's aligned blocks.
            let (fo, _) = param_layout(&sizes);
            let used = |i: usize| {
                sizes.windows(2).zip(&fo).any(|(io, &(w, b))| {
                    (w..w + io[0] * io[1]).contains(&i) || (b..b + io[1]).contains(&i)
                })
            };
            for i in 0..n {
                if used(i) {
                    assert_eq!(joined[i], full[i], "world {world}, parameter {i}");
                }
            }
        }
    }

    #[test]
    fn a_block_holds_its_units_rows_columns_and_rank_0_the_logits_bias() {
        let sizes = [3, 4, 2];
        let (fo, n) = param_layout(&sizes);
        let full: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let s = Split { rank: 1, world: 2 };
        assert_eq!(s.local_sizes(&sizes), [3, 2, 2]);
        let p = s.local_params(&sizes, &full);
        let (lo, _) = param_layout(&s.local_sizes(&sizes));
        // W1's rows 2 and 3, b1's units 2 and 3, W2's columns 2 and 3 of each class.
        assert_eq!(p[lo[0].0..lo[0].0 + 6], full[fo[0].0 + 6..fo[0].0 + 12]);
        assert_eq!(p[lo[0].1..lo[0].1 + 2], full[fo[0].1 + 2..fo[0].1 + 4]);
        assert_eq!(
            p[lo[1].0..lo[1].0 + 4],
            [
                full[fo[1].0 + 2],
                full[fo[1].0 + 3],
                full[fo[1].0 + 6],
                full[fo[1].0 + 7]
            ]
        );
        // Only rank 0 adds the logits' bias.
        assert_eq!(p[lo[1].1..lo[1].1 + 2], [0.0, 0.0]);
        let r0 = Split { rank: 0, world: 2 }.local_params(&sizes, &full);
        assert_eq!(r0[lo[1].1..lo[1].1 + 2], full[fo[1].1..fo[1].1 + 2]);
    }
}
