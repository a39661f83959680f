//! Device memory as arenas: one allocation carved into typed buffers, so that a run allocates
//! once and a training step never does.
use super::Gpu;
use anyhow::{Context, Result, ensure};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::any::Any;
use std::marker::PhantomData;

/// A typed region of device memory carved from an [`Arena`]: an address and a length. It owns
/// nothing; the arena it came from must outlive its use.
pub struct Buf<T> {
    pub ptr: u64,
    pub len: usize,
    _t: PhantomData<T>,
}

impl<T> Clone for Buf<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Buf<T> {}

impl<T> Buf<T> {
    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.ptr + (i * size_of::<T>()) as u64
    }
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }
}

/// One device allocation made before any work, carved into [`Buf`]s: a run's whole footprint is
/// known, allocated once, and nothing is allocated or freed while it trains.
///
/// Size it by running the same carving code against [`Arena::measuring`] first, then allocate
/// [`Arena::new`] with the `used()` that reported.
pub struct Arena {
    /// What holds the memory: a `CudaSlice`, or another library's allocation.
    _owner: Option<Box<dyn Any>>,
    base: u64,
    cap: usize,
    used: usize,
}

/// Alignment of every region: enough for 16-byte vector access and for coalescing.
pub const ARENA_ALIGN: usize = 256;

/// Offset of a region of `bytes` after `used` bytes, and the new fill, if it fits in `cap`.
pub fn carve(used: usize, bytes: usize, cap: usize) -> Option<(usize, usize)> {
    let off = used.checked_next_multiple_of(ARENA_ALIGN)?;
    let end = off.checked_add(bytes)?;
    (end <= cap).then_some((off, end))
}

impl Arena {
    /// An arena that hands out addresses but owns no memory: for measuring a footprint.
    pub fn measuring() -> Arena {
        Arena {
            _owner: None,
            base: 0,
            cap: usize::MAX,
            used: 0,
        }
    }

    /// Whether `bytes` of device memory are free, with the figures where they are not.
    pub fn ensure_free(gpu: &Gpu, bytes: usize) -> Result<()> {
        let (free, _) = gpu.mem_info()?;
        ensure!(
            bytes <= free,
            "this run needs {:.1} MiB of device memory; {:.1} MiB are free",
            bytes as f64 / 1048576.0,
            free as f64 / 1048576.0
        );
        Ok(())
    }

    /// Allocates `bytes` of device memory in one piece.
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<Arena> {
        Arena::ensure_free(gpu, bytes)?;
        let mem = gpu.zeros::<u8>(bytes.max(1))?;
        let base = dptr(&mem, &gpu.stream);
        Ok(Arena {
            _owner: Some(Box::new(mem)),
            base,
            cap: bytes.max(1),
            used: 0,
        })
    }

    /// An arena over `bytes` of device memory at `base` that `owner` holds (memory another
    /// library allocated), zeroed as [`Arena::new`]'s is.
    ///
    /// # Safety
    /// `base..base + bytes` must be device memory of `gpu`, valid as long as `owner` lives.
    pub unsafe fn over(gpu: &Gpu, owner: impl Any, base: u64, bytes: usize) -> Result<Arena> {
        gpu.zero_raw(base, bytes)?;
        Ok(Arena {
            _owner: Some(Box::new(owner)),
            base,
            cap: bytes,
            used: 0,
        })
    }

    pub fn alloc<T>(&mut self, len: usize) -> Result<Buf<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .context("buffer size overflows")?;
        let (off, used) = carve(self.used, bytes, self.cap).with_context(|| {
            format!(
                "arena of {} bytes is full ({} used, {bytes} more asked)",
                self.cap, self.used
            )
        })?;
        self.used = used;
        Ok(Buf {
            ptr: self.base + off as u64,
            len,
            _t: PhantomData,
        })
    }

    /// Bytes handed out so far, alignment included.
    pub fn used(&self) -> usize {
        self.used
    }
}

/// The raw device address of a buffer, for kernels that take pointers with offsets.
pub fn dptr<T>(buf: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    buf.device_ptr(stream).0
}
