//! Numbers as the report writes them. A leaf: the text report and the analysis's own
//! sentences (call sites, findings) use it.

/// A duration with a unit that suits it.
pub fn dur(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", v / 1e3)
    } else if ns < 10_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", v / 1e6)
    } else if ns < 100_000_000_000 {
        format!("{:.3} s", v / 1e9)
    } else {
        format!("{:.1} s", v / 1e9)
    }
}
