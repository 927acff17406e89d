//! Nothing lost on a kill: a process launching kernels steadily is SIGKILLed mid-run
//! (as the OOM killer would), and its trace is compared with what it launched.
//!
//! The app appends "N MONO_NS" to a progress file after every 10th launch. The writer
//! stamps every chunk it writes with a clock pair taken right after it drained the
//! rings, so what must be in the file is known without any timing assumption: every
//! launch that returned before the second-to-last chunk's stamp had its host record
//! drained by the last chunk at the latest. GPU records travel through CUPTI's buffers
//! first (handed over every CUPTI flush period), so their loss is measured and printed,
//! in flush periods, alongside.

use gputrace_analyzer::Trace as Analyzed;
use gputrace_format::{CollectorState, Event};
use gputrace_tests::{poll, Cuda, Layout, TempDir, Trace, Wheel};
use std::time::Duration;

const FLUSH_MS: u64 = 100;

/// Ids sorted are exactly 1..=n; returns n.
fn gapless_from_1(mut ids: Vec<u32>, what: &str) -> u64 {
    ids.sort_unstable();
    let n = ids.len() as u32;
    assert!(
        ids.iter().copied().eq(1..=n),
        "{what}: not every id from 1 to {n}: {:?}..",
        &ids[..ids.len().min(20)]
    );
    n as u64
}

#[test]
fn a_sigkill_loses_only_what_came_after_the_last_write() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let tmp = TempDir::new("steady");
    let progress = tmp.path().join("progress");
    let child = w
        .app(&["steady", progress.to_str().unwrap()])
        .env("GPUTRACE_FLUSH_MS", FLUSH_MS.to_string())
        .spawn();
    // Wait (with a generous deadline, not a fixed sleep) until the writer has put many
    // chunks with kernels in the file: a kill mid-run, not at start-up.
    let seen = poll(Duration::from_secs(120), || {
        let f = w.trace_files().into_iter().next()?;
        let d = gputrace_format::read_all(&f).ok()?;
        let k = d
            .events
            .iter()
            .filter(|e| matches!(e, Event::Kernel(_)))
            .count();
        (d.stats.chunks >= 8 && k >= 500).then_some(k)
    });
    // Then kill at a moment unrelated to the writes: after a number of launches more
    // (200 to 1200, about 20 to 120 ms) that varies from run to run.
    let progress_now = || {
        let text = std::fs::read_to_string(&progress).ok()?;
        text.lines().last()?.split_once(' ')?.0.parse::<u64>().ok()
    };
    if let Some(now) = progress_now() {
        let more = 200 + (child.id() as u64 * 7919) % 1000;
        poll(Duration::from_secs(120), || {
            progress_now().filter(|n| *n >= now + more)
        });
    }
    let (status, _out, err) = child.kill();
    assert!(seen.is_some(), "the trace never grew; stderr:\n{err}");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the app was killed"
    );

    // What the app launched, and when.
    let launched: Vec<(u64, u64)> = std::fs::read_to_string(&progress)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (n, t) = l.split_once(' ')?;
            Some((n.parse().ok()?, t.parse().ok()?))
        })
        .collect();
    let &(last_n, last_t) = launched.last().expect("progress lines");

    let files = w.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let t = Trace::read(&files[0]);
    let s = &t.data.stats;
    // Whole chunks only, or a torn last write: cut short, never damaged.
    assert!(s.cut_short() && !s.damaged(), "{s:?}");
    assert!(!t.states().iter().any(|x| x.1 == CollectorState::Stopped));
    let kernels = gapless_from_1(t.kernels().iter().map(|k| k.corr).collect(), "kernels");
    let apis = gapless_from_1(t.apis().iter().map(|a| a.corr).collect(), "API records");
    assert!(t.dropped().is_empty(), "{:?}", t.dropped());
    // Nothing was recorded that was not launched (up to 9 launches after the last
    // progress line).
    assert!(kernels <= last_n + 9 && apis <= last_n + 9);

    // Each chunk's stamp (CLOCK_MONOTONIC), in file order; the first chunk has two.
    let stamps: Vec<u64> = t
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Clock { mono_ns, .. } => Some(*mono_ns),
            _ => None,
        })
        .collect();
    assert!(stamps.len() >= 4, "{stamps:?}");
    let penultimate = stamps[stamps.len() - 2];
    let must = launched
        .iter()
        .filter(|(_, at)| *at < penultimate)
        .map(|(n, _)| *n)
        .max()
        .unwrap_or(0);
    assert!(
        apis >= must,
        "{apis} launch records, but {must} launches returned before the second-to-last write"
    );

    // What was lost, in time: from the launch after the last recorded one to the last
    // progress line before the kill.
    let lost_ms = |recorded: u64| {
        let first_lost = launched.iter().find(|(n, _)| *n > recorded);
        first_lost.map_or(0.0, |(_, at)| last_t.saturating_sub(*at) as f64 / 1e6)
    };
    let (k_ms, a_ms) = (lost_ms(kernels), lost_ms(apis));
    // Written past the test harness's capture: the measurement is worth seeing.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "sigkill: launched at least {last_n}; recorded {kernels} kernels (the last {k_ms:.0} ms \
         lost: {:.1} flush periods) and {apis} launch records (the last {a_ms:.0} ms lost: {:.1} \
         flush periods); flush period {FLUSH_MS} ms, CUPTI's the same",
        k_ms / FLUSH_MS as f64,
        a_ms / FLUSH_MS as f64
    );

    // The analyzer says the trace was cut short, in its verdict too.
    let a = Analyzed::load(&files[0]).unwrap();
    let r = gputrace_analyzer::analyze(std::slice::from_ref(&a));
    assert!(r.verdict.contains("cut short"), "{}", r.verdict);
    assert!(r.processes[0]
        .damage
        .as_ref()
        .is_some_and(|d| d.cut_short && !d.damaged));
}

/// Kills the steady launcher once its trace holds `apis` launch records in at least 4
/// chunks, with `env` set; returns its trace's kernel and launch record counts.
fn kill_steady_after(env: &[(&str, &str)], apis: usize) -> (usize, usize) {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let tmp = TempDir::new("steady");
    let progress = tmp.path().join("progress");
    let mut cmd = w
        .app(&["steady", progress.to_str().unwrap()])
        .env("GPUTRACE_FLUSH_MS", FLUSH_MS.to_string());
    for (k, v) in env {
        cmd = cmd.env(k, v);
    }
    let child = cmd.spawn();
    let seen = poll(Duration::from_secs(120), || {
        let f = w.trace_files().into_iter().next()?;
        let d = gputrace_format::read_all(&f).ok()?;
        let n = d
            .events
            .iter()
            .filter(|e| matches!(e, Event::Api(_)))
            .count();
        (d.stats.chunks >= 4 && n >= apis).then_some(n)
    });
    let (_, _, err) = child.kill();
    assert!(seen.is_some(), "the trace never grew; stderr:\n{err}");
    let t = Trace::read(&w.trace_files()[0]);
    (t.kernels().len(), t.apis().len())
}

/// CUPTI hands a buffer over when it is full or at a flush (its periodic flush only
/// hands over full ones, and so does the fake): a GPU whose records fill no buffer
/// before a SIGKILL leaves no kernel, unless the library's handover flushes while
/// records are overdue.
#[test]
fn the_handover_keeps_the_kernels_of_a_busy_job_killed_before_a_buffer_filled() {
    let (kernels, apis) = kill_steady_after(&[("GPUTRACE_HANDOVER_MS", "0")], 1500);
    assert!(apis >= 1500, "{apis}");
    assert_eq!(kernels, 0, "without the handover no buffer is handed over");
    let (kernels, apis) = kill_steady_after(&[("GPUTRACE_HANDOVER_MS", "200")], 1500);
    assert!(apis >= 1500, "{apis}");
    assert!(
        kernels > 0,
        "the handover flushed nothing ({apis} launches recorded)"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "handover 200 ms: {kernels} kernels of {apis} launch records reached the file"
    );
}
