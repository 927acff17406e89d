//! The shape of interpose/src, checked from its source text:
//! * the module import graph has no loop, and every import goes down the layers
//!   (exports -> runtime -> session -> rings -> writer -> base);
//! * every `extern "C" fn` (an exported symbol or a callback handed to C) runs its whole
//!   body through `ffi::entry!`, so a panic never reaches C unguarded.
//!
//! Files are nodes (`a/mod.rs` is module `a`); an edge is any path that names another of
//! our modules (`crate::x::y`, `super::z`, a child module `c::f`, `use` trees with
//! braces). Comments, strings and `#[cfg(test)]` items are left out: tests may reach
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top first. A module's layer is that of its first path segment; the crate
/// root (lib.rs) is above them all.
const LAYERS: &[(&str, &[&str])] = &[
    ("exports", &["exports"]),
    ("runtime", &["runtime"]),
    ("session", &["session"]),
    ("rings", &["rings"]),
    ("writer", &["writer"]),
    ("base", &["base"]),
];

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
    /// `::`
    Path,
}

/// Splits Rust source into tokens, dropping comments, lifetimes and char literals.
fn lex(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            let (s, end) = string_at(&c, i + 1, 0);
            out.push(Tok::Str(s));
            i = end;
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): both dropped.
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' || ch == '$' {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // String prefixes: b"", c"", r"", r#""#, br"", cr#""#.
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (c.get(i) == Some(&'"') || c.get(i) == Some(&'#')) {
                let mut hashes = 0;
                while c.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                let (s, end) = string_at(&c, i + 1, hashes);
                out.push(Tok::Str(s));
                i = end;
            } else if matches!(word.as_str(), "b" | "c") && c.get(i) == Some(&'"') {
                let (s, end) = string_at(&c, i + 1, 0);
                out.push(Tok::Str(s));
                i = end;
            } else {
                out.push(Tok::Ident(word));
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                if c[i] == '.' && !c.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                    break;
                }
                i += 1;
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::Path);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// The string starting at `i` (just after its opening quote); `hashes` > 0 for raw
/// strings. Returns the text and the index after the closing quote.
fn string_at(c: &[char], mut i: usize, hashes: usize) -> (String, usize) {
    let mut s = String::new();
    while i < c.len() {
        if hashes == 0 && c[i] == '\\' {
            s.push(c[i]);
            if let Some(n) = c.get(i + 1) {
                s.push(*n);
            }
            i += 2;
            continue;
        }
        if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
            return (s, i + 1 + hashes);
        }
        s.push(c[i]);
        i += 1;
    }
    (s, i)
}

/// Index just past the group opened at `open` (a `{`, `(` or `[`).
fn close_of(t: &[Tok], open: usize) -> usize {
    let mut depth = 0i32;
    let mut i = open;
    while i < t.len() {
        match t[i] {
            Tok::Punct('{' | '(' | '[') => depth += 1,
            Tok::Punct('}' | ')' | ']') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    t.len()
}

/// Drops `#[cfg(test)]` items (test modules, test-only functions and imports).
fn without_tests(t: Vec<Tok>) -> Vec<Tok> {
    let id = |s: &str| Tok::Ident(s.into());
    let p = Tok::Punct;
    let cfg_test = [
        p('#'),
        p('['),
        id("cfg"),
        p('('),
        id("test"),
        p(')'),
        p(']'),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with(&cfg_test) {
            let mut j = i + cfg_test.len();
            // Further attributes on the same item.
            while t.get(j) == Some(&p('#')) && t.get(j + 1) == Some(&p('[')) {
                j = close_of(&t, j + 1);
            }
            // The item: up to its `;` or through its first brace group.
            while j < t.len() {
                match t[j] {
                    Tok::Punct(';') => {
                        j += 1;
                        break;
                    }
                    Tok::Punct('{') => {
                        j = close_of(&t, j);
                        break;
                    }
                    Tok::Punct('(' | '[') => j = close_of(&t, j),
                    _ => j += 1,
                }
            }
            i = j;
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

struct Module {
    file: PathBuf,
    toks: Vec<Tok>,
}

/// Every module of `src`, by path (`[]` is the crate root).
fn modules(src: &Path) -> BTreeMap<Vec<String>, Module> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, Module>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                let mut pre = prefix.to_vec();
                pre.push(name);
                walk(&p, &pre, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let mut path = prefix.to_vec();
                if stem != "mod" && !(prefix.is_empty() && stem == "lib") {
                    path.push(stem.to_string());
                }
                let text = std::fs::read_to_string(&p).unwrap();
                out.insert(
                    path,
                    Module {
                        file: p.clone(),
                        toks: without_tests(lex(&text)),
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

/// The modules each module names.
fn import_graph(mods: &BTreeMap<Vec<String>, Module>) -> Graph {
    let is_mod = |p: &[String]| mods.contains_key(p);
    let mut g = Graph::new();
    for (me, m) in mods {
        let t = &m.toks;
        let mut targets = BTreeSet::new();
        for i in 0..t.len() {
            let Tok::Ident(first) = &t[i] else { continue };
            if t.get(i + 1) != Some(&Tok::Path) || (i > 0 && t[i - 1] == Tok::Path) {
                continue;
            }
            let base: Vec<String> = match first.as_str() {
                "crate" | "$crate" => vec![],
                "super" => me[..me.len().saturating_sub(1)].to_vec(),
                "self" => me.clone(),
                name => {
                    let mut child = me.clone();
                    child.push(name.to_string());
                    if is_mod(&child) {
                        child
                    } else if me.is_empty() && is_mod(&[name.to_string()]) {
                        vec![name.to_string()]
                    } else {
                        continue;
                    }
                }
            };
            follow(t, i + 1, base, &is_mod, &mut targets);
        }
        targets.remove(me);
        g.insert(me.clone(), targets);
    }
    g
}

/// Follows a path from `base` whose next token (at `i`) is `::`, recording the deepest
/// module each branch reaches.
fn follow(
    t: &[Tok],
    mut i: usize,
    mut base: Vec<String>,
    is_mod: &dyn Fn(&[String]) -> bool,
    out: &mut BTreeSet<Vec<String>>,
) {
    while t.get(i) == Some(&Tok::Path) {
        match t.get(i + 1) {
            Some(Tok::Ident(s)) if s == "super" => {
                base.pop();
                i += 2;
            }
            Some(Tok::Ident(s)) if s == "self" => i += 2,
            Some(Tok::Ident(s)) => {
                let mut next = base.clone();
                next.push(s.clone());
                if !is_mod(&next) {
                    break;
                }
                base = next;
                i += 2;
            }
            Some(Tok::Punct('{')) => {
                let end = close_of(t, i + 1) - 1;
                let mut j = i + 2;
                while j < end {
                    // One item of the group: a path relative to `base`.
                    let mut k = j;
                    let mut depth = 0;
                    while k < end && !(depth == 0 && t[k] == Tok::Punct(',')) {
                        match t[k] {
                            Tok::Punct('{') => depth += 1,
                            Tok::Punct('}') => depth -= 1,
                            _ => {}
                        }
                        k += 1;
                    }
                    let mut item = base.clone();
                    let mut at = j;
                    if let Some(Tok::Ident(s)) = t.get(at) {
                        if s == "self" {
                            at += 1;
                        } else {
                            let mut next = base.clone();
                            next.push(s.clone());
                            if is_mod(&next) {
                                item = next;
                                at += 1;
                            } else {
                                at = k;
                            }
                        }
                    }
                    if at < k && t.get(at) == Some(&Tok::Path) {
                        follow(t, at, item, is_mod, out);
                    } else {
                        out.insert(item);
                    }
                    j = k + 1;
                }
                return;
            }
            _ => break,
        }
    }
    out.insert(base);
}

/// Strongly connected components of more than one module (Tarjan).
fn loops(g: &Graph) -> Vec<Vec<Vec<String>>> {
    struct S<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn name(p: &[String]) -> String {
    if p.is_empty() {
        "lib".into()
    } else {
        p.join("/")
    }
}

#[test]
fn no_import_loops() {
    let mods = modules(&src_dir());
    let g = import_graph(&mods);
    let found = loops(&g);
    let text: Vec<String> = found
        .iter()
        .map(|c| c.iter().map(|m| name(m)).collect::<Vec<_>>().join(", "))
        .collect();
    eprintln!(
        "{} modules, {} imports, {} import loops{}",
        g.len(),
        g.values().map(|s| s.len()).sum::<usize>(),
        found.len(),
        text.iter()
            .map(|t| format!("\n  loop: {t}"))
            .collect::<String>()
    );
    assert!(
        found.is_empty(),
        "import loops in interpose/src:\n{text:#?}"
    );
}

fn layer_of(p: &[String]) -> usize {
    let Some(first) = p.first() else { return 0 };
    LAYERS
        .iter()
        .position(|(_, tops)| tops.contains(&first.as_str()))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("module {} is in no layer (see LAYERS)", name(p)))
}

#[test]
fn imports_only_go_down_the_layers() {
    let mods = modules(&src_dir());
    let g = import_graph(&mods);
    let mut up = Vec::new();
    for (from, tos) in &g {
        for to in tos {
            if layer_of(to) < layer_of(from) {
                up.push(format!("{} -> {}", name(from), name(to)));
            }
        }
    }
    assert!(up.is_empty(), "imports that go up a layer: {up:#?}");
}

/// `extern "C" fn NAME` definitions whose body is not exactly one `entry!(..)`.
fn unguarded_entries(mods: &BTreeMap<Vec<String>, Module>) -> (usize, Vec<String>) {
    let mut seen = 0;
    let mut bad = Vec::new();
    for m in mods.values() {
        let t = &m.toks;
        for i in 0..t.len() {
            let is_def = t[i] == Tok::Ident("extern".into())
                && t.get(i + 1) == Some(&Tok::Str("C".into()))
                && t.get(i + 2) == Some(&Tok::Ident("fn".into()))
                && matches!(t.get(i + 3), Some(Tok::Ident(n)) if !n.starts_with('$'));
            if !is_def {
                continue;
            }
            seen += 1;
            let Some(Tok::Ident(fname)) = t.get(i + 3) else {
                unreachable!()
            };
            // The body: the first `{` after the signature's parentheses.
            let mut j = i + 4;
            while j < t.len() && t[j] != Tok::Punct('(') {
                j += 1;
            }
            j = close_of(t, j);
            while j < t.len() && t[j] != Tok::Punct('{') && t[j] != Tok::Punct(';') {
                j += 1;
            }
            if t.get(j) != Some(&Tok::Punct('{')) {
                continue; // a declaration, not a definition
            }
            let body_end = close_of(t, j) - 1;
            // `entry!(...)` or `ffi::entry!(...)` / `crate::base::ffi::entry!(...)`, alone.
            let mut k = j + 1;
            while matches!(t.get(k), Some(Tok::Ident(s)) if s != "entry")
                && t.get(k + 1) == Some(&Tok::Path)
            {
                k += 2;
            }
            let ok = t.get(k) == Some(&Tok::Ident("entry".into()))
                && t.get(k + 1) == Some(&Tok::Punct('!'))
                && t.get(k + 2) == Some(&Tok::Punct('('))
                && close_of(t, k + 2) == body_end;
            if !ok {
                bad.push(format!("{}: {fname}", m.file.display()));
            }
        }
    }
    (seen, bad)
}

#[test]
fn every_c_entry_point_is_guarded() {
    let mods = modules(&src_dir());
    let (seen, bad) = unguarded_entries(&mods);
    eprintln!("{seen} extern \"C\" functions, {} unguarded", bad.len());
    assert!(
        seen > 50,
        "the scan found only {seen} entry points: is it broken?"
    );
    assert!(
        bad.is_empty(),
        "extern \"C\" functions whose body is not one `entry!(..)` call: {bad:#?}"
    );
}

#[test]
fn the_scanner_sees_what_it_should() {
    let t = without_tests(lex(r##"
        use crate::{a::{self, b}, c};
        use super::d::e;
        // crate::commented::out
        let s = "crate::in_a_string";
        let r = r#"crate::raw"#;
        let ch = '"'; let l: &'static str = "";
        #[cfg(test)]
        mod tests { use crate::hidden; }
        f::g();
    "##));
    let idents: Vec<&str> = t
        .iter()
        .filter_map(|x| match x {
            Tok::Ident(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    assert!(!idents.contains(&"commented"));
    assert!(!idents.contains(&"hidden"));
    assert!(!idents.contains(&"in_a_string"));
    assert!(idents.contains(&"e"));
    let mut mods = BTreeMap::new();
    for p in [
        vec![],
        vec!["a".to_string()],
        vec!["a".into(), "b".into()],
        vec!["c".into()],
        vec!["d".into()],
        vec!["x".into()],
        vec!["x".into(), "f".into()],
    ] {
        mods.insert(
            p,
            Module {
                file: PathBuf::new(),
                toks: Vec::new(),
            },
        );
    }
    mods.get_mut(&vec!["x".to_string()]).unwrap().toks = t;
    let g = import_graph(&mods);
    let got: Vec<String> = g[&vec!["x".to_string()]].iter().map(|m| name(m)).collect();
    assert_eq!(got, ["a", "a/b", "c", "d", "x/f"]);
}

/// A panic is caught in one of two kinds of place only: the guard of a function C calls
/// (`base/ffi.rs`: `entry!`, `guarded`, `guarded_value`, which turn tracing off and say
/// so) and the body of a thread of ours (`gputrace_env::worker::Worker`, outside this
/// crate: it says so and ends the thread, doing what the thread's `Spec` asks). A hook
/// that caught a panic itself and swallowed it left tracing on after an internal error.
#[test]
fn panics_are_caught_only_by_the_guards() {
    const ALLOWED: &[&str] = &["base/ffi.rs"];
    let mut found = Vec::new();
    for_each_source(|rel, code| {
        let uses = code
            .iter()
            .filter(|t| matches!(t, Tok::Ident(s) if s == "catch_unwind"))
            .count();
        if uses > 0 {
            found.push((rel.to_string(), uses));
        }
    });
    let outside: Vec<_> = found
        .iter()
        .filter(|(f, _)| !ALLOWED.contains(&f.as_str()))
        .collect();
    assert!(
        found.iter().any(|(f, _)| f == "base/ffi.rs"),
        "the scan did not see the guard's own catch_unwind: is it broken? {found:?}"
    );
    assert!(
        outside.is_empty(),
        "catch_unwind outside the guards (use base::ffi::guarded or guarded_value): {outside:?}"
    );
}

/// Every thread of ours is a worker (`base::worker`, over `gputrace_env::worker`): its
/// start, stop, period, fork child and panic policy in one place. A thread spawned by
/// hand had its own stop flag, its own panic handling and no fork handling.
#[test]
fn threads_are_started_only_as_workers() {
    let mut outside = Vec::new();
    for_each_source(|rel, code| {
        let spawns = code
            .windows(3)
            .filter(|w| {
                matches!(&w[0], Tok::Ident(s) if s == "thread")
                    && matches!(&w[2], Tok::Ident(s) if s == "spawn" || s == "Builder")
            })
            .count();
        if spawns > 0 {
            outside.push(rel.to_string());
        }
    });
    assert!(
        outside.is_empty(),
        "threads started outside base::worker: {outside:?}"
    );
}

/// Calls `f` with each source file of src/ (its path under src/, `/`-separated) and its
/// tokens outside test modules.
fn for_each_source(mut f: impl FnMut(&str, &[Tok])) {
    let root = src_dir();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read src") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&root).expect("under src");
                let rel = rel.to_string_lossy().replace('\\', "/");
                let src = std::fs::read_to_string(&p).expect("read source");
                f(&rel, &without_tests(lex(&src)));
            }
        }
    }
}
