//! The few CUPTI entry points of PM sampling (`cupti_pmsampling.h`), the profiler host
//! API (`cupti_profiler_host.h`) and the profiler target API (`cupti_profiler_target.h`,
//! `cupti_target.h`) this session calls, written by hand: the committed cupti-sys
//! bindings were generated from `cupti.h` alone, which does not include these headers.
//! Struct layouts follow the CUPTI 13.0 headers; the layout test at the end checks each
//! `*_STRUCT_SIZE` as the header's macro computes it (offset of the last field plus its
//! size). Earlier 12.x headers end `SetConfig` before its append mode (60 bytes, not 64):
//! the session retries with that size when CUPTI refuses the 13.0 one.
//!
//! The functions are looked up with `dlsym` in the CUPTI library the CUPTI session
//! already loaded; an older CUPTI without them gives [`Pm::load`] an error naming the
//! first missing symbol.

use std::ffi::{c_char, c_void, CStr};

/// `CUptiResult`.
pub type CuptiResult = u32;
pub const CUPTI_SUCCESS: CuptiResult = 0;
pub const CUPTI_ERROR_INVALID_PARAMETER: CuptiResult = 1;
/// `SetConfig`'s structSize in the 12.6/12.7 headers (no `hwBufferAppendMode`).
pub const SET_CONFIG_SIZE_12: usize = 60;
pub const CUPTI_ERROR_HARDWARE_BUSY: CuptiResult = 26;
pub const CUPTI_ERROR_NOT_SUPPORTED: CuptiResult = 27;
pub const CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED: CuptiResult = 33;
pub const CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: CuptiResult = 35;
pub const CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES: CuptiResult = 40;
pub const CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED: CuptiResult = 42;
pub const CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED: CuptiResult = 43;

/// `CUpti_ProfilerType`.
pub const CUPTI_PROFILER_TYPE_PM_SAMPLING: u32 = 1;
/// `CUpti_PmSampling_TriggerMode`: the interval is in nanoseconds of a fixed clock.
pub const TRIGGER_GPU_TIME_INTERVAL: u32 = 1;
/// `CUpti_PmSampling_HardwareBuffer_AppendMode`: new records overwrite the oldest.
pub const APPEND_KEEP_LATEST: u32 = 1;
/// `CUpti_PmSampling_DecodeStopReason`.
pub const DECODE_STOP_COUNTER_DATA_FULL: u32 = 1;
pub const DECODE_STOP_END_OF_RECORDS: u32 = 2;

pub type Object = c_void;
pub type HostObject = c_void;

#[repr(C)]
pub struct ProfilerInitialize {
    pub struct_size: usize,
    pub priv_: *mut c_void,
}

#[repr(C)]
pub struct DeviceGetChipName {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub device_index: usize,
    pub chip_name: *const c_char,
}

#[repr(C)]
pub struct Enable {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub device_index: usize,
    pub object: *mut Object,
}

/// `CUpti_PmSampling_Disable_Params`, `_Start_Params` and `_Stop_Params` (the same
/// fields).
#[repr(C)]
pub struct ObjectParams {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub object: *mut Object,
}

#[repr(C)]
pub struct SetConfig {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub object: *mut Object,
    pub config_size: usize,
    pub config: *const u8,
    pub hardware_buffer_size: usize,
    pub sampling_interval: u64,
    pub trigger_mode: u32,
    pub append_mode: u32,
}

#[repr(C)]
pub struct DecodeData {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub object: *mut Object,
    pub counter_data: *mut u8,
    pub counter_data_size: usize,
    pub stop_reason: u32,
    pub overflow: u8,
}

/// `CUpti_PmSampling_GetCounterAvailability_Params`: called with a null image for its
/// size, then with a buffer of that size.
#[repr(C)]
pub struct GetCounterAvailability {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub device_index: usize,
    pub counter_availability_size: usize,
    pub counter_availability: *mut u8,
}

#[repr(C)]
pub struct GetCounterDataSize {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub object: *mut Object,
    pub metric_names: *const *const c_char,
    pub num_metrics: usize,
    pub max_samples: u32,
    pub counter_data_size: usize,
}

#[repr(C)]
pub struct CounterDataInitialize {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub object: *mut Object,
    pub counter_data_size: usize,
    pub counter_data: *mut u8,
}

#[repr(C)]
pub struct GetCounterDataInfo {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub counter_data: *const u8,
    pub counter_data_size: usize,
    pub total: usize,
    pub populated: usize,
    pub completed: usize,
}

#[repr(C)]
pub struct GetSampleInfo {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub object: *mut Object,
    pub counter_data: *const u8,
    pub counter_data_size: usize,
    pub sample_index: usize,
    pub start: u64,
    pub end: u64,
}

#[repr(C)]
pub struct HostInitialize {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub profiler_type: u32,
    pub chip_name: *const c_char,
    pub counter_availability: *const u8,
    pub host: *mut HostObject,
}

#[repr(C)]
pub struct HostDeinitialize {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub host: *mut HostObject,
}

#[repr(C)]
pub struct HostConfigAddMetrics {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub host: *mut HostObject,
    pub metric_names: *const *const c_char,
    pub num_metrics: usize,
}

#[repr(C)]
pub struct HostGetConfigImageSize {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub host: *mut HostObject,
    pub config_image_size: usize,
}

#[repr(C)]
pub struct HostGetConfigImage {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub host: *mut HostObject,
    pub config_image_size: usize,
    pub config_image: *mut u8,
}

#[repr(C)]
pub struct HostGetNumOfPasses {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub config_image_size: usize,
    pub config_image: *mut u8,
    pub num_passes: usize,
}

#[repr(C)]
pub struct HostEvaluateToGpuValues {
    pub struct_size: usize,
    pub priv_: *mut c_void,
    pub host: *mut HostObject,
    pub counter_data: *const u8,
    pub counter_data_size: usize,
    pub range_index: usize,
    pub metric_names: *const *const c_char,
    pub num_metrics: usize,
    pub metric_values: *mut f64,
}

/// A params struct. CUPTI reads `structSize` (the first field) to know which fields the
/// caller has, and 13.0 accepts only the exact value of the header's
/// `CUPTI_PROFILER_STRUCT_SIZE(type, lastField)`: the offset of the last field plus its
/// size, without the tail padding `size_of` counts (`DecodeData`: 45, not 48; CUPTI
/// answers 48 with CUPTI_ERROR_INVALID_PARAMETER).
pub trait Params: Sized {
    /// `CUPTI_PROFILER_STRUCT_SIZE(type, lastField)` of the 13.0 header.
    const STRUCT_SIZE: usize;
    /// A zeroed struct with `structSize` set.
    fn new() -> Self {
        // SAFETY: every params struct is plain data (integers and raw pointers), for
        // which all-zero bytes are a valid value.
        let mut p: Self = unsafe { std::mem::zeroed() };
        // SAFETY: every params struct begins with `size_t structSize`.
        unsafe { *(&mut p as *mut Self as *mut usize) = Self::STRUCT_SIZE };
        p
    }
}

/// `impl Params` for each (struct, its last field, that field's type).
macro_rules! params {
    ($(($t:ty, $last:ident, $lt:ty)),* $(,)?) => {
        $(impl Params for $t {
            const STRUCT_SIZE: usize =
                std::mem::offset_of!($t, $last) + std::mem::size_of::<$lt>();
        })*
    };
}
params!(
    // (Pointer-sized last fields are given as usize: only their size counts here.)
    (ProfilerInitialize, priv_, usize),
    (DeviceGetChipName, chip_name, usize),
    (Enable, object, usize),
    (ObjectParams, object, usize),
    (SetConfig, append_mode, u32),
    (DecodeData, overflow, u8),
    (GetCounterAvailability, counter_availability, usize),
    (GetCounterDataSize, counter_data_size, usize),
    (CounterDataInitialize, counter_data, usize),
    (GetCounterDataInfo, completed, usize),
    (GetSampleInfo, end, u64),
    (HostInitialize, host, usize),
    (HostDeinitialize, host, usize),
    (HostConfigAddMetrics, num_metrics, usize),
    (HostGetConfigImageSize, config_image_size, usize),
    (HostGetConfigImage, config_image, usize),
    (HostGetNumOfPasses, num_passes, usize),
    (HostEvaluateToGpuValues, metric_values, usize),
);

type F<T> = unsafe extern "C" fn(*mut T) -> CuptiResult;

/// The entry points, resolved in the loaded CUPTI.
#[derive(Clone, Copy)]
pub struct Pm {
    pub profiler_initialize: F<ProfilerInitialize>,
    pub profiler_deinitialize: F<ProfilerInitialize>,
    pub device_get_chip_name: F<DeviceGetChipName>,
    pub enable: F<Enable>,
    pub disable: F<ObjectParams>,
    pub start: F<ObjectParams>,
    pub stop: F<ObjectParams>,
    pub set_config: F<SetConfig>,
    pub decode_data: F<DecodeData>,
    pub get_counter_data_size: F<GetCounterDataSize>,
    pub counter_data_initialize: F<CounterDataInitialize>,
    pub get_counter_data_info: F<GetCounterDataInfo>,
    pub get_sample_info: F<GetSampleInfo>,
    pub host_initialize: F<HostInitialize>,
    pub host_deinitialize: F<HostDeinitialize>,
    pub host_config_add_metrics: F<HostConfigAddMetrics>,
    pub host_get_config_image_size: F<HostGetConfigImageSize>,
    pub host_get_config_image: F<HostGetConfigImage>,
    pub host_get_num_of_passes: F<HostGetNumOfPasses>,
    pub host_evaluate_to_gpu_values: F<HostEvaluateToGpuValues>,
    /// Optional: without it the host objects get the chip name only.
    pub get_counter_availability: Option<F<GetCounterAvailability>>,
}

impl Pm {
    /// Resolves every entry point in the library `handle`; `Err` names the first one
    /// it lacks (a CUPTI older than 12.6).
    ///
    /// # Safety
    /// `handle` must be a live `dlopen` handle of a CUPTI library (whose functions of
    /// these names have the signatures of its headers).
    pub unsafe fn load(handle: *mut c_void) -> Result<Pm, &'static str> {
        // `opt`: the function, or None when this CUPTI lacks it; without: it must exist.
        macro_rules! sym {
            (opt $name:literal, $t:ty) => {{
                let n: &CStr = $name;
                // SAFETY: `handle` is a live dlopen handle and `n` NUL-terminated.
                let p = unsafe { libc::dlsym(handle, n.as_ptr()) };
                // SAFETY: the symbol is the CUPTI function of that name, whose C
                // signature is `CUptiResult f(Params*)` with the struct of the field.
                (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, F<$t>>(p) })
            }};
            ($name:literal, $t:ty) => {{
                let n: &CStr = $name;
                match sym!(opt $name, $t) {
                    Some(f) => f,
                    None => return Err(n.to_str().unwrap_or("?")),
                }
            }};
        }
        Ok(Pm {
            get_counter_availability: sym!(
                opt c"cuptiPmSamplingGetCounterAvailability",
                GetCounterAvailability
            ),
            profiler_initialize: sym!(c"cuptiProfilerInitialize", ProfilerInitialize),
            profiler_deinitialize: sym!(c"cuptiProfilerDeInitialize", ProfilerInitialize),
            device_get_chip_name: sym!(c"cuptiDeviceGetChipName", DeviceGetChipName),
            enable: sym!(c"cuptiPmSamplingEnable", Enable),
            disable: sym!(c"cuptiPmSamplingDisable", ObjectParams),
            start: sym!(c"cuptiPmSamplingStart", ObjectParams),
            stop: sym!(c"cuptiPmSamplingStop", ObjectParams),
            set_config: sym!(c"cuptiPmSamplingSetConfig", SetConfig),
            decode_data: sym!(c"cuptiPmSamplingDecodeData", DecodeData),
            get_counter_data_size: sym!(c"cuptiPmSamplingGetCounterDataSize", GetCounterDataSize),
            counter_data_initialize: sym!(
                c"cuptiPmSamplingCounterDataImageInitialize",
                CounterDataInitialize
            ),
            get_counter_data_info: sym!(c"cuptiPmSamplingGetCounterDataInfo", GetCounterDataInfo),
            get_sample_info: sym!(c"cuptiPmSamplingCounterDataGetSampleInfo", GetSampleInfo),
            host_initialize: sym!(c"cuptiProfilerHostInitialize", HostInitialize),
            host_deinitialize: sym!(c"cuptiProfilerHostDeinitialize", HostDeinitialize),
            host_config_add_metrics: sym!(
                c"cuptiProfilerHostConfigAddMetrics",
                HostConfigAddMetrics
            ),
            host_get_config_image_size: sym!(
                c"cuptiProfilerHostGetConfigImageSize",
                HostGetConfigImageSize
            ),
            host_get_config_image: sym!(c"cuptiProfilerHostGetConfigImage", HostGetConfigImage),
            host_get_num_of_passes: sym!(c"cuptiProfilerHostGetNumOfPasses", HostGetNumOfPasses),
            host_evaluate_to_gpu_values: sym!(
                c"cuptiProfilerHostEvaluateToGpuValues",
                HostEvaluateToGpuValues
            ),
        })
    }
}

/// Calls `f` with a fresh params struct after `fill` set its inputs; the struct back
/// (with its outputs) or CUPTI's error code.
///
/// # Safety
/// `f` must be the CUPTI function taking `T`, and `fill` must leave only valid pointers
/// in it.
pub unsafe fn call<T: Params>(f: F<T>, fill: impl FnOnce(&mut T)) -> Result<T, CuptiResult> {
    let mut p = T::new();
    fill(&mut p);
    // SAFETY: per this function's contract.
    let r = unsafe { f(&mut p) };
    if r == CUPTI_SUCCESS {
        Ok(p)
    } else {
        Err(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// `CUPTI_PROFILER_STRUCT_SIZE(type, lastfield)`: the offset of the last field plus
    /// its size, which is what CUPTI expects in `structSize` at the least.
    macro_rules! struct_size {
        ($t:ty, $f:ident, $ft:ty) => {
            offset_of!($t, $f) + size_of::<$ft>()
        };
    }

    #[test]
    fn layouts_match_the_cupti_13_headers() {
        // x86-64 / aarch64 Linux (LP64): the values the headers' macros give.
        assert_eq!(struct_size!(ProfilerInitialize, priv_, usize), 16);
        assert_eq!(struct_size!(DeviceGetChipName, chip_name, usize), 32);
        assert_eq!(struct_size!(Enable, object, usize), 32);
        assert_eq!(struct_size!(ObjectParams, object, usize), 24);
        assert_eq!(struct_size!(SetConfig, append_mode, u32), 64);
        assert_eq!(size_of::<SetConfig>(), 64);
        assert_eq!(offset_of!(SetConfig, sampling_interval), 48);
        assert_eq!(struct_size!(DecodeData, overflow, u8), 45);
        assert_eq!(offset_of!(DecodeData, stop_reason), 40);
        assert_eq!(
            struct_size!(GetCounterDataSize, counter_data_size, usize),
            56
        );
        assert_eq!(offset_of!(GetCounterDataSize, max_samples), 40);
        assert_eq!(struct_size!(CounterDataInitialize, counter_data, usize), 40);
        assert_eq!(struct_size!(GetCounterDataInfo, completed, usize), 56);
        assert_eq!(struct_size!(GetSampleInfo, end, u64), 64);
        assert_eq!(struct_size!(HostInitialize, host, usize), 48);
        assert_eq!(offset_of!(HostInitialize, chip_name), 24);
        assert_eq!(struct_size!(HostDeinitialize, host, usize), 24);
        assert_eq!(struct_size!(HostConfigAddMetrics, num_metrics, usize), 40);
        assert_eq!(
            struct_size!(HostGetConfigImageSize, config_image_size, usize),
            32
        );
        assert_eq!(struct_size!(HostGetConfigImage, config_image, usize), 40);
        assert_eq!(struct_size!(HostGetNumOfPasses, num_passes, usize), 40);
        assert_eq!(
            struct_size!(HostEvaluateToGpuValues, metric_values, usize),
            72
        );
        // Params::new sets structSize to the macro's value, which CUPTI 13.0 checks for
        // equality: without the tail padding.
        assert_eq!(size_of::<DecodeData>(), 48);
        assert_eq!(DecodeData::new().struct_size, 45);
        assert_eq!(GetCounterAvailability::new().struct_size, 40);
        assert_eq!(SetConfig::new().struct_size, 64);
        assert_eq!(HostEvaluateToGpuValues::new().struct_size, 72);
    }
}
