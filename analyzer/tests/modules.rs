//! The shape of analyzer/src, from its source text (as scripts/module-graph.py measures
//! it): `report/` has no import circle, and the exporters read the analysis only
//! through `report/view.rs`, the report's public types and its documents (`summary`,
//! `diff`).
//!
//! A node is a file (`a/mod.rs` and `a.rs` are module `a`); an arrow is a path a file
//! names outside `#[cfg(test)]` items: every `use` item (brace trees expanded) and every
//! inline path starting with `crate::`, `super::` or `self::`, resolved to the longest
//! module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn module_of(src: &Path, p: &Path) -> Module {
    let rel = p.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// The source without comments, string and char literals, and `#[cfg(test)]` items.
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        let at = |s: &str| c[i..].iter().take(s.len()).copied().eq(s.chars());
        if at("//") {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at("/*") {
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
        } else if c[i] == 'r'
            && (c.get(i + 1) == Some(&'"') || c.get(i + 1) == Some(&'#'))
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            while j < c.len()
                && !(c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')))
            {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (c.get(i + 2) == Some(&'\'') || c.get(i + 1) == Some(&'\\')) {
            // A char literal ('a', '\n', '\u{..}'); a lifetime has no closing quote.
            let mut j = i + 1;
            if c.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            i = j + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    // Each #[cfg(test)] item, to its matching brace or its semicolon.
    while let Some(k) = out.find("#[cfg(test)]") {
        let b: Vec<char> = out[k..].chars().collect();
        let mut depth = 0;
        let mut j = "#[cfg(test)]".len();
        while j < b.len() {
            match b[j] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = k + b[..j.min(b.len())]
            .iter()
            .map(|ch| ch.len_utf8())
            .sum::<usize>();
        out.replace_range(k..end, "");
    }
    out
}

/// In an inline `mod m { ... }` (one level), `super::` is the file's own module: written
/// `self::` here.
fn inline_modules(s: &str) -> String {
    let mut blocks = Vec::new();
    let mut from = 0;
    while let Some(k) = s[from..].find("mod ").map(|k| k + from) {
        from = k + 4;
        if k > 0 && s[..k].ends_with(|ch: char| ch.is_alphanumeric() || ch == '_') {
            continue;
        }
        let rest = &s[k + 4..];
        let name_end = rest
            .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
            .unwrap_or(rest.len());
        if name_end == 0 || !rest[name_end..].trim_start().starts_with('{') {
            continue;
        }
        let open = k + 4 + name_end + rest[name_end..].find('{').unwrap_or(0);
        let mut depth = 0;
        let mut end = s.len();
        for (j, ch) in s[open..].char_indices() {
            depth += (ch == '{') as i32 - (ch == '}') as i32;
            if depth == 0 {
                end = open + j;
                break;
            }
        }
        blocks.push((open, end));
    }
    let mut out = s.to_string();
    for &(a, b) in blocks.iter().rev() {
        let inner = out[a..b].replace("super::", "self::");
        out.replace_range(a..b, &inner);
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e` (`self` in a tree is its prefix).
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|ch| !ch.is_whitespace()).collect();
    let tree = tree.as_str();
    let Some(k) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = &tree[..k];
    let inner = &tree[k + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in inner.chars() {
        match ch {
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            '{' => {
                depth += 1;
                cur.push(ch)
            }
            '}' => {
                depth -= 1;
                cur.push(ch)
            }
            _ => cur.push(ch),
        }
    }
    parts.push(cur);
    let mut out = Vec::new();
    for p in parts.iter().filter(|p| !p.is_empty()) {
        for e in expand(p) {
            out.push(if e == "self" {
                prefix.trim_end_matches(':').to_string()
            } else {
                format!("{prefix}{e}")
            });
        }
    }
    out
}

fn resolve(me: &Module, path: &str, mods: &BTreeSet<Module>) -> Option<Module> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let (mut base, mut rest): (Module, &[&str]) = match segs.first() {
        Some(&"crate") => (Vec::new(), &segs[1..]),
        Some(&"super") | Some(&"self") => (me.clone(), &segs[..]),
        _ => return None,
    };
    while let Some(s) = rest.first().filter(|s| **s == "super" || **s == "self") {
        if *s == "super" {
            base.pop();
        }
        rest = &rest[1..];
    }
    (0..=rest.len()).rev().find_map(|k| {
        let mut cand = base.clone();
        cand.extend(rest[..k].iter().map(|s| s.to_string()));
        mods.contains(&cand).then_some(cand)
    })
}

fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files(&src, &mut paths);
    let mods: BTreeSet<Module> = paths.iter().map(|p| module_of(&src, p)).collect();
    let mut g = BTreeMap::new();
    for p in &paths {
        let me = module_of(&src, p);
        let s = inline_modules(&strip(&std::fs::read_to_string(p).unwrap()));
        let mut names = Vec::new();
        let mut rest = s.as_str();
        while let Some(k) = rest.find("use ") {
            let word = k == 0 || !rest[..k].ends_with(|ch: char| ch.is_alphanumeric() || ch == '_');
            let tail = &rest[k + 4..];
            let end = tail.find(';').unwrap_or(tail.len());
            if word {
                let tree: String = tail[..end].split_whitespace().collect::<Vec<_>>().join(" ");
                // `x as y` names x.
                let tree = tree
                    .split(',')
                    .map(|t| t.split(" as ").next().unwrap_or(t))
                    .collect::<Vec<_>>()
                    .join(",")
                    .replace(' ', "");
                names.extend(expand(&tree));
            }
            rest = &tail[end.min(tail.len())..];
        }
        for start in ["crate::", "super::", "self::"] {
            for (k, _) in s.match_indices(start) {
                if k > 0 && s[..k].ends_with(|ch: char| ch.is_alphanumeric() || ch == '_') {
                    continue;
                }
                let tail = &s[k..];
                let end = tail
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ':'))
                    .unwrap_or(tail.len());
                // `crate::a::{b, c}` names a::b and a::c (expanded above), not a.
                if tail[end..].starts_with('{') {
                    continue;
                }
                names.push(tail[..end].to_string());
            }
        }
        let to: BTreeSet<Module> = names
            .iter()
            .filter_map(|n| resolve(&me, n, &mods))
            .filter(|m| *m != me && !m.is_empty())
            .collect();
        g.insert(me, to);
    }
    g
}

fn circles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    // A module is in a circle with every module it reaches that reaches it back.
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in g.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let all: BTreeMap<&Module, BTreeSet<Module>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<Module>> = Vec::new();
    for (m, r) in &all {
        if !r.contains(*m) {
            continue;
        }
        let mut c: Vec<Module> = r.iter().filter(|n| all[n].contains(*m)).cloned().collect();
        c.sort();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn name(m: &Module) -> String {
    m.join("/")
}

#[test]
fn report_has_no_import_circle() {
    let g = graph();
    assert!(g.len() > 50, "the sources were not found");
    let bad: Vec<String> = circles(&g)
        .into_iter()
        .filter(|c| c.iter().any(|m| m.first().is_some_and(|s| s == "report")))
        .map(|c| c.iter().map(name).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(
        bad.is_empty(),
        "import circles in analyzer/src/report:\n{}",
        bad.join("\n")
    );
}

#[test]
fn exporters_read_the_analysis_through_its_view() {
    let allowed = ["report", "report/view", "report/summary", "report/diff"];
    let mut bad = Vec::new();
    for (m, to) in graph() {
        if m.first().map(String::as_str) != Some("export") {
            continue;
        }
        for t in to
            .iter()
            .filter(|t| t.first().is_some_and(|s| s == "report"))
        {
            if !allowed.contains(&name(t).as_str()) {
                bad.push(format!("{} -> {}", name(&m), name(t)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "exporters naming report internals:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scanner_sees_what_it_should() {
    let s = strip("use a::b; // use crate::x;\nlet s = \"crate::y\";\n#[cfg(test)]\nmod tests { use crate::z; }\nfn f() { crate::w::f() }");
    assert!(
        !s.contains("crate::x") && !s.contains("crate::y") && !s.contains("crate::z"),
        "{s}"
    );
    assert!(s.contains("crate::w::f"), "{s}");
    assert_eq!(
        expand("crate::report::{self, a::{b, c}, d}"),
        [
            "crate::report",
            "crate::report::a::b",
            "crate::report::a::c",
            "crate::report::d"
        ]
    );
    let g = graph();
    // Known arrows: the circle that was, and one every build has.
    let report_of = |m: &str| g[&m.split('/').map(String::from).collect::<Module>()].clone();
    assert!(report_of("report/host").contains(&vec!["report".to_string(), "cause".to_string()]));
    assert!(report_of("export/overlay").contains(&vec!["report".to_string(), "view".to_string()]));
}

#[test]
fn no_module_names_an_ancestor() {
    // A parent holds what its children share only by re-exporting it: the children
    // name the module that defines it (report/out, export/api, fleet/rows).
    let mut bad = Vec::new();
    for (m, to) in graph() {
        for t in &to {
            if !t.is_empty() && t.len() < m.len() && m.starts_with(t) {
                bad.push(format!("{} -> {}", name(&m), name(t)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "modules naming an ancestor:\n{}",
        bad.join("\n")
    );
}

#[test]
fn inline_modules_and_use_prefixes_are_read_as_rust_does() {
    let s = inline_modules("mod imp { use super::*; }\nuse super::x;");
    assert_eq!(s, "mod imp { use self::*; }\nuse super::x;");
    let g = graph();
    let of = |m: &str| g[&m.split('/').map(String::from).collect::<Module>()].clone();
    // `use crate::report::{...}` and `mod imp { use super::*; }` name no parent.
    assert!(!of("report/findings/inputs").contains(&vec!["report".to_string()]));
    assert!(!of("commands/inject").contains(&vec!["commands".to_string()]));
}

/// Functions of analyzer/src over `max` lines (outside `#[cfg(test)]` items), longest
/// first: (lines, file, name). A function runs from its `fn` line to the first line
/// after it that is a closing brace at its indentation (rustfmt's layout).
fn long_functions(max: usize) -> Vec<(usize, String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files(&src, &mut paths);
    let mut out = Vec::new();
    for p in &paths {
        let text = std::fs::read_to_string(p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Tests sit at the end of a file, from `#[cfg(test)]` on.
        let end = lines
            .iter()
            .position(|l| l.trim() == "#[cfg(test)]")
            .unwrap_or(lines.len());
        for i in 0..end {
            let l = lines[i];
            let body = l.trim_start();
            let indent = &l[..l.len() - body.len()];
            let body = body
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ")
                .trim_start_matches("const ")
                .trim_start_matches("unsafe ")
                .trim_start_matches("extern \"C\" ");
            let Some(rest) = body.strip_prefix("fn ") else {
                continue;
            };
            if l.trim_end().ends_with(';') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                .collect();
            let close = format!("{indent}}}");
            if let Some(j) = (i + 1..end).find(|&j| lines[j] == close) {
                if j - i + 1 > max {
                    let file = p.strip_prefix(&src).unwrap().display().to_string();
                    out.push((j - i + 1, file, name));
                }
            }
        }
    }
    out.sort_by(|a, b| b.cmp(a));
    out
}

#[test]
fn no_function_is_over_150_lines() {
    assert!(
        !long_functions(20).is_empty(),
        "the scanner found no function"
    );
    let long = long_functions(150);
    assert!(long.is_empty(), "functions over 150 lines: {long:?}");
}
