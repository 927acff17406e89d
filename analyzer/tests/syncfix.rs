//! `implicit_sync`'s fix follows the call that synchronised: synthetic loops whose
//! only difference is the call that makes the host wait for the GPU each step.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Finding, Report};

fn get<'r>(r: &'r Report, id: &str) -> &'r Finding {
    r.findings
        .iter()
        .find(|f| f.id.as_str() == id)
        .unwrap_or_else(|| panic!("no {id} finding\n{}", gputrace_analyzer::render_text(r)))
}

/// Each step: 4 kernels of 500 us launched at once, then `calls` synchronising calls
/// (cbid, name) back to back (the first waits for the GPU to drain), then 300 us of host
/// work before the next step.
fn loop_with(calls: &[(u32, &str)], steps: usize) -> Report {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for _ in 0..steps {
        let prev_end = b.step_kernels(h, 500 * US);
        let mut at = h + 50 * US;
        for (i, &(cbid, name)) in calls.iter().enumerate() {
            let end = if i == 0 {
                prev_end + 5 * US
            } else {
                at + 20 * US
            };
            b.api(TID, at, end - at, cbid, name, 0, 0);
            at = end + 2 * US;
        }
        h = at + 300 * US;
    }
    analyze(&[b.build()])
}

#[test]
fn empty_cache_every_step_gets_the_allocator_fix() {
    // torch.cuda.empty_cache(): a cudaFree per cached block, the first waits for the GPU.
    let r = loop_with(&[(22, "cudaFree"), (22, "cudaFree"), (22, "cudaFree")], 40);
    let f = get(&r, "implicit_sync");
    assert_eq!(f.subcause.as_deref(), Some("allocator"));
    assert!(f.fix.contains("empty_cache"), "{}", f.fix);
    assert!(f.fix.contains("PYTORCH_CUDA_ALLOC_CONF"), "{}", f.fix);
    assert!(!f.fix.contains(".item()"), "{}", f.fix);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("allocator (117 calls")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn device_synchronize_gets_the_synchronize_fix() {
    let r = loop_with(&[(165, "cudaDeviceSynchronize")], 40);
    let f = get(&r, "implicit_sync");
    assert_eq!(f.subcause.as_deref(), Some("device_synchronize"));
    assert!(f.fix.contains("torch.cuda.synchronize()"), "{}", f.fix);
}

#[test]
fn event_synchronize_gets_the_event_fix() {
    let r = loop_with(&[(137, "cudaEventSynchronize")], 40);
    let f = get(&r, "implicit_sync");
    assert_eq!(f.subcause.as_deref(), Some("event_synchronize"));
    assert!(f.fix.contains("event"), "{}", f.fix);
}

#[test]
fn stream_synchronize_alone_gets_the_stream_fix() {
    let r = loop_with(&[(STREAM_SYNC, "cudaStreamSynchronize")], 40);
    let f = get(&r, "implicit_sync");
    assert_eq!(f.subcause.as_deref(), Some("stream_synchronize"));
    assert!(f.fix.contains("wait_event"), "{}", f.fix);
}

#[test]
fn item_style_reads_keep_the_item_fix() {
    // A DtoH copy then a stream sync: what .item() does.
    let r = gputrace_analyzer::report::analyze(&[item_every_step(20).build()]);
    let f = get(&r, "implicit_sync");
    assert_eq!(f.subcause.as_deref(), Some("d2h_read"));
    assert!(f.fix.contains(".item()"), "{}", f.fix);
}
