//! The CUDA runtime of the host: one device, one stream and the embedded module here; typed
//! launches, side streams and event timers in `launch`; device-buffer arenas in `arena`.
use crate::ptx::{self, EmbeddedPtx};
use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use indicatif::{ProgressBar, ProgressFinish, WeakProgressBar};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use cudarc::driver::PushKernelArg;

mod arena;
mod launch;
pub use arena::*;
pub use launch::*;

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
