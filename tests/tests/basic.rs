//! A traced run of known CUDA work: every record, every API call, the metadata; and
//! the same work through CUPTI 12 records, which must decode to the same trace.

use gputrace_format::{self as fmt, CollectorState, CopyKind, MemKind, SyncKind};
use gputrace_tests::{Cuda, Layout, Output, Trace, Wheel};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

const VECADD: &str = "_Z6vecAddPKfS0_Pfi";
const RELU: &str = "_Z4reluPfi";
const DEFAULT_STREAM: u32 = 7;
const STREAM: u32 = 13;

/// Traced runtime calls of `basic`, by name, as app.c makes them.
const API_COUNTS: &[(&str, u32, usize)] = &[
    ("cudaMalloc", 20, 2),
    ("cudaFree", 22, 2),
    ("cudaMallocHost", 25, 1),
    ("cudaFreeHost", 26, 2),
    ("cudaHostAlloc", 27, 1),
    ("cudaMemcpy", 31, 4),
    ("cudaMemcpyAsync", 41, 3),
    ("cudaMemset", 49, 1),
    ("cudaMemsetAsync", 51, 1),
    ("cudaStreamSynchronize", 131, 1),
    ("cudaDeviceSynchronize", 165, 1),
    ("cudaLaunchKernel", 211, 8),
];

fn same_file(a: &Path, b: &Path) -> bool {
    std::fs::canonicalize(a).unwrap() == std::fs::canonicalize(b).unwrap()
}

/// Everything `basic` must leave in its trace.
fn check_basic(w: &Wheel, out: &Output, t: &Trace) {
    t.assert_complete();
    let m = &t.data.meta;
    assert!(
        same_file(Path::new(&m.cupti_path), w.cupti.as_ref().unwrap()),
        "cupti_path {} is not the wheel's {}",
        m.cupti_path,
        w.cupti.as_ref().unwrap().display()
    );
    assert_eq!(m.cupti_source, "next to the process's libcudart");
    assert_eq!(m.cupti_api_version, w.cuda.cupti_api_version());
    assert_eq!(m.cuda_runtime_major, w.cuda.major());
    assert!(
        same_file(Path::new(&m.cuda_runtime_path), &w.cudart),
        "cuda_runtime_path {}",
        m.cuda_runtime_path
    );
    assert_eq!(m.started_by, "injection");
    assert!(
        m.cmdline.iter().any(|a| a == "basic"),
        "cmdline {:?}",
        m.cmdline
    );
    assert!(
        t.data
            .path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with(&format!("-{}.gtrace", m.pid)),
        "file name {} does not carry pid {}",
        t.data.path.display(),
        m.pid
    );
    assert!(out.stderr.is_empty(), "unexpected stderr: {}", out.stderr);

    // Kernels: names via Str, launch geometry, streams, in launch order.
    let mut ks = t.kernels();
    ks.sort_by_key(|k| k.corr);
    let names: Vec<&str> = ks.iter().map(|k| t.str(k.name)).collect();
    assert_eq!(
        names,
        [VECADD, VECADD, RELU, VECADD, RELU, VECADD, RELU, VECADD],
        "kernels in launch order"
    );
    for k in &ks {
        let (grid, block, stream, smem) = if t.str(k.name) == VECADD {
            ([64, 2, 1], [256, 1, 1], DEFAULT_STREAM, 0)
        } else {
            ([10, 1, 1], [128, 1, 1], STREAM, 1024)
        };
        assert_eq!((k.grid, k.block), (grid, block), "{k:?}");
        assert_eq!(
            (k.stream, k.device, k.dynamic_smem),
            (stream, 0, smem),
            "{k:?}"
        );
        assert_eq!(
            (k.static_smem, k.registers, k.graph_id),
            (256, 32, 0),
            "{k:?}"
        );
        assert!(k.start <= k.end, "{k:?}");
    }
    let name_ids: HashSet<u32> = ks.iter().map(|k| k.name).collect();
    assert_eq!(name_ids.len(), 2, "each kernel name is interned once");

    // Copies: 4 pageable synchronous, 3 pinned asynchronous.
    let mut cs = t.memcpys();
    cs.sort_by_key(|c| c.corr);
    let got: Vec<(u64, CopyKind, MemKind, MemKind, u8, u32)> = cs
        .iter()
        .map(|c| {
            (
                c.bytes,
                CopyKind::from_u8(c.copy_kind),
                MemKind::from_u8(c.src_kind),
                MemKind::from_u8(c.dst_kind),
                c.flags,
                c.stream,
            )
        })
        .collect();
    use CopyKind::{DtoH, HtoD};
    use MemKind::{Device, Pageable, Pinned};
    let a = fmt::MEMCPY_FLAG_ASYNC;
    assert_eq!(
        got,
        [
            (1024, HtoD, Pageable, Device, 0, DEFAULT_STREAM),
            (2048, DtoH, Device, Pageable, 0, DEFAULT_STREAM),
            (3000, HtoD, Pageable, Device, 0, DEFAULT_STREAM),
            (4096, DtoH, Device, Pageable, 0, DEFAULT_STREAM),
            (512, HtoD, Pinned, Device, a, STREAM),
            (768, DtoH, Device, Pinned, a, STREAM),
            (4096, HtoD, Pinned, Device, a, STREAM),
        ]
    );
    assert!(cs.iter().all(|c| c.device == 0 && c.start <= c.end));

    let mut ss = t.memsets();
    ss.sort_by_key(|s| s.corr);
    let got: Vec<_> = ss
        .iter()
        .map(|s| {
            (
                s.bytes,
                s.value,
                MemKind::from_u8(s.mem_kind),
                s.flags,
                s.stream,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (65536, 0, Device, 0, DEFAULT_STREAM),
            (1234, 7, Device, 1, STREAM)
        ]
    );

    let mut ys = t.syncs();
    ys.sort_by_key(|y| y.corr);
    let got: Vec<_> = ys
        .iter()
        .map(|y| (SyncKind::from_u8(y.kind), y.stream))
        .collect();
    assert_eq!(
        got,
        [
            (SyncKind::StreamSynchronize, STREAM),
            (SyncKind::ContextSynchronize, u32::MAX)
        ]
    );

    let mut ms = t.memories();
    ms.sort_by_key(|m| m.corr);
    let got: Vec<_> = ms
        .iter()
        .map(|m| (m.op, m.bytes, m.mem_kind, m.device))
        .collect();
    assert_eq!(
        got,
        [
            (fmt::MEMORY_OP_ALLOC, 1 << 20, MemKind::Device as u8, 0),
            (fmt::MEMORY_OP_ALLOC, 1 << 16, MemKind::Device as u8, 0),
            (fmt::MEMORY_OP_FREE, 1 << 20, MemKind::Device as u8, 0),
            (fmt::MEMORY_OP_FREE, 1 << 16, MemKind::Device as u8, 0),
        ]
    );
    assert_eq!(ms[0].address, ms[2].address, "free of the first allocation");
    assert_eq!(
        ms[1].address, ms[3].address,
        "free of the second allocation"
    );

    let ds = t.devices();
    assert_eq!(ds.len(), 1, "one Device record: {ds:?}");
    let d = ds[0];
    assert_eq!(t.str(d.name), "Fake NVIDIA H200");
    assert_eq!(
        (
            d.id,
            d.sm_count,
            d.max_blocks_per_sm,
            d.max_threads_per_sm,
            d.max_warps_per_sm
        ),
        (0, 132, 32, 2048, 64)
    );
    assert_eq!((d.cc_major, d.cc_minor), (9, 0));
    assert_eq!(d.global_memory, 150_754_820_096);
    assert_eq!((d.max_regs_per_sm, d.max_smem_per_sm), (65536, 233472));

    // API calls: one event per traced call, with the right id, name and numbers.
    let apis = t.apis();
    for (name, cbid, n) in API_COUNTS {
        let v = t.apis_named(name);
        assert_eq!(v.len(), *n, "{name} calls");
        assert!(v.iter().all(|a| a.cbid == *cbid), "{name} cbid");
    }
    assert_eq!(apis.len(), API_COUNTS.iter().map(|c| c.2).sum::<usize>());
    let corrs: Vec<u32> = {
        let mut v: Vec<u32> = apis.iter().map(|a| a.corr).collect();
        v.sort();
        v
    };
    // cudaGetDeviceCount (1) and cudaStreamCreate (2) are not traced.
    assert_eq!(corrs, (3..=29).collect::<Vec<u32>>(), "API correlation ids");
    let tids: HashSet<u32> = apis.iter().map(|a| a.tid).collect();
    assert_eq!(tids.len(), 1, "one calling thread");
    assert!(
        t.named_threads().is_superset(&tids),
        "the calling thread is named"
    );
    for a in &apis {
        assert_eq!(a.domain, fmt::DOMAIN_RUNTIME, "{a:?}");
        assert_eq!(a.result, 0, "{a:?}");
        assert!(a.start <= a.end, "{a:?}");
    }

    // Every GPU record belongs to the API call with its correlation id, and ran
    // while that call did.
    let by_corr = t.api_by_corr();
    let call = |corr: u32, start: u64, end: u64, want: &[&str]| {
        let a = by_corr
            .get(&corr)
            .unwrap_or_else(|| panic!("no API call with corr {corr}"));
        assert!(
            want.contains(&t.str(a.name)),
            "corr {corr} is {}",
            t.str(a.name)
        );
        assert!(
            a.start <= start && start <= end && end <= a.end,
            "{a:?} vs [{start}, {end}]"
        );
        *a
    };
    for k in &ks {
        call(k.corr, k.start, k.end, &["cudaLaunchKernel"]);
    }
    for c in &cs {
        let a = call(c.corr, c.start, c.end, &["cudaMemcpy", "cudaMemcpyAsync"]);
        assert_eq!(a.bytes, c.bytes, "API bytes of {a:?}");
        let kind = if c.copy_kind == CopyKind::HtoD as u8 {
            1
        } else {
            2
        };
        assert_eq!(a.arg, kind, "cudaMemcpyKind of {a:?}");
        assert_eq!(
            t.str(a.name) == "cudaMemcpyAsync",
            c.flags == fmt::MEMCPY_FLAG_ASYNC
        );
    }
    for s in &ss {
        let a = call(s.corr, s.start, s.end, &["cudaMemset", "cudaMemsetAsync"]);
        assert_eq!(a.bytes, s.bytes, "API bytes of {a:?}");
    }
    for y in &ys {
        call(
            y.corr,
            y.start,
            y.end,
            &["cudaStreamSynchronize", "cudaDeviceSynchronize"],
        );
    }
    for m in &ms {
        let a = call(m.corr, m.ts, m.ts, &["cudaMalloc", "cudaFree"]);
        let want = if m.op == fmt::MEMORY_OP_ALLOC {
            m.bytes
        } else {
            0
        };
        assert_eq!(a.bytes, want, "{a:?}");
        // Allocations and frees carry the pointer (format 2.5), MEMORY2's address.
        assert_eq!(a.ptr, m.address, "{a:?}");
    }
    // Each free names the pointer its allocation returned.
    let made: Vec<u64> = ["cudaMallocHost", "cudaHostAlloc"]
        .iter()
        .map(|n| t.apis_named(n)[0].ptr)
        .collect();
    let freed: Vec<u64> = t.apis_named("cudaFreeHost").iter().map(|a| a.ptr).collect();
    assert!(
        made.iter().all(|p| *p != 0 && *p != fmt::ENV_NA64),
        "{made:?}"
    );
    assert_eq!(freed, made, "pinned frees name their allocations");
    assert!(t
        .apis_named("cudaLaunchKernel")
        .iter()
        .all(|a| a.ptr == fmt::ENV_NA64));
    let host: Vec<u64> = ["cudaMallocHost", "cudaHostAlloc"]
        .iter()
        .map(|n| t.apis_named(n)[0].bytes)
        .collect();
    assert_eq!(host, [8192, 4096], "pinned allocation sizes");

    assert!(t.dropped().is_empty(), "dropped records: {:?}", t.dropped());
    let states = t.states();
    assert_eq!(states.first().map(|s| s.1), Some(CollectorState::Tracing));
    assert!(
        !states.iter().any(|s| s.1 == CollectorState::Blind),
        "no blind window: {states:?}"
    );
    assert!(
        t.events()
            .iter()
            .any(|e| matches!(e, fmt::Event::Clock { .. })),
        "a clock pair"
    );
}

/// The trace without what differs from run to run (times, thread ids, string ids).
fn normalized(t: &Trace) -> BTreeMap<u32, Vec<String>> {
    let mut m: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for e in t.events() {
        let (corr, s) = match e {
            fmt::Event::Kernel(k) => {
                let mut k = k.clone();
                let name = t.str(k.name).to_string();
                (k.start, k.end, k.name) = (0, 0, 0);
                (k.corr, format!("{k:?} {name}"))
            }
            fmt::Event::Memcpy(c) => {
                let mut c = c.clone();
                (c.start, c.end) = (0, 0);
                (c.corr, format!("{c:?}"))
            }
            fmt::Event::Memset(s) => {
                let mut s = s.clone();
                (s.start, s.end) = (0, 0);
                (s.corr, format!("{s:?}"))
            }
            fmt::Event::Sync(y) => {
                let mut y = y.clone();
                (y.start, y.end) = (0, 0);
                (y.corr, format!("{y:?}"))
            }
            fmt::Event::Memory(r) => {
                let mut r = r.clone();
                (r.ts, r.address) = (0, 0);
                (r.corr, format!("{r:?}"))
            }
            fmt::Event::Api(a) => {
                let mut a = a.clone();
                let name = t.str(a.name).to_string();
                (a.start, a.end, a.tid, a.name) = (0, 0, 0, 0);
                // Pinned host pointers are malloc's: whether there is one.
                if a.ptr != fmt::ENV_NA64 {
                    a.ptr = 1;
                }
                (a.corr, format!("{a:?} {name}"))
            }
            fmt::Event::Device(d) => {
                let mut d = d.clone();
                let name = t.str(d.name).to_string();
                d.name = 0;
                (0, format!("{d:?} {name}"))
            }
            _ => continue,
        };
        m.entry(corr).or_default().push(s);
    }
    for v in m.values_mut() {
        v.sort();
    }
    m
}

fn run_basic(cuda: Cuda, layout: Layout) -> (Wheel, Output, Trace) {
    let w = Wheel::new(cuda, layout);
    let base = w.app(&["basic"]).untraced().run();
    base.assert_ok();
    assert!(base.traces.is_empty(), "an untraced run writes no trace");
    // Every kind, SYNCHRONIZATION (off by default) included, to check every decoder.
    let all = "kernel,memcpy,memset,sync,device,memory";
    let out = w.app(&["basic"]).env("GPUTRACE_ACTIVITY", all).run();
    out.assert_ok();
    assert_eq!(
        out.stdout, base.stdout,
        "tracing changed the program's output"
    );
    let t = out.only_trace();
    (w, out, t)
}

#[test]
fn basic_cuda13_wheel() {
    let (w, out, t) = run_basic(Cuda::V13, Layout::Flat);
    check_basic(&w, &out, &t);
    // The collector writes its last chunk as the end: a copy of its first events chunk
    // appended after it is set aside, not read.
    let mut d = std::fs::read(&t.data.path).unwrap();
    let meta_len = u32::from_le_bytes(d[fmt::HEADER_LEN + 4..][..4].try_into().unwrap());
    let first = fmt::HEADER_LEN + fmt::CHUNK_HEADER_LEN + meta_len as usize;
    let len = u32::from_le_bytes(d[first + 4..][..4].try_into().unwrap()) as usize;
    let end = d.len();
    d.extend_from_within(first..first + fmt::CHUNK_HEADER_LEN + len);
    let mut r = fmt::open(&t.data.path, &d).unwrap();
    let mut n = 0;
    r.for_each_event(|_| n += 1);
    assert_eq!(n, t.data.events.len());
    let kinds: Vec<_> = r.stats.lost.iter().map(|l| (l.kind, l.offset)).collect();
    assert_eq!(kinds, [(fmt::LossKind::AfterEnd, end as u64)]);
}

#[test]
fn basic_cuda12_records_decode_like_13() {
    let (w13, out13, t13) = run_basic(Cuda::V13, Layout::Flat);
    check_basic(&w13, &out13, &t13);
    // CUDA 12 wheels keep libcupti in nvidia/cuda_cupti/lib, away from libcudart.
    let (w12, out12, t12) = run_basic(Cuda::V12, Layout::Split);
    check_basic(&w12, &out12, &t12);
    assert_eq!(
        normalized(&t12),
        normalized(&t13),
        "12.x and 13.x traces differ"
    );
    // And the CUDA 12 libraries side by side.
    let (w12f, out12f, t12f) = run_basic(Cuda::V12, Layout::Flat);
    check_basic(&w12f, &out12f, &t12f);
    assert_eq!(normalized(&t12f), normalized(&t13));
}

#[test]
fn threads_each_get_their_calls() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["threads"]).run();
    out.assert_ok();
    let t = out.only_trace();
    t.assert_complete();
    let ks = t.kernels_named("_Z6workerv");
    assert_eq!(ks.len(), 100);
    let mut per_grid: BTreeMap<u32, usize> = BTreeMap::new();
    for k in &ks {
        *per_grid.entry(k.grid[0]).or_default() += 1;
    }
    assert_eq!(
        per_grid,
        BTreeMap::from([(1, 25), (2, 25), (3, 25), (4, 25)])
    );
    let launches = t.apis_named("cudaLaunchKernel");
    assert_eq!(launches.len(), 100);
    let tids: HashSet<u32> = launches.iter().map(|a| a.tid).collect();
    assert_eq!(tids.len(), 4, "four launching threads");
    let sync = t.apis_named("cudaDeviceSynchronize");
    assert_eq!(sync.len(), 1);
    assert!(!tids.contains(&sync[0].tid), "the main thread synchronised");
    let mut corrs: Vec<u32> = t.apis().iter().map(|a| a.corr).collect();
    corrs.sort();
    assert_eq!(corrs, (1..=101).collect::<Vec<u32>>());
    let by_corr = t.api_by_corr();
    for k in &ks {
        assert_eq!(t.str(by_corr[&k.corr].name), "cudaLaunchKernel");
    }
    assert!(t.dropped().is_empty(), "{:?}", t.dropped());
}
