//! A thin NVML binding, loaded at run time.
//!
//! `libnvidia-ml.so.1` comes with the driver, not with CUDA: a machine may have CUDA
//! and no NVML (a container without the driver's utilities mounted), or NVML that
//! refuses us (`NVML_ERROR_NO_PERMISSION`). So nothing links against it: it is
//! dlopened by its soname (or a path given), every entry point is resolved once into a
//! typed `Option<fn>`, and a missing one makes only the values it gives unavailable.
//! Only the four calls without which nothing works are required. Every failure is a
//! returned [`NvmlError`], never a panic: this code runs inside the traced process.
//!
//! Why not the `nvml-wrapper` crate: it loads by the same soname and returns errors
//! the same way (checked: 0.13 loads `libnvidia-ml.so.1`, takes a path through its
//! builder, maps NO_PERMISSION to an error), but it brings six crates and the whole
//! NVML API into a library preloaded into other people's processes, for the thirty
//! calls used here; the house style (cupti-sys) is to keep such bindings small and
//! ours, with the structs we read pinned by size tests.

use cupti_sys::loader::{self, Library, Open};
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::path::{Path, PathBuf};

/// The soname the driver installs.
pub const SONAME: &str = "libnvidia-ml.so.1";

pub type Return = c_int;
/// A device handle as NVML's C calls take it.
pub type RawDevice = *mut c_void;

/// A device handle from [`Nvml::device`] (only NVML makes them, so the calls that take
/// one stay safe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device(RawDevice);

impl Device {
    /// Whether this is the handle an event names.
    pub fn is(self, raw: RawDevice) -> bool {
        self.0 == raw
    }
}
pub type EventSet = *mut c_void;

pub const SUCCESS: Return = 0;
pub const ERROR_UNINITIALIZED: Return = 1;
pub const ERROR_NOT_SUPPORTED: Return = 3;
pub const ERROR_NO_PERMISSION: Return = 4;
pub const ERROR_NOT_FOUND: Return = 6;
pub const ERROR_INSUFFICIENT_SIZE: Return = 7;
pub const ERROR_DRIVER_NOT_LOADED: Return = 9;
pub const ERROR_TIMEOUT: Return = 10;

/// `nvmlClockType_t`.
pub const CLOCK_SM: c_uint = 1;
pub const CLOCK_MEM: c_uint = 2;
/// `nvmlTemperatureSensors_t`.
const TEMPERATURE_GPU: c_uint = 0;
/// `nvmlPcieUtilCounter_t`.
const PCIE_TX: c_uint = 0;
const PCIE_RX: c_uint = 1;
/// `nvmlMemoryErrorType_t` and `nvmlEccCounterType_t`.
pub const ECC_CORRECTED: c_uint = 0;
pub const ECC_UNCORRECTED: c_uint = 1;
const ECC_VOLATILE: c_uint = 0;
/// `nvmlEventType` bits.
pub const EVENT_SINGLE_BIT_ECC: u64 = 0x1;
pub const EVENT_DOUBLE_BIT_ECC: u64 = 0x2;
pub const EVENT_XID: u64 = 0x8;
/// NVLink links a device may have (`NVML_NVLINK_MAX_LINKS`).
pub const NVLINK_MAX_LINKS: c_uint = 18;

/// `nvmlPciInfo_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_subsystem_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_t` (the `_v2` / `_v3` calls).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    /// CPU timestamp in microseconds.
    pub time_stamp: u64,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `nvmlEventData_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventData {
    pub device: RawDevice,
    pub event_type: u64,
    pub event_data: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlGpmSample_t`: an opaque sample buffer NVML allocates.
pub type GpmSampleHandle = *mut c_void;

/// `nvmlGpmSupport_t`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct GpmSupport {
    pub version: c_uint,
    pub is_supported_device: c_uint,
}
/// `NVML_GPM_SUPPORT_VERSION`.
pub const GPM_SUPPORT_VERSION: c_uint = 1;

/// `nvmlGpmMetric_t`'s `metricInfo`: names NVML fills in (static strings).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GpmMetricInfo {
    pub short_name: *const c_char,
    pub long_name: *const c_char,
    pub unit: *const c_char,
}

/// `nvmlGpmMetric_t`: one metric asked for (`metric_id`) and what NVML gave.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GpmMetric {
    pub metric_id: c_uint,
    pub nvml_return: Return,
    pub value: f64,
    pub metric_info: GpmMetricInfo,
}

/// Room for metrics in [`GpmMetricsGet`]: `NVML_GPM_METRIC_MAX` of the newest header
/// (older ones say 98). NVML reads only `num_metrics` entries, so a larger array than
/// the library's is harmless.
pub const GPM_METRIC_ROOM: usize = 210;

/// `nvmlGpmMetricsGet_t` (version 1).
#[repr(C)]
pub struct GpmMetricsGet {
    pub version: c_uint,
    pub num_metrics: c_uint,
    pub sample1: GpmSampleHandle,
    pub sample2: GpmSampleHandle,
    pub metrics: [GpmMetric; GPM_METRIC_ROOM],
}
/// `NVML_GPM_METRICS_GET_VERSION`.
pub const GPM_METRICS_GET_VERSION: c_uint = 1;

/// Largest value NVML uses for "not available" in a few process fields.
const NOT_AVAILABLE_U64: u64 = u64::MAX;

/// Why NVML cannot be used, or a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    #[error("NVML library not found (searched: {searched})")]
    NotFound { searched: String },
    #[error("{path} is not a usable NVML library: {symbol} is missing")]
    MissingSymbol { path: String, symbol: &'static str },
    #[error("NVML refused access ({call}: NVML_ERROR_NO_PERMISSION)")]
    NoPermission { call: &'static str },
    #[error("the NVIDIA driver is not loaded ({call}: NVML_ERROR_DRIVER_NOT_LOADED)")]
    DriverNotLoaded { call: &'static str },
    #[error("{call} failed: {text} ({code})")]
    Call {
        call: &'static str,
        code: Return,
        text: String,
    },
}

impl NvmlError {
    /// A short, stable word for the trace's `nvml` fact and for `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            NvmlError::NotFound { .. } => "missing",
            NvmlError::MissingSymbol { .. } => "unusable",
            NvmlError::NoPermission { .. } => "no_permission",
            NvmlError::DriverNotLoaded { .. } => "driver_not_loaded",
            NvmlError::Call { .. } => "error",
        }
    }
}

macro_rules! nvml_fns {
    ($( $name:ident : fn($($arg:ty),*) ; )*) => {
        /// The entry points, resolved once; `None` where the library lacks one.
        #[allow(non_snake_case)]
        struct Fns {
            $( $name: Option<unsafe extern "C" fn($($arg),*) -> Return>, )*
        }

        impl Fns {
            fn resolve(lib: &Library) -> Fns {
                Fns {
                    $( $name: {
                        let name = concat!(stringify!($name), "\0");
                        CStr::from_bytes_with_nul(name.as_bytes())
                            .ok()
                            .and_then(|n| lib.sym(n))
                            // SAFETY: the symbol of that name has this C signature (nvml.h).
                            .map(|p| unsafe {
                                std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> Return>(p.as_ptr())
                            })
                    }, )*
                }
            }
        }
    };
}

nvml_fns! {
    nvmlInit_v2: fn();
    nvmlShutdown: fn();
    nvmlDeviceGetCount_v2: fn(*mut c_uint);
    nvmlDeviceGetHandleByIndex_v2: fn(c_uint, *mut RawDevice);
    nvmlSystemGetDriverVersion: fn(*mut c_char, c_uint);
    nvmlSystemGetCudaDriverVersion_v2: fn(*mut c_int);
    nvmlSystemGetCudaDriverVersion: fn(*mut c_int);
    nvmlSystemGetNVMLVersion: fn(*mut c_char, c_uint);
    nvmlDeviceGetName: fn(RawDevice, *mut c_char, c_uint);
    nvmlDeviceGetUUID: fn(RawDevice, *mut c_char, c_uint);
    nvmlDeviceGetPciInfo_v3: fn(RawDevice, *mut PciInfo);
    nvmlDeviceGetClockInfo: fn(RawDevice, c_uint, *mut c_uint);
    nvmlDeviceGetMaxClockInfo: fn(RawDevice, c_uint, *mut c_uint);
    nvmlDeviceGetCurrentClocksEventReasons: fn(RawDevice, *mut u64);
    nvmlDeviceGetCurrentClocksThrottleReasons: fn(RawDevice, *mut u64);
    nvmlDeviceGetPowerUsage: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetEnforcedPowerLimit: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetPowerManagementDefaultLimit: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetTemperature: fn(RawDevice, c_uint, *mut c_uint);
    nvmlDeviceGetUtilizationRates: fn(RawDevice, *mut Utilization);
    nvmlDeviceGetMemoryInfo: fn(RawDevice, *mut Memory);
    nvmlDeviceGetCurrPcieLinkGeneration: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetMaxPcieLinkGeneration: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetCurrPcieLinkWidth: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetMaxPcieLinkWidth: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetPcieThroughput: fn(RawDevice, c_uint, *mut c_uint);
    nvmlDeviceGetComputeRunningProcesses_v3: fn(RawDevice, *mut c_uint, *mut ProcessInfo);
    nvmlDeviceGetComputeRunningProcesses_v2: fn(RawDevice, *mut c_uint, *mut ProcessInfo);
    nvmlDeviceGetProcessUtilization: fn(RawDevice, *mut ProcessUtilizationSample, *mut c_uint, u64);
    nvmlDeviceGetPersistenceMode: fn(RawDevice, *mut c_int);
    nvmlDeviceGetComputeMode: fn(RawDevice, *mut c_int);
    nvmlDeviceGetMigMode: fn(RawDevice, *mut c_uint, *mut c_uint);
    nvmlDeviceGetCpuAffinity: fn(RawDevice, c_uint, *mut c_ulong);
    nvmlDeviceGetTopologyCommonAncestor: fn(RawDevice, RawDevice, *mut c_int);
    nvmlDeviceGetNvLinkState: fn(RawDevice, c_uint, *mut c_int);
    nvmlDeviceGetNvLinkRemotePciInfo_v2: fn(RawDevice, c_uint, *mut PciInfo);
    nvmlDeviceGetTotalEccErrors: fn(RawDevice, c_uint, c_uint, *mut u64);
    nvmlEventSetCreate: fn(*mut EventSet);
    nvmlDeviceRegisterEvents: fn(RawDevice, u64, EventSet);
    nvmlEventSetWait_v2: fn(EventSet, *mut EventData, c_uint);
    nvmlEventSetFree: fn(EventSet);
    nvmlGpmQueryDeviceSupport: fn(RawDevice, *mut GpmSupport);
    nvmlGpmSampleAlloc: fn(*mut GpmSampleHandle);
    nvmlGpmSampleFree: fn(GpmSampleHandle);
    nvmlGpmSampleGet: fn(RawDevice, GpmSampleHandle);
    nvmlGpmMigSampleGet: fn(RawDevice, c_uint, GpmSampleHandle);
    nvmlGpmMetricsGet: fn(*mut GpmMetricsGet);
    nvmlDeviceGetMaxMigDeviceCount: fn(RawDevice, *mut c_uint);
    nvmlDeviceGetMigDeviceHandleByIndex: fn(RawDevice, c_uint, *mut RawDevice);
    nvmlDeviceGetGpuInstanceId: fn(RawDevice, *mut c_uint);
}

/// A loaded, initialised NVML. Dropping it calls `nvmlShutdown` (NVML counts its
/// initialisations, so the program's own use of NVML is not disturbed); the library
/// itself stays loaded.
pub struct Nvml {
    f: Fns,
    pub path: PathBuf,
    err_string: Option<unsafe extern "C" fn(Return) -> *const c_char>,
}

// SAFETY: NVML is thread-safe (nvml.h: "all NVML functions are thread-safe"); the
// struct holds only function pointers.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

/// Library to load: `explicit` (a path or a soname), else [`SONAME`].
pub fn library_name(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(SONAME))
}

impl Nvml {
    /// Loads NVML (`path`, or the driver's soname through the loader's search path)
    /// and initialises it.
    pub fn load(path: Option<&Path>) -> Result<Nvml, NvmlError> {
        let name = library_name(path);
        let searched = || {
            let s = name.display().to_string();
            if name.components().count() > 1 {
                s
            } else {
                format!("{s} in the loader's search path")
            }
        };
        // Through the one loader: never under secure execution; the handle is never
        // closed (a library NVML may have started threads in must stay mapped).
        let lib = Library::open(&name, Open::Load).map_err(|_| NvmlError::NotFound {
            searched: searched(),
        })?;
        let f = Fns::resolve(&lib);
        // SAFETY: nvmlErrorString returns a pointer, not a Return (nvml.h).
        let err_string = lib.sym(c"nvmlErrorString").map(|p| unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Return) -> *const c_char>(
                p.as_ptr(),
            )
        });
        let resolved = lib
            .sym(c"nvmlInit_v2")
            .and_then(|p| loader::object_file(p.as_ptr()))
            .unwrap_or(name.clone());
        let missing = |symbol| NvmlError::MissingSymbol {
            path: resolved.display().to_string(),
            symbol,
        };
        let init = f.nvmlInit_v2.ok_or_else(|| missing("nvmlInit_v2"))?;
        for (present, symbol) in [
            (f.nvmlShutdown.is_some(), "nvmlShutdown"),
            (f.nvmlDeviceGetCount_v2.is_some(), "nvmlDeviceGetCount_v2"),
            (
                f.nvmlDeviceGetHandleByIndex_v2.is_some(),
                "nvmlDeviceGetHandleByIndex_v2",
            ),
        ] {
            if !present {
                return Err(missing(symbol));
            }
        }
        let nvml = Nvml {
            f,
            path: resolved,
            err_string,
        };
        // SAFETY: nvmlInit_v2 takes no arguments.
        let r = unsafe { init() };
        if r != SUCCESS {
            // Not initialised: no shutdown owed.
            let e = nvml.error("nvmlInit_v2", r);
            std::mem::forget(nvml);
            return Err(e);
        }
        Ok(nvml)
    }

    fn error(&self, call: &'static str, code: Return) -> NvmlError {
        match code {
            ERROR_NO_PERMISSION => NvmlError::NoPermission { call },
            ERROR_DRIVER_NOT_LOADED => NvmlError::DriverNotLoaded { call },
            _ => NvmlError::Call {
                call,
                code,
                text: self.error_text(code),
            },
        }
    }

    /// NVML's text for a return code.
    pub fn error_text(&self, code: Return) -> String {
        let Some(f) = self.err_string else {
            return format!("NVML error {code}");
        };
        // SAFETY: nvmlErrorString returns NULL or a static NUL-terminated string.
        let p = unsafe { f(code) };
        if p.is_null() {
            return format!("NVML error {code}");
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Number of GPUs NVML sees (all of the machine's, whatever CUDA_VISIBLE_DEVICES).
    pub fn device_count(&self) -> Result<u32, NvmlError> {
        let mut n: c_uint = 0;
        self.check("nvmlDeviceGetCount_v2", |f| {
            // SAFETY: valid out-pointer.
            f.nvmlDeviceGetCount_v2.map(|g| unsafe { g(&mut n) })
        })?;
        Ok(n)
    }

    pub fn device(&self, index: u32) -> Result<Device, NvmlError> {
        let mut d: RawDevice = std::ptr::null_mut();
        self.check("nvmlDeviceGetHandleByIndex_v2", |f| {
            // SAFETY: valid out-pointer.
            f.nvmlDeviceGetHandleByIndex_v2
                .map(|g| unsafe { g(index, &mut d) })
        })?;
        Ok(Device(d))
    }

    /// Runs one call; a missing entry point reads as NOT_SUPPORTED.
    fn check(
        &self,
        call: &'static str,
        run: impl FnOnce(&Fns) -> Option<Return>,
    ) -> Result<(), NvmlError> {
        match run(&self.f).unwrap_or(ERROR_NOT_SUPPORTED) {
            SUCCESS => Ok(()),
            r => Err(self.error(call, r)),
        }
    }

    /// A call's value where it succeeded.
    fn get<T: Default>(&self, run: impl FnOnce(&Fns, &mut T) -> Option<Return>) -> Option<T> {
        let mut v = T::default();
        (run(&self.f, &mut v) == Some(SUCCESS)).then_some(v)
    }

    fn string(
        &self,
        run: impl FnOnce(&Fns, *mut c_char, c_uint) -> Option<Return>,
    ) -> Option<String> {
        let mut buf = [0 as c_char; 96];
        if run(&self.f, buf.as_mut_ptr(), buf.len() as c_uint - 1) != Some(SUCCESS) {
            return None;
        }
        // SAFETY: zero-initialised and NVML writes at most len - 1 bytes: NUL-terminated.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Some(s.to_string_lossy().trim().to_string())
    }

    pub fn driver_version(&self) -> Option<String> {
        // SAFETY: nvml.h's signature; `b` is a zeroed buffer of `n` bytes.
        self.string(|f, b, n| f.nvmlSystemGetDriverVersion.map(|g| unsafe { g(b, n) }))
    }

    pub fn nvml_version(&self) -> Option<String> {
        // SAFETY: nvml.h's signature; `b` is a zeroed buffer of `n` bytes.
        self.string(|f, b, n| f.nvmlSystemGetNVMLVersion.map(|g| unsafe { g(b, n) }))
    }

    /// The newest CUDA version the driver supports, as `major * 1000 + minor * 10`.
    pub fn cuda_driver_version(&self) -> Option<i32> {
        self.get(|f, v: &mut c_int| {
            f.nvmlSystemGetCudaDriverVersion_v2
                .or(f.nvmlSystemGetCudaDriverVersion)
                // SAFETY: nvml.h's signature; `v` is a valid out-pointer.
                .map(|g| unsafe { g(v) })
        })
        .filter(|v| *v > 0)
    }

    pub fn name(&self, d: Device) -> Option<String> {
        // SAFETY: nvml.h's signature; a device handle NVML gave and a zeroed buffer of `n` bytes.
        self.string(|f, b, n| f.nvmlDeviceGetName.map(|g| unsafe { g(d.0, b, n) }))
    }

    pub fn uuid(&self, d: Device) -> Option<String> {
        // SAFETY: nvml.h's signature; a device handle NVML gave and a zeroed buffer of `n` bytes.
        self.string(|f, b, n| f.nvmlDeviceGetUUID.map(|g| unsafe { g(d.0, b, n) }))
    }

    /// The PCI bus id, `00000000:17:00.0`.
    pub fn pci_bus_id(&self, d: Device) -> Option<String> {
        let p = self.pci_info(d)?;
        // SAFETY: NVML NUL-terminates busId; the struct was zeroed before the call.
        let s = unsafe { CStr::from_ptr(p.bus_id.as_ptr()) };
        Some(s.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
    }

    fn pci_info(&self, d: Device) -> Option<PciInfo> {
        // SAFETY: PciInfo is plain data; all zero is a valid value.
        let mut p: PciInfo = unsafe { std::mem::zeroed() };
        let r = self
            .f
            .nvmlDeviceGetPciInfo_v3
            // SAFETY: nvml.h's signature; a device handle NVML gave and a zeroed PciInfo to fill.
            .map(|g| unsafe { g(d.0, &mut p) });
        (r == Some(SUCCESS)).then_some(p)
    }

    pub fn clock(&self, d: Device, which: c_uint) -> Option<u32> {
        self.get(|f, v| {
            f.nvmlDeviceGetClockInfo
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, which, v) })
        })
    }

    pub fn max_clock(&self, d: Device, which: c_uint) -> Option<u32> {
        self.get(|f, v| {
            f.nvmlDeviceGetMaxClockInfo
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, which, v) })
        })
    }

    /// Clock event (throttle) reasons in force, `CLOCK_REASON_*` bits.
    pub fn clock_reasons(&self, d: Device) -> Option<u64> {
        self.get(|f, v| {
            f.nvmlDeviceGetCurrentClocksEventReasons
                .or(f.nvmlDeviceGetCurrentClocksThrottleReasons)
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, v) })
        })
    }

    pub fn power_mw(&self, d: Device) -> Option<u32> {
        // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
        self.get(|f, v| f.nvmlDeviceGetPowerUsage.map(|g| unsafe { g(d.0, v) }))
    }

    pub fn power_limit_mw(&self, d: Device) -> Option<u32> {
        self.get(|f, v| {
            f.nvmlDeviceGetEnforcedPowerLimit
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, v) })
        })
    }

    pub fn power_default_limit_mw(&self, d: Device) -> Option<u32> {
        self.get(|f, v| {
            f.nvmlDeviceGetPowerManagementDefaultLimit
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, v) })
        })
    }

    pub fn temperature_c(&self, d: Device) -> Option<u32> {
        self.get(|f, v| {
            f.nvmlDeviceGetTemperature
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, TEMPERATURE_GPU, v) })
        })
    }

    pub fn utilization(&self, d: Device) -> Option<Utilization> {
        self.get(|f, v| {
            f.nvmlDeviceGetUtilizationRates
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, v) })
        })
    }

    pub fn memory(&self, d: Device) -> Option<Memory> {
        // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
        self.get(|f, v| f.nvmlDeviceGetMemoryInfo.map(|g| unsafe { g(d.0, v) }))
    }

    /// (current generation, maximum generation, current width, maximum width).
    pub fn pcie_link(&self, d: Device) -> [Option<u32>; 4] {
        [
            self.get(|f, v| {
                f.nvmlDeviceGetCurrPcieLinkGeneration
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, v) })
            }),
            self.get(|f, v| {
                f.nvmlDeviceGetMaxPcieLinkGeneration
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, v) })
            }),
            self.get(|f, v| {
                f.nvmlDeviceGetCurrPcieLinkWidth
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, v) })
            }),
            self.get(|f, v| {
                f.nvmlDeviceGetMaxPcieLinkWidth
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, v) })
            }),
        ]
    }

    /// (TX, RX) PCIe throughput in KB/s. NVML samples each over 20 ms: slow.
    pub fn pcie_throughput(&self, d: Device) -> (Option<u32>, Option<u32>) {
        (
            self.get(|f, v| {
                f.nvmlDeviceGetPcieThroughput
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, PCIE_TX, v) })
            }),
            self.get(|f, v| {
                f.nvmlDeviceGetPcieThroughput
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, PCIE_RX, v) })
            }),
        )
    }

    /// The compute processes on the device, with the memory each holds.
    pub fn compute_processes(&self, d: Device) -> Result<Vec<ProcessInfo>, NvmlError> {
        let call = self
            .f
            .nvmlDeviceGetComputeRunningProcesses_v3
            .or(self.f.nvmlDeviceGetComputeRunningProcesses_v2);
        let Some(call) = call else {
            return Err(self.error("nvmlDeviceGetComputeRunningProcesses", ERROR_NOT_SUPPORTED));
        };
        let mut cap: c_uint = 16;
        for _ in 0..4 {
            let mut v = vec![ProcessInfo::default(); cap as usize];
            let mut n = cap;
            // SAFETY: `v` has room for `n` entries.
            let r = unsafe { call(d.0, &mut n, v.as_mut_ptr()) };
            match r {
                SUCCESS => {
                    v.truncate((n as usize).min(cap as usize));
                    for p in &mut v {
                        if p.used_gpu_memory == NOT_AVAILABLE_U64 {
                            p.used_gpu_memory = gputrace_format::ENV_NA64;
                        }
                    }
                    return Ok(v);
                }
                // More processes than room: NVML said how many; try again with more.
                ERROR_INSUFFICIENT_SIZE => cap = n.clamp(cap * 2, 4096),
                r => return Err(self.error("nvmlDeviceGetComputeRunningProcesses", r)),
            }
        }
        Err(self.error(
            "nvmlDeviceGetComputeRunningProcesses",
            ERROR_INSUFFICIENT_SIZE,
        ))
    }

    /// Per-process utilisation samples newer than `since_us` (NVML's own timestamps).
    /// NOT_FOUND (no samples since) is an empty list.
    pub fn process_utilization(
        &self,
        d: Device,
        since_us: u64,
    ) -> Result<Vec<ProcessUtilizationSample>, NvmlError> {
        let Some(call) = self.f.nvmlDeviceGetProcessUtilization else {
            return Err(self.error("nvmlDeviceGetProcessUtilization", ERROR_NOT_SUPPORTED));
        };
        let mut n: c_uint = 0;
        // SAFETY: a NULL buffer asks for the count.
        let r = unsafe { call(d.0, std::ptr::null_mut(), &mut n, since_us) };
        match r {
            SUCCESS | ERROR_INSUFFICIENT_SIZE => {}
            ERROR_NOT_FOUND => return Ok(Vec::new()),
            r => return Err(self.error("nvmlDeviceGetProcessUtilization", r)),
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let cap = n.min(4096) + 8;
        let mut v = vec![ProcessUtilizationSample::default(); cap as usize];
        let mut n = cap;
        // SAFETY: `v` has room for `n` samples.
        let r = unsafe { call(d.0, v.as_mut_ptr(), &mut n, since_us) };
        match r {
            SUCCESS => {
                v.truncate((n as usize).min(cap as usize));
                Ok(v)
            }
            ERROR_NOT_FOUND => Ok(Vec::new()),
            r => Err(self.error("nvmlDeviceGetProcessUtilization", r)),
        }
    }

    pub fn persistence_mode(&self, d: Device) -> Option<bool> {
        // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
        self.get(|f, v: &mut c_int| f.nvmlDeviceGetPersistenceMode.map(|g| unsafe { g(d.0, v) }))
            .map(|v| v == 1)
    }

    /// `nvmlComputeMode_t` as a word.
    pub fn compute_mode(&self, d: Device) -> Option<&'static str> {
        let v =
            // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
            self.get(|f, v: &mut c_int| f.nvmlDeviceGetComputeMode.map(|g| unsafe { g(d.0, v) }))?;
        Some(match v {
            0 => "default",
            1 => "exclusive_thread",
            2 => "prohibited",
            3 => "exclusive_process",
            _ => "unknown",
        })
    }

    /// (current, pending) MIG mode.
    pub fn mig_mode(&self, d: Device) -> Option<(bool, bool)> {
        let mut cur: c_uint = 0;
        let mut pend: c_uint = 0;
        let r = self
            .f
            .nvmlDeviceGetMigMode
            // SAFETY: nvml.h's signature; a device handle NVML gave and two valid out-pointers.
            .map(|g| unsafe { g(d.0, &mut cur, &mut pend) });
        (r == Some(SUCCESS)).then_some((cur == 1, pend == 1))
    }

    /// The CPUs close to the device (NVML's ideal affinity), as CPU numbers.
    pub fn cpu_affinity(&self, d: Device) -> Option<Vec<u32>> {
        const WORDS: usize = 64; // 4096 CPUs
        let mut set = [0 as c_ulong; WORDS];
        let r = self
            .f
            .nvmlDeviceGetCpuAffinity
            // SAFETY: nvml.h's signature; `set` has room for the WORDS words passed.
            .map(|g| unsafe { g(d.0, WORDS as c_uint, set.as_mut_ptr()) });
        if r != Some(SUCCESS) {
            return None;
        }
        let bits = c_ulong::BITS as usize;
        let cpus: Vec<u32> = (0..WORDS * bits)
            .filter(|i| set[i / bits] >> (i % bits) & 1 == 1)
            .map(|i| i as u32)
            .collect();
        (!cpus.is_empty()).then_some(cpus)
    }

    /// `nvmlGpuTopologyLevel_t` between two devices.
    pub fn topology(&self, a: Device, b: Device) -> Option<i32> {
        self.get(|f, v: &mut c_int| {
            f.nvmlDeviceGetTopologyCommonAncestor
                // SAFETY: nvml.h's signature; two device handles NVML gave and a valid out-pointer.
                .map(|g| unsafe { g(a.0, b.0, v) })
        })
    }

    /// PCI bus ids at the far end of each active NVLink.
    pub fn nvlink_peers(&self, d: Device) -> Vec<String> {
        let mut out = Vec::new();
        for link in 0..NVLINK_MAX_LINKS {
            let active = self.get(|f, v: &mut c_int| {
                f.nvmlDeviceGetNvLinkState
                    // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                    .map(|g| unsafe { g(d.0, link, v) })
            });
            if active != Some(1) {
                continue;
            }
            // SAFETY: plain data; all zero is valid.
            let mut p: PciInfo = unsafe { std::mem::zeroed() };
            let r = self
                .f
                .nvmlDeviceGetNvLinkRemotePciInfo_v2
                // SAFETY: nvml.h's signature; a device handle NVML gave and a zeroed PciInfo to fill.
                .map(|g| unsafe { g(d.0, link, &mut p) });
            let id = if r == Some(SUCCESS) {
                // SAFETY: NVML NUL-terminates busId in a zeroed struct.
                unsafe { CStr::from_ptr(p.bus_id.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            } else {
                String::new()
            };
            out.push(id);
        }
        out
    }

    /// Volatile ECC error count (since the driver loaded) of one kind.
    pub fn ecc_errors(&self, d: Device, kind: c_uint) -> Option<u64> {
        self.get(|f, v| {
            f.nvmlDeviceGetTotalEccErrors
                // SAFETY: nvml.h's signature; an NVML device handle, a valid out-pointer.
                .map(|g| unsafe { g(d.0, kind, ECC_VOLATILE, v) })
        })
    }

    /// Whether the device supports GPM (`nvmlGpmQueryDeviceSupport`); an error where
    /// the call is missing (a driver older than GPM) or fails.
    pub fn gpm_supported(&self, d: Device) -> Result<bool, NvmlError> {
        let mut s = GpmSupport {
            version: GPM_SUPPORT_VERSION,
            is_supported_device: 0,
        };
        let Some(g) = self.f.nvmlGpmQueryDeviceSupport else {
            return Err(NvmlError::MissingSymbol {
                path: self.path.display().to_string(),
                symbol: "nvmlGpmQueryDeviceSupport",
            });
        };
        // SAFETY: a valid handle and a versioned struct NVML fills.
        let r = unsafe { g(d.0, &mut s) };
        if r != SUCCESS {
            return Err(self.error("nvmlGpmQueryDeviceSupport", r));
        }
        Ok(s.is_supported_device != 0)
    }

    /// A GPM sample buffer, freed on drop; an error where NVML has no GPM.
    pub fn gpm_sample(&self) -> Result<GpmSample<'_>, NvmlError> {
        let (Some(alloc), Some(_), Some(_), Some(_)) = (
            self.f.nvmlGpmSampleAlloc,
            self.f.nvmlGpmSampleFree,
            self.f.nvmlGpmSampleGet,
            self.f.nvmlGpmMetricsGet,
        ) else {
            return Err(NvmlError::MissingSymbol {
                path: self.path.display().to_string(),
                symbol: "nvmlGpmSampleAlloc",
            });
        };
        let mut h: GpmSampleHandle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let r = unsafe { alloc(&mut h) };
        if r != SUCCESS || h.is_null() {
            return Err(self.error("nvmlGpmSampleAlloc", r));
        }
        Ok(GpmSample { nvml: self, h })
    }

    /// Reads the device's GPM counters into `s` (of the MIG GPU instance `instance`
    /// through `nvmlGpmMigSampleGet` when given).
    pub fn gpm_sample_get(
        &self,
        d: Device,
        instance: Option<u32>,
        s: &mut GpmSample<'_>,
    ) -> Result<(), NvmlError> {
        let r = match instance {
            // SAFETY: a valid handle and a sample buffer NVML allocated.
            None => self.f.nvmlGpmSampleGet.map(|g| unsafe { g(d.0, s.h) }),
            // SAFETY: as above.
            Some(gi) => self
                .f
                .nvmlGpmMigSampleGet
                .map(|g| unsafe { g(d.0, gi, s.h) }),
        };
        match r.unwrap_or(ERROR_NOT_SUPPORTED) {
            SUCCESS => Ok(()),
            r => Err(self.error("nvmlGpmSampleGet", r)),
        }
    }

    /// The metrics `ids` between two samples of one device (`older` first): each id with
    /// its value, or `None` where NVML did not give it.
    pub fn gpm_metrics(
        &self,
        older: &GpmSample<'_>,
        newer: &GpmSample<'_>,
        ids: &[u32],
    ) -> Result<Vec<(u32, Option<f64>)>, NvmlError> {
        let Some(get) = self.f.nvmlGpmMetricsGet else {
            return Err(self.error("nvmlGpmMetricsGet", ERROR_NOT_SUPPORTED));
        };
        let n = ids.len().min(GPM_METRIC_ROOM);
        // SAFETY: plain data (integers, a double, pointers): all zero is valid.
        let mut m: Box<GpmMetricsGet> = Box::new(unsafe { std::mem::zeroed() });
        m.version = GPM_METRICS_GET_VERSION;
        m.num_metrics = n as c_uint;
        m.sample1 = older.h;
        m.sample2 = newer.h;
        for (slot, id) in m.metrics.iter_mut().zip(&ids[..n]) {
            slot.metric_id = *id;
        }
        // SAFETY: a versioned struct with `num_metrics` entries and two samples NVML filled.
        let r = unsafe { get(&mut *m) };
        if r != SUCCESS {
            return Err(self.error("nvmlGpmMetricsGet", r));
        }
        Ok(m.metrics[..n]
            .iter()
            .map(|x| {
                let ok = x.nvml_return == SUCCESS && x.value.is_finite();
                (x.metric_id, ok.then_some(x.value))
            })
            .collect())
    }

    /// The MIG GPU instance ids on a device in MIG mode (empty when none, or not read).
    pub fn gpu_instances(&self, d: Device) -> Vec<u32> {
        let (Some(count), Some(handle), Some(gi)) = (
            self.f.nvmlDeviceGetMaxMigDeviceCount,
            self.f.nvmlDeviceGetMigDeviceHandleByIndex,
            self.f.nvmlDeviceGetGpuInstanceId,
        ) else {
            return Vec::new();
        };
        let mut n: c_uint = 0;
        // SAFETY: a valid handle and out-pointer.
        if unsafe { count(d.0, &mut n) } != SUCCESS {
            return Vec::new();
        }
        let mut out = Vec::new();
        for i in 0..n.min(64) {
            let mut m: RawDevice = std::ptr::null_mut();
            // SAFETY: as above; a missing index fails and is skipped.
            if unsafe { handle(d.0, i, &mut m) } != SUCCESS || m.is_null() {
                continue;
            }
            let mut id: c_uint = 0;
            // SAFETY: a MIG device handle NVML gave, and an out-pointer.
            if unsafe { gi(m, &mut id) } == SUCCESS && !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }

    /// An event set for Xid and ECC events on `devices`, where NVML allows it.
    pub fn error_events(&self, devices: &[Device]) -> Option<Events<'_>> {
        let create = self.f.nvmlEventSetCreate?;
        let register = self.f.nvmlDeviceRegisterEvents?;
        self.f.nvmlEventSetWait_v2?;
        let mut set: EventSet = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        if unsafe { create(&mut set) } != SUCCESS || set.is_null() {
            return None;
        }
        let mut any = false;
        for d in devices {
            // Not every device allows every type: ask for each one alone.
            for t in [EVENT_XID, EVENT_DOUBLE_BIT_ECC, EVENT_SINGLE_BIT_ECC] {
                // SAFETY: valid device handle and event set.
                any |= unsafe { register(d.0, t, set) } == SUCCESS;
            }
        }
        let ev = Events { nvml: self, set };
        any.then_some(ev)
    }
}

/// A registered NVML event set, freed on drop.
pub struct Events<'a> {
    nvml: &'a Nvml,
    set: EventSet,
}

impl Events<'_> {
    /// The events already waiting (no wait).
    pub fn poll(&self) -> Vec<EventData> {
        let mut out = Vec::new();
        let Some(wait) = self.nvml.f.nvmlEventSetWait_v2 else {
            return out;
        };
        for _ in 0..64 {
            // SAFETY: plain data; all zero is valid.
            let mut e: EventData = unsafe { std::mem::zeroed() };
            // SAFETY: valid set and out-pointer; timeout 0 returns at once.
            if unsafe { wait(self.set, &mut e, 0) } != SUCCESS {
                break;
            }
            out.push(e);
        }
        out
    }
}

impl Drop for Events<'_> {
    fn drop(&mut self) {
        if let Some(free) = self.nvml.f.nvmlEventSetFree {
            // SAFETY: a set we created and free once.
            unsafe { free(self.set) };
        }
    }
}

/// A GPM sample buffer of NVML's, freed on drop.
pub struct GpmSample<'a> {
    nvml: &'a Nvml,
    h: GpmSampleHandle,
}

impl Drop for GpmSample<'_> {
    fn drop(&mut self) {
        if let Some(free) = self.nvml.f.nvmlGpmSampleFree {
            // SAFETY: a buffer nvmlGpmSampleAlloc gave, freed once.
            unsafe { free(self.h) };
        }
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        if let Some(f) = self.f.nvmlShutdown {
            // SAFETY: balanced with the successful nvmlInit_v2 in load.
            unsafe { f() };
        }
    }
}

/// The CUDA version in NVML's encoding (`13000`) as text (`13.0`).
pub fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// `nvmlGpuTopologyLevel_t` in `nvidia-smi topo -m`'s words.
pub fn topology_name(level: i32) -> &'static str {
    match level {
        0 => "SAME",
        10 => "PIX",
        20 => "PXB",
        30 => "PHB",
        40 => "NODE",
        50 => "SYS",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_nvml_h() {
        assert_eq!(std::mem::size_of::<PciInfo>(), 68);
        assert_eq!(std::mem::size_of::<Memory>(), 24);
        assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
        assert_eq!(std::mem::size_of::<ProcessUtilizationSample>(), 32);
        assert_eq!(std::mem::size_of::<EventData>(), 32);
        assert_eq!(std::mem::size_of::<GpmSupport>(), 8);
        assert_eq!(std::mem::size_of::<GpmMetric>(), 40);
        assert_eq!(
            std::mem::size_of::<GpmMetricsGet>(),
            24 + 40 * GPM_METRIC_ROOM
        );
        assert_eq!(std::mem::offset_of!(GpmMetricsGet, metrics), 24);
        assert_eq!(std::mem::offset_of!(GpmMetric, value), 8);
    }

    #[test]
    fn a_missing_library_is_an_error() {
        let e = Nvml::load(Some(Path::new("/nonexistent/libnvidia-ml.so.1")))
            .err()
            .expect("no such library");
        assert_eq!(e.kind(), "missing");
        assert!(
            e.to_string().contains("/nonexistent/libnvidia-ml.so.1"),
            "{e}"
        );
    }

    #[test]
    fn a_library_without_nvml_is_an_error() {
        // libc is loadable but is not NVML.
        let e = Nvml::load(Some(Path::new("libc.so.6")))
            .err()
            .expect("libc is not NVML");
        assert_eq!(e.kind(), "unusable");
    }

    #[test]
    fn versions_and_levels_read_as_nvidia_smi_writes_them() {
        assert_eq!(cuda_version_text(13000), "13.0");
        assert_eq!(cuda_version_text(12080), "12.8");
        assert_eq!(topology_name(50), "SYS");
    }
}
