//! What a symbol hook costs over the call it wraps, against a fake library.
//!
//! A tiny fake libcudart.so.13 / libnccl.so.2 (functions that return 0) is compiled
//! with `cc` and dlopened RTLD_LOCAL, the way a Python extension's libraries are, so
//! the hooks find it the way they find the real one. Then, interleaved over several
//! rounds: the fake function called directly; through the hook while not tracing
//! (state DORMANT); through the hook while tracing, with a thread draining the rings
//! as the writer does. Per-call times are medians over rounds (min in brackets).
//!
//! Part 1 links the hooks into this binary (cheap thread-local access). Part 2 loads
//! the real libgputrace.so the bench build made (thread-locals of a shared object cost
//! a call each), started through its `InitializeInjection` with no CUPTI, its own
//! writer thread draining every 5 ms; calls come in batches of 8192 with a pause
//! between them so the rings have room, as a real program's rarely fill them. Each
//! round runs one child process traced and one dormant (`GPUTRACE_MODE=dormant`).
//!
//! Run: `cargo bench -p gputrace-interpose --bench hooks` (results: bench/cpu-hooks.md).

use gputrace::base::{clock, state};
use gputrace::exports::hooks::{comms, cudart, nccl};
use gputrace::rings as ring;
use std::ffi::c_void;
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const FAKE: &str = r#"
int cudaMemcpyAsync(void *d, const void *s, unsigned long n, int k, void *st) {
    (void)d; (void)s; (void)n; (void)k; (void)st; return 0;
}
int ncclAllReduce(const void *s, void *r, unsigned long n, int dt, int op, void *c, void *st) {
    (void)s; (void)r; (void)n; (void)dt; (void)op; (void)c; (void)st; return 0;
}
typedef struct { char internal[128]; } ncclUniqueId;
static int comm_storage[2];
int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
    (void)id; comm_storage[0] = rank; comm_storage[1] = nranks; *comm = comm_storage; return 0;
}
int ncclCommUserRank(void *c, int *r) { *r = ((int *)c)[0]; return 0; }
int ncclCommCount(void *c, int *n) { *n = ((int *)c)[1]; return 0; }
"#;

type InitRank = unsafe extern "C" fn(*mut *mut c_void, i32, nccl::UniqueId, i32) -> i32;

fn build_fake(dir: &std::path::Path, soname: &str) -> std::path::PathBuf {
    let src = dir.join("fake.c");
    std::fs::write(&src, FAKE).unwrap();
    let out = dir.join(soname);
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-fPIC", "-shared"])
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed");
    out
}

fn dlopen_local(p: &std::path::Path) -> *mut c_void {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid path; the handle is kept for the life of the process.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", p.display());
    h
}

type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32, *mut c_void) -> i32;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    i32,
    i32,
    *mut c_void,
    *mut c_void,
) -> i32;

/// ns per call of `f`, over `n` calls.
fn time(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Part 2, in a child process: `hooks --child trace|dormant LIB FAKE_DIR`.
fn child(mode: &str, lib: &str, fake_dir: &str) {
    let fake = std::path::Path::new(fake_dir);
    let h_rt = dlopen_local(&fake.join("libcudart.so.13"));
    let h_nc = dlopen_local(&fake.join("nccl/libnccl.so.2"));
    // This binary's own copy of the hooks set these in its constructor; the library
    // under test must find them unset, or it steps aside for "another tool".
    std::env::remove_var("CUDA_INJECTION64_PATH");
    std::env::remove_var("NVTX_INJECTION64_PATH");
    let c = std::ffi::CString::new(lib).unwrap();
    // SAFETY: loading the library under test into this process, for good.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null(), "dlopen {lib}");
    let sym = |h: *mut c_void, name: &std::ffi::CStr| {
        // SAFETY: looking up a symbol in a live handle.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        assert!(!p.is_null(), "{name:?} missing");
        p
    };
    // SAFETY: the exported signatures.
    let (hook_memcpy, direct_memcpy, hook_allreduce, direct_allreduce, inject) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Memcpy>(sym(h, c"cudaMemcpyAsync")),
            std::mem::transmute::<*mut c_void, Memcpy>(sym(h_rt, c"cudaMemcpyAsync")),
            std::mem::transmute::<*mut c_void, AllReduce>(sym(h, c"ncclAllReduce")),
            std::mem::transmute::<*mut c_void, AllReduce>(sym(h_nc, c"ncclAllReduce")),
            std::mem::transmute::<*mut c_void, extern "C" fn() -> i32>(sym(
                h,
                c"InitializeInjection",
            )),
        )
    };
    assert_eq!(inject(), 1, "InitializeInjection");
    let (dst, src, s) = (
        0xd000_0000usize as *mut c_void,
        0x1000 as *const c_void,
        std::ptr::null_mut(),
    );
    // A communicator made through the hooks, so the table knows it.
    // SAFETY: the exported signature; the fake writes the handle.
    let init: InitRank = unsafe { std::mem::transmute(sym(h, c"ncclCommInitRank")) };
    let mut comm: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let r = unsafe { init(&mut comm, 8, nccl::UniqueId { internal: [7; 128] }, 0) };
    assert_eq!(r, 0);
    let batch = 8192u64;
    let batches = 64;
    // ns per call over `batches` batches, pausing 6 ms after each (the writer drains).
    let paced = |f: &dyn Fn()| {
        let mut total = 0u128;
        for _ in 0..batches {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            total += t.elapsed().as_nanos();
            std::thread::sleep(std::time::Duration::from_millis(6));
        }
        total as f64 / (batch * batches) as f64
    };
    let dm = paced(&|| {
        // SAFETY: the fake ignores its arguments.
        black_box(unsafe { direct_memcpy(black_box(dst), src, 64, 1, s) });
    });
    let hm = paced(&|| {
        // SAFETY: as above; the hook forwards to the fake.
        black_box(unsafe { hook_memcpy(black_box(dst), src, 64, 1, s) });
    });
    let dn = paced(&|| {
        // SAFETY: the fake ignores its arguments.
        black_box(unsafe { direct_allreduce(src, dst, 64, 7, 0, black_box(comm), s) });
    });
    let hn = paced(&|| {
        // SAFETY: as above; the hook forwards to the fake.
        black_box(unsafe { hook_allreduce(src, dst, 64, 7, 0, black_box(comm), s) });
    });
    println!("{mode} {dm} {hm} {dn} {hn}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1], &args[i + 2], &args[i + 3]);
    }
    let dir = std::env::temp_dir().join(format!("gputrace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let h_rt = dlopen_local(&build_fake(&dir, "libcudart.so.13"));
    let nccl_dir = dir.join("nccl");
    std::fs::create_dir_all(&nccl_dir).unwrap();
    let h_nc = dlopen_local(&build_fake(&nccl_dir, "libnccl.so.2"));
    // SAFETY: the fake defines these with these signatures.
    let direct_memcpy: Memcpy =
        unsafe { std::mem::transmute(libc::dlsym(h_rt, c"cudaMemcpyAsync".as_ptr())) };
    // SAFETY: as above.
    let direct_allreduce: AllReduce =
        unsafe { std::mem::transmute(libc::dlsym(h_nc, c"ncclAllReduce".as_ptr())) };
    let mut comm: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the hook forwards to the fake, which writes it.
    let r =
        unsafe { nccl::ncclCommInitRank(&mut comm, 8, nccl::UniqueId { internal: [7; 128] }, 0) };
    assert_eq!(r, 0);
    assert!(comms::lookup(comm as usize).is_some());

    // The writer's part: drain the rings continuously.
    let stop = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicU64::new(0));
    let drainer = {
        let (stop, dropped) = (stop.clone(), dropped.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (_, d) = ring::drain_all(|_, r| {
                    black_box(r);
                });
                dropped.fetch_add(d, Ordering::Relaxed);
                // Sleeps like the writer (which drains every 5 ms), only more often, so
                // the ring has room and the drainer does not compete for the CPU.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };

    let n = 2_000_000u64;
    let rounds = 9;
    let (dst, src, s) = (
        0xd000_0000usize as *mut c_void,
        0x1000 as *const c_void,
        std::ptr::null_mut(),
    );
    let memcpy_direct = |_| {
        // SAFETY: the fake ignores its arguments.
        black_box(unsafe { direct_memcpy(black_box(dst), src, 64, 1, s) });
    };
    let memcpy_hook = |_| {
        // SAFETY: as above; the hook forwards to the fake.
        black_box(unsafe { cudart::cudaMemcpyAsync(black_box(dst), src, 64, 1, s) });
    };
    let nccl_direct = |_| {
        // SAFETY: as above.
        black_box(unsafe { direct_allreduce(src, dst, 64, 7, 0, black_box(comm), s) });
    };
    let nccl_hook = |_| {
        // SAFETY: as above.
        black_box(unsafe { nccl::ncclAllReduce(src, dst, 64, 7, 0, black_box(comm), s) });
    };
    // The CUPTI API callback, the hottest path: ENTER and EXIT of one runtime call,
    // called the way CUPTI calls it (the record goes to this thread's ring).
    let cbid = gputrace::base::cupti::apis::RUNTIME[0].cbid;
    let mut slot: u64 = 0;
    let mut ret: i32 = 0;
    // SAFETY: CUpti_CallbackData is plain C data; all zeroes is a valid value.
    let mut data: cupti_sys::CUpti_CallbackData = unsafe { std::mem::zeroed() };
    data.correlationData = &mut slot;
    data.functionReturnValue = &mut ret as *mut i32 as *mut c_void;
    let mut api_pair = |_| {
        for site in [
            cupti_sys::CUpti_ApiCallbackSite_CUPTI_API_ENTER,
            cupti_sys::CUpti_ApiCallbackSite_CUPTI_API_EXIT,
        ] {
            data.callbackSite = site;
            // SAFETY: a CUpti_CallbackData for a runtime API call, as CUPTI passes it.
            unsafe {
                gputrace::session::cupti::callback::api_callback(
                    std::ptr::null_mut(),
                    cupti_sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_RUNTIME_API,
                    cbid,
                    black_box(&data as *const cupti_sys::CUpti_CallbackData as *const c_void),
                )
            };
        }
    };
    // Warm up (resolves the real functions).
    state::set(state::DORMANT);
    time(1000, memcpy_hook);
    time(1000, nccl_hook);

    let mut res: Vec<(&str, Vec<f64>)> = [
        "clock_gettime(CLOCK_REALTIME)",
        "cudaMemcpyAsync direct",
        "cudaMemcpyAsync hook, not tracing",
        "cudaMemcpyAsync hook, tracing",
        "ncclAllReduce direct",
        "ncclAllReduce hook, not tracing",
        "ncclAllReduce hook, tracing",
        "CUPTI API callback ENTER+EXIT, tracing",
    ]
    .into_iter()
    .map(|s| (s, Vec::new()))
    .collect();
    for _ in 0..rounds {
        res[0].1.push(time(n, |_| {
            black_box(clock::now_ns());
        }));
        res[1].1.push(time(n, memcpy_direct));
        state::set(state::DORMANT);
        res[2].1.push(time(n, memcpy_hook));
        state::set(state::TRACING);
        res[3].1.push(time(n, memcpy_hook));
        res[4].1.push(time(n, nccl_direct));
        state::set(state::DORMANT);
        res[5].1.push(time(n, nccl_hook));
        state::set(state::TRACING);
        res[6].1.push(time(n, nccl_hook));
        res[7].1.push(time(n, &mut api_pair));
        state::set(state::DORMANT);
    }
    stop.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    println!(
        "{} calls per measurement, {rounds} rounds interleaved; ns per call, median (min)",
        n
    );
    let mut med = Vec::new();
    for (name, v) in &mut res {
        let min = v.iter().cloned().fold(f64::MAX, f64::min);
        let m = median(v);
        med.push(m);
        println!("  {name:<36} {m:>7.1} ({min:.1})");
    }
    println!(
        "  overhead over the direct call: cudaMemcpyAsync {:.1} ns not tracing, {:.1} ns tracing; ncclAllReduce {:.1} / {:.1} ns",
        med[2] - med[1],
        med[3] - med[1],
        med[5] - med[4],
        med[6] - med[4]
    );
    println!(
        "  ring records dropped while tracing: {} (the drainer could not keep up)",
        dropped.load(Ordering::Relaxed)
    );
    cdylib(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Part 2: the shared library, in child processes.
fn cdylib(dir: &std::path::Path) {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libgputrace.so");
    if !lib.is_file() {
        println!("(no {} next to the bench: part 2 skipped)", lib.display());
        return;
    }
    let traces = dir.join("traces");
    let rounds = 5;
    // [mode][column] -> values: direct memcpy, hook memcpy, direct nccl, hook nccl.
    let mut v: [[Vec<f64>; 4]; 2] = Default::default();
    for _ in 0..rounds {
        for (m, mode) in ["trace", "dormant"].iter().enumerate() {
            let out = Command::new(&exe)
                .args(["--child", mode])
                .arg(&lib)
                .arg(dir)
                .env("GPUTRACE_CUPTI", "/nonexistent")
                .env("GPUTRACE_DIR", &traces)
                .env(
                    "GPUTRACE_MODE",
                    if *mode == "dormant" {
                        "dormant"
                    } else {
                        "trace"
                    },
                )
                .env_remove("CUDA_INJECTION64_PATH")
                .output()
                .expect("run the bench child");
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find(|l| l.starts_with(mode))
                .unwrap_or_else(|| {
                    panic!("child failed: {}", String::from_utf8_lossy(&out.stderr))
                });
            for (c, x) in line.split_whitespace().skip(1).enumerate() {
                v[m][c].push(x.parse().unwrap());
            }
        }
    }
    println!(
        "\nlibgputrace.so (shared object), {rounds} rounds of a traced and a dormant process,"
    );
    println!("64 batches of 8192 calls each; ns per call, median (min)");
    let names = [
        "cudaMemcpyAsync direct",
        "cudaMemcpyAsync hook",
        "ncclAllReduce direct",
        "ncclAllReduce hook",
    ];
    for (m, mode) in ["tracing", "dormant"].iter().enumerate() {
        let mut med = [0.0; 4];
        for c in 0..4 {
            let min = v[m][c].iter().cloned().fold(f64::MAX, f64::min);
            med[c] = median(&mut v[m][c]);
            println!(
                "  {:<36} {:>7.1} ({min:.1})",
                format!("{} ({mode})", names[c]),
                med[c]
            );
        }
        println!(
            "  overhead over the direct call ({mode}): cudaMemcpyAsync {:.1} ns, ncclAllReduce {:.1} ns",
            med[1] - med[0],
            med[3] - med[2]
        );
    }
}
