//! The CUDA runtime of the host: one device, one stream, the embedded module, typed launches,
//! device-buffer arenas and event timers.
use crate::ptx::{self, EmbeddedPtx};
use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::{self, CUdevice_attribute as Attr, CUlaunchAttributeID};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use indicatif::{ProgressBar, ProgressFinish, WeakProgressBar};
use std::collections::HashMap;
use std::ffi::c_void;
use std::io::IsTerminal;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use cudarc::driver::PushKernelArg;

/// How a [`Gpu`] loads its module and presents itself to the host: the PTX it loads (for
/// studying an older architecture's path on a newer device), whether a cubin may stand in for
/// it, and the shared memory the host believes a block may use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// The embedded PTX to load (`--ptx sm_75`) instead of the newest the device runs.
    pub ptx: Option<ptx::Target>,
    /// Bytes of shared memory per block the host takes as the device's opt-in limit
    /// (`--max-smem-kb`), at most the real one.
    pub max_smem: Option<usize>,
    /// Load the PTX even where an embedded cubin runs (`--jit`): the driver's compiler can be
    /// newer than the build's ptxas and its SASS faster, at the price of the compile on an
    /// empty driver cache.
    pub jit: bool,
}

impl GpuOptions {
    /// What can be checked without a device: a cap of zero.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.max_smem != Some(0),
            "--max-smem-kb must be positive: it caps the shared memory of a block"
        );
        Ok(())
    }
}

/// The shared memory per block the host may use: the device's opt-in limit `device`, or `cap`
/// where one is set, which may only lower it.
pub fn smem_limit(device: usize, cap: Option<usize>) -> Result<usize> {
    let Some(cap) = cap else { return Ok(device) };
    ensure!(
        cap > 0 && cap <= device,
        "--max-smem-kb {} is not within this GPU's shared memory of {} KiB per block ({device} B, the opt-in limit): a cap can only lower it",
        cap / 1024,
        device / 1024
    );
    Ok(cap)
}

/// A device with its stream and the embedded PTX module chosen for it.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub module: Arc<CudaModule>,
    /// The PTX chosen for the device; `module` holds it or the cubin assembled from it.
    pub ptx: &'static EmbeddedPtx,
    /// Which of the two `module` was loaded from.
    pub form: ModuleForm,
    /// Compute capability, major·10 + minor.
    pub sm: u32,
    /// What the device was opened with.
    pub options: GpuOptions,
    /// Multiprocessors (read once: launches size grids by it).
    sms: u32,
    /// The device's opt-in shared memory per block, and what the host uses of it (the cap).
    smem_device: usize,
    smem: usize,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl Gpu {
    /// Opens device `ordinal` with the newest embedded PTX it runs and its whole shared memory.
    /// Without a driver or a device this is an error of one sentence, as for
    /// [`Gpu::with_options`].
    pub fn new(ordinal: usize) -> Result<Gpu> {
        Gpu::with_options(ordinal, &GpuOptions::default())
    }

    /// Opens device `ordinal` as `options` present it. Without a driver or a device this is an
    /// error with one clear sentence, never a panic (cudarc panics if asked to load a missing
    /// libcuda); so is an option the device or the build cannot honour.
    pub fn with_options(ordinal: usize, options: &GpuOptions) -> Result<Gpu> {
        options.validate()?;
        let count = Gpu::count()?;
        if ordinal >= count {
            bail!("GPU {ordinal} requested, but only {count} present");
        }
        let ctx = CudaContext::new(ordinal).context("could not create a CUDA context")?;
        // Streams ordered by hand (the persistent kernel's shuffle stream meets this one by its
        // own events): cudarc's per-buffer events would add work to every launch and break
        // graph capture.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability()?;
        let sm = (major * 10 + minor) as u32;
        let ptx = ptx::choose(sm, options.ptx)?;
        let smem_device =
            ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize;
        let smem = smem_limit(smem_device, options.max_smem)?;
        let (module, form) = load_module(&ctx, ptx, sm, options.jit)?;
        // The highest priority: where another stream's kernels run beside this one's (the
        // persistent kernel's shuffle ahead), this stream's blocks take freed SMs first.
        ctx.bind_to_thread()?;
        let (_, highest) = cudarc::driver::result::stream::get_priority_range()?;
        let stream = ctx.new_stream_with_priority(highest)?;
        let sms = ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        Ok(Gpu {
            ctx,
            stream,
            module,
            ptx,
            form,
            sm,
            options: options.clone(),
            sms,
            smem_device,
            smem,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// GPUs present: at least one, or an error that says why there is none.
    pub fn count() -> Result<usize> {
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
        Ok(count as usize)
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
            .with_context(|| format!("kernel {name} is not in the {}", self.module_source()))?;
        map.insert(name.to_string(), f.clone());
        Ok(f)
    }

    pub fn name(&self) -> Result<String> {
        Ok(self.ctx.name()?)
    }

    /// What `module` was loaded from, e.g. `sm_90 cubin` or
    /// `sm_90 PTX (JIT-compiled by the driver)`.
    pub fn module_source(&self) -> String {
        match self.form {
            ModuleForm::Cubin => format!("{} cubin", self.ptx.arch),
            ModuleForm::Ptx => format!("{} PTX (JIT-compiled by the driver)", self.ptx.arch),
        }
    }

    pub fn attribute(&self, a: Attr) -> Result<i32> {
        Ok(self.ctx.attribute(a)?)
    }

    pub fn sm_count(&self) -> u32 {
        self.sms
    }

    /// Most dynamic shared memory one block may use after opting in: the device's limit, or
    /// the cap of [`GpuOptions::max_smem`]. Every choice the host makes by shared memory reads
    /// this.
    pub fn max_smem_optin(&self) -> usize {
        self.smem
    }

    /// The device's own opt-in limit, whatever the cap.
    pub fn device_max_smem_optin(&self) -> usize {
        self.smem_device
    }

    /// The shared-memory limit in words, for errors and reasons: what the device allows, or
    /// what the cap allows.
    pub fn describe_smem_limit(&self) -> String {
        match self.options.max_smem {
            Some(_) => format!("--max-smem-kb caps a block at {} B", self.smem),
            None => format!("this GPU allows {} B per block", self.smem),
        }
    }

    /// Why `ptx` was loaded: `chosen with --ptx`, or `newest that sm_90 runs`.
    pub fn ptx_choice(&self) -> String {
        match self.options.ptx {
            Some(_) => "chosen with --ptx".into(),
            None => format!("newest that sm_{} runs", self.sm),
        }
    }

    /// The PTX and, where one is set, the shared-memory cap, for the first line of a command:
    /// `sm_80 PTX, chosen with --ptx, shared memory capped at 64 KiB per block`.
    pub fn describe_ptx(&self) -> String {
        let mut s = format!("{} PTX", self.ptx.arch);
        if self.options.ptx.is_some() {
            s += &format!(", {}", self.ptx_choice());
        }
        if self.options.max_smem.is_some() {
            s += &format!(
                ", shared memory capped at {} KiB per block",
                self.smem / 1024
            );
        }
        s
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

    /// Copies `data` into `buf` (which must hold at least as many elements) and waits for it.
    pub fn upload_to<T: DeviceRepr>(&self, buf: Buf<T>, data: &[T]) -> Result<()> {
        ensure!(
            data.len() <= buf.len,
            "copying {} elements into a buffer of {}",
            data.len(),
            buf.len
        );
        unsafe {
            cudarc::driver::result::memcpy_htod_async(buf.ptr, data, self.stream.cu_stream())
        }?;
        self.sync()
    }

    /// The contents of `buf`, after the work queued before it.
    pub fn download_buf<T: DeviceRepr + Default + Clone>(&self, buf: Buf<T>) -> Result<Vec<T>> {
        let mut out = vec![T::default(); buf.len];
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut out, buf.ptr, self.stream.cu_stream())
        }?;
        self.sync()?;
        Ok(out)
    }

    /// Zeroes `buf` (queued on the stream).
    pub fn zero<T>(&self, buf: Buf<T>) -> Result<()> {
        self.zero_raw(buf.ptr, buf.bytes())
    }

    /// Zeroes `bytes` bytes at device address `ptr` (queued on the stream).
    pub fn zero_raw(&self, ptr: u64, bytes: usize) -> Result<()> {
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 0, bytes, self.stream.cu_stream()) }?;
        Ok(())
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

/// The form in which a module reached the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleForm {
    /// The cubin ptxas assembled at build time: SASS, loaded as it is.
    Cubin,
    /// The PTX, compiled to SASS by the driver, which caches the result for later runs.
    Ptx,
}

/// Loads `ptx` for a device of compute capability `sm`: its cubin where that SASS runs on the
/// device, else the PTX, whose compile by the driver (tens of seconds on an empty driver cache)
/// a line on stderr announces.
fn load_module(
    ctx: &Arc<CudaContext>,
    ptx: &EmbeddedPtx,
    sm: u32,
    jit: bool,
) -> Result<(Arc<CudaModule>, ModuleForm)> {
    if let Some(cubin) = ptx.cubin_for(sm).filter(|_| !jit) {
        match ctx.load_module(Ptx::from_binary(ptx::decompress(cubin)?)) {
            Ok(module) => return Ok((module, ModuleForm::Cubin)),
            // A driver older than the build's ptxas refuses its cubins, yet may take the PTX
            // (of an older PTX ISA for sm_75 and sm_80).
            Err(e) => eprintln!(
                "the driver rejected the embedded {} cubin ({e}); loading the PTX instead",
                ptx.arch
            ),
        }
    }
    let wait = jit_notice(ptx.arch);
    let module = ctx.load_module(Ptx::from_src(ptx.source));
    drop(wait);
    let module =
        module.with_context(|| format!("the driver rejected the embedded {} PTX", ptx.arch))?;
    Ok((module, ModuleForm::Ptx))
}

/// The notice in flight while a JIT compile runs, shared by the threads of every GPU compiling
/// at once so that they draw one line.
static JIT_NOTICE: Mutex<Option<WeakProgressBar>> = Mutex::new(None);

/// The notice of a JIT compile of `arch`'s PTX: a spinner on stderr, cleared when the last
/// holder drops it; where stderr is no terminal (a log), the same words as a plain line.
fn jit_notice(arch: &str) -> ProgressBar {
    let mut shared = JIT_NOTICE.lock().unwrap();
    if let Some(bar) = shared.as_ref().and_then(WeakProgressBar::upgrade) {
        return bar;
    }
    let msg =
        format!("compiling the {arch} PTX for this GPU (the driver caches it for later runs)");
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new_spinner().with_message(msg);
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    } else {
        eprintln!("{msg}");
        ProgressBar::hidden()
    };
    let bar = bar.with_finish(ProgressFinish::AndClear);
    *shared = Some(bar.downgrade());
    bar
}

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
    _mem: Option<CudaSlice<u8>>,
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
            _mem: None,
            base: 0,
            cap: usize::MAX,
            used: 0,
        }
    }

    /// Allocates `bytes` of device memory in one piece.
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<Arena> {
        let (free, _) = gpu.mem_info()?;
        ensure!(
            bytes <= free,
            "this run needs {:.1} MiB of device memory; {:.1} MiB are free",
            bytes as f64 / 1048576.0,
            free as f64 / 1048576.0
        );
        let mem = gpu.zeros::<u8>(bytes.max(1))?;
        let base = dptr(&mem, &gpu.stream);
        Ok(Arena {
            _mem: Some(mem),
            base,
            cap: bytes.max(1),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carving_aligns_and_respects_capacity() {
        assert_eq!(carve(0, 10, 1000), Some((0, 10)));
        assert_eq!(carve(10, 10, 1000), Some((256, 266)));
        assert_eq!(carve(256, 0, 256), Some((256, 256)));
        assert_eq!(carve(300, 100, 600), None);
        assert_eq!(carve(usize::MAX - 10, 1, usize::MAX), None);
    }

    #[test]
    fn a_shared_memory_cap_may_only_lower_the_limit() {
        assert_eq!(smem_limit(232448, None).unwrap(), 232448);
        assert_eq!(smem_limit(232448, Some(65536)).unwrap(), 65536);
        assert_eq!(smem_limit(232448, Some(232448)).unwrap(), 232448);
        for cap in [0, 232449, 300 * 1024] {
            let e = smem_limit(232448, Some(cap)).unwrap_err().to_string();
            assert!(e.contains("--max-smem-kb") && e.contains("227 KiB"), "{e}");
        }
        let e = GpuOptions {
            max_smem: Some(0),
            ..Default::default()
        };
        assert!(e.validate().unwrap_err().to_string().contains("positive"));
        assert!(GpuOptions::default().validate().is_ok());
    }

    #[test]
    fn measuring_arena_reports_the_footprint() {
        let mut a = Arena::measuring();
        let x = a.alloc::<f32>(3).unwrap();
        let y = a.alloc::<u16>(1000).unwrap();
        assert_eq!((x.ptr, x.bytes(), y.ptr, y.at(2)), (0, 12, 256, 260));
        assert_eq!(a.used(), 256 + 2000);
    }
}
