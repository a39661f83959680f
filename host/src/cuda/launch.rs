//! Typed launches: parameter blocks, launch attributes and configurations, the extended
//! launch, and the side streams and event timers around them.
use super::Gpu;
use anyhow::Result;
use cudarc::driver::sys::{self, CUlaunchAttributeID};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, DeviceRepr, LaunchConfig};
use std::ffi::c_void;
use std::sync::Arc;

/// A kernel's whole parameter block (one of `gpu::params`), passed by value through
/// cudarc's launch builder: `b.arg(&ParamBlock(p))`.
#[repr(transparent)]
pub struct ParamBlock<T>(pub T);

// SAFETY: the blocks are `#[repr(C)]` plain data (integers, floats and device addresses), laid
// out as the kernel declares its one parameter (checked against the PTX by a CPU test).
unsafe impl<T: Copy> DeviceRepr for ParamBlock<T> {}

/// A kernel parameter as `cuLaunchKernelEx` takes it: a pointer to its value.
pub fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

/// A launch attribute for `cuLaunchKernelEx`, its value set by `set`.
pub fn attribute(
    id: CUlaunchAttributeID,
    set: impl FnOnce(&mut sys::CUlaunchAttributeValue),
) -> sys::CUlaunchAttribute {
    // SAFETY: the attribute is plain old data; all zeroes is a valid (empty) value.
    let mut a: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    a.id = id;
    set(&mut a.value);
    a
}

/// The launch attribute that groups blocks into clusters of `x` × `y`.
pub fn cluster_attribute((x, y): (u32, u32)) -> sys::CUlaunchAttribute {
    attribute(
        CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        |v| v.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x, y, z: 1 },
    )
}

/// The launch attribute that makes a launch a programmatic dependent launch: its blocks may be
/// scheduled while the kernel before it on the stream finishes, and wait for it on the GPU
/// (`griddepcontrol.wait`) instead of behind a launch. Only for kernels that wait before their
/// first global memory access, on GPUs that have it (`Target::dependent_launches`).
pub fn dependent_attribute() -> sys::CUlaunchAttribute {
    attribute(
        CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        |v| v.programmaticStreamSerializationAllowed = 1,
    )
}

impl Gpu {
    /// The driver's launch configuration for `cfg` on this GPU's stream, with `attrs` (which
    /// must outlive its use): what `cuLaunchKernelEx` and the occupancy queries take.
    pub fn launch_config(
        &self,
        cfg: LaunchConfig,
        attrs: &mut [sys::CUlaunchAttribute],
    ) -> sys::CUlaunchConfig {
        sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        }
    }

    /// Launches `f` on `stream` with its one parameter block `p`, as a dependent launch where
    /// the GPU has them ([`dependent_attribute`]), else as a plain one.
    ///
    /// # Safety
    /// As for any launch: `p` must be the kernel's parameter block and the buffers it names
    /// must outlive the work. The kernel must wait for the grid before it
    /// (`wait_for_prior_grids`) before its first global memory access.
    pub unsafe fn launch_dependent<T: Copy>(
        &self,
        stream: &CudaStream,
        f: &CudaFunction,
        cfg: LaunchConfig,
        p: T,
    ) -> Result<()> {
        let mut dependent = [dependent_attribute()];
        let n = usize::from(self.ptx.target().dependent_launches());
        // SAFETY: the caller vouches for the parameter block and the kernel's wait.
        unsafe { self.launch_ex(stream, f, cfg, &mut dependent[..n], &mut [arg(&p)]) }
    }

    /// Launches `f` on `stream` with driver launch attributes (`cuLaunchKernelEx`), which
    /// cudarc's launch builder does not take: e.g. a programmatic dependent launch, which may
    /// start while the kernel before it finishes, so `f` must execute `griddepcontrol.wait`
    /// before its first global memory access. `args` point at the kernel's parameters, in
    /// order.
    ///
    /// # Safety
    /// As for any launch: `args` must match the kernel's parameters and the buffers they name
    /// must outlive the work.
    pub unsafe fn launch_ex(
        &self,
        stream: &CudaStream,
        f: &CudaFunction,
        cfg: LaunchConfig,
        attrs: &mut [sys::CUlaunchAttribute],
        args: &mut [*mut c_void],
    ) -> Result<()> {
        let config = sys::CUlaunchConfig {
            hStream: stream.cu_stream(),
            ..self.launch_config(cfg, attrs)
        };
        self.ctx.bind_to_thread()?;
        // SAFETY: `config` and `attrs` outlive the call; the caller vouches for `args`.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                f.cu_function(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()?;
        Ok(())
    }
}

/// A grid of `ceil(n / threads)` blocks, capped for grid-stride kernels.
pub fn grid_1d(n: usize, threads: u32) -> LaunchConfig {
    let blocks = n.div_ceil(threads as usize).clamp(1, 65535 * 8) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A second stream of the GPU's context, for work that runs beside the GPU's stream, and the
/// events that fork work onto it and join it back. Its default priority is below the GPU's
/// stream's: where both have blocks waiting, the GPU's stream's take freed SMs first.
pub struct SideStream {
    pub stream: Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
}

impl SideStream {
    pub fn new(gpu: &Gpu) -> Result<SideStream> {
        Ok(SideStream {
            stream: gpu.ctx.new_stream()?,
            fork: gpu.ctx.new_event(None)?,
            join: gpu.ctx.new_event(None)?,
        })
    }

    /// Makes this stream wait for the work queued so far on the GPU's stream.
    pub fn fork(&self, gpu: &Gpu) -> Result<()> {
        self.fork.record(&gpu.stream)?;
        Ok(self.stream.wait(&self.fork)?)
    }

    /// Makes the GPU's stream wait for the work queued so far on this one.
    pub fn join(&self, gpu: &Gpu) -> Result<()> {
        self.join.record(&self.stream)?;
        Ok(gpu.stream.wait(&self.join)?)
    }
}

/// Elapsed GPU time between two points of the stream.
pub struct Timer {
    start: CudaEvent,
    end: CudaEvent,
    stream: Arc<CudaStream>,
}

impl Gpu {
    /// A timer of work on this GPU's stream, by CUDA events.
    pub fn timer(&self) -> Result<Timer> {
        // cudarc's default events have timing disabled.
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(Timer {
            start: self.ctx.new_event(timed)?,
            end: self.ctx.new_event(timed)?,
            stream: self.stream.clone(),
        })
    }
}

impl Timer {
    pub fn start(&self) -> Result<()> {
        Ok(self.start.record(&self.stream)?)
    }
    /// Records the end, waits for it, and returns milliseconds since `start`.
    pub fn stop_ms(&self) -> Result<f32> {
        self.end.record(&self.stream)?;
        self.end.synchronize()?;
        Ok(self.start.elapsed_ms(&self.end)?)
    }
}
