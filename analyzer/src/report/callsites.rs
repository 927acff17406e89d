//! Where in the user's Python code the calls behind a finding were made: the traces of
//! a CPython process carry the caller's Python stack for its synchronising calls,
//! copies, allocations and NCCL calls (format 2.2 `PyStack` / `CallSite`). A finding
//! about calls tallies them by the innermost frame of the user's own code (frames of
//! the standard library, of installed packages and of torch are stepped over; a stack
//! with nothing else is tallied by its innermost frame), with the calls made from each
//! and the host time spent inside them. The full stacks go into `--json`.

use crate::model::trace::Trace;
use gputrace_format as fmt;
use serde::Serialize;
use std::collections::HashMap;

/// Call sites a finding lists in `--json`.
pub const MAX_SITES: usize = 5;
/// Call sites shown in the text report.
pub const SHOWN_SITES: usize = 2;
/// Distinct full stacks kept per call site.
const MAX_STACKS: usize = 3;

/// One frame of a Python stack.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub file: String,
    pub function: String,
    /// 0 when not known.
    pub line: u32,
}

/// One place in the code that made calls a finding is about.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct CallSite {
    /// The innermost frame of the user's code (or, when every frame is library code,
    /// the innermost frame).
    pub file: String,
    pub line: u32,
    pub function: String,
    /// The frame is the user's code (not the standard library, an installed package or
    /// torch).
    pub user_code: bool,
    /// Calls made from here, and the host time inside them.
    pub calls: u64,
    pub host_ns: u64,
    /// The CUDA / NCCL functions called from here, most calls first.
    pub apis: Vec<String>,
    /// The calls of each of `apis` (same order); they add up to `calls`.
    pub api_calls: Vec<u64>,
    /// The full stacks seen (innermost first), most calls first.
    pub stacks: Vec<Vec<Frame>>,
}

impl CallSite {
    /// `train.py:57 in train_step`.
    pub fn place(&self) -> String {
        format!(
            "{}:{} in {}",
            short_file(&self.file),
            self.line,
            self.function
        )
    }
}

/// The file name as the text report shows it: its last component, with its directory
/// for package files (`pkg/__init__.py`).
pub fn short_file(path: &str) -> String {
    let mut parts = path.rsplit('/');
    let name = parts.next().unwrap_or(path);
    match (name, parts.next()) {
        ("__init__.py" | "__main__.py", Some(dir)) if !dir.is_empty() => format!("{dir}/{name}"),
        _ => name.to_string(),
    }
}

/// Whether a frame's file is library code rather than the user's: the standard
/// library, an installed package, torch, or code with no file (`<frozen ...>`,
/// `<string>`).
pub fn is_library(file: &str) -> bool {
    file.is_empty()
        || file.starts_with('<')
        || file.contains("/site-packages/")
        || file.contains("/dist-packages/")
        || file.contains("/torch/")
        || is_stdlib(file)
}

/// `.../lib/python3.12/x.py` (but not its site-packages).
fn is_stdlib(file: &str) -> bool {
    file.split('/')
        .any(|c| c.starts_with("python3.") && c[8..].chars().all(|d| d.is_ascii_digit()))
        && file.contains("/lib")
}

#[derive(Default)]
struct Acc {
    calls: u64,
    host_ns: u64,
    user: bool,
    apis: HashMap<String, u64>,
    stacks: HashMap<u32, u64>,
}

/// Calls tallied by call site.
pub struct Tally<'t> {
    t: &'t Trace,
    /// By (file, line, function) of the chosen frame.
    sites: HashMap<(u32, u32, u32), Acc>,
}

impl<'t> Tally<'t> {
    pub fn new(t: &'t Trace) -> Tally<'t> {
        Tally {
            t,
            sites: HashMap::new(),
        }
    }

    /// Whether the trace has call sites at all (else nothing is worth tallying).
    pub fn possible(t: &Trace) -> bool {
        !t.call_sites.is_empty()
    }

    /// Adds the call of thread `tid` that ran from `start` to `end`, named `api`, if
    /// the trace knows where it was made from.
    pub fn add(&mut self, tid: u32, start: u64, end: u64, api: &str) {
        let Some(st) = self.t.call_site(tid, start) else {
            return;
        };
        let Some((f, user)) = pick(self.t, &st.frames) else {
            return;
        };
        let a = self.sites.entry((f.file, f.line, f.function)).or_default();
        a.calls += 1;
        a.host_ns = a.host_ns.saturating_add(end.saturating_sub(start));
        a.user = user;
        *a.apis.entry(api.to_string()).or_default() += 1;
        *a.stacks.entry(st.id).or_default() += 1;
    }

    /// The call sites, most host time first (then most calls), at most [`MAX_SITES`].
    pub fn finish(self) -> Vec<CallSite> {
        let t = self.t;
        let mut v: Vec<CallSite> = self
            .sites
            .into_iter()
            .map(|((file, line, function), a)| {
                let mut apis: Vec<(String, u64)> = a.apis.into_iter().collect();
                apis.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
                let mut stacks: Vec<(u32, u64)> = a.stacks.into_iter().collect();
                stacks.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
                CallSite {
                    file: t.str(file).to_string(),
                    line,
                    function: t.str(function).to_string(),
                    user_code: a.user,
                    calls: a.calls,
                    host_ns: a.host_ns,
                    api_calls: apis.iter().map(|x| x.1).collect(),
                    apis: apis.into_iter().map(|x| x.0).collect(),
                    stacks: stacks
                        .iter()
                        .take(MAX_STACKS)
                        .filter_map(|(id, _)| t.py_stack(*id))
                        .map(|s| frames(t, &s.frames))
                        .collect(),
                }
            })
            .collect();
        v.sort_by(|a, b| {
            b.host_ns
                .cmp(&a.host_ns)
                .then(b.calls.cmp(&a.calls))
                .then(a.file.cmp(&b.file))
                .then(a.line.cmp(&b.line))
        });
        v.truncate(MAX_SITES);
        v
    }
}

/// Where the host call of thread `tid` that started at `start` was made, as a call site
/// is tallied (the innermost frame of the user's code): `train.py:57 in step`, with
/// ` [library]` when every frame is library code. None without its Python stack.
pub fn place_of(t: &Trace, tid: u32, start: u64) -> Option<String> {
    let st = t.call_site(tid, start)?;
    let (f, user) = pick(t, &st.frames)?;
    Some(format!(
        "{}:{} in {}{}",
        short_file(t.str(f.file)),
        f.line,
        t.str(f.function),
        if user { "" } else { " [library]" }
    ))
}

/// The frame a call is charged to: the innermost of the user's code, else the
/// innermost; and whether it is the user's.
fn pick<'f>(t: &Trace, frames: &'f [fmt::PyFrame]) -> Option<(&'f fmt::PyFrame, bool)> {
    frames
        .iter()
        .find(|f| !is_library(t.str(f.file)))
        .map(|f| (f, true))
        .or_else(|| frames.first().map(|f| (f, false)))
}

fn frames(t: &Trace, fs: &[fmt::PyFrame]) -> Vec<Frame> {
    fs.iter()
        .map(|f| Frame {
            file: t.str(f.file).to_string(),
            function: t.str(f.function).to_string(),
            line: f.line,
        })
        .collect()
}

/// The evidence line for the top call sites, each function with its own count:
/// `called from train.py:57 in train_step (cudaStreamSynchronize x960, 4.1 s in the calls)`,
/// `called from train.py:43 in main (472 calls: cudaMemcpyAsync x236, cudaStreamSynchronize
/// x236; 234.7 ms in the calls)`.
pub fn evidence(sites: &[CallSite]) -> Option<String> {
    if sites.is_empty() {
        return None;
    }
    let shown: Vec<String> = sites
        .iter()
        .take(SHOWN_SITES)
        .map(|s| {
            let each: Vec<String> = s
                .apis
                .iter()
                .zip(&s.api_calls)
                .map(|(a, n)| format!("{a} x{n}"))
                .collect();
            let calls = match each.len() {
                0 => format!("{} calls,", s.calls),
                1 => format!("{},", each[0]),
                _ => format!("{} calls: {};", s.calls, each.join(", ")),
            };
            format!(
                "{}{} ({calls} {} in the calls)",
                s.place(),
                if s.user_code { "" } else { " [library]" },
                super::units::dur(s.host_ns)
            )
        })
        .collect();
    Some(format!("called from {}", shown.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_files_are_told_from_the_users() {
        for f in [
            "/usr/lib/python3.12/threading.py",
            "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py",
            "/usr/lib/python3/dist-packages/numpy/core.py",
            "/src/pytorch/torch/_tensor.py",
            "<frozen importlib._bootstrap>",
            "",
        ] {
            assert!(is_library(f), "{f}");
        }
        for f in [
            "/home/u/train.py",
            "train.py",
            "/work/python3.12-notes/train.py",
            "/home/u/lib/models/resnet.py",
        ] {
            assert!(!is_library(f), "{f}");
        }
    }

    #[test]
    fn short_names() {
        assert_eq!(short_file("/a/b/train.py"), "train.py");
        assert_eq!(short_file("/a/pkg/__init__.py"), "pkg/__init__.py");
        assert_eq!(short_file("train.py"), "train.py");
    }
}
