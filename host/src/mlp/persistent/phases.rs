//! `host mnist --phases`: the persistent kernel's phase trace (`gpu::persistent::trace`) as a
//! table. Each block's thread 0 marks the GPU's nanosecond clock as a step starts and as each
//! phase ends; a phase's time is its mark less the one before. The table gives the median over
//! an epoch's steps for block 0 and for the slowest block (the largest median step), as
//! `docs/persistent.md` and `docs/deeper.md` print it.
use gpu::persistent::trace::MARKS;
use std::fmt::Write;

/// The marks of one epoch: `[step][block][mark]`, as the kernel writes them.
pub struct Marks<'a> {
    pub marks: &'a [u64],
    pub steps: usize,
    pub blocks: usize,
}

impl Marks<'_> {
    /// Nanoseconds block `b` spent in each phase of step `s` (the first of `phases` phases after
    /// the step's start mark), and the whole step last.
    fn times(&self, s: usize, b: usize, phases: usize) -> Vec<u64> {
        let row = &self.marks[(s * self.blocks + b) * MARKS..][..=phases];
        let mut t: Vec<u64> = row.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
        t.push(row[phases].saturating_sub(row[0]));
        t
    }

    /// Median over the steps of each phase's time of block `b`, and of its step.
    fn medians(&self, b: usize, phases: usize) -> Vec<u64> {
        let steps: Vec<_> = (0..self.steps).map(|s| self.times(s, b, phases)).collect();
        (0..=phases)
            .map(|p| median(steps.iter().map(|t| t[p]).collect()))
            .collect()
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The table of `names`' phases from `m`: a row a phase and one for the step, in ns.
pub fn table(names: &[&str], m: &Marks) -> String {
    let phases = names.len();
    let per_block: Vec<_> = (0..m.blocks).map(|b| m.medians(b, phases)).collect();
    let slowest = (0..m.blocks)
        .max_by_key(|&b| per_block[b][phases])
        .unwrap_or(0);
    let mut s = format!(
        "phase trace: median over {} steps of the last epoch, ns (block 0, and block {slowest}, the slowest step of {} blocks)\n",
        m.steps, m.blocks
    );
    let _ = writeln!(s, "| phase | block 0 | block {slowest} |");
    let _ = writeln!(s, "| --- | ---: | ---: |");
    for (p, name) in names.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {name} | {} | {} |",
            per_block[0][p], per_block[slowest][p]
        );
    }
    let _ = writeln!(
        s,
        "| **step** | **{}** | **{}** |",
        per_block[0][phases], per_block[slowest][phases]
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two blocks, three steps, two phases: block 1 is slower; each phase's median is its own.
    #[test]
    fn the_table_gives_each_phases_median_and_the_slowest_block() {
        let (steps, blocks) = (3, 2);
        let mut marks = vec![0u64; steps * blocks * MARKS];
        let phase_ns = |b: usize, s: usize| match (b, s) {
            (0, 1) => [100, 900],
            (0, _) => [100, 200],
            (_, _) => [300 + s as u64, 400],
        };
        for s in 0..steps {
            for b in 0..blocks {
                let row = &mut marks[(s * blocks + b) * MARKS..];
                row[0] = 10_000 * s as u64;
                let [a, c] = phase_ns(b, s);
                row[1] = row[0] + a;
                row[2] = row[1] + c;
            }
        }
        let t = table(
            &["one", "two"],
            &Marks {
                marks: &marks,
                steps,
                blocks,
            },
        );
        assert!(t.contains("| one | 100 | 301 |"), "{t}");
        assert!(t.contains("| two | 200 | 400 |"), "{t}");
        assert!(t.contains("| **step** | **300** | **701** |"), "{t}");
        assert!(t.contains("block 1, the slowest step of 2 blocks"), "{t}");
    }
}
