//! Unit tests: the loader's error paths, a loader round trip against a stub
//! library built on the fly, and record layouts pinned to the numbers gcc
//! reports for the CUPTI headers (see LAYOUTS.md).

use super::*;
use std::mem::{offset_of, size_of};
use std::path::Path;

// ---------------------------------------------------------------- loading

#[test]
fn nonexistent_path_is_an_error_naming_the_path() {
    let path = Path::new("/nonexistent/dir/libcupti.so.13");
    let err = load(path).err().expect("loading a missing file must fail");
    assert!(matches!(err, LoadError::Open { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/dir/libcupti.so.13"), "{msg}");
}

#[test]
fn library_that_is_not_cupti_is_missing_symbols() {
    for name in ["libc.so.6", "libm.so.6"] {
        match load(Path::new(name)) {
            Err(LoadError::MissingSymbol(sym)) => assert_eq!(sym, REQUIRED_SYMBOLS[0]),
            Err(other) => panic!("{name}: unexpected error {other}"),
            Ok(_) => panic!("{name} was accepted as CUPTI"),
        }
    }
}

#[test]
fn from_loaded_finds_only_loaded_libraries() {
    // libc is mapped into every test process, but it is not CUPTI.
    assert!(matches!(
        from_loaded(Path::new("libc.so.6")),
        Err(LoadError::MissingSymbol(_))
    ));
    let err = from_loaded(Path::new("libcupti-sys-test-not-there.so"))
        .err()
        .expect("nothing of that name is loaded");
    assert!(matches!(err, LoadError::NotLoaded { .. }), "{err:?}");
    assert!(err.to_string().contains("libcupti-sys-test-not-there.so"));
}

#[test]
fn null_handle_is_rejected() {
    // SAFETY: a null handle is rejected before anything uses it.
    let r = unsafe { from_handle(std::ptr::null_mut()) };
    assert!(matches!(r, Err(LoadError::NullHandle)));
}

#[test]
fn required_list_matches_the_checked_fields() {
    // check_required reports the first missing symbol; with libc every one is
    // missing, so it must name REQUIRED_SYMBOLS[0]. The order of the rest is
    // checked through the stub library below.
    assert_eq!(REQUIRED_SYMBOLS.len(), 12);
    let mut seen = std::collections::HashSet::new();
    for s in REQUIRED_SYMBOLS {
        assert!(seen.insert(*s), "duplicate {s}");
    }
}

#[test]
fn result_helpers() {
    assert_eq!(CuptiError::check(CUptiResult_CUPTI_SUCCESS), Ok(()));
    assert_eq!(CUptiResult_CUPTI_SUCCESS.result(), Ok(()));
    let e = CUptiResult_CUPTI_ERROR_NOT_INITIALIZED
        .result()
        .unwrap_err();
    assert_eq!(e.code, 15);
    assert_eq!(e.name(), Some("CUPTI_ERROR_NOT_INITIALIZED"));
    assert_eq!(e.to_string(), "CUPTI_ERROR_NOT_INITIALIZED (15)");
    assert_eq!(result_name(999), Some("CUPTI_ERROR_UNKNOWN"));
    assert_eq!(result_name(12345), None);
    assert_eq!(
        CuptiError { code: 12345 }.to_string(),
        "unknown CUPTI error (12345)"
    );
}

#[test]
fn cupti_table_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Cupti>();
}

/// A table whose every symbol is missing, built from libc without the
/// required-symbol check, to drive the fallbacks.
fn empty_table() -> Cupti {
    // SAFETY: libc is already loaded (no initialisers run); from_library on
    // it only performs dlsym lookups, all of which fail.
    let lib = unsafe { libloading::Library::new("libc.so.6") }.expect("libc");
    // SAFETY: as above, resolving only.
    unsafe { Cupti::from_library(lib) }.expect("resolving never fails")
}

#[test]
fn fallbacks_without_symbols_do_not_panic() {
    let c = empty_table();
    assert!(c.cuptiGetResultString.is_err());
    assert_eq!(result_string(&c, 1), "CUPTI_ERROR_INVALID_PARAMETER (1)");
    assert_eq!(result_string(&c, 4242), "unknown CUPTI error (4242)");
    assert_eq!(
        version(&c),
        Err(CuptiError {
            code: CUptiResult_CUPTI_ERROR_NOT_INITIALIZED
        })
    );
    assert!(matches!(
        cupti_fn!(c, cuptiFinalize),
        Err(LoadError::MissingSymbol("cuptiFinalize"))
    ));
    assert!(matches!(
        check_required(&c),
        Err(LoadError::MissingSymbol("cuptiGetVersion"))
    ));
}

// ------------------------------------------------- stub library round trip

/// C source of a stand-in libcupti: the required entry points only, with
/// just enough behaviour to observe calls. `omit` leaves one symbol out.
fn stub_source(omit: Option<&str>) -> String {
    let mut src = String::from(
        "#include <stdint.h>\n#include <stddef.h>\n\
         int cuptiGetVersion(uint32_t *v) { if (!v) return 1; *v = 130001; return 0; }\n\
         int cuptiGetResultString(int r, const char **s) {\n\
           if (r == 7) { *s = \"stub: invalid operation\"; return 0; }\n\
           if (r == 8) { *s = 0; return 0; }\n\
           return 1; }\n\
         uint64_t cuptiGetTimestamp_value = 0;\n\
         int cuptiGetTimestamp(uint64_t *t) { *t = ++cuptiGetTimestamp_value; return 0; }\n",
    );
    for name in REQUIRED_SYMBOLS {
        if matches!(
            *name,
            "cuptiGetVersion" | "cuptiGetResultString" | "cuptiGetTimestamp"
        ) {
            continue;
        }
        src.push_str(&format!("int {name}(void) {{ return 0; }}\n"));
    }
    if let Some(name) = omit {
        // Rename the definition so the symbol is absent from the library.
        src = src.replace(&format!("{name}("), &format!("omitted_{name}("));
    }
    src
}

/// Build the stub with the system C compiler. Returns None (and the test is
/// skipped) when no compiler is available.
fn build_stub(tag: &str, omit: Option<&str>) -> Option<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("cupti-sys-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let c = dir.join("stub.c");
    let so = dir.join("libcupti-stub.so");
    std::fs::write(&c, stub_source(omit)).ok()?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = std::process::Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .status()
        .ok()?;
    status.success().then_some(so)
}

#[test]
fn stub_library_loads_and_calls_through_fields() {
    let Some(so) = build_stub("full", None) else {
        eprintln!("skipped: no C compiler to build the stub library");
        return;
    };
    let cupti = load(&so).expect("stub exports every required symbol");
    assert_eq!(version(&cupti), Ok(130001));
    assert_eq!(result_string(&cupti, 7), "stub: invalid operation");
    // Success with a null string, and a failing lookup, both fall back.
    assert_eq!(result_string(&cupti, 8), "CUPTI_ERROR_OUT_OF_MEMORY (8)");
    assert_eq!(result_string(&cupti, 3), "CUPTI_ERROR_INVALID_CONTEXT (3)");
    // Optional symbols are simply Err.
    assert!(cupti.cuptiFinalize.is_err());
    assert!(cupti.cuptiActivityFlushPeriod.is_err());
    let ts = cupti_fn!(cupti, cuptiGetTimestamp).expect("required");
    let (mut a, mut b) = (0u64, 0u64);
    // SAFETY: the stub's cuptiGetTimestamp writes one u64 through the pointer.
    unsafe {
        assert_eq!(ts(&mut a), 0);
        assert_eq!(ts(&mut b), 0);
    }
    assert!(b > a);

    // The same library, found again through RTLD_NOLOAD while loaded.
    let again = from_loaded(&so).expect("stub is loaded");
    assert_eq!(version(&again), Ok(130001));
    drop(again);
    drop(cupti);
    let _ = std::fs::remove_dir_all(so.parent().unwrap());
}

#[test]
fn stub_library_missing_each_required_symbol_is_refused() {
    for (i, name) in REQUIRED_SYMBOLS.iter().enumerate() {
        let Some(so) = build_stub(&format!("omit{i}"), Some(name)) else {
            eprintln!("skipped: no C compiler to build the stub library");
            return;
        };
        match load(&so) {
            Err(LoadError::MissingSymbol(s)) => assert_eq!(s, *name),
            Err(other) => panic!("{name}: {other}"),
            Ok(_) => panic!("stub without {name} was accepted"),
        }
        let _ = std::fs::remove_dir_all(so.parent().unwrap());
    }
}

#[test]
fn from_handle_takes_over_a_dlopen_handle() {
    let Some(so) = build_stub("handle", None) else {
        eprintln!("skipped: no C compiler to build the stub library");
        return;
    };
    let cpath = std::ffi::CString::new(so.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain dlopen of the stub we just built; `cpath` is a valid C string.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null());
    // SAFETY: `handle` is live and we hand it over; nothing else closes it.
    let cupti = unsafe { from_handle(handle) }.expect("stub is complete");
    assert_eq!(version(&cupti), Ok(130001));
    drop(cupti);
    let _ = std::fs::remove_dir_all(so.parent().unwrap());
}

// ---------------------------------------------------------------- layouts

macro_rules! offsets {
    ($t:ty, size $size:expr; $($field:ident @ $off:expr),* $(,)?) => {{
        assert_eq!(size_of::<$t>(), $size, "sizeof {}", stringify!($t));
        $(
            assert_eq!(
                offset_of!($t, $field),
                $off,
                "{}::{}",
                stringify!($t),
                stringify!($field)
            );
        )*
    }};
}

/// Every listed field sits at the same offset in both structs: reading an
/// older record through the newer struct is correct for those fields.
macro_rules! same_offsets {
    ($old:ty, $new:ty; $($field:ident),* $(,)?) => {{
        $(
            assert_eq!(
                offset_of!($old, $field),
                offset_of!($new, $field),
                "{} vs {}: {}",
                stringify!($old),
                stringify!($new),
                stringify!($field)
            );
        )*
    }};
}

#[test]
fn kernel_record_layout() {
    offsets!(CUpti_ActivityKernel10, size 216;
        kind @ 0, registersPerThread @ 6, start @ 16, end @ 24, completed @ 32,
        deviceId @ 40, contextId @ 44, streamId @ 48,
        gridX @ 52, gridY @ 56, gridZ @ 60, blockX @ 64, blockY @ 68, blockZ @ 72,
        staticSharedMemory @ 76, dynamicSharedMemory @ 80, correlationId @ 92,
        gridId @ 96, name @ 104, queued @ 120, submitted @ 128, launchType @ 136,
        isSharedMemoryCarveoutRequested @ 137, graphNodeId @ 144, graphId @ 156,
        isDeviceLaunched @ 208);
    // CUPTI 12.x hands out CUpti_ActivityKernel9 (208 bytes).
    offsets!(CUpti_ActivityKernel9, size 208; start @ 16, name @ 104);
    same_offsets!(CUpti_ActivityKernel9, CUpti_ActivityKernel10;
        kind, registersPerThread, start, end, completed, deviceId, contextId,
        streamId, gridX, gridY, gridZ, blockX, blockY, blockZ,
        staticSharedMemory, dynamicSharedMemory, correlationId, gridId, name,
        queued, submitted, launchType, graphNodeId, graphId, channelID,
        clusterX, maxActiveClusters);
}

#[test]
fn memcpy_record_layout() {
    offsets!(CUpti_ActivityMemcpy6, size 96;
        kind @ 0, copyKind @ 4, srcKind @ 5, dstKind @ 6, flags @ 7, bytes @ 8,
        start @ 16, end @ 24, deviceId @ 32, contextId @ 36, streamId @ 40,
        correlationId @ 44, runtimeCorrelationId @ 48, graphNodeId @ 64,
        graphId @ 72, isDeviceLaunched @ 84, copyCount @ 88);
    // CUPTI 12.0-12.6 hand out CUpti_ActivityMemcpy5 (88 bytes).
    offsets!(CUpti_ActivityMemcpy5, size 88; correlationId @ 44);
    same_offsets!(CUpti_ActivityMemcpy5, CUpti_ActivityMemcpy6;
        kind, copyKind, srcKind, dstKind, flags, bytes, start, end, deviceId,
        contextId, streamId, correlationId, runtimeCorrelationId, graphNodeId,
        graphId, channelID, channelType);
}

#[test]
fn memset_record_layout() {
    offsets!(CUpti_ActivityMemset4, size 88;
        kind @ 0, value @ 4, bytes @ 8, start @ 16, end @ 24, deviceId @ 32,
        contextId @ 36, streamId @ 40, correlationId @ 44, flags @ 48,
        memoryKind @ 50, graphNodeId @ 64, graphId @ 72, isDeviceLaunched @ 84);
}

#[test]
fn synchronization_record_layout() {
    offsets!(CUpti_ActivitySynchronization2, size 56;
        kind @ 0, type_ @ 4, start @ 8, end @ 16, correlationId @ 24,
        contextId @ 28, streamId @ 32, cudaEventId @ 36, cudaEventSyncId @ 40,
        returnValue @ 48);
    // CUPTI 12.0-12.6 hand out CUpti_ActivitySynchronization (40 bytes).
    offsets!(CUpti_ActivitySynchronization, size 40; cudaEventId @ 36);
    same_offsets!(CUpti_ActivitySynchronization, CUpti_ActivitySynchronization2;
        kind, type_, start, end, correlationId, contextId, streamId, cudaEventId);
}

#[test]
fn device_record_layout() {
    offsets!(CUpti_ActivityDevice5, size 184;
        kind @ 0, flags @ 4, globalMemorySize @ 16, numMultiprocessors @ 44,
        maxBlocksPerMultiprocessor @ 56, computeCapabilityMajor @ 104,
        computeCapabilityMinor @ 108, id @ 112, uuid @ 120, name @ 136,
        isNumaNode @ 176, numaId @ 180);
    // CUPTI 12.0 hands out CUpti_ActivityDevice4 (176 bytes).
    offsets!(CUpti_ActivityDevice4, size 176; name @ 136);
    same_offsets!(CUpti_ActivityDevice4, CUpti_ActivityDevice5;
        kind, flags, globalMemorySize, numMultiprocessors,
        maxBlocksPerMultiprocessor, computeCapabilityMajor,
        computeCapabilityMinor, id, uuid, name, migUuid);
}

#[test]
fn memory_record_layout() {
    offsets!(CUpti_ActivityMemory4, size 128;
        kind @ 0, memoryOperationType @ 4, memoryKind @ 8, correlationId @ 12,
        address @ 16, bytes @ 24, timestamp @ 32, PC @ 40, processId @ 48,
        deviceId @ 52, contextId @ 56, streamId @ 60, name @ 64, isAsync @ 72,
        memoryPoolConfig @ 80, source @ 120);
    // CUPTI 12.0-12.4 hand out CUpti_ActivityMemory3 (120 bytes).
    offsets!(CUpti_ActivityMemory3, size 120; memoryPoolConfig @ 80);
    same_offsets!(CUpti_ActivityMemory3, CUpti_ActivityMemory4;
        kind, memoryOperationType, memoryKind, correlationId, address, bytes,
        timestamp, PC, processId, deviceId, contextId, streamId, name, isAsync,
        memoryPoolConfig);
    // Memory pools: 12.x MemoryPool2 (72 bytes) vs 13.0 MemoryPool3 (80).
    offsets!(CUpti_ActivityMemoryPool2, size 72; address @ 32, timestamp @ 56);
    offsets!(CUpti_ActivityMemoryPool3, size 80; address @ 32, timestamp @ 56,
        isManagedPool @ 72);
}

#[test]
fn api_and_callback_layouts() {
    offsets!(CUpti_ActivityAPI, size 40;
        kind @ 0, cbid @ 4, start @ 8, end @ 16, processId @ 24, threadId @ 28,
        correlationId @ 32, returnValue @ 36);
    offsets!(CUpti_CallbackData, size 72;
        callbackSite @ 0, functionName @ 8, functionParams @ 16,
        functionReturnValue @ 24, symbolName @ 32, context @ 40,
        contextUid @ 48, correlationData @ 56, correlationId @ 64);
    offsets!(CUpti_ResourceData, size 24; context @ 0, resourceHandle @ 8,
        resourceDescriptor @ 16);
    offsets!(CUpti_SynchronizeData, size 16; context @ 0, stream @ 8);
    offsets!(cudaLaunchKernel_v7000_params, size 56;
        func @ 0, gridDim @ 8, blockDim @ 20, args @ 32, sharedMem @ 40, stream @ 48);
    offsets!(cudaMemcpy_v3020_params, size 32; dst @ 0, src @ 8, count @ 16, kind @ 24);
    offsets!(cudaMemcpyAsync_v3020_params, size 40;
        dst @ 0, src @ 8, count @ 16, kind @ 24, stream @ 32);
    offsets!(cudaStreamSynchronize_v3020_params, size 8; stream @ 0);
}

#[test]
fn constants_used_by_the_tracer() {
    assert_eq!(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMCPY, 1);
    assert_eq!(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMSET, 2);
    assert_eq!(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_DEVICE, 8);
    assert_eq!(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 10);
    assert_eq!(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, 38);
    assert_eq!(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMORY2, 49);
    assert_eq!(CUpti_CallbackDomain_CUPTI_CB_DOMAIN_RUNTIME_API, 2);
    assert_eq!(CUpti_CallbackDomain_CUPTI_CB_DOMAIN_DRIVER_API, 1);
    // Runtime callback ids; the numbers are the same in CUPTI 12.x.
    type R = CUpti_runtime_api_trace_cbid;
    let ids: &[(R, u32)] = &[
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
            20,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
            22,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
            31,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
            41,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
            131,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
            165,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
            211,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
            214,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
            311,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
            430,
        ),
        (
            CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
            505,
        ),
    ];
    for (got, want) in ids {
        assert_eq!(got, want);
    }
    assert_eq!(
        CUpti_driver_api_trace_cbid_enum_CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
        307
    );
    assert_eq!(
        CUpti_driver_api_trace_cbid_enum_CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
        652
    );
}

// ------------------------------------------------------ cross-release reads

#[test]
fn record_sizes_follow_the_release() {
    use api_version as v;
    let k = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    assert_eq!(record_size(k, 17), None);
    assert_eq!(record_size(k, v::CUDA_12_0), Some(208));
    assert_eq!(record_size(k, v::CUDA_12_9), Some(208));
    assert_eq!(record_size(k, v::CUDA_13_0), Some(216));
    let m = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMCPY;
    assert_eq!(record_size(m, v::CUDA_12_6), Some(88));
    assert_eq!(record_size(m, 25), Some(88)); // unmeasured: the smaller one
    assert_eq!(record_size(m, v::CUDA_12_8), Some(96));
    let s = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    assert_eq!(record_size(s, v::CUDA_12_6), Some(40));
    assert_eq!(record_size(s, v::CUDA_12_8), Some(56));
    let d = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_DEVICE;
    assert_eq!(record_size(d, v::CUDA_12_0), Some(176));
    assert_eq!(record_size(d, v::CUDA_12_2), Some(184));
    let mem = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMORY2;
    assert_eq!(record_size(mem, v::CUDA_12_5), Some(120));
    assert_eq!(record_size(mem, v::CUDA_12_6), Some(128));
    let ctx = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONTEXT;
    assert_eq!(record_size(ctx, v::CUDA_12_3), Some(16));
    assert_eq!(record_size(ctx, v::CUDA_12_4), Some(24));
    assert_eq!(record_size(ctx, v::CUDA_12_5), Some(32));
    let ev = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CUDA_EVENT;
    assert_eq!(record_size(ev, v::CUDA_12_6), Some(24));
    assert_eq!(record_size(ev, v::CUDA_12_8), Some(56));
    let pool = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMORY_POOL;
    assert_eq!(record_size(pool, v::CUDA_12_9), Some(72));
    assert_eq!(record_size(pool, v::CUDA_13_0), Some(80));
    assert_eq!(
        record_size(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMSET, 1_000_000),
        Some(88)
    );
    assert_eq!(
        record_size(CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_PCIE, v::CUDA_13_0),
        None
    );
}

#[test]
fn a_12x_kernel_record_decodes_through_the_13_struct() {
    // Lay out a CUPTI 12.x record (CUpti_ActivityKernel9, 208 bytes) at the
    // end of a buffer, so reading even one byte further would leave it.
    // SAFETY: all-zero is a valid Kernel9 (integers and raw pointers only).
    let mut old: CUpti_ActivityKernel9 = unsafe { std::mem::zeroed() };
    old.kind = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    old.start = 1_000;
    old.end = 2_500;
    old.correlationId = 77;
    old.gridX = 128;
    old.blockX = 256;
    old.registersPerThread = 32;
    old.graphId = 9;
    let mut buf = vec![0xAAu8; 8];
    // SAFETY: viewing a plain-data struct as its bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&old as *const CUpti_ActivityKernel9).cast::<u8>(),
            size_of::<CUpti_ActivityKernel9>(),
        )
    };
    buf.extend_from_slice(bytes);
    let rec = buf[8..].as_ptr().cast::<CUpti_Activity>();
    let len = record_size(old.kind, api_version::CUDA_12_9).unwrap();
    assert_eq!(len, bytes.len());
    // SAFETY: `rec` is readable for `len` bytes; Kernel10 is plain data.
    let new: CUpti_ActivityKernel10 = unsafe { copy_record(rec, len) };
    assert_eq!(new.kind, old.kind);
    assert_eq!((new.start, new.end), (1_000, 2_500));
    assert_eq!(new.correlationId, 77);
    assert_eq!((new.gridX, new.blockX), (128, 256));
    assert_eq!(new.registersPerThread, 32);
    assert_eq!(new.graphId, 9);
    assert_eq!(new.isDeviceLaunched, 0, "past the 12.x record: zero");
}

/// With `CUPTI_SYS_TEST_LIBS=/path/libcupti.so.12:/path/libcupti.so.13`, load
/// real CUPTI libraries (no GPU needed for this) and check what this crate
/// relies on. Without the variable the test does nothing.
#[test]
fn real_cupti_libraries_if_given() {
    let Ok(list) = std::env::var("CUPTI_SYS_TEST_LIBS") else {
        eprintln!("skipped: CUPTI_SYS_TEST_LIBS not set");
        return;
    };
    for path in list.split(':').filter(|p| !p.is_empty()) {
        let cupti = load(Path::new(path)).unwrap_or_else(|e| panic!("{e}"));
        let v = version(&cupti).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(v >= api_version::CUDA_12_0, "{path}: version {v}");
        let k = CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        assert!(record_size(k, v).is_some());
        assert_eq!(
            result_string(&cupti, CUptiResult_CUPTI_ERROR_INVALID_PARAMETER),
            "CUPTI_ERROR_INVALID_PARAMETER"
        );
        eprintln!("{path}: cuptiGetVersion = {v}");
    }
}
