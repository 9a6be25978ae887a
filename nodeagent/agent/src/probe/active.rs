//! The active check: a short CUDA context on one GPU, an allocation, a memset, a copy
//! back, a small kernel (PTX the driver compiles, where it can) and a synchronise, through
//! the driver API of `libcuda.so.1` loaded at run time (no CUDA toolkit at build time).
//! It runs in a child process (`gagentd active-check`), one per GPU, with a time limit:
//! a driver that hangs hangs the child, which is killed, and the hang is the finding.
//! [`check`] is the sequence over a [`Driver`], so its decisions are tested without a GPU.

use super::state::{ActiveResult, ActiveStep};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Words the check writes: 4 Mi of them (16 MiB).
const WORDS: usize = 4 << 20;
const PATTERN: u32 = 0xC0DE_5A5A;
const KERNEL_XOR: u32 = 0x5A5A_5A5A;

/// What the check needs of the CUDA driver; errors are the driver's names for them.
pub trait Driver {
    fn init(&mut self) -> Result<(), String>;
    /// The GPU at `pci` when given, else the `ordinal`th visible one; makes its primary
    /// context current.
    fn open(&mut self, pci: Option<&str>, ordinal: u32) -> Result<(), DeviceError>;
    fn alloc(&mut self, bytes: usize) -> Result<u64, String>;
    fn memset(&mut self, ptr: u64, value: u32, words: usize) -> Result<(), String>;
    fn copy_to_host(&mut self, out: &mut [u32], ptr: u64) -> Result<(), String>;
    /// Writes `i ^ KERNEL_XOR` into word `i` of `ptr`; `Err(Skipped)` when the driver
    /// cannot load the kernel (a missing or older PTX compiler), which says nothing of
    /// the GPU.
    fn kernel(&mut self, ptr: u64, words: usize) -> Result<(), KernelError>;
    fn synchronize(&mut self) -> Result<(), String>;
    fn free(&mut self, ptr: u64);
    fn close(&mut self);
}

/// Why the device could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceError {
    /// Not found by its address or ordinal.
    NotFound(String),
    /// Found, but no context could be made on it.
    Context(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    Skipped(String),
    Failed(String),
}

/// Runs the check on the GPU at `pci` (or `ordinal`), with the clock `elapsed_ms`.
pub fn check(
    d: &mut dyn Driver,
    pci: Option<&str>,
    ordinal: u32,
    words: usize,
    elapsed_ms: &dyn Fn() -> u64,
) -> ActiveResult {
    let failed = |step, error: String| ActiveResult::Failed {
        step,
        error,
        ms: elapsed_ms(),
    };
    if let Err(e) = d.init() {
        return failed(ActiveStep::Init, e);
    }
    match d.open(pci, ordinal) {
        Ok(()) => {}
        Err(DeviceError::NotFound(e)) => return failed(ActiveStep::Device, e),
        Err(DeviceError::Context(e)) => return failed(ActiveStep::Context, e),
    }
    let result = with_memory(d, words, elapsed_ms);
    d.close();
    result
}

fn with_memory(d: &mut dyn Driver, words: usize, elapsed_ms: &dyn Fn() -> u64) -> ActiveResult {
    let failed = |step, error: String| ActiveResult::Failed {
        step,
        error,
        ms: elapsed_ms(),
    };
    let ptr = match d.alloc(words * 4) {
        Ok(p) => p,
        Err(e) => return failed(ActiveStep::Alloc, e),
    };
    let result = (|| {
        let mut host = vec![0u32; words];
        d.memset(ptr, PATTERN, words)
            .map_err(|e| (ActiveStep::Memset, e))?;
        d.synchronize().map_err(|e| (ActiveStep::Synchronize, e))?;
        d.copy_to_host(&mut host, ptr)
            .map_err(|e| (ActiveStep::Copy, e))?;
        if let Some(i) = host.iter().position(|w| *w != PATTERN) {
            return Err((
                ActiveStep::Verify,
                format!(
                    "word {i} reads {:#010x} after a memset to {PATTERN:#010x}",
                    host[i]
                ),
            ));
        }
        let skipped = match d.kernel(ptr, words) {
            Ok(()) => None,
            Err(KernelError::Skipped(why)) => Some(why),
            Err(KernelError::Failed(e)) => return Err((ActiveStep::Kernel, e)),
        };
        d.synchronize().map_err(|e| (ActiveStep::Synchronize, e))?;
        if skipped.is_none() {
            d.copy_to_host(&mut host, ptr)
                .map_err(|e| (ActiveStep::Copy, e))?;
            if let Some(i) = (0..words).find(|&i| host[i] != (i as u32 ^ KERNEL_XOR)) {
                return Err((
                    ActiveStep::Verify,
                    format!(
                        "word {i} reads {:#010x} after the kernel wrote {:#010x}",
                        host[i],
                        i as u32 ^ KERNEL_XOR
                    ),
                ));
            }
        }
        Ok(skipped)
    })();
    d.free(ptr);
    match result {
        Ok(kernel_skipped) => ActiveResult::Passed {
            ms: elapsed_ms(),
            kernel_skipped,
        },
        Err((step, error)) => failed(step, error),
    }
}

/// `out[i] = i ^ 0x5a5a5a5a` for `i < n`, for any GPU from Maxwell on (the driver
/// compiles it for the GPU it runs on).
const FILL_PTX: &str = "\
.version 6.0
.target sm_50
.address_size 64

.visible .entry gsched_fill(
\t.param .u64 gsched_fill_out,
\t.param .u32 gsched_fill_n
)
{
\t.reg .pred %p<2>;
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<5>;

\tld.param.u64 %rd1, [gsched_fill_out];
\tld.param.u32 %r1, [gsched_fill_n];
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %ntid.x;
\tmov.u32 %r4, %tid.x;
\tmad.lo.s32 %r5, %r2, %r3, %r4;
\tsetp.ge.u32 %p1, %r5, %r1;
\t@%p1 bra DONE;
\tcvta.to.global.u64 %rd2, %rd1;
\tmul.wide.u32 %rd3, %r5, 4;
\tadd.s64 %rd4, %rd2, %rd3;
\txor.b32 %r6, %r5, 1515870810;
\tst.global.u32 [%rd4], %r6;
DONE:
\tret;
}
\0";

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;

/// `libcuda.so.1`'s functions the check calls.
pub struct LibCuda {
    _lib: libloading::Library,
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_by_pci: unsafe extern "C" fn(*mut CuDevice, *const c_char) -> CuResult,
    primary_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(u64) -> CuResult,
    memset_d32: unsafe extern "C" fn(u64, c_uint, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    synchronize: unsafe extern "C" fn() -> CuResult,
    error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    module_load: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    module_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    module_unload: unsafe extern "C" fn(CuModule) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    device: Option<CuDevice>,
}

/// Why `libcuda.so.1` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LibCudaError {
    #[error(
        "cannot load libcuda.so.1 ({0}): no NVIDIA driver's CUDA library on this node, so no active check"
    )]
    Library(libloading::Error),
    #[error("libcuda.so.1 lacks {name} ({source}): the driver is older than the check needs")]
    Symbol {
        name: &'static str,
        source: libloading::Error,
    },
}

impl LibCuda {
    pub fn load() -> Result<LibCuda, LibCudaError> {
        // SAFETY: loading the driver's CUDA library runs its initialisers, as any CUDA
        // program does.
        let lib =
            unsafe { libloading::Library::new("libcuda.so.1") }.map_err(LibCudaError::Library)?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: each symbol is given the type cuda.h declares for that versioned
                // name.
                unsafe {
                    *lib.get(concat!($name, "\0").as_bytes()).map_err(|source| {
                        LibCudaError::Symbol {
                            name: $name,
                            source,
                        }
                    })?
                }
            };
        }
        Ok(LibCuda {
            init: sym!("cuInit"),
            device_get: sym!("cuDeviceGet"),
            device_by_pci: sym!("cuDeviceGetByPCIBusId"),
            primary_retain: sym!("cuDevicePrimaryCtxRetain"),
            primary_release: sym!("cuDevicePrimaryCtxRelease_v2"),
            set_current: sym!("cuCtxSetCurrent"),
            mem_alloc: sym!("cuMemAlloc_v2"),
            mem_free: sym!("cuMemFree_v2"),
            memset_d32: sym!("cuMemsetD32_v2"),
            memcpy_dtoh: sym!("cuMemcpyDtoH_v2"),
            synchronize: sym!("cuCtxSynchronize"),
            error_name: sym!("cuGetErrorName"),
            module_load: sym!("cuModuleLoadData"),
            module_function: sym!("cuModuleGetFunction"),
            module_unload: sym!("cuModuleUnload"),
            launch: sym!("cuLaunchKernel"),
            device: None,
            _lib: lib,
        })
    }

    /// `Ok` for CUDA_SUCCESS, else the error's name (`CUDA_ERROR_ECC_UNCORRECTABLE`).
    fn ok(&self, code: CuResult) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it NULL
        // for a code it does not know).
        let known = unsafe { (self.error_name)(code, &mut name) } == 0 && !name.is_null();
        if known {
            // SAFETY: a non-null name is a NUL-terminated static string of the driver.
            let text = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            Err(format!("{text} ({code})"))
        } else {
            Err(format!("CUDA error {code}"))
        }
    }
}

impl Driver for LibCuda {
    fn init(&mut self) -> Result<(), String> {
        // SAFETY: cuInit takes flags by value (0 is the only value defined).
        self.ok(unsafe { (self.init)(0) })
    }

    fn open(&mut self, pci: Option<&str>, ordinal: u32) -> Result<(), DeviceError> {
        let mut dev: CuDevice = 0;
        let found = match pci.map(CString::new) {
            Some(Ok(bus)) => {
                // SAFETY: `dev` is a valid out-pointer; `bus` a NUL-terminated string.
                self.ok(unsafe { (self.device_by_pci)(&mut dev, bus.as_ptr()) })
            }
            _ => {
                // SAFETY: `dev` is a valid out-pointer.
                self.ok(unsafe { (self.device_get)(&mut dev, ordinal as c_int) })
            }
        };
        found.map_err(DeviceError::NotFound)?;
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer; `dev` a device the driver returned.
        self.ok(unsafe { (self.primary_retain)(&mut ctx, dev) })
            .map_err(DeviceError::Context)?;
        self.device = Some(dev);
        // SAFETY: `ctx` is the primary context just retained.
        self.ok(unsafe { (self.set_current)(ctx) })
            .map_err(DeviceError::Context)
    }

    fn alloc(&mut self, bytes: usize) -> Result<u64, String> {
        let mut ptr = 0u64;
        // SAFETY: `ptr` is a valid out-pointer; a context is current.
        self.ok(unsafe { (self.mem_alloc)(&mut ptr, bytes) })?;
        Ok(ptr)
    }

    fn memset(&mut self, ptr: u64, value: u32, words: usize) -> Result<(), String> {
        // SAFETY: `ptr` holds `words` 32-bit words, allocated by `alloc`.
        self.ok(unsafe { (self.memset_d32)(ptr, value, words) })
    }

    fn copy_to_host(&mut self, out: &mut [u32], ptr: u64) -> Result<(), String> {
        // SAFETY: `out` is valid for its length in bytes, and the device buffer is at
        // least that long.
        self.ok(unsafe {
            (self.memcpy_dtoh)(out.as_mut_ptr().cast(), ptr, std::mem::size_of_val(out))
        })
    }

    fn kernel(&mut self, ptr: u64, words: usize) -> Result<(), KernelError> {
        let mut module: CuModule = std::ptr::null_mut();
        // SAFETY: FILL_PTX is NUL-terminated PTX text; `module` is a valid out-pointer.
        self.ok(unsafe { (self.module_load)(&mut module, FILL_PTX.as_ptr().cast()) })
            .map_err(|e| KernelError::Skipped(format!("the driver could not load the PTX: {e}")))?;
        let mut function: CuFunction = std::ptr::null_mut();
        // SAFETY: `module` was just loaded; the name is NUL-terminated.
        let got = self
            .ok(unsafe { (self.module_function)(&mut function, module, c"gsched_fill".as_ptr()) });
        let launched = got.map_err(KernelError::Skipped).and_then(|()| {
            let (mut out, mut n) = (ptr, words as c_uint);
            let mut params: [*mut c_void; 2] = [(&raw mut out).cast(), (&raw mut n).cast()];
            let blocks = words.div_ceil(256) as c_uint;
            // SAFETY: the kernel takes (u64, u32), which `params` points at for the call;
            // grid and block sizes are within every GPU's limits; stream 0 is the
            // context's default.
            self.ok(unsafe {
                (self.launch)(
                    function,
                    blocks,
                    1,
                    1,
                    256,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            })
            .map_err(KernelError::Failed)
        });
        let synced = launched.and_then(|()| self.synchronize().map_err(KernelError::Failed));
        // SAFETY: `module` was loaded above and is unloaded once.
        let _ = unsafe { (self.module_unload)(module) };
        synced
    }

    fn synchronize(&mut self) -> Result<(), String> {
        // SAFETY: takes no arguments; a context is current.
        self.ok(unsafe { (self.synchronize)() })
    }

    fn free(&mut self, ptr: u64) {
        // SAFETY: `ptr` came from `alloc` and is freed once.
        let _ = unsafe { (self.mem_free)(ptr) };
    }

    fn close(&mut self) {
        if let Some(dev) = self.device.take() {
            // SAFETY: releases the primary context retained in `open`, once.
            let _ = unsafe { (self.primary_release)(dev) };
        }
    }
}

/// `gagentd active-check`: the check on one GPU in this process, as JSON on stdout. With
/// `fake_state`, the outcome the fake state file gives GPU `gpu` (hanging if it says so).
pub fn run_here(
    pci: Option<&str>,
    ordinal: u32,
    gpu: u32,
    fake_state: Option<&Path>,
) -> ActiveResult {
    let started = Instant::now();
    let elapsed = || started.elapsed().as_millis() as u64;
    if let Some(path) = fake_state {
        let fake = match super::fake_state::load(path) {
            Ok(all) => all.get(&gpu).cloned().unwrap_or_default(),
            Err(e) => return ActiveResult::Unavailable { why: e.to_string() },
        };
        if let super::fake_state::FakeActive::Slow(ms) = fake.active {
            std::thread::sleep(Duration::from_millis(ms));
        }
        return super::fake_state::active_of(&fake).unwrap_or_else(|| {
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        });
    }
    match LibCuda::load() {
        Ok(mut cuda) => check(&mut cuda, pci, ordinal, WORDS, &elapsed),
        Err(e) => ActiveResult::Unavailable { why: e.to_string() },
    }
}

/// Where the check runs for one GPU.
#[derive(Debug, Clone)]
pub struct Target {
    /// The agent's index (what the fake state file names).
    pub gpu: u32,
    /// NVML's index of the GPU (CUDA's ordinal in PCI order).
    pub device: u32,
    pub pci_bus_id: Option<String>,
    pub uuid: Option<String>,
}

/// Starts the check in child processes, one per GPU, and ends each at `limit`.
#[derive(Debug, Clone)]
pub struct ActiveRunner {
    /// This agent's executable (`gagentd active-check`).
    pub exe: PathBuf,
    pub limit: Duration,
    /// The fake state file of a fake node: its outcomes instead of CUDA.
    pub fake_state: Option<PathBuf>,
}

impl ActiveRunner {
    /// Each target's result, checked in parallel.
    pub fn run(&self, targets: &[Target]) -> Vec<ActiveResult> {
        let started = Instant::now();
        let mut children: Vec<Result<std::process::Child, String>> =
            targets.iter().map(|t| self.spawn(t)).collect();
        let mut results: Vec<Option<ActiveResult>> = vec![None; targets.len()];
        loop {
            for (k, child) in children.iter_mut().enumerate() {
                if results[k].is_some() {
                    continue;
                }
                results[k] = match child {
                    Err(why) => Some(ActiveResult::Unavailable { why: why.clone() }),
                    Ok(c) => match c.try_wait() {
                        Ok(Some(status)) => Some(read_result(c, status)),
                        Ok(None) => None,
                        Err(e) => Some(ActiveResult::Unavailable {
                            why: format!("cannot wait for the check: {e}"),
                        }),
                    },
                };
            }
            if results.iter().all(Option::is_some) {
                break;
            }
            if started.elapsed() >= self.limit {
                for (k, child) in children.iter_mut().enumerate() {
                    if results[k].is_none()
                        && let Ok(c) = child
                    {
                        let _ = c.kill();
                        results[k] = Some(ActiveResult::Hung {
                            limit_ms: self.limit.as_millis() as u64,
                        });
                    }
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A child stuck in the driver dies when the driver lets it: reaped then.
        for c in children.into_iter().flatten() {
            let mut c = c;
            if !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::spawn(move || c.wait());
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every result set"))
            .collect()
    }

    fn spawn(&self, t: &Target) -> Result<std::process::Child, String> {
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.arg("active-check")
            .arg("--gpu")
            .arg(t.gpu.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        if let Some(f) = &self.fake_state {
            cmd.arg("--fake-state").arg(f);
        } else if let Some(uuid) = &t.uuid {
            // Only this GPU is initialised: another GPU's trouble cannot stall the check.
            cmd.env("CUDA_VISIBLE_DEVICES", uuid)
                .arg("--ordinal")
                .arg("0");
        } else {
            cmd.arg("--ordinal").arg(t.device.to_string());
        }
        if let Some(pci) = &t.pci_bus_id
            && self.fake_state.is_none()
        {
            cmd.arg("--pci").arg(pci);
        }
        cmd.spawn()
            .map_err(|e| format!("cannot start {} active-check: {e}", self.exe.display()))
    }
}

fn read_result(child: &mut std::process::Child, status: std::process::ExitStatus) -> ActiveResult {
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
    }
    serde_json::from_str(out.trim()).unwrap_or_else(|_| ActiveResult::Failed {
        step: ActiveStep::Init,
        error: format!(
            "the check process ended with {status} and no result (it crashed in the driver?)"
        ),
        ms: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that works on `words` of memory, failing where told.
    #[derive(Default)]
    struct Fake {
        mem: Vec<u32>,
        fail: Option<&'static str>,
        flip: Option<usize>,
        no_ptx: bool,
        closed: bool,
        freed: bool,
    }

    impl Fake {
        fn step(&self, name: &'static str) -> Result<(), String> {
            match self.fail {
                Some(f) if f == name => Err(format!("CUDA_ERROR_{}", name.to_uppercase())),
                _ => Ok(()),
            }
        }
    }

    impl Driver for Fake {
        fn init(&mut self) -> Result<(), String> {
            self.step("init")
        }
        fn open(&mut self, _pci: Option<&str>, _ordinal: u32) -> Result<(), DeviceError> {
            self.step("device").map_err(DeviceError::NotFound)?;
            self.step("context").map_err(DeviceError::Context)
        }
        fn alloc(&mut self, bytes: usize) -> Result<u64, String> {
            self.step("alloc")?;
            self.mem = vec![0; bytes / 4];
            Ok(0x1000)
        }
        fn memset(&mut self, _ptr: u64, value: u32, words: usize) -> Result<(), String> {
            self.step("memset")?;
            self.mem[..words].fill(value);
            Ok(())
        }
        fn copy_to_host(&mut self, out: &mut [u32], _ptr: u64) -> Result<(), String> {
            self.step("copy")?;
            out.copy_from_slice(&self.mem[..out.len()]);
            if let Some(i) = self.flip {
                out[i] ^= 1;
            }
            Ok(())
        }
        fn kernel(&mut self, _ptr: u64, words: usize) -> Result<(), KernelError> {
            if self.no_ptx {
                return Err(KernelError::Skipped(
                    "CUDA_ERROR_JIT_COMPILER_NOT_FOUND".into(),
                ));
            }
            self.step("kernel").map_err(KernelError::Failed)?;
            for i in 0..words {
                self.mem[i] = i as u32 ^ KERNEL_XOR;
            }
            Ok(())
        }
        fn synchronize(&mut self) -> Result<(), String> {
            self.step("synchronize")
        }
        fn free(&mut self, _ptr: u64) {
            self.freed = true;
        }
        fn close(&mut self) {
            self.closed = true;
        }
    }

    fn run(fake: &mut Fake) -> ActiveResult {
        check(fake, Some("0000:21:00.0"), 0, 1024, &|| 7)
    }

    #[test]
    fn a_working_gpu_passes_and_everything_is_given_back() {
        let mut d = Fake::default();
        assert_eq!(
            run(&mut d),
            ActiveResult::Passed {
                ms: 7,
                kernel_skipped: None
            }
        );
        assert!(d.freed && d.closed);
        let mut d = Fake {
            no_ptx: true,
            ..Fake::default()
        };
        assert!(
            matches!(
                run(&mut d),
                ActiveResult::Passed { kernel_skipped: Some(ref why), .. } if why.contains("JIT")
            ),
            "no PTX compiler says nothing of the GPU"
        );
    }

    #[test]
    fn each_failing_step_is_named_with_the_drivers_error() {
        for (fail, step) in [
            ("init", ActiveStep::Init),
            ("device", ActiveStep::Device),
            ("context", ActiveStep::Context),
            ("alloc", ActiveStep::Alloc),
            ("memset", ActiveStep::Memset),
            ("copy", ActiveStep::Copy),
            ("kernel", ActiveStep::Kernel),
            ("synchronize", ActiveStep::Synchronize),
        ] {
            let mut d = Fake {
                fail: Some(fail),
                ..Fake::default()
            };
            match run(&mut d) {
                ActiveResult::Failed { step: s, error, .. } => {
                    assert_eq!(s, step, "{fail}");
                    assert!(error.contains(&fail.to_uppercase()), "{error}");
                }
                other => panic!("{fail}: {other:?}"),
            }
            // Memory taken is given back; a context made is closed.
            assert_eq!(
                d.freed,
                !matches!(fail, "init" | "device" | "context" | "alloc"),
                "{fail}"
            );
            assert_eq!(
                d.closed,
                !matches!(fail, "init" | "device" | "context"),
                "{fail}"
            );
        }
    }

    #[test]
    fn memory_that_reads_back_wrong_fails_the_check() {
        let mut d = Fake {
            flip: Some(3),
            ..Fake::default()
        };
        match run(&mut d) {
            ActiveResult::Failed {
                step: ActiveStep::Verify,
                error,
                ..
            } => assert!(error.starts_with("word 3 reads"), "{error}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_ptx_is_one_nul_terminated_entry() {
        assert!(FILL_PTX.ends_with('\0'));
        assert_eq!(FILL_PTX.matches(".entry gsched_fill").count(), 1);
        assert_eq!(KERNEL_XOR, 1_515_870_810);
    }

    #[test]
    fn a_missing_executable_is_unavailable_not_a_fault() {
        let runner = ActiveRunner {
            exe: PathBuf::from("/nonexistent/gagentd"),
            limit: Duration::from_secs(5),
            fake_state: None,
        };
        let r = runner.run(&[Target {
            gpu: 0,
            device: 0,
            pci_bus_id: None,
            uuid: None,
        }]);
        assert!(
            matches!(&r[0], ActiveResult::Unavailable { why } if why.contains("cannot start")),
            "{r:?}"
        );
    }

    #[test]
    fn a_child_that_never_answers_is_a_hang_at_the_limit() {
        // A script that sleeps stands in for a check stuck in the driver.
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("stuck");
        std::fs::write(&exe, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let runner = ActiveRunner {
            exe,
            limit: Duration::from_millis(300),
            fake_state: None,
        };
        let target = Target {
            gpu: 0,
            device: 0,
            pci_bus_id: None,
            uuid: None,
        };
        let t0 = Instant::now();
        // A script just written may be "busy" while another test's fork holds it open.
        let mut r = runner.run(std::slice::from_ref(&target));
        for _ in 0..20 {
            if !matches!(&r[0], ActiveResult::Unavailable { why } if why.contains("busy")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            r = runner.run(std::slice::from_ref(&target));
        }
        assert_eq!(r, [ActiveResult::Hung { limit_ms: 300 }]);
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}
