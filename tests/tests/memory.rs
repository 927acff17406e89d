//! Out of memory end to end: the fake app's `grow` loop keeps every step's allocation
//! (a leak), the fake runtime's cudaMalloc fails past FAKE_CUDA_MEMORY_LIMIT with
//! cudaErrorMemoryAllocation (the fake CUPTI hands the code to the EXIT callback, as
//! CUPTI does), the app frees its cached blocks, asks again, fails again and exits 1, as
//! a PyTorch job raising torch.cuda.OutOfMemoryError does. The report must say the
//! process died of it, with the numbers the app made: the size asked, what was in use
//! (each cudaFree paired with its cudaMalloc by pointer), the growth per step and the
//! retry. Without a limit the same loop ends normally and is warned as `memory_growth`.

use gputrace_analyzer::report::{analyze, Finding, Report};
use gputrace_analyzer::Trace;
use gputrace_format as fmt;
use gputrace_tests::{Cuda, Layout, Wheel};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// The app's cache: 4 blocks of 64 MiB, freed to retry.
const CACHE: u64 = 256 * MIB;

fn get<'r>(r: &'r Report, id: &str) -> &'r Finding {
    r.findings
        .iter()
        .find(|f| f.id.as_str() == id)
        .unwrap_or_else(|| panic!("no {id} finding\n{}", gputrace_analyzer::render_text(r)))
}

fn metric(f: &Finding, k: &str) -> f64 {
    *f.metrics
        .get(k)
        .unwrap_or_else(|| panic!("no metric {k}: {:?}", f.metrics))
}

#[test]
fn a_job_that_leaks_until_cuda_runs_out_of_memory_is_reported_dead_of_it() {
    // 12 steps of 1 GiB fit with the cache; the 13th does not, nor once the cache is
    // freed (12 GiB + 1 GiB > 12.75 GiB).
    let limit = CACHE + 12 * GIB + GIB / 2;
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w
        .app(&["grow", "1024", "100"])
        .env("FAKE_CUDA_MEMORY_LIMIT", limit.to_string())
        .untraced()
        .run();
    assert_eq!(base.status.code(), Some(1), "untraced: {}", base.stderr);
    let out = w
        .app(&["grow", "1024", "100"])
        .env("FAKE_CUDA_MEMORY_LIMIT", limit.to_string())
        .run();
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("grow: CUDA out of memory at step 13: tried to allocate 1024 MiB"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, base.stdout);
    let t = Trace::load(&out.traces[0]).expect("read the trace");
    // The trace: two failed cudaMallocs, with the code at EXIT and no pointer; every
    // successful one with its pointer, every free with the one it was given.
    let mallocs: Vec<fmt::Api> = t.apis.iter().filter(|a| a.cbid == 20).collect();
    let failed: Vec<&fmt::Api> = mallocs.iter().filter(|a| a.result != 0).collect();
    assert_eq!(failed.len(), 2);
    assert!(failed
        .iter()
        .all(|a| a.result == 2 && a.bytes == GIB && a.ptr == fmt::ENV_NA64));
    assert_eq!(mallocs.len(), 4 + 12 + 2);
    assert!(mallocs
        .iter()
        .filter(|a| a.result == 0)
        .all(|a| a.ptr != fmt::ENV_NA64 && a.ptr != 0));
    let frees: Vec<u64> = t
        .apis
        .iter()
        .filter(|a| a.cbid == 22)
        .map(|a| a.ptr)
        .collect();
    let cache: Vec<u64> = mallocs[..4].iter().map(|a| a.ptr).collect();
    assert_eq!(frees, cache, "the cache's blocks were freed");

    let r = analyze(std::slice::from_ref(&t));
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, "out_of_memory");
    assert_eq!(f.severity.name(), "critical", "{text}");
    assert_eq!(f.title, "The process died of CUDA out of memory");
    assert_eq!(r.findings[0].id.as_str(), "out_of_memory", "{text}");
    for want in [
        "cudaMalloc of 1.0 GiB failed with cudaErrorMemoryAllocation at +",
        "and the process ran no GPU work after it: 12.0 GiB allocated through cudaMalloc was in use then",
        "and that grew 1.0 GiB every step",
        "tensors kept alive across steps",
    ] {
        assert!(f.summary.contains(want), "{want:?} not in {}\n{text}", f.summary);
    }
    let ev = f.evidence.join("\n");
    for want in [
        "2 allocations failed, the first at +",
        "cudaMalloc of 1.0 GiB (cudaErrorMemoryAllocation 2)",
        "in use when it failed: 12.0 GiB of the GPU's 140.4 GiB, from cudaMalloc/cudaFree pairs (peak 12.2 GiB at +",
        "the allocator then freed 256.0 MiB of cached blocks (4 cudaFree calls) and retried: it failed again",
        "+1.0 GiB per step",
    ] {
        assert!(ev.contains(want), "{want:?} not in\n{ev}");
    }
    assert!(
        f.fix
            .starts_with("Memory grew every step and was not given back"),
        "{}",
        f.fix
    );
    assert!(f.fix.contains(".item()"));
    assert_eq!(metric(f, "failed_bytes"), GIB as f64);
    assert_eq!(metric(f, "failed_allocations"), 2.0);
    assert_eq!(metric(f, "fatal"), 1.0);
    assert_eq!(metric(f, "in_use_bytes"), (12 * GIB) as f64);
    assert_eq!(metric(f, "peak_bytes"), (12 * GIB + CACHE) as f64);
    assert_eq!(metric(f, "growth_per_step_bytes"), GIB as f64);
    assert_eq!(metric(f, "retry_freed_bytes"), CACHE as f64);
    assert_eq!(metric(f, "steps_grown"), metric(f, "steps_compared"));
    assert!(metric(f, "steps_compared") >= 3.0, "{:?}", f.metrics);
    // What the run lost: its traced time up to the failure.
    assert!(f.at_stake_ns > 0 && f.at_stake_pct > 90.0, "{text}");
    assert!(
        r.findings.iter().all(|f| f.id.as_str() != "memory_growth"),
        "out_of_memory says it: {text}"
    );

    // The failed-calls section (its lines unwrapped) and what the verdict can call.
    assert!(text.contains("\nFAILED CALLS\n"), "{text}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "cudaMalloc returned cudaErrorMemoryAllocation (2) x2 at +",
        ", 1.0 GiB asked",
        "no GPU work ran after the last: cudaMalloc of 1.0 GiB failed with cudaErrorMemoryAllocation at +",
    ] {
        assert!(flat.contains(want), "{want:?} not in\n{text}");
    }
    let p = &r.processes[0];
    let fc = p.fatal_call.as_ref().expect("a fatal call");
    assert_eq!(fc.what(), "CUDA out of memory");

    // --json.
    let j = serde_json::to_value(&r).unwrap();
    let calls = &j["processes"][0]["failed_calls"];
    assert_eq!(calls.as_array().map(|a| a.len()), Some(1), "{calls}");
    let c = &calls[0];
    assert_eq!(c["call"], "cudaMalloc");
    assert_eq!(c["source"], "runtime");
    assert_eq!(c["code"], 2);
    assert_eq!(c["error"], "cudaErrorMemoryAllocation");
    assert_eq!(c["sticky"], false);
    assert_eq!(c["count"], 2);
    assert_eq!(c["bytes"], GIB);
    let fatal = &j["processes"][0]["fatal_call"];
    assert_eq!(fatal["kind"], "out_of_memory");
    assert_eq!(fatal["call"], "cudaMalloc");
    assert_eq!(fatal["bytes"], GIB);
    let m = &j["processes"][0]["memory_in_use"];
    assert_eq!(m["source"], "cuda_malloc");
    assert_eq!(m["allocations"], 16);
    assert_eq!(m["frees"], 4);
    assert_eq!(m["peak_bytes"], 12 * GIB + CACHE);
    assert_eq!(m["end_bytes"], 12 * GIB);
    assert_eq!(m["growth"]["per_step_bytes"], GIB);
    let jf = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "out_of_memory")
        .unwrap();
    assert_eq!(jf["severity"], "critical");
    assert_eq!(jf["metrics"]["in_use_bytes"], (12 * GIB) as f64);
}

#[test]
fn a_job_whose_memory_grows_every_step_is_warned() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["grow", "512", "12"]).run();
    out.assert_ok();
    let t = Trace::load(&out.traces[0]).expect("read the trace");
    let r = analyze(std::slice::from_ref(&t));
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, "memory_growth");
    assert_eq!(f.severity.name(), "warn", "{text}");
    assert!(
        f.summary
            .starts_with("Memory allocated through cudaMalloc grew 512.0 MiB every step"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("more steps ("), "{}", f.summary);
    assert_eq!(metric(f, "growth_per_step_bytes"), (512 * MIB) as f64);
    assert_eq!(metric(f, "steps_grown"), metric(f, "steps_compared"));
    assert!(f.fix.contains(".item()"));
    assert!(r.findings.iter().all(|f| f.id.as_str() != "out_of_memory"));
    assert!(!text.contains("FAILED CALLS"), "{text}");
    assert!(r.processes[0].fatal_call.is_none());
    assert!(r.processes[0].failed_calls.is_empty());
    assert!(!r.verdict.starts_with("Healthy"), "{}", r.verdict);
}
