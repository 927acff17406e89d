//! Old formats stay readable: the format-1 originals of two bundled examples (kept in
//! `tests/format1/`, uncompressed) read to the same events, dump and report as their
//! format-2 conversions under `examples/` (zstd-compressed chunks).

use gputrace_analyzer::export::jsonl::Jsonl;
use gputrace_analyzer::export::stream::{EventStream, DEFAULT_MAX_PENDING};
use gputrace_analyzer::report::{analyze, render_text};
use gputrace_analyzer::Trace;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The report as JSON, without the one field that names the file.
fn report_json(t: &Trace) -> serde_json::Value {
    let mut v = serde_json::to_value(analyze(std::slice::from_ref(t))).unwrap();
    v["processes"][0]["path"] = serde_json::Value::Null;
    v
}

#[test]
fn format1_originals_read_like_their_format2_conversions() {
    for (name, minor) in [("pageable_memcpy", 1), ("jax-loop", 0)] {
        let old = Trace::load(&root().join(format!("tests/format1/{name}.gtrace"))).unwrap();
        let new = Trace::load(&root().join(format!("../examples/{name}.gtrace"))).unwrap();
        assert_eq!((old.stats.major, old.stats.minor), (1, minor), "{name}");
        assert_eq!((new.stats.major, new.stats.minor), (2, 0), "{name}");
        for t in [&old, &new] {
            assert!(t.stats.warning().is_none(), "{name}: {:?}", t.stats);
            assert!(!t.kernels.is_empty(), "{name}");
        }
        assert_eq!(old.stats.events, new.stats.events, "{name}");
        assert_eq!(old.meta, new.meta, "{name}");
        // `gputrace dump`, streamed from the file.
        let dumped = |t: &Trace| {
            let mut out = Vec::new();
            EventStream::open(&t.path)
                .unwrap()
                .write(DEFAULT_MAX_PENDING, &mut Jsonl::default(), &mut out)
                .unwrap();
            out
        };
        assert!(dumped(&old) == dumped(&new), "{name}: dumps differ");
        assert_eq!(report_json(&old), report_json(&new), "{name}");
        let text = |t: &Trace| render_text(&analyze(std::slice::from_ref(t)));
        let (a, b) = (text(&old), text(&new));
        // The text names the file once, in its process header.
        let strip = |s: &str, t: &Trace| s.replace(&t.path.display().to_string(), "PATH");
        assert_eq!(strip(&a, &old), strip(&b, &new), "{name}");
    }
}
