//! Golden outputs of the text report (and one JSON report, to hold the schema still).
//! `UPDATE_GOLDEN=1 cargo test -p gputrace-analyzer --test golden` rewrites them.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, render_text};
use gputrace_analyzer::Trace;
use gputrace_format::{Event, Meta};
use std::path::PathBuf;

fn check(name: &str, got: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; run with UPDATE_GOLDEN=1 to create it. Output:\n{got}",
            path.display()
        )
    });
    if want != got {
        let line = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{} differs from the golden file at line {}:\n  want: {:?}\n  got:  {:?}\n(UPDATE_GOLDEN=1 rewrites it)\nfull output:\n{got}",
            name,
            line + 1,
            want.lines().nth(line).unwrap_or(""),
            got.lines().nth(line).unwrap_or("")
        );
    }
}

fn text(traces: &[Trace]) -> String {
    render_text(&analyze(traces))
}

#[test]
fn golden_healthy() {
    check("healthy.txt", &text(&[healthy(30).build()]));
}

#[test]
fn golden_data_starvation() {
    check("data_starvation.txt", &text(&[data_starved(20).build()]));
}

#[test]
fn golden_implicit_sync() {
    check("implicit_sync.txt", &text(&[item_every_step(20).build()]));
}

#[test]
fn golden_launch_bound() {
    check("launch_bound.txt", &text(&[launch_bound(20).build()]));
}

#[test]
fn golden_pageable() {
    check("pageable_memcpy.txt", &text(&[pageable(20, false).build()]));
}

#[test]
fn golden_small_grid() {
    check("small_grid.txt", &text(&[small_grid(20, GIB).build()]));
}

#[test]
fn golden_straggler() {
    check("comm_straggler.txt", &text(&straggler_ranks(20)));
}

#[test]
fn golden_gpu_only() {
    let mut b = data_starved(20);
    b.ev.retain(|e| !matches!(e, Event::Api(_)));
    check("gpu_only.txt", &text(&[b.build()]));
}

#[test]
fn golden_empty() {
    check(
        "empty.txt",
        &text(&[Trace::from_events(Meta::default(), Vec::new())]),
    );
}

#[test]
fn golden_json() {
    let r = analyze(&[data_starved(8).build()]);
    let mut s = serde_json::to_string_pretty(&r).unwrap();
    s.push('\n');
    check("data_starvation.json", &s);
}
