//! docs/settings.md against the settings table (`protocol::SETTINGS`): every setting is
//! documented, with the table's default where the doc's table has a default column and
//! the range of a number setting; every `GPUTRACE_*` name the doc lists is in the table.

use gputrace_format::protocol::{setting, ReadBy, Value, SETTINGS};

const DOC: &str = include_str!("../../docs/settings.md");

/// A documented row: the names of its first cell, and its default cell (tables with a
/// default column) and the rest of the row.
struct Row {
    names: Vec<String>,
    defaults: Option<Vec<String>>,
    text: String,
}

fn names_in(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = cell;
    while let Some(i) = rest.find("GPUTRACE_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// `./gputrace-traces` and `` `gputrace-traces` `` read the same.
fn norm(s: &str) -> String {
    let s = s.replace('`', "");
    s.trim().trim_start_matches("./").to_string()
}

fn rows() -> Vec<Row> {
    let mut out = Vec::new();
    let mut with_default = false;
    for line in DOC.lines() {
        if line.starts_with("| variable |") {
            with_default = line.contains("| default |");
            continue;
        }
        if !line.starts_with("| `GPUTRACE_") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let names = names_in(cells[0]);
        let defaults = with_default
            .then(|| cells.get(1).map(|d| d.split(", ").map(norm).collect()))
            .flatten();
        out.push(Row {
            names,
            defaults,
            text: line.to_string(),
        });
    }
    out
}

#[test]
fn every_setting_is_documented_with_its_default_and_range() {
    let rows = rows();
    assert!(rows.len() > 20, "the doc's tables were not found");
    let mut wrong = Vec::new();
    for s in SETTINGS {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.names.iter().any(|n| n == s.name))
            .collect();
        if mine.is_empty() {
            wrong.push(format!("{}: not documented", s.name));
            continue;
        }
        // The user-facing settings are in a table with a default column, with the
        // table's default (a word one of several defaults a setting read by both the
        // library and the command has).
        if !s.experimental && s.read_by != ReadBy::Developer {
            let want = norm(s.default);
            let mut seen = false;
            for r in &mine {
                let Some(d) = &r.defaults else { continue };
                seen = true;
                let i = r.names.iter().position(|n| n == s.name).unwrap_or(0);
                let got = d.get(i).or(d.first()).cloned().unwrap_or_default();
                let ok = match s.value {
                    Value::Text => !got.is_empty() && want.contains(&got),
                    _ => got == want,
                };
                if !ok {
                    wrong.push(format!("{}: default {got:?}, the table's {want:?}", s.name));
                }
            }
            if !seen {
                wrong.push(format!("{}: no row with a default", s.name));
            }
        }
        if let Value::Number { min, max, .. } = s.value {
            let range = if min == 0 {
                format!("up to {max}")
            } else {
                format!("{min}-{max}")
            };
            if !mine.iter().any(|r| r.text.contains(&range)) {
                wrong.push(format!("{}: the range {range} is not said", s.name));
            }
        }
    }
    for r in &rows {
        for n in &r.names {
            if setting(n).is_none() {
                wrong.push(format!("{n}: documented, not in the table"));
            }
        }
    }
    assert!(wrong.is_empty(), "docs/settings.md:\n{}", wrong.join("\n"));
}

#[test]
fn numbers_and_flags_parse_through_the_table() {
    for s in SETTINGS {
        match s.value {
            Value::Number { min, max, zero, .. } => {
                assert!(min <= max, "{}", s.name);
                assert_eq!(s.number(&max.to_string()), Some(max), "{}", s.name);
                assert_eq!(s.number(&(max + 1).to_string()), None, "{}", s.name);
                assert_eq!(s.number("x"), None, "{}", s.name);
                assert_eq!(
                    s.number("0").is_some(),
                    min == 0 || !zero.is_empty(),
                    "{}",
                    s.name
                );
                // A number default the library starts from is in range (the others
                // are words: off, another setting's name).
                if let Ok(d) = s.default.parse::<u64>() {
                    assert_eq!(s.number(s.default), Some(d), "{}", s.name);
                }
            }
            Value::Flag => {
                assert!(s.flag(s.default).is_some(), "{}", s.name);
                assert_eq!(s.flag("on"), Some(true));
                assert_eq!(s.flag("maybe"), None);
            }
            Value::Text => {}
        }
    }
}
