//! Numbers as the report writes them. A leaf: the text report and the analysis's own
//! sentences (call sites, findings) use it.

/// `part` as a percentage of `whole` (0 for an empty whole).
pub(crate) fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

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

/// A timestamp relative to the trace start, in seconds (to the microsecond).
pub fn ts(ns: u64) -> String {
    format!("{:.6} s", ns as f64 / 1e9)
}

/// A percentage with a decimal when it is small.
pub fn pct_str(p: f64) -> String {
    if p > 0.0 && p < 9.95 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// "12.3% (820 ms)"
pub fn share(part: u64, whole: u64) -> String {
    format!("{:.1}% ({})", pct(part, whole), dur(part))
}

/// A byte count in binary units ("1.5 GiB").
pub fn bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}
