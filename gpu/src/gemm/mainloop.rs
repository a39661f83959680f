//! A configuration's mainloop: how it stages and multiplies the tiles, which decides the PTX
//! it needs.
use crate::target::Target;

/// A configuration's mainloop, named by its row of [`tile_configs!`](crate::tile_configs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mainloop {
    /// A double buffer staged through registers, `mma.sync` m16n8k8 (sm_75).
    Staged,
    /// A `cp.async` multi-stage pipeline, `mma.sync` m16n8k16 (sm_80).
    CpAsync,
    /// Tensor copies of the copy engine into 128-byte-swizzled tiles, `wgmma` (sm_90a).
    Wgmma,
    /// The `wgmma` mainloop in persistent blocks whose two consumer warpgroups take the tiles
    /// in turn, one's epilogue beside the other's mainloop (sm_90a).
    PingPong,
}

impl Mainloop {
    /// Whether PTX built for `target` has the instructions of this mainloop.
    pub const fn in_ptx(self, target: Target) -> bool {
        match self {
            Mainloop::Staged => true,
            Mainloop::CpAsync => target.cp_async(),
            Mainloop::Wgmma | Mainloop::PingPong => target.wgmma(),
        }
    }
    /// The oldest PTX that has it: a `wgmma` row's runs on Hopper alone.
    pub const fn oldest_ptx(self) -> Target {
        match self {
            Mainloop::Staged => Target::SM75,
            Mainloop::CpAsync => Target::SM80,
            Mainloop::Wgmma | Mainloop::PingPong => Target {
                sm: 90,
                specific: true,
            },
        }
    }
    /// The oldest architecture whose PTX has it (compute capability ×10).
    pub const fn min_sm(self) -> u32 {
        self.oldest_ptx().sm
    }
}
