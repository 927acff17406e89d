//! `gputrace attach --steps N`: a window that closes after N NVTX step ranges.

use gputrace_analyzer::commands::attach;
use gputrace_format::{self as fmt, Event};
use gputrace_tests::hooks::run_scenario;
use gputrace_tests::poll;
use std::collections::HashMap;
use std::time::Duration;

/// The pid of the running hook_app whose arguments include `marker`.
fn pid_with(marker: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if cmd.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
                return Some(pid);
            }
        }
    }
    None
}

#[test]
fn a_steps_window_closes_after_that_many_steps() {
    let marker = format!("gputrace-steps-test-{}", std::process::id());
    let m = marker.clone();
    let app = std::thread::spawn(move || {
        run_scenario("steps", &["8", &m], &[("GPUTRACE_MODE", "dormant")])
    });
    let pid = poll(Duration::from_secs(30), || pid_with(&marker)).expect("the app started");
    poll(Duration::from_secs(30), || {
        attach::candidate_sockets(pid)
            .into_iter()
            .find(|p| p.exists())
    })
    .expect("the control socket");
    let win = attach::attach(pid, Duration::from_secs(30), Some(5), None, None, |_| {})
        .expect("a window");
    let run = app.join().unwrap();
    run.assert_ok();
    let data = fmt::read_all(&win.trace).unwrap();
    let mut strings = HashMap::new();
    let mut step_pushes = 0;
    for e in &data.events {
        match e {
            Event::Str { id, text } => {
                strings.insert(*id, text.clone());
            }
            Event::Nvtx(n)
                if n.kind == fmt::NVTX_PUSH
                    && strings.get(&n.text).is_some_and(|t| t.contains("step")) =>
            {
                step_pushes += 1;
            }
            _ => {}
        }
    }
    // The window closes once the sixth step begins (polled every 20 ms, at about 2 ms a
    // step); left to its 30 s cap it would run until the app exits, some 3000 steps.
    assert!(step_pushes >= 6, "{step_pushes} step ranges in the window");
    assert!(
        step_pushes < 300,
        "{step_pushes} step ranges: the window ignored --steps"
    );
}
