//! GPU hardware counters (CUPTI PM sampling) end to end through the fake CUPTI, which
//! plays the PM sampling and profiler host APIs with known answers (tests/fakes/
//! fake_cupti.c): its samples must reach the trace with their values, and each refusal
//! (not permitted, hardware busy, a CUPTI without the API) must be one `pm_sampling`
//! fact, the program running as it does untraced.

use gputrace_format::{self as fmt, Event};
use gputrace_tests::*;

const DONE: &str = "pm: 5 launches done\n";

/// Runs the app's `pm` scenario with PM sampling on; the wheel keeps the trace.
fn run(cuda: Cuda, wait: bool, extra: &[(&str, &str)]) -> (Wheel, Output) {
    let w = Wheel::new(cuda, Layout::Flat);
    let mut r = w
        .app(&["pm", if wait { "1" } else { "0" }])
        .env("GPUTRACE_PM", "1")
        .env("GPUTRACE_FLUSH_MS", "10");
    for (k, v) in extra {
        r = r.env(k, v);
    }
    let o = r.run();
    o.assert_ok();
    assert_eq!(o.stdout, DONE, "stderr:\n{}", o.stderr);
    (w, o)
}

/// The `pm_sampling` facts of a trace.
fn pm_facts(t: &Trace) -> Vec<String> {
    t.events()
        .iter()
        .filter_map(|e| match e {
            Event::Fact(f) if t.str(f.key) == "pm_sampling" => Some(t.str(f.value).to_string()),
            _ => None,
        })
        .collect()
}

fn samples(t: &Trace) -> Vec<fmt::CounterSample> {
    t.events()
        .iter()
        .filter_map(|e| match e {
            Event::CounterSample(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn samples_reach_the_trace_with_their_values() {
    let (_w, o) = run(Cuda::V13, true, &[]);
    let t = o.only_trace();
    let facts = pm_facts(&t);
    assert_eq!(facts.len(), 1, "{facts:?}\n{}", o.stderr);
    // dram__throughput is unknown to the fake chip (its fallback is used), NVLink too;
    // six metrics need two passes there, so the last (PCIe write) is left out.
    assert!(
        facts[0].starts_with("on: device 0, every 1000 us, 5 metrics: ")
            && facts[0].contains("gpu__dram_throughput")
            && !facts[0].contains("pcie__write"),
        "{facts:?}"
    );
    let s = samples(&t);
    assert_eq!(s.len(), 3, "{s:?}\n{}", o.stderr);
    for (i, c) in s.iter().enumerate() {
        assert_eq!(c.end - c.start, 1_000_000, "{c:?}");
        if i > 0 {
            assert_eq!(c.start, s[i - 1].end);
        }
        assert_eq!(
            (c.sm_active, c.dram, c.occupancy, c.tensor_active),
            (9900, 9250, 4000, 50)
        );
        assert_eq!(c.pcie_read_bytes, 4096);
        assert_eq!(c.pcie_write_bytes, fmt::ENV_NA64);
        assert_eq!(c.nvlink_rx_bytes, fmt::ENV_NA64);
    }
    // Disabled once, after the activity kinds were off (CUPTI may finalize itself there).
    let disabled: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("fake_cupti: PM sampling disabled"))
        .collect();
    assert_eq!(
        disabled,
        ["fake_cupti: PM sampling disabled after activity tracing stopped"],
        "{}",
        o.stderr
    );
    // On the trace's clock: after the first kernel, inside the trace.
    let first_kernel = t.kernels().iter().map(|k| k.start).min().unwrap();
    assert!(
        s[0].start >= first_kernel,
        "{} < {first_kernel}",
        s[0].start
    );
}

#[test]
fn samples_decodable_only_after_stop_are_drained() {
    // The fake gives nothing while sampling, "other" at the first decode after Stop,
    // and the samples at the next: the session must stop, then decode until the end of
    // the records. (The fake also checks every structSize for the header's exact value
    // and that the config image outlives Disable.)
    let (_w, o) = run(Cuda::V13, true, &[("FAKE_CUPTI_PM", "at_stop")]);
    let t = o.only_trace();
    let facts = pm_facts(&t);
    assert_eq!(facts.len(), 1, "{facts:?}\n{}", o.stderr);
    assert!(facts[0].starts_with("on: "), "{facts:?}");
    assert_eq!(samples(&t).len(), 3, "{}", o.stderr);
    assert!(
        !o.stderr.contains("freed before"),
        "the config image was freed early:\n{}",
        o.stderr
    );
}

#[test]
fn a_cupti_12_set_config_struct_is_tried_when_the_13_one_is_refused() {
    let (_w, o) = run(Cuda::V13, true, &[("FAKE_CUPTI_PM", "v12")]);
    let t = o.only_trace();
    let facts = pm_facts(&t);
    assert!(
        facts.len() == 1 && facts[0].starts_with("on: "),
        "{facts:?}"
    );
    assert_eq!(samples(&t).len(), 3, "{}", o.stderr);
}

#[test]
fn the_device_sampled_is_the_one_the_work_ran_on() {
    // Every context of the fake is on device 1, and its PM calls refuse device 0.
    let (_w, o) = run(Cuda::V13, true, &[("FAKE_CUPTI_DEVICE", "1")]);
    let t = o.only_trace();
    let facts = pm_facts(&t);
    assert_eq!(facts.len(), 1, "{facts:?}\n{}", o.stderr);
    assert!(facts[0].starts_with("on: device 1, "), "{facts:?}");
    let s = samples(&t);
    assert_eq!(s.len(), 3, "{}", o.stderr);
    assert!(s.iter().all(|c| c.device == 1), "{s:?}");
}

#[test]
fn a_refusal_is_one_fact_and_nothing_else_changes() {
    for (mode, want) in [
        ("denied", "refused: not permitted"),
        ("busy", "refused: hardware busy"),
    ] {
        let (_w, o) = run(Cuda::V13, true, &[("FAKE_CUPTI_PM", mode)]);
        let t = o.only_trace();
        let facts = pm_facts(&t);
        assert_eq!(facts.len(), 1, "{mode}: {facts:?}");
        assert!(facts[0].starts_with(want), "{mode}: {facts:?}");
        if mode == "denied" {
            assert!(
                facts[0].contains("NVreg_RestrictProfilingToAdminUsers=0"),
                "{facts:?}"
            );
        }
        assert!(samples(&t).is_empty());
        assert_eq!(t.kernels_named("_Z6streamv").len(), 5);
    }
}

#[test]
fn a_cupti_without_pm_sampling_is_one_fact() {
    // The 12.0 flavour has no PM sampling entry points (CUPTI added them in 12.6).
    let (_w, o) = run(Cuda::V12, false, &[]);
    let t = o.only_trace();
    let facts = pm_facts(&t);
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(
        facts[0].starts_with("not supported: ") && facts[0].contains("cuptiProfilerInitialize"),
        "{facts:?}"
    );
    assert_eq!(t.kernels_named("_Z6streamv").len(), 5);
}

#[test]
fn off_by_default() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = w.app(&["pm", "0"]).run();
    o.assert_ok();
    assert_eq!(o.stdout, DONE);
    let t = o.only_trace();
    assert!(pm_facts(&t).is_empty());
    assert!(samples(&t).is_empty());
}
