//! Flagged lines, the narrow form of a plane (`plane`): each 16-byte line carries the step's
//! flag beside its data, as NCCL's LL protocol does: two data words (four fp16) and the flag
//! twice, one in each 8-byte half, which a store lands whole. A reader polls the lines it needs
//! until both flags are the step's, so it waits on the data itself: one round trip through L2,
//! where a counter and then the data took two.
//!
//! Flags count the launch's steps from 1 and the host zeroes the planes before each launch, so
//! no line carries a reader's flag before its writer has stored it. A writer overwrites a line
//! only after every reader of its last value has passed a later grid barrier (the caller's
//! rule), so a reader never finds a newer step's flag where it waits for its own.
#[cfg(target_arch = "nvptx64")]
pub use kernel::Flagged;

/// 32-bit words of a plane of `rows` rows of `width` fp16 as flagged lines (a 16-byte line for
/// each four), which also holds its plain form.
pub const fn plane_words(rows: usize, width: usize) -> usize {
    rows * width / 4 * 4
}

#[cfg(target_arch = "nvptx64")]
mod kernel {
    use super::super::THREADS;
    use crate::arch::*;

    /// Lines a thread has in flight at once while gathering.
    const IN_FLIGHT: usize = 8;

    /// Whether a line read by a poll carries `flag` in both halves.
    #[inline(always)]
    fn landed(line: &[u32; 4], flag: u32) -> bool {
        line[1] == flag && line[3] == flag
    }

    /// An fp16 plane `[rows][width]` as flagged lines from `at` (`width` a multiple of 8): row
    /// `r`'s columns `4c..4c + 4` are line `r·width/4 + c`.
    #[derive(Clone, Copy)]
    pub struct Flagged {
        at: *mut u32,
        width: usize,
    }

    impl Flagged {
        /// The plane of `width` columns at `at`.
        #[inline(always)]
        pub fn new(at: *mut u32, width: usize) -> Flagged {
            Flagged { at, width }
        }

        /// The line of row `r` that holds columns `4c..4c + 4`.
        #[inline(always)]
        fn line(&self, r: usize, c: usize) -> *mut u32 {
            self.at.wrapping_add(4 * (r * self.width / 4 + c))
        }

        /// Columns `c0..c0 + 8` of row `r` (`c0` a multiple of 8), the eight fp16 of `v` as a
        /// 16-byte load from shared memory holds them, flagged `flag`.
        #[inline(always)]
        pub fn put8(&self, r: usize, c0: usize, v: [u32; 4], flag: u32) {
            st_relaxed_v4(self.line(r, c0 / 4), [v[0], flag, v[1], flag]);
            st_relaxed_v4(self.line(r, c0 / 4 + 1), [v[2], flag, v[3], flag]);
        }

        /// Rows `r0..r0 + rows` into shared memory at `to` (`stride` bytes a row) once their lines
        /// carry `flag`, by the block's threads (this one `tid`). The region `area` (rows, columns;
        /// columns a multiple of 4) is written whole: zeros past the plane's rows and width. Each
        /// thread has [`IN_FLIGHT`] lines in flight before it waits on the first.
        #[inline(always)]
        pub fn gather(
            &self,
            tid: usize,
            (r0, rows): (usize, usize),
            flag: u32,
            (to, stride): (u32, usize),
            area: (usize, usize),
        ) {
            let (lines, per_row) = ((self.width / 4) as u32, (area.1 / 4) as u32);
            let total = area.0 as u32 * per_row;
            let mut i = tid as u32;
            while i < total {
                // Each line's place in the area, and whether the plane has it.
                let at: [(u32, u32); IN_FLIGHT] = core::array::from_fn(|j| {
                    let n = i + (j * THREADS) as u32;
                    (n / per_row, n % per_row)
                });
                let has = |j: usize| at[j].0 < rows as u32 && at[j].1 < lines;
                // Every load issued before any is waited on: a line past the plane loads the
                // block's first, whose value is not used.
                let src: [*const u32; IN_FLIGHT] = core::array::from_fn(|j| {
                    let (r, c) = if has(j) { at[j] } else { (0, 0) };
                    self.line(r0 + r as usize, c as usize) as *const u32
                });
                let mut v: [[u32; 4]; IN_FLIGHT] = core::array::from_fn(|j| ld_relaxed_v4(src[j]));
                for j in 0..IN_FLIGHT {
                    if has(j) {
                        while !landed(&v[j], flag) {
                            v[j] = ld_relaxed_v4(src[j]);
                        }
                    } else {
                        v[j] = [0; 4];
                    }
                    let (r, c) = at[j];
                    if r < area.0 as u32 {
                        st_shared_v2(to + r * stride as u32 + 8 * c, [v[j][0], v[j][2]]);
                    }
                }
                i += (IN_FLIGHT * THREADS) as u32;
            }
        }
    }
}
