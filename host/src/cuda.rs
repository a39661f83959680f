//! The CUDA runtime of the host: one device, one stream, the embedded module, typed launches,
//! device-buffer arenas and event timers.
use crate::ptx::{self, EmbeddedPtx};
use anyhow::{Context, Result, bail};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, ValidAsZeroBits,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use cudarc::driver::PushKernelArg;

/// A device with its stream and the best embedded PTX module for it.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub module: Arc<CudaModule>,
    pub ptx: &'static EmbeddedPtx,
    /// Compute capability, major·10 + minor.
    pub sm: u32,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl Gpu {
    /// Opens device `ordinal`. Without a driver or a device this is an error with one clear
    /// sentence, never a panic (cudarc panics if asked to load a missing libcuda).
    pub fn new(ordinal: usize) -> Result<Gpu> {
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            bail!(
                "no CUDA driver found (libcuda.so could not be loaded): this command needs an NVIDIA GPU and its driver"
            );
        }
        let count =
            CudaContext::device_count().context("the CUDA driver could not count devices")?;
        if count == 0 {
            bail!("the CUDA driver is installed but reports no GPU");
        }
        if ordinal >= count as usize {
            bail!("GPU {ordinal} requested, but only {count} present");
        }
        let ctx = CudaContext::new(ordinal).context("could not create a CUDA context")?;
        // One stream, ordered by hand: cudarc's per-buffer events would add work to every
        // launch and break graph capture.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability()?;
        let sm = (major * 10 + minor) as u32;
        let ptx = ptx::best_for(sm).with_context(|| {
            let built: Vec<_> = ptx::EMBEDDED.iter().map(|p| p.arch).collect();
            format!("this GPU is sm_{sm}, older than every embedded PTX ({built:?}); rebuild with GPU_ARCHS including an older arch")
        })?;
        let module = ctx
            .load_module(ptx.source.to_string().into())
            .with_context(|| format!("the driver rejected the embedded {} PTX", ptx.arch))?;
        let stream = ctx.new_stream()?;
        Ok(Gpu {
            ctx,
            stream,
            module,
            ptx,
            sm,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// A kernel of the module by name (looked up once, then cached).
    pub fn function(&self, name: &str) -> Result<CudaFunction> {
        let mut map = self.functions.lock().unwrap();
        if let Some(f) = map.get(name) {
            return Ok(f.clone());
        }
        let f = self
            .module
            .load_function(name)
            .with_context(|| format!("kernel {name} is not in the {} PTX", self.ptx.arch))?;
        map.insert(name.to_string(), f.clone());
        Ok(f)
    }

    pub fn name(&self) -> Result<String> {
        Ok(self.ctx.name()?)
    }

    pub fn attribute(&self, a: Attr) -> Result<i32> {
        Ok(self.ctx.attribute(a)?)
    }

    pub fn sm_count(&self) -> Result<u32> {
        Ok(self.attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32)
    }

    /// Most dynamic shared memory one block may use after opting in.
    pub fn max_smem_optin(&self) -> Result<usize> {
        Ok(self.attribute(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize)
    }

    /// (free, total) device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        Ok(self.ctx.mem_get_info()?)
    }

    pub fn sync(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        Ok(self.stream.alloc_zeros(n)?)
    }

    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(data)?)
    }

    pub fn download<T: DeviceRepr + Default + Clone>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(buf)?)
    }

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

/// The raw device address of a buffer, for kernels that take pointers with offsets.
pub fn dptr<T>(buf: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    buf.device_ptr(stream).0
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

/// Elapsed GPU time between two points of the stream.
pub struct Timer {
    start: CudaEvent,
    end: CudaEvent,
    stream: Arc<CudaStream>,
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
