//! Secrets kept out of command lines, wherever one is stored (the library's trace, the
//! environment file of `gputrace run`/`attach`) or shown (the report, the exports): a
//! value that looks like a secret becomes [`REDACTED`], the rest of the argument stays, so
//! the command's shape can still be read. `GPUTRACE_KEEP_SECRETS=1` is the way around it
//! (docs/settings.md).
//!
//! What counts (names compare without case; `-`, `_`, `.` and camelCase split words):
//! * an option whose name's *last word* is a secret word ([`SECRET_WORDS`]: `--password`,
//!   `--hf-token`, `--api_key`, `-apiKey`, `--client-secret`, ...), or a single word
//!   ending in one (`--dbpassword`, `--hftoken`): its value, `--password=X` or the next
//!   argument of `--password X` (unless that is itself an option; `--no-...` takes none).
//!   Only the last word decides, so `--max-tokens`, `--tokenizer`, `--keyframes`,
//!   `--token-file` stay; and `key`/`token` after an ordinary word ([`ORDINARY`]: `--sort-key`,
//!   `--pad-token`, `--max-token`) stay too;
//! * `NAME=VALUE` (passed through `env`, a launcher, a config override): by the same rule
//!   on NAME, except that an environment-style NAME (no lower-case letter) counts where
//!   a secret word is any of its words (`AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`,
//!   `SECRET_KEY_BASE`, not `MAX_TOKENS`, `TOKENIZERS_PARALLELISM`);
//! * a URL's password anywhere in an argument (`scheme://user:<redacted>@host/...`), the
//!   whole user part of an http(s) URL without a password (a token passed as the user
//!   name), and secret-named query parameters (`?token=`, `X-Amz-Signature=`);
//! * header arguments: `Authorization: Bearer <redacted>`, `Cookie: <redacted>`,
//!   `X-Api-Key: <redacted>`, and a `Bearer X` argument;
//! * an argument holding spaces (`bash -c "..."`) by the same rules, word by word.
//!
//! Not recognised: short options whose letter means a password to one program only
//! (`mysql -pX`, `sshpass -p X`), secrets inside JSON or a program's own syntax, and a
//! value that starts with `-` after a secret-named option.

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// The last word of a name that makes its value a secret.
pub const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "auth",
    "oauth",
    "credential",
    "credentials",
    "key",
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "signature",
];

/// Endings that make a one-word name a secret one (`dbpassword`, `hftoken`); `key` is
/// not among them (`monkey`, `hotkey`) and `auth` neither (`noauth`).
const SECRET_ENDINGS: &[&str] = &["password", "passwd", "passphrase", "secret", "token"];

/// Words before `key` or `token` that make it an ordinary one: a dictionary's key, a
/// tokenizer's special tokens, a count.
pub const ORDINARY: &[&str] = &[
    "sort",
    "group",
    "cache",
    "primary",
    "foreign",
    "partition",
    "shard",
    "join",
    "lookup",
    "index",
    "hash",
    "dict",
    "map",
    "metric",
    "monitor",
    "seed",
    "rng",
    "random",
    "column",
    "field",
    "label",
    "target",
    "input",
    "output",
    "image",
    "text",
    "data",
    "batch",
    "feature",
    "state",
    "event",
    "query",
    "value",
    "order",
    "split",
    "pad",
    "eos",
    "bos",
    "sep",
    "unk",
    "mask",
    "cls",
    "special",
    "start",
    "end",
    "stop",
    "begin",
    "audio",
    "video",
    "vision",
    "placeholder",
    "sentinel",
    "max",
    "min",
    "num",
    "first",
    "last",
    "next",
    "decoder",
];

/// Header names whose value is a credential whatever the name's words say.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// `args` with the values that look like secrets replaced by [`REDACTED`] (the rules are
/// in the module's documentation). The same length as `args`, each argument in its place.
pub fn redact_cmdline(args: &[String]) -> Vec<String> {
    redact_words(args.iter().map(String::as_str))
}

/// What the argument before says of the next one.
#[derive(Clone, Copy, PartialEq)]
enum Next {
    Free,
    /// The value of a secret-named option, or the credential after `Bearer`.
    Secret,
    /// What follows an `Authorization:` word: a scheme (kept, its credential next) or
    /// the credential itself.
    AuthValue,
}

fn redact_words<'a>(args: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = Next::Free;
    for a in args {
        let (open, inner, close) = unquote(a);
        let was = std::mem::replace(&mut next, Next::Free);
        match was {
            Next::Secret if option(inner).is_none() && !matches!(inner, "" | "--") => {
                out.push(format!("{open}{REDACTED}{close}"));
                continue;
            }
            Next::AuthValue if !inner.is_empty() => {
                if is_auth_scheme(inner) {
                    next = Next::Secret;
                    out.push(a.to_string());
                } else {
                    out.push(format!("{open}{REDACTED}{close}"));
                }
                continue;
            }
            _ => {}
        }
        if inner.eq_ignore_ascii_case("bearer") {
            next = Next::Secret;
            out.push(a.to_string());
            continue;
        }
        if let Some(name) = inner.strip_suffix(':') {
            if is_header_name(name) && secret_header(name) {
                next = Next::AuthValue;
                out.push(a.to_string());
                continue;
            }
        }
        let (r, takes_value) = redact_arg(inner);
        if takes_value {
            next = Next::Secret;
        }
        out.push(format!("{open}{r}{close}"));
    }
    out
}

/// Shell quotes around a word of a shell string (`'--token=x'`), for the word to be read
/// without them and given them back.
fn unquote(a: &str) -> (&str, &str, &str) {
    let q = |c: char| c == '"' || c == '\'';
    let inner = a.trim_start_matches(q);
    let open = &a[..a.len() - inner.len()];
    let trimmed = inner.trim_end_matches(q);
    let close = &inner[trimmed.len()..];
    (open, trimmed, close)
}

/// One argument; `true` when it is a secret-named option whose value is the next one.
fn redact_arg(a: &str) -> (String, bool) {
    if let Some(o) = option(a) {
        if name_is_secret(o.name, false) {
            return match o.value {
                Some(v) => (format!("{}={}", o.head, hidden(v)), false),
                None => (a.to_string(), !negated(o.name)),
            };
        }
        return match o.value {
            Some(v) => (format!("{}={}", o.head, redact_piece(v)), false),
            None => (a.to_string(), false),
        };
    }
    (redact_piece(a), false)
}

/// A secret value: [`REDACTED`], after the quotes it opened with (`'<redacted>`, the
/// closing one kept by [`unquote`]); one with nothing in it is left as it is.
fn hidden(v: &str) -> String {
    let quote = |c: char| c == '"' || c == '\'';
    let body = v.trim_start_matches(quote);
    if body.trim_end_matches(quote).is_empty() {
        return v.to_string();
    }
    format!("{}{REDACTED}", &v[..v.len() - body.len()])
}

/// Something that is not an option: a header, `Bearer X`, `NAME=VALUE`, a shell string,
/// or text that may hold URLs. A secret-named assignment goes before the words of a
/// shell string: `PASSWORD=two words` as one argument loses both, at the price of
/// `HF_TOKEN=x python train.py` in a `sh -c` string losing the command after it.
fn redact_piece(s: &str) -> String {
    if let Some(r) = header(s) {
        return r;
    }
    if let Some(r) = assignment(s) {
        return r;
    }
    if s.contains(char::is_whitespace) {
        return shell_string(s);
    }
    urls(s)
}

/// An option: `-name`, `--name` or `--name=value` (`head` is everything before `=`).
struct Opt<'a> {
    head: &'a str,
    name: &'a str,
    value: Option<&'a str>,
}

fn option(a: &str) -> Option<Opt<'_>> {
    let rest = a
        .strip_prefix("--")
        .or_else(|| a.strip_prefix('-'))
        .filter(|r| r.starts_with(|c: char| c.is_ascii_alphabetic()))?;
    let (name, value) = match rest.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (rest, None),
    };
    if !name.chars().all(name_char) {
        return None;
    }
    Some(Opt {
        head: &a[..a.len() - rest.len() + name.len()],
        name,
        value,
    })
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `--no-auth`, a flag that takes no value.
fn negated(name: &str) -> bool {
    let w = words(name);
    w.len() > 1 && w[0] == "no"
}

/// A name's words, lower case: split at `-`, `_`, `.`, and camelCase (`apiKey`,
/// `HFToken`).
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in name.split(|c: char| !c.is_ascii_alphanumeric()) {
        let cs: Vec<char> = part.chars().collect();
        let mut cur = String::new();
        for (i, &c) in cs.iter().enumerate() {
            let prev = i.checked_sub(1).map(|j| cs[j]);
            let next = cs.get(i + 1).copied();
            let boundary = c.is_ascii_uppercase()
                && prev.is_some_and(|p| {
                    p.is_ascii_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
                });
            if boundary && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(c.to_ascii_lowercase());
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// Whether word `i` of `w` names a secret.
fn secret_at(w: &[String], i: usize) -> bool {
    let word = w[i].as_str();
    if matches!(word, "key" | "token") && i > 0 && ORDINARY.contains(&w[i - 1].as_str()) {
        return false;
    }
    SECRET_WORDS.contains(&word)
        || (w.len() == 1
            && SECRET_ENDINGS
                .iter()
                .any(|e| word.len() > e.len() && word.ends_with(e)))
}

/// Whether a name's value is a secret: by its last word, or by any of its words when
/// `any_word` (environment-style names, where the qualifier comes last:
/// `SECRET_KEY_BASE`, `HF_TOKEN_PATH`).
fn name_is_secret(name: &str, any_word: bool) -> bool {
    let w = words(name);
    if w.is_empty() || (w.len() > 1 && w[0] == "no") {
        return false;
    }
    if any_word {
        (0..w.len()).any(|i| secret_at(&w, i))
    } else {
        secret_at(&w, w.len() - 1)
    }
}

/// `NAME=VALUE` with a plausible name (an environment variable, a config override such
/// as `+model.api_key=`): the value redacted when NAME names a secret, else read on.
fn assignment(s: &str) -> Option<String> {
    let (name, value) = s.split_once('=')?;
    let bare = name.trim_start_matches(['+', '~']);
    if bare.is_empty()
        || !bare.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        || !bare.chars().all(name_char)
    {
        return None;
    }
    let env_style = !bare.chars().any(|c| c.is_ascii_lowercase());
    if name_is_secret(bare, env_style) {
        return Some(format!("{name}={}", hidden(value)));
    }
    Some(format!("{name}={}", redact_piece(value)))
}

fn is_header_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

fn secret_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_HEADERS.contains(&lower.as_str()) || name_is_secret(name, false)
}

fn is_auth_scheme(w: &str) -> bool {
    ["bearer", "basic", "token", "digest", "negotiate", "ntlm"]
        .iter()
        .any(|s| w.eq_ignore_ascii_case(s))
}

/// `Name: value` where the header carries a credential; `Bearer X` on its own. A space
/// after the colon (`key:value` is no header) unless the name is `Authorization` or
/// another of [`SECRET_HEADERS`].
fn header(s: &str) -> Option<String> {
    let t = s.trim_start();
    if let (Some(b), Some(rest)) = (t.get(..7), t.get(7..)) {
        if b.eq_ignore_ascii_case("bearer ") && !rest.trim().is_empty() {
            return Some(format!("{} {REDACTED}", &t[..6]));
        }
    }
    let (name, raw) = t.split_once(':')?;
    let value = raw.trim();
    if !is_header_name(name) || value.is_empty() || value.starts_with("//") {
        return None;
    }
    let spaced = raw.starts_with(char::is_whitespace);
    let named = SECRET_HEADERS.contains(&name.to_ascii_lowercase().as_str());
    if !(named || (spaced && secret_header(name))) {
        return None;
    }
    match value.split_once(char::is_whitespace) {
        Some((scheme, rest)) if is_auth_scheme(scheme) && !rest.trim().is_empty() => {
            Some(format!("{name}: {scheme} {REDACTED}"))
        }
        _ => Some(format!("{name}: {REDACTED}")),
    }
}

/// An argument with spaces (`sh -c "..."`): its words by the same rules, the spaces kept.
fn shell_string(s: &str) -> String {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(b)) => {
                spans.push((b, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(b) = start {
        spans.push((b, s.len()));
    }
    let redacted = redact_words(spans.iter().map(|&(b, e)| &s[b..e]));
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for ((b, e), w) in spans.iter().zip(redacted) {
        out.push_str(&s[at..*b]);
        out.push_str(&w);
        at = *e;
    }
    out.push_str(&s[at..]);
    out
}

/// Every URL in `s`, its password (or an http(s) URL's token user name) and its
/// secret-named query parameters redacted.
fn urls(s: &str) -> String {
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let mut from = 0;
    while let Some(i) = s[from..].find("://").map(|i| i + from) {
        let scheme_start = s[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
            .map_or(0, |j| j + 1);
        let scheme = &s[scheme_start..i];
        let auth_start = i + 3;
        let url_end = s[auth_start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>'))
            .map_or(s.len(), |j| j + auth_start);
        // On from here, not from the URL's end: a list (`a,https://..,https://..`) is
        // one URL to the end of the text.
        from = auth_start;
        if scheme.is_empty() || !scheme.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        let auth_end = s[auth_start..url_end]
            .find(['/', '?', '#'])
            .map_or(url_end, |j| j + auth_start);
        if let Some(at) = s[auth_start..auth_end].rfind('@').map(|j| j + auth_start) {
            let user = &s[auth_start..at];
            match user.find(':') {
                Some(c) if c + 1 < user.len() => cuts.push((auth_start + c + 1, at)),
                None if !user.is_empty()
                    && (scheme.eq_ignore_ascii_case("http")
                        || scheme.eq_ignore_ascii_case("https")) =>
                {
                    cuts.push((auth_start, at))
                }
                _ => {}
            }
        }
        let Some(q) = s[auth_end..url_end].find('?').map(|j| j + auth_end) else {
            continue;
        };
        let q_end = s[q..url_end].find('#').map_or(url_end, |j| j + q);
        let mut p = q + 1;
        for param in s[q + 1..q_end].split(['&', ';']) {
            if let Some((k, v)) = param.split_once('=') {
                let secret = name_is_secret(k, false) || k.eq_ignore_ascii_case("sig") || {
                    let w = words(k);
                    w.last().is_some_and(|l| l == "signature")
                };
                if secret && !v.is_empty() {
                    let vs = p + k.len() + 1;
                    cuts.push((vs, vs + v.len()));
                }
            }
            p += param.len() + 1;
        }
    }
    if cuts.is_empty() {
        return s.to_string();
    }
    // A URL inside another's query is seen twice.
    cuts.sort_unstable();
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for (b, e) in cuts {
        if b < at {
            continue;
        }
        out.push_str(&s[at..b]);
        out.push_str(REDACTED);
        at = e;
    }
    out.push_str(&s[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> Vec<String> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        redact_cmdline(&v)
    }

    /// One argument, alone.
    fn one(a: &str) -> String {
        r(&[a]).remove(0)
    }

    #[test]
    fn secret_options_keep_their_name() {
        for (a, want) in [
            ("--password=hunter2", "--password=<redacted>"),
            ("--PASSWORD=hunter2", "--PASSWORD=<redacted>"),
            ("-password=hunter2", "-password=<redacted>"),
            ("--passwd=x", "--passwd=<redacted>"),
            ("--passphrase=x", "--passphrase=<redacted>"),
            ("--token=abc", "--token=<redacted>"),
            ("--hf-token=abc", "--hf-token=<redacted>"),
            ("--hf_token=abc", "--hf_token=<redacted>"),
            ("--auth-token=abc", "--auth-token=<redacted>"),
            ("--api-key=abc", "--api-key=<redacted>"),
            ("--api_key=abc", "--api_key=<redacted>"),
            ("--apikey=abc", "--apikey=<redacted>"),
            ("--apiKey=abc", "--apiKey=<redacted>"),
            ("--HFToken=abc", "--HFToken=<redacted>"),
            ("--secret=abc", "--secret=<redacted>"),
            ("--client-secret=abc", "--client-secret=<redacted>"),
            ("--auth=user:pw", "--auth=<redacted>"),
            ("--credentials=abc", "--credentials=<redacted>"),
            ("--credential=abc", "--credential=<redacted>"),
            ("--access-key=abc", "--access-key=<redacted>"),
            (
                "--aws-secret-access-key=abc",
                "--aws-secret-access-key=<redacted>",
            ),
            ("--private-key=abc", "--private-key=<redacted>"),
            ("--private_key=abc", "--private_key=<redacted>"),
            ("--key=abc", "--key=<redacted>"),
            ("--dbpassword=abc", "--dbpassword=<redacted>"),
            ("--hftoken=abc", "--hftoken=<redacted>"),
            ("--db.password=abc", "--db.password=<redacted>"),
        ] {
            assert_eq!(one(a), want, "{a}");
        }
    }

    #[test]
    fn the_value_after_a_secret_option_is_redacted() {
        assert_eq!(
            r(&["prog", "--password", "hunter2", "--lr", "0.1"]),
            ["prog", "--password", "<redacted>", "--lr", "0.1"]
        );
        assert_eq!(
            r(&["x", "--token", "abc123", "-api-key", "k", "--Secret", "s"]),
            [
                "x",
                "--token",
                "<redacted>",
                "-api-key",
                "<redacted>",
                "--Secret",
                "<redacted>"
            ]
        );
        // An option next is no value: the secret option was a flag.
        assert_eq!(
            r(&["x", "--auth", "--lr=3", "train.py"]),
            ["x", "--auth", "--lr=3", "train.py"]
        );
        // A negated flag takes no value.
        assert_eq!(
            r(&["x", "--no-auth", "train.py"]),
            ["x", "--no-auth", "train.py"]
        );
        // Nothing after it.
        assert_eq!(r(&["x", "--token"]), ["x", "--token"]);
        // The end of the options is no value either.
        assert_eq!(r(&["x", "--auth", "--", "y"]), ["x", "--auth", "--", "y"]);
        // An empty value has nothing to hide.
        assert_eq!(one("--password="), "--password=");
        // A negative number is a value, not an option.
        assert_eq!(r(&["x", "--token", "-5"]), ["x", "--token", "<redacted>"]);
    }

    #[test]
    fn ordinary_options_stay() {
        let kept = [
            "--max-tokens=64",
            "--max_tokens=64",
            "--maxTokens=64",
            "--max-new-tokens=64",
            "--num-tokens=5",
            "--tokenizer=gpt2",
            "--tokenizer-name=gpt2",
            "--tokens-per-batch=4096",
            "--token-file=/run/t",
            "--api-key-file=/run/k",
            "--keyframes=5",
            "--key-dim=64",
            "--sort-key=name",
            "--cache-key=abc",
            "--pad-token=<pad>",
            "--eos_token=</s>",
            "--max-token=5",
            "--monkey=1",
            "--author=me",
            "--authors=me",
            "--passes=2",
            "--secrets-dir=/run",
            "--lr=3e-4",
            "--batch-size=64",
            "-v",
            "--",
            "-",
            "-5",
        ];
        for a in kept {
            assert_eq!(one(a), a, "{a}");
        }
        assert_eq!(
            r(&[
                "x",
                "--max-tokens",
                "64",
                "--tokenizer",
                "gpt2",
                "--keyframes",
                "3"
            ]),
            [
                "x",
                "--max-tokens",
                "64",
                "--tokenizer",
                "gpt2",
                "--keyframes",
                "3"
            ]
        );
        assert_eq!(
            r(&["x", "--pad-token", "0", "--sort-key", "k"]),
            ["x", "--pad-token", "0", "--sort-key", "k"]
        );
    }

    #[test]
    fn assignments_of_secret_names() {
        for (a, want) in [
            ("HF_TOKEN=zzz", "HF_TOKEN=<redacted>"),
            (
                "AWS_SECRET_ACCESS_KEY=abc",
                "AWS_SECRET_ACCESS_KEY=<redacted>",
            ),
            ("OPENAI_API_KEY=sk-1", "OPENAI_API_KEY=<redacted>"),
            ("WANDB_API_KEY=x", "WANDB_API_KEY=<redacted>"),
            ("GITHUB_TOKEN=x", "GITHUB_TOKEN=<redacted>"),
            ("DB_PASSWORD=x", "DB_PASSWORD=<redacted>"),
            ("MYSQL_PASSWD=x", "MYSQL_PASSWD=<redacted>"),
            (
                "GOOGLE_APPLICATION_CREDENTIALS=x",
                "GOOGLE_APPLICATION_CREDENTIALS=<redacted>",
            ),
            ("SECRET_KEY_BASE=x", "SECRET_KEY_BASE=<redacted>"),
            ("HF_TOKEN_PATH=x", "HF_TOKEN_PATH=<redacted>"),
            ("BASIC_AUTH=u:p", "BASIC_AUTH=<redacted>"),
            ("APIKEY=x", "APIKEY=<redacted>"),
            ("hf_token=x", "hf_token=<redacted>"),
            ("model.api_key=x", "model.api_key=<redacted>"),
            ("+model.api_key=x", "+model.api_key=<redacted>"),
            ("apiKey=x", "apiKey=<redacted>"),
        ] {
            assert_eq!(one(a), want, "{a}");
        }
        for a in [
            "MAX_TOKENS=64",
            "TOKENIZERS_PARALLELISM=false",
            "CUDA_VISIBLE_DEVICES=0,1",
            "PYTHONHASHSEED=0",
            "KEYFRAMES=3",
            "SORT_KEY=x",
            "PAD_TOKEN_ID=0",
            "trainer.max_tokens=64",
            "model.key_dim=64",
            "data.pad_token=0",
            "tokenizer=gpt2",
            "lr=0.1",
            "HF_TOKEN=",
            "=x",
            "a=b=c",
        ] {
            assert_eq!(one(a), a, "{a}");
        }
        // Through `env` or a launcher's option.
        assert_eq!(
            r(&["env", "HF_TOKEN=zzz", "python", "train.py"]),
            ["env", "HF_TOKEN=<redacted>", "python", "train.py"]
        );
        assert_eq!(
            r(&[
                "docker",
                "run",
                "-e",
                "HF_TOKEN=zzz",
                "--env=WANDB_API_KEY=k",
                "img"
            ]),
            [
                "docker",
                "run",
                "-e",
                "HF_TOKEN=<redacted>",
                "--env=WANDB_API_KEY=<redacted>",
                "img"
            ]
        );
    }

    #[test]
    fn urls_lose_their_passwords() {
        for (a, want) in [
            ("https://u:pw@example.invalid/x", "https://u:<redacted>@example.invalid/x"),
            ("postgres://me:s3cr3t@db:5432/app", "postgres://me:<redacted>@db:5432/app"),
            (
                "--db=postgres://me:s3cr3t@db/app",
                "--db=postgres://me:<redacted>@db/app",
            ),
            (
                "DATABASE_URL=mysql://root:pw@h/db",
                "DATABASE_URL=mysql://root:<redacted>@h/db",
            ),
            (
                "a,https://u:p@h1/x,https://v:q@h2/y",
                "a,https://u:<redacted>@h1/x,https://v:<redacted>@h2/y",
            ),
            (
                "https://ghp_abc@github.com/o/r.git",
                "https://<redacted>@github.com/o/r.git",
            ),
            (
                "https://h/x?token=abc&lang=en",
                "https://h/x?token=<redacted>&lang=en",
            ),
            (
                "https://b.s3/o?X-Amz-Credential=c&X-Amz-Signature=s&X-Amz-Security-Token=t",
                "https://b.s3/o?X-Amz-Credential=<redacted>&X-Amz-Signature=<redacted>&X-Amz-Security-Token=<redacted>",
            ),
            ("https://h/x?sig=abc#top", "https://h/x?sig=<redacted>#top"),
            (
                "https://h/login?next=https://u:pw@i/y&token=t",
                "https://h/login?next=https://u:<redacted>@i/y&token=<redacted>",
            ),
        ] {
            assert_eq!(one(a), want, "{a}");
        }
        for a in [
            "https://example.com/x",
            "ssh://git@github.com/o/r.git",
            "git@github.com:o/r.git",
            "https://h/x?max_tokens=5&page=2",
            "http://[::1]:8080/x",
            "localhost:8080",
            "s3://bucket/key@v2",
            "file:///tmp/x",
        ] {
            assert_eq!(one(a), a, "{a}");
        }
    }

    #[test]
    fn headers_lose_their_credentials() {
        for (a, want) in [
            (
                "Authorization: Bearer abc",
                "Authorization: Bearer <redacted>",
            ),
            (
                "authorization: Basic dTpw",
                "authorization: Basic <redacted>",
            ),
            ("Authorization: abc", "Authorization: <redacted>"),
            (
                "Proxy-Authorization: Basic x",
                "Proxy-Authorization: Basic <redacted>",
            ),
            ("Cookie: session=abc", "Cookie: <redacted>"),
            ("X-Api-Key: abc", "X-Api-Key: <redacted>"),
            ("X-Auth-Token: abc", "X-Auth-Token: <redacted>"),
            ("Private-Token: abc", "Private-Token: <redacted>"),
            ("Bearer abc", "Bearer <redacted>"),
            (
                "--header=Authorization: Bearer abc",
                "--header=Authorization: Bearer <redacted>",
            ),
        ] {
            assert_eq!(one(a), want, "{a}");
        }
        assert_eq!(
            r(&["curl", "-H", "Authorization: Bearer abc", "https://h/"]),
            [
                "curl",
                "-H",
                "Authorization: Bearer <redacted>",
                "https://h/"
            ]
        );
        assert_eq!(
            one("Authorization:Bearer abc"),
            "Authorization: Bearer <redacted>"
        );
        for a in [
            "Content-Type: application/json",
            "note: fine",
            "Accept: */*",
            "key:value",
            "token:5",
        ] {
            assert_eq!(one(a), a, "{a}");
        }
    }

    #[test]
    fn shell_strings_word_by_word() {
        assert_eq!(
            one("python train.py --password hunter2 HF_TOKEN=zzz --lr 0.1"),
            "python train.py --password <redacted> HF_TOKEN=<redacted> --lr 0.1"
        );
        // A secret assignment first: everything after it may be its value.
        assert_eq!(one("HF_TOKEN=zzz python train.py"), "HF_TOKEN=<redacted>");
        assert_eq!(one("PASSWORD=two words"), "PASSWORD=<redacted>");
        assert_eq!(one("--password=two words"), "--password=<redacted>");
        assert_eq!(
            one("python  t.py\t--token='abc' 'https://u:pw@h/x' HF_TOKEN=\"z\""),
            "python  t.py\t--token='<redacted>' 'https://u:<redacted>@h/x' HF_TOKEN=\"<redacted>\""
        );
        assert_eq!(
            one("python t.py --token 'abc'"),
            "python t.py --token '<redacted>'"
        );
        assert_eq!(
            one("curl -H \"Authorization: Bearer abc\" https://h"),
            "curl -H \"Authorization: Bearer <redacted>\" https://h"
        );
        assert_eq!(
            one("python train.py --max-tokens 64"),
            "python train.py --max-tokens 64"
        );
        assert_eq!(one("echo hello world"), "echo hello world");
    }

    #[test]
    fn the_task_s_command_line() {
        let got = r(&[
            "/bin/app",
            "basic",
            "--password=hunter2",
            "--token",
            "abc123",
            "HF_TOKEN=zzz",
            "https://u:pw@example.invalid/x",
        ]);
        assert_eq!(
            got,
            [
                "/bin/app",
                "basic",
                "--password=<redacted>",
                "--token",
                "<redacted>",
                "HF_TOKEN=<redacted>",
                "https://u:<redacted>@example.invalid/x",
            ]
        );
        let all = got.join(" ");
        for s in ["hunter2", "abc123", "zzz", "pw@"] {
            assert!(!all.contains(s), "{s} in {all}");
        }
    }

    #[test]
    fn ordinary_command_lines_are_unchanged() {
        for cmd in [
            &[
                "/opt/torch/.venv/bin/python3",
                "/work/main/scripts/workloads/example/train.py",
            ][..],
            &[
                "torchrun",
                "--nproc-per-node=8",
                "train.py",
                "--config",
                "cfg.yaml",
            ],
            &[
                "python",
                "-m",
                "vllm.entrypoints.api_server",
                "--max-model-len",
                "4096",
            ],
            &[
                "python",
                "gen.py",
                "--max-new-tokens",
                "128",
                "--tokenizer",
                "t",
            ],
            &["./a.out", "-n", "5", "--", "x=1", "y"],
        ] {
            let v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            assert_eq!(redact_cmdline(&v), v);
        }
        assert!(redact_cmdline(&[]).is_empty());
    }

    #[test]
    fn redacting_twice_changes_nothing_more() {
        // The analyzer redacts what the library already redacted.
        for args in [
            &[
                "x",
                "--password=hunter2",
                "--token",
                "abc123",
                "HF_TOKEN=zzz",
            ][..],
            &[
                "https://u:pw@h/x?token=t",
                "https://ghp@github.com/r",
                "Bearer abc",
            ],
            &[
                "curl",
                "-H",
                "Authorization: Bearer abc",
                "--header=Cookie: a=b",
            ],
            &[
                "sh",
                "-c",
                "python t.py --token 'abc' --key=\"k\" HF_TOKEN=x",
            ],
        ] {
            let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let once = redact_cmdline(&v);
            assert_eq!(redact_cmdline(&once), once, "{args:?}");
        }
    }

    #[test]
    fn words_split_names() {
        assert_eq!(words("apiKey"), ["api", "key"]);
        assert_eq!(words("HFToken"), ["hf", "token"]);
        assert_eq!(
            words("AWS_SECRET_ACCESS_KEY"),
            ["aws", "secret", "access", "key"]
        );
        assert_eq!(words("max-new.tokens"), ["max", "new", "tokens"]);
        assert_eq!(words("x2Key"), ["x2", "key"]);
    }

    #[test]
    fn non_ascii_arguments_do_not_panic() {
        for a in [
            "--päss=x",
            "ключ=значение",
            "https://ü:ß@h/x",
            "€:€",
            "\"",
            "''",
            "'",
        ] {
            let _ = one(a);
        }
        assert_eq!(one("https://ü:ß@h/x"), "https://ü:<redacted>@h/x");
    }
}
