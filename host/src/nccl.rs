//! NCCL, loaded at run time from wherever the system or PyTorch installed `libnccl.so.2`: the
//! few calls training on several GPUs makes (a communicator per rank, sums in place, the
//! gathers of a split model's checkpoint).
//!
//! The bindings are our own, a handful of entry points of NCCL's stable C ABI: cudarc's NCCL
//! loader looks only for names such as `libnccl.so`, and PyTorch's NCCL wheel ships only
//! `libnccl.so.2`.
use anyhow::{Context, Result, bail};
use cudarc::driver::CudaStream;
use half::f16;
use libloading::Library;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

type Status = c_int;
type RawComm = *mut c_void;

/// What every rank of a communicator is given to find the others: made once, by rank 0, and
/// passed to the rest (here to threads; between processes it would travel through the
/// environment, as `torchrun` passes its rendezvous).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [c_char; 128],
}

/// The NCCL library and its entry points (`ncclDataType_t` and `ncclRedOp_t` as C ints).
struct Api {
    path: String,
    version: c_int,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Status,
    comm_init_rank: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> Status,
    comm_abort: unsafe extern "C" fn(RawComm) -> Status,
    #[allow(clippy::type_complexity)]
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        *mut c_void,
    ) -> Status,
    #[allow(clippy::type_complexity)]
    reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        *mut c_void,
    ) -> Status,
    #[allow(clippy::type_complexity)]
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        RawComm,
        *mut c_void,
    ) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    /// NCCL 2.27's symmetric memory, where the loaded library has it.
    windows: Option<Windows>,
    // The functions above point into the library: it lives as long as they do.
    _lib: Library,
}

/// The entry points of symmetric memory (NCCL 2.27 on): device memory from `ncclMemAlloc`,
/// registered by every rank as a window, which NCCL's symmetric kernels read and write directly
/// in the other ranks' memory.
struct Windows {
    mem_alloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> Status,
    mem_free: unsafe extern "C" fn(*mut c_void) -> Status,
    register: unsafe extern "C" fn(RawComm, *mut c_void, usize, *mut RawWindow, c_int) -> Status,
    deregister: unsafe extern "C" fn(RawComm, RawWindow) -> Status,
}

type RawWindow = *mut c_void;

/// `NCCL_WIN_COLL_SYMMETRIC`: the window's buffers may take part in symmetric collectives.
const WIN_COLL_SYMMETRIC: c_int = 1;

/// `ncclSum`.
const SUM: c_int = 0;

/// Element types NCCL sums, with their `ncclDataType_t`.
pub trait Element {
    const NCCL_TYPE: c_int;
}
impl Element for f16 {
    const NCCL_TYPE: c_int = 6;
}
impl Element for f32 {
    const NCCL_TYPE: c_int = 7;
}

/// The library, loaded on first use; the error says what was looked for, and where.
fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| load().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// `libnccl.so.2` where the dynamic linker finds it (`LD_LIBRARY_PATH`, the system's library
/// folders), else in the NCCL wheel PyTorch depends on.
fn load() -> Result<Api> {
    const NAME: &str = "libnccl.so.2";
    let mut tried = vec![NAME.to_string()];
    // SAFETY: loading NCCL runs only its initialisers, which have no preconditions.
    if let Ok(lib) = unsafe { Library::new(NAME) } {
        return bind(lib, NAME.into());
    }
    let packages = python_packages();
    for p in packages.iter().filter_map(|dir| find_file(dir, NAME, 3)) {
        tried.push(p.display().to_string());
        if let Ok(lib) = unsafe { Library::new(&p) } {
            return bind(lib, p.display().to_string());
        }
    }
    let looked = if packages.is_empty() {
        "python3 gave no nvidia or torch package to search".to_string()
    } else {
        format!("nor under {}", join(&packages))
    };
    bail!(
        "NCCL could not be loaded: {NAME} is not on the library path (LD_LIBRARY_PATH, the system's folders), {looked}; install NCCL (or PyTorch) or add its lib folder to LD_LIBRARY_PATH (tried {})",
        tried.join(", ")
    )
}

fn bind(lib: Library, path: String) -> Result<Api> {
    // SAFETY: each symbol has NCCL's C signature, as declared in its nccl.h since 2.x.
    unsafe {
        let get_version: unsafe extern "C" fn(*mut c_int) -> Status =
            *lib.get(b"ncclGetVersion").context("ncclGetVersion")?;
        let mut version = 0;
        get_version(&mut version);
        Ok(Api {
            path,
            version,
            get_unique_id: *lib.get(b"ncclGetUniqueId")?,
            comm_init_rank: *lib.get(b"ncclCommInitRank")?,
            comm_abort: *lib.get(b"ncclCommAbort")?,
            all_reduce: *lib.get(b"ncclAllReduce")?,
            reduce_scatter: *lib.get(b"ncclReduceScatter")?,
            all_gather: *lib.get(b"ncclAllGather")?,
            error_string: *lib.get(b"ncclGetErrorString")?,
            windows: bind_windows(&lib),
            _lib: lib,
        })
    }
}

/// Symmetric memory's entry points, if the library has every one of them.
fn bind_windows(lib: &Library) -> Option<Windows> {
    // SAFETY: each symbol has NCCL's C signature, as declared in its nccl.h since 2.27.
    unsafe {
        Some(Windows {
            mem_alloc: *lib.get(b"ncclMemAlloc").ok()?,
            mem_free: *lib.get(b"ncclMemFree").ok()?,
            register: *lib.get(b"ncclCommWindowRegister").ok()?,
            deregister: *lib.get(b"ncclCommWindowDeregister").ok()?,
        })
    }
}

/// The folders of the `nvidia` and `torch` Python packages, where PyTorch's NCCL wheel puts the
/// library, as `python3` finds them (without importing them); none without a `python3`.
fn python_packages() -> Vec<PathBuf> {
    const FIND: &str = "import importlib.util as u\n\
        for n in ('nvidia', 'torch'):\n    \
        s = u.find_spec(n)\n    \
        if s and s.submodule_search_locations:\n        \
        print(*s.submodule_search_locations, sep='\\n')";
    let out = std::process::Command::new("python3")
        .args(["-c", FIND])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The first file called `name` in `dir` or its subfolders, at most `depth` levels down.
fn find_file(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let f = dir.join(name);
    if f.is_file() {
        return Some(f);
    }
    let mut subdirs: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    subdirs
        .iter()
        .filter(|_| depth > 0)
        .find_map(|d| find_file(d, name, depth - 1))
}

fn join(paths: &[PathBuf]) -> String {
    let v: Vec<_> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

/// The loaded library's version and path, and whether it has symmetric memory, e.g. "2.27.3
/// (/usr/lib/libnccl.so.2), symmetric memory", loading it if no call has yet.
pub fn describe() -> Result<String> {
    let a = api()?;
    let v = a.version;
    let windows = if a.windows.is_some() {
        "symmetric memory"
    } else {
        "no symmetric memory (NCCL 2.27 has it)"
    };
    Ok(format!(
        "{}.{}.{} ({}), {windows}",
        v / 10000,
        v / 100 % 100,
        v % 100,
        a.path
    ))
}

fn check(a: &Api, status: Status, what: &str) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: NCCL returns a static C string for every status.
    let text = unsafe { CStr::from_ptr((a.error_string)(status)) };
    bail!("NCCL {what} failed: {}", text.to_string_lossy())
}

impl UniqueId {
    pub fn new() -> Result<UniqueId> {
        let a = api()?;
        let mut id = UniqueId { internal: [0; 128] };
        check(a, unsafe { (a.get_unique_id)(&mut id) }, "ncclGetUniqueId")?;
        Ok(id)
    }
}

/// One rank's member of a communicator.
pub struct Comm {
    raw: RawComm,
    rank: usize,
    world: usize,
}

// SAFETY: a communicator may be used from any thread, one at a time; `Comm` hands out no
// aliases of it.
unsafe impl Send for Comm {}

impl Comm {
    /// Joins rank `rank` of `world` to the communicator of `id` on the GPU whose context is
    /// current on this thread; returns once every rank has joined.
    pub fn new(id: &UniqueId, rank: usize, world: usize) -> Result<Comm> {
        let a = api()?;
        let mut raw = std::ptr::null_mut();
        let status = unsafe { (a.comm_init_rank)(&mut raw, world as c_int, *id, rank as c_int) };
        check(a, status, "ncclCommInitRank")?;
        Ok(Comm { raw, rank, world })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Queues on `stream` the sum over all ranks of the `count` elements at `ptr`, left in place
    /// on every rank (captured into a graph if `stream` is capturing).
    pub fn sum_in_place<T: Element>(
        &self,
        ptr: u64,
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let a = api()?;
        let buf = ptr as *mut c_void;
        let s = stream.cu_stream() as *mut c_void;
        let status = unsafe { (a.all_reduce)(buf, buf, count, T::NCCL_TYPE, SUM, self.raw, s) };
        check(a, status, "ncclAllReduce")
    }

    /// Queues on `stream` the sum over all ranks of the `world · count` elements at `send`, of
    /// which rank `r` receives elements `r · count ..` `+ count` at `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        (send, recv): (u64, u64),
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let a = api()?;
        let (send, recv) = (send as *const c_void, recv as *mut c_void);
        let s = stream.cu_stream() as *mut c_void;
        let status =
            unsafe { (a.reduce_scatter)(send, recv, count, T::NCCL_TYPE, SUM, self.raw, s) };
        check(a, status, "ncclReduceScatter")
    }

    /// Queues on `stream` the `count` elements at `send` of every rank to every rank's `recv`,
    /// rank `r`'s at elements `r · count ..` `+ count`.
    pub fn all_gather<T: Element>(
        &self,
        (send, recv): (u64, u64),
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let a = api()?;
        let (send, recv) = (send as *const c_void, recv as *mut c_void);
        let s = stream.cu_stream() as *mut c_void;
        let status = unsafe { (a.all_gather)(send, recv, count, T::NCCL_TYPE, self.raw, s) };
        check(a, status, "ncclAllGather")
    }
}

/// Device memory from `ncclMemAlloc`, registered with a communicator as a symmetric window:
/// an all-reduce whose buffers lie in it runs NCCL's symmetric kernels, where the GPUs reach
/// each other directly (NVLink). Every rank makes one of the same size at the same point.
pub struct SymmetricMemory {
    ptr: *mut c_void,
    bytes: usize,
    comm: RawComm,
    window: RawWindow,
}

// SAFETY: the memory and the window are plain handles, used from one thread at a time.
unsafe impl Send for SymmetricMemory {}

impl SymmetricMemory {
    /// The device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Comm {
    /// At least `bytes` of symmetric memory, registered by this rank (every rank of the communicator
    /// must ask for as many at the same point), or `None` where the library has no symmetric
    /// memory. It must be dropped before the communicator.
    pub fn symmetric_memory(&self, bytes: usize) -> Result<Option<SymmetricMemory>> {
        let a = api()?;
        let Some(w) = &a.windows else {
            return Ok(None);
        };
        // Windows are mapped in pages of 2 MiB.
        let bytes = bytes.next_multiple_of(2 << 20);
        let mut ptr = std::ptr::null_mut();
        check(a, unsafe { (w.mem_alloc)(&mut ptr, bytes) }, "ncclMemAlloc")?;
        let mut window = std::ptr::null_mut();
        let status = unsafe { (w.register)(self.raw, ptr, bytes, &mut window, WIN_COLL_SYMMETRIC) };
        if let Err(e) = check(a, status, "ncclCommWindowRegister") {
            unsafe { (w.mem_free)(ptr) };
            return Err(e);
        }
        Ok(Some(SymmetricMemory {
            ptr,
            bytes,
            comm: self.raw,
            window,
        }))
    }
}

impl Drop for SymmetricMemory {
    fn drop(&mut self) {
        if let Ok(Api {
            windows: Some(w), ..
        }) = api()
        {
            // A window NCCL did not make (symmetric memory disabled) is null: nothing to undo.
            if !self.window.is_null() {
                unsafe { (w.deregister)(self.comm, self.window) };
            }
            unsafe { (w.mem_free)(self.ptr) };
        }
    }
}

impl Drop for Comm {
    /// Aborted rather than destroyed: abort never waits on other ranks, so a rank that stops
    /// on an error does not hang; every rank's work has finished by the time its `Comm` drops.
    fn drop(&mut self) {
        if let Ok(a) = api() {
            unsafe { (a.comm_abort)(self.raw) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_file_searches_a_few_levels_down() {
        let root = std::env::temp_dir().join(format!("nccl-find-{}", std::process::id()));
        let deep = root.join("nvidia/nccl/lib");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("libnccl.so.2"), b"").unwrap();
        assert_eq!(
            find_file(&root, "libnccl.so.2", 3),
            Some(deep.join("libnccl.so.2"))
        );
        assert_eq!(find_file(&root, "libnccl.so.2", 2), None);
        assert_eq!(find_file(&root.join("missing"), "libnccl.so.2", 3), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
