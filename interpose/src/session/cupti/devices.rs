//! What the CUDA driver says about the devices and itself, read through the driver API
//! when it is loaded (never loading it ourselves).

use cupti_sys::loader::{Library, Open};
use std::ffi::c_void;

/// The CUDA driver, if the process has loaded it (never loaded here).
fn loaded_driver() -> Option<Library> {
    Library::open(std::path::Path::new("libcuda.so.1"), Open::IfLoaded).ok()
}

/// Every device's properties, read through the driver API (empty if it is not loaded).
pub fn driver_devices() -> Vec<(gputrace_format::Device, String)> {
    let Some(driver) = loaded_driver() else {
        return Vec::new();
    };
    let sym = |n: &std::ffi::CStr| driver.sym(n).map(|p| p.as_ptr());
    let (Some(count), Some(get), Some(attr), Some(name), Some(mem)) = (
        sym(c"cuDeviceGetCount"),
        sym(c"cuDeviceGet"),
        sym(c"cuDeviceGetAttribute"),
        sym(c"cuDeviceGetName"),
        sym(c"cuDeviceTotalMem_v2"),
    ) else {
        return Vec::new();
    };
    // SAFETY: these are the driver API's C signatures (CUresult is an int, CUdevice an int).
    let (count, get, attr, name, mem) = unsafe {
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32) -> i32>(count),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32, i32) -> i32>(get),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32, i32, i32) -> i32>(
                attr,
            ),
            std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut libc::c_char, i32, i32) -> i32,
            >(name),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut usize, i32) -> i32>(mem),
        )
    };
    let mut n = 0;
    // SAFETY: valid out-pointer.
    if unsafe { count(&mut n) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..n.clamp(0, 64) {
        let mut dev = 0;
        // SAFETY: valid out-pointer and ordinal.
        if unsafe { get(&mut dev, i) } != 0 {
            continue;
        }
        // CUdevice_attribute values from the driver API.
        let a = |id: i32| {
            let mut v = 0;
            // SAFETY: valid out-pointer, attribute id and device.
            unsafe { attr(&mut v, id, dev) };
            v.max(0) as u32
        };
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: the buffer is writable for its length.
        unsafe { name(buf.as_mut_ptr(), buf.len() as i32 - 1, dev) };
        // SAFETY: zero-initialised and length-limited, so NUL-terminated.
        let nm = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut bytes = 0usize;
        // SAFETY: valid out-pointer.
        unsafe { mem(&mut bytes, dev) };
        let warp = a(10).max(1);
        out.push((
            gputrace_format::Device {
                id: i as u32,
                name: 0,
                sm_count: a(16),
                max_blocks_per_sm: a(106),
                max_threads_per_sm: a(39),
                max_warps_per_sm: a(39) / warp,
                global_memory: bytes as u64,
                cc_major: a(75),
                cc_minor: a(76),
                max_regs_per_sm: a(82),
                max_smem_per_sm: a(81),
            },
            nm,
        ));
    }
    out
}

/// The driver's major CUDA version, for processes that use the driver API only.
pub fn driver_major() -> Option<u32> {
    let f = loaded_driver()?.sym(c"cuDriverGetVersion")?;
    // SAFETY: cuDriverGetVersion(int*) -> CUresult, per the CUDA driver API.
    let f: unsafe extern "C" fn(*mut i32) -> i32 = unsafe { std::mem::transmute(f.as_ptr()) };
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer.
    if unsafe { f(&mut v) } != 0 || v <= 0 {
        return None;
    }
    Some(v as u32 / 1000)
}
