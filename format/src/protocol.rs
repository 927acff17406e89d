//! What the preload library and the `gputrace` command must agree on, spelled once:
//! * [`settings`]: the `GPUTRACE_*` variables (name, meaning, default, who reads them);
//! * [`RANK_VARS`] / [`LOCAL_RANK_VARS`]: where a process's rank comes from;
//! * [`parse_duration`]: the one duration syntax (settings, the control line, the CLI);
//! * the control socket: where it lives ([`socket_dir`], [`socket_path`]) and the line
//!   protocol spoken over it ([`Request`], [`Reply`]);
//! * trace file names ([`TraceFileName`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

// ---------------------------------------------------------------------------------
// Settings.

/// The `GPUTRACE_*` variables, one constant each (`crate::settings`, where each is one
/// row with its type, default and meaning).
pub use crate::settings::names as settings;
pub use crate::settings::SETTINGS;

/// Every setting's name starts with this.
pub const SETTING_PREFIX: &str = "GPUTRACE_";

/// Who reads a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBy {
    /// The preload library, in every traced process.
    Library,
    /// The `gputrace` command.
    Command,
    /// Both, each in its own way (the setting's meaning says how).
    Both,
    /// The project's own tests and benchmarks.
    Developer,
}

/// What a setting's value is: how the library parses it, and the range it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// On or off: `1`/`0` (also `true`/`false`, `yes`/`no`, `on`/`off`; empty is off).
    Flag,
    /// A whole number from `min` to `max`, in `unit` (`ms`, `KiB`, `MiB`); `zero`, when
    /// not empty, is what 0 means where it is allowed below `min`.
    Number {
        min: u64,
        max: u64,
        unit: &'static str,
        zero: &'static str,
    },
    /// Anything else (a word from a list, a path, a duration): its reader parses it.
    Text,
}

/// One `GPUTRACE_*` variable.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    pub name: &'static str,
    /// The default, as a user would write it (`off`: unset means not used). For a
    /// [`Value::Flag`] or [`Value::Number`] read by the library it is the value the
    /// library starts from (`default_number`, `default_flag`): written here only.
    pub default: &'static str,
    pub value: Value,
    /// What a [`Value::Text`] setting takes, in the words of a warning.
    pub takes: &'static str,
    pub meaning: &'static str,
    pub read_by: ReadBy,
    /// For cost experiments only (not part of the user-facing list).
    pub experimental: bool,
}

impl Setting {
    /// `v` as this setting's flag, if it is one it takes.
    pub fn flag(&self, v: &str) -> Option<bool> {
        match self.value {
            Value::Flag => parse_flag(v),
            _ => None,
        }
    }

    /// `v` as this setting's number, if it is one in its range.
    pub fn number(&self, v: &str) -> Option<u64> {
        let Value::Number { min, max, zero, .. } = self.value else {
            return None;
        };
        let n: u64 = v.trim().parse().ok()?;
        ((min..=max).contains(&n) || (n == 0 && !zero.is_empty())).then_some(n)
    }

    /// What the setting takes, in the words of the library's warning
    /// (`milliseconds between 10 and 1000`).
    pub fn expected(&self) -> String {
        match self.value {
            Value::Flag => "0 or 1".into(),
            Value::Number {
                min,
                max,
                unit,
                zero,
            } => {
                let unit = match unit {
                    "ms" => "milliseconds".to_string(),
                    u => format!("a size in {u}"),
                };
                let range = if min == 0 {
                    format!("{unit} up to {max}")
                } else {
                    format!("{unit} between {min} and {max}")
                };
                if zero.is_empty() {
                    range
                } else {
                    format!("{range}, or 0 ({zero})")
                }
            }
            Value::Text => self.takes.into(),
        }
    }
}

/// `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off` (any case; empty is off).
pub fn parse_flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn entry(name: &str) -> &'static Setting {
    let mut i = 0;
    while i < SETTINGS.len() {
        if same(SETTINGS[i].name, name) {
            return &SETTINGS[i];
        }
        i += 1;
    }
    panic!("not a setting of the table")
}

/// The default of a [`Value::Number`] setting, at compile time: a build error where
/// `name` is not in the table or its default is not a number.
pub const fn default_number(name: &str) -> u64 {
    let d = entry(name).default.as_bytes();
    assert!(!d.is_empty(), "an empty default");
    let mut n: u64 = 0;
    let mut i = 0;
    while i < d.len() {
        assert!(d[i].is_ascii_digit(), "a default that is not a number");
        n = n * 10 + (d[i] - b'0') as u64;
        i += 1;
    }
    n
}

/// The default of a setting as written in the table (for a [`Value::Text`] setting).
pub const fn default_text(name: &str) -> &'static str {
    entry(name).default
}

/// The range a [`Value::Number`] setting takes, `(min, max)`, at compile time.
pub const fn number_range(name: &str) -> (u64, u64) {
    match entry(name).value {
        Value::Number { min, max, .. } => (min, max),
        _ => panic!("not a number setting"),
    }
}

/// The default of a [`Value::Flag`] setting, at compile time (`1` or `0`).
pub const fn default_flag(name: &str) -> bool {
    let d = entry(name).default.as_bytes();
    assert!(
        d.len() == 1 && (d[0] == b'0' || d[0] == b'1'),
        "a flag's default is 0 or 1"
    );
    d[0] == b'1'
}

/// The table entry for `name`, if it is one of ours.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The `GPUTRACE_NVML` value that asks for NVML sampling inside the traced process even
/// under `gputrace run` (which otherwise samples from its own process and sets the job's
/// `GPUTRACE_NVML` to `0`).
pub const NVML_IN_PROCESS: &str = "inprocess";

/// Where trace files go by default (relative to the working directory).
pub const DEFAULT_TRACE_DIR: &str = "gputrace-traces";

/// The CUDA driver loads the library named here inside `cuInit`.
pub const CUDA_INJECTION_VAR: &str = "CUDA_INJECTION64_PATH";
/// NVTX loads the library named here at a program's first NVTX call.
pub const NVTX_INJECTION_VAR: &str = "NVTX_INJECTION64_PATH";

// ---------------------------------------------------------------------------------
// Ranks.

/// Variables that give a process's rank in its job, most specific first: ours, then
/// those of torchrun, Slurm, Open MPI and MPICH/PMI. The library records the ones set
/// (with [`LOCAL_RANK_VARS`]) in the trace's options; [`rank_from`] reads them back.
pub const RANK_VARS: &[&str] = &[
    settings::RANK,
    "RANK",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
];

/// Variables that give a process's rank on its node, most specific first.
pub const LOCAL_RANK_VARS: &[&str] = &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"];

/// The first of `names` (in their order) set to a whole number among `vars`, with the
/// name it came from. Names compare without regard to case.
pub fn rank_from<'a, K, V>(vars: &'a [(K, V)], names: &[&'static str]) -> Option<(u32, &'a str)>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    names.iter().find_map(|want| {
        vars.iter().find_map(|(k, v)| {
            (k.as_ref().eq_ignore_ascii_case(want))
                .then(|| v.as_ref().trim().parse::<u32>().ok())
                .flatten()
                .map(|r| (r, k.as_ref()))
        })
    })
}

// ---------------------------------------------------------------------------------
// Durations.

/// The longest duration accepted anywhere (a window, a timer): one day.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// The shortest: one millisecond (the control line counts in ms).
pub const MIN_DURATION: Duration = Duration::from_millis(1);

/// A duration that [`parse_duration`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError(pub String);

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a duration such as 10s, 500ms, 2m or 1h (from 1ms to 24h)",
            self.0
        )
    }
}

impl std::error::Error for DurationError {}

/// Parses `500ms`, `10s`, `1.5s`, `2m`, `1h`; a bare number is seconds. The one rule:
/// from 1 ms ([`MIN_DURATION`], so never zero) to one day ([`MAX_DURATION`]), both
/// included; anything else (negative, zero, too short, too long, not a number) is an
/// error.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(s.to_string());
    let t = s.trim();
    let (num, unit_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60e3)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600e3)
    } else {
        (t, 1e3)
    };
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    let ms = v * unit_ms;
    // NaN fails both comparisons.
    if !(ms >= MIN_DURATION.as_millis() as f64 && ms <= MAX_DURATION.as_millis() as f64) {
        return Err(err());
    }
    Ok(Duration::from_micros((ms * 1e3).round() as u64))
}

// ---------------------------------------------------------------------------------
// The control socket.

/// Where the control sockets of one user's processes live:
/// `$XDG_RUNTIME_DIR/gputrace`, else `/tmp/gputrace-<uid>`. The library creates it mode
/// 0700 and refuses it unless it is the user's own and private.
pub fn socket_dir(xdg_runtime_dir: Option<&Path>, uid: u32) -> PathBuf {
    match xdg_runtime_dir {
        Some(d) if !d.as_os_str().is_empty() => d.join("gputrace"),
        _ => PathBuf::from(format!("/tmp/gputrace-{uid}")),
    }
}

/// The variable that names a user's runtime directory (the preferred socket place).
pub const RUNTIME_DIR_VAR: &str = "XDG_RUNTIME_DIR";

/// The end of a control socket's name (a name ending otherwise is one being made).
pub const SOCKET_SUFFIX: &str = ".sock";
const SOCKET_TMP_SUFFIX: &str = ".sock.new";

/// Whose control socket a file is: the pid as the process sees it, its pid namespace
/// (the inode of `/proc/PID/ns/pid`) and its start time (clock ticks after boot, the
/// 22nd field of `/proc/PID/stat`). Pids repeat across pid namespaces that share a
/// directory (two containers' pid 1 under one `/tmp`); the three together do not.
/// Names: `<pid>-<pidns>-<start>.sock`; libraries before this key wrote `<pid>.sock`
/// (read as pidns and start 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SocketKey {
    pub pid: u32,
    pub pidns: u64,
    pub start: u64,
}

impl SocketKey {
    /// The key of the process whose `/proc` directory is `proc_dir` (`/proc/self`, or
    /// `/proc/PID` seen from another namespace) and whose pid in its own namespace is
    /// `pid`; zeroes for what cannot be read.
    pub fn of(proc_dir: &Path, pid: u32) -> SocketKey {
        let pidns = std::fs::read_link(proc_dir.join("ns/pid"))
            .ok()
            .and_then(|l| {
                let l = l.to_string_lossy().into_owned();
                l.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
            })
            .unwrap_or(0);
        let start = std::fs::read_to_string(proc_dir.join("stat"))
            .ok()
            .and_then(|s| stat_start_time(&s))
            .unwrap_or(0);
        SocketKey { pid, pidns, start }
    }

    fn stem(&self) -> String {
        if self.pidns == 0 && self.start == 0 {
            self.pid.to_string()
        } else {
            format!("{}-{}-{}", self.pid, self.pidns, self.start)
        }
    }

    /// Parses a socket file's name (`<key>.sock` or `<key>.sock.new`).
    pub fn parse(file_name: &str) -> Option<SocketKey> {
        let stem = file_name
            .strip_suffix(SOCKET_TMP_SUFFIX)
            .or_else(|| file_name.strip_suffix(SOCKET_SUFFIX))?;
        let number = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let mut parts = stem.split('-');
        let pid = u32::try_from(number(parts.next()?)?).ok()?;
        match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => Some(SocketKey {
                pid,
                pidns: 0,
                start: 0,
            }),
            (Some(ns), Some(start), None) => Some(SocketKey {
                pid,
                pidns: number(ns)?,
                start: number(start)?,
            }),
            _ => None,
        }
    }
}

/// The start time (22nd field) of a `/proc/PID/stat` line; the command name (2nd) may
/// hold spaces and parentheses, so fields are counted after its last `)`.
pub fn stat_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The control socket of the process `key`: `<dir>/<pid>-<pidns>-<start>.sock`.
pub fn socket_path(dir: &Path, key: &SocketKey) -> PathBuf {
    dir.join(format!("{}{SOCKET_SUFFIX}", key.stem()))
}

/// Where the process binds its socket before renaming it to [`socket_path`] (so a
/// client never finds a socket that does not accept yet).
pub fn socket_tmp_path(dir: &Path, key: &SocketKey) -> PathBuf {
    dir.join(format!("{}{SOCKET_TMP_SUFFIX}", key.stem()))
}

/// Who is at the other end of a connected control socket (`SO_PEERCRED`): its pid (as
/// this process's pid namespace sees it; 0 when it cannot) and its uid. The library
/// answers only its own uid and root; `gputrace attach` talks only to the process it
/// was asked for.
pub fn peer_credentials(s: &std::os::unix::net::UnixStream) -> Option<(i32, u32)> {
    use std::os::unix::io::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a plain C struct.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some((cred.pid, cred.uid))
}

/// Where a library from before [`SocketKey`] put the socket of `pid`.
pub fn legacy_socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}{SOCKET_SUFFIX}"))
}

/// Appended to a window's `started_by` ("attach, loaded late") when the library was
/// loaded into the running program by `gputrace attach`.
pub const LOADED_LATE: &str = "loaded late";

/// The name `gputrace attach` loads the library under (a link to it in a directory of
/// its own) when the process was started without it: the library's constructor, seeing
/// it, knows it was loaded late (the program is running, CUDA is up) and starts dormant.
pub const LATE_LOAD_FILE: &str = "libgputrace-late.so";

/// A trace window asked of a dormant process.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowReq {
    /// Longest the window lasts (with `steps`, a cap).
    pub duration: Duration,
    /// End the window when this many NVTX step ranges have begun in it and the next begins.
    pub steps: Option<u64>,
    /// Wall-clock start (CLOCK_REALTIME ms since the epoch), so all ranks trace the same window.
    pub at_ms: Option<u64>,
    /// Where the process writes the window's trace (default: its GPUTRACE_DIR).
    pub dir: Option<PathBuf>,
}

/// A window's length when the request names none.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// What a client asks, one line:
/// ```text
/// window ms=<duration> [steps=<n>] [at=<epoch ms>] [dir=<path to end of line>]
/// status
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Window(WindowReq),
    Status,
}

/// Longest request line a server reads.
pub const MAX_REQUEST_LINE: u64 = 4096;

impl Request {
    /// The request as one line, `\n` included. The duration is sent in whole ms, at
    /// least 1.
    pub fn line(&self) -> String {
        match self {
            Request::Status => "status\n".into(),
            Request::Window(w) => {
                let ms = w.duration.as_millis().max(1);
                let mut s = format!("window ms={ms}");
                if let Some(n) = w.steps {
                    s.push_str(&format!(" steps={n}"));
                }
                if let Some(at) = w.at_ms {
                    s.push_str(&format!(" at={at}"));
                }
                if let Some(d) = &w.dir {
                    s.push_str(&format!(" dir={}", d.display()));
                }
                s.push('\n');
                s
            }
        }
    }

    /// Parses a request line (its `\n` or `\r\n` optional).
    pub fn parse(line: &str) -> Result<Request, String> {
        let line = line.trim_end_matches(['\r', '\n']);
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            "status" => Ok(Request::Status),
            "window" => {
                let mut req = WindowReq {
                    duration: DEFAULT_WINDOW,
                    steps: None,
                    at_ms: None,
                    dir: None,
                };
                let mut rest = rest.trim_start();
                while !rest.is_empty() {
                    if let Some(d) = rest.strip_prefix("dir=") {
                        if d.is_empty() {
                            return Err("empty dir".into());
                        }
                        req.dir = Some(PathBuf::from(d));
                        break;
                    }
                    let (tok, more) = rest.split_once(' ').unwrap_or((rest, ""));
                    rest = more.trim_start();
                    if let Some(v) = tok.strip_prefix("ms=") {
                        let ms: u64 = v.parse().map_err(|_| format!("bad duration {v:?}"))?;
                        let d = Duration::from_millis(ms);
                        if !(MIN_DURATION..=MAX_DURATION).contains(&d) {
                            return Err("duration must be between 1 ms and 24 h".into());
                        }
                        req.duration = d;
                    } else if let Some(v) = tok.strip_prefix("steps=") {
                        let n: u64 = v.parse().map_err(|_| format!("bad step count {v:?}"))?;
                        if n == 0 {
                            return Err("steps must be at least 1".into());
                        }
                        req.steps = Some(n);
                    } else if let Some(v) = tok.strip_prefix("at=") {
                        req.at_ms = Some(v.parse().map_err(|_| format!("bad start time {v:?}"))?);
                    } else {
                        return Err(format!("unknown argument {tok:?}"));
                    }
                }
                Ok(Request::Window(req))
            }
            "" => Err("empty command".into()),
            other => Err(format!("unknown command {other:?}")),
        }
    }
}

/// What the server answers, one line each. To `window`: `started <trace path>` once
/// recording begins, then `done <trace path>` when the trace is complete, or `error
/// <text>` at any point. To `status`: the process's state name ([`STATES`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Started(PathBuf),
    Done(PathBuf),
    Error(String),
    State(String),
}

/// State names a `status` reply may carry.
pub const STATES: &[&str] = &["dormant", "tracing", "blind", "other"];

impl Reply {
    /// The reply as one line, `\n` included.
    pub fn line(&self) -> String {
        match self {
            Reply::Started(p) => format!("started {}\n", p.display()),
            Reply::Done(p) => format!("done {}\n", p.display()),
            Reply::Error(e) => format!("error {e}\n"),
            Reply::State(s) => format!("{s}\n"),
        }
    }

    /// Parses a reply line (its line end optional); `None` for anything else.
    pub fn parse(line: &str) -> Option<Reply> {
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(p) = line.strip_prefix("started ") {
            Some(Reply::Started(PathBuf::from(p)))
        } else if let Some(p) = line.strip_prefix("done ") {
            Some(Reply::Done(PathBuf::from(p)))
        } else if let Some(e) = line.strip_prefix("error ") {
            Some(Reply::Error(e.to_string()))
        } else if STATES.contains(&line) {
            Some(Reply::State(line.to_string()))
        } else {
            None
        }
    }
}

// ---------------------------------------------------------------------------------
// Trace file names.

/// The name of a trace file: `gputrace-<host>-<pid>.gtrace`, or
/// `gputrace-<host>-<pid>-<n>.gtrace` for the n-th (n >= 1) more file of the same
/// process in the same directory (windows of a dormant process, an exec'd image). The
/// host is [`TraceFileName::host_part`] of the hostname: letters, digits, `-`, `.`, `_`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceFileName {
    pub host: String,
    pub pid: u32,
    pub seq: u32,
}

/// A trace file's extension.
pub const TRACE_EXTENSION: &str = "gtrace";

impl TraceFileName {
    /// A hostname as it may appear in a file name (anything but letters, digits, `-`
    /// and `.` becomes `_`).
    pub fn host_part(host: &str) -> String {
        host.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The file name.
    pub fn name(&self) -> String {
        if self.seq == 0 {
            format!("gputrace-{}-{}.{TRACE_EXTENSION}", self.host, self.pid)
        } else {
            format!(
                "gputrace-{}-{}-{}.{TRACE_EXTENSION}",
                self.host, self.pid, self.seq
            )
        }
    }

    /// Reads a name back: every (host, pid, seq) whose [`name`](Self::name) it is, the
    /// plainest first; empty for names this pattern does not make. A name that ends in
    /// two numbers has two readings, since hosts may end in `-<digits>` too:
    /// `gputrace-node-12-345.gtrace` is pid 345 on host `node-12`, or the 345th more
    /// file of pid 12 on host `node`. The trace's own metadata (host, pid) tells them
    /// apart; [`TraceFileName::is_of`] asks the question the other way round.
    pub fn parse(name: &str) -> Vec<TraceFileName> {
        let Some(stem) = name
            .strip_prefix("gputrace-")
            .and_then(|s| s.strip_suffix(TRACE_EXTENSION))
            .and_then(|s| s.strip_suffix('.'))
        else {
            return Vec::new();
        };
        let number = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let mut out = Vec::new();
        let Some((rest, last)) = stem.rsplit_once('-') else {
            return out;
        };
        let Some(last) = number(last) else {
            return out;
        };
        if !rest.is_empty() {
            out.push(TraceFileName {
                host: rest.to_string(),
                pid: last,
                seq: 0,
            });
        }
        if let Some((host, pid)) = rest.rsplit_once('-') {
            if let (Some(pid), false, true) = (number(pid), host.is_empty(), last > 0) {
                out.push(TraceFileName {
                    host: host.to_string(),
                    pid,
                    seq: last,
                });
            }
        }
        out
    }

    /// If `name` is a trace file of process `pid` on `host` (as [`host_part`](Self::host_part)
    /// gives it), which one (its `seq`).
    pub fn is_of(name: &str, host: &str, pid: u32) -> Option<u32> {
        TraceFileName::parse(name)
            .into_iter()
            .find(|t| t.host == host && t.pid == pid)
            .map(|t| t.seq)
    }
}

/// The name of an environment file (the NVML samples `gputrace run` or `gputrace
/// attach` took from their own process, see `Meta::kind`):
/// `gputrace-env-<host>-<pid>.gtrace` with the command's pid, `-<n>` before the
/// extension for its n-th more. A trace file name whose host part is `env-<host>`; the
/// file's metadata, not its name, says what it is.
pub fn env_file_name(host: &str, pid: u32, seq: u32) -> String {
    TraceFileName {
        host: format!("env-{host}"),
        pid,
        seq,
    }
    .name()
}

/// Is `path` a trace file by its name (its extension)?
pub fn is_trace_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == TRACE_EXTENSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_one_rule() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("3"), Duration::from_secs(3));
        assert_eq!(ok(" 1.5s "), Duration::from_millis(1500));
        assert_eq!(ok("0.25"), Duration::from_millis(250));
        // The edges: 1 ms and 24 h are in, zero and anything past a day are out.
        assert_eq!(ok("1ms"), MIN_DURATION);
        assert_eq!(ok("0.001s"), MIN_DURATION);
        assert_eq!(ok("24h"), MAX_DURATION);
        assert_eq!(ok("86400"), MAX_DURATION);
        assert_eq!(ok("1440m"), MAX_DURATION);
        for bad in [
            "0",
            "0s",
            "0ms",
            "0.5ms",
            "0.0009s",
            "-1s",
            "-0",
            "86400.001s",
            "1441m",
            "25h",
            "1e9",
            "inf",
            "NaN",
            "",
            "s",
            "ms",
            "soon",
            "10 seconds",
            "1d",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains("24h"), "{bad}: {e}");
        }
    }

    #[test]
    fn requests_round_trip() {
        let reqs = [
            Request::Status,
            Request::Window(WindowReq {
                duration: Duration::from_millis(5000),
                steps: None,
                at_ms: Some(1_700_000_000_000),
                dir: Some(PathBuf::from("/tmp/my traces")),
            }),
            Request::Window(WindowReq {
                duration: Duration::from_secs(60),
                steps: Some(20),
                at_ms: None,
                dir: None,
            }),
        ];
        for r in reqs {
            let line = r.line();
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            assert_eq!(Request::parse(&line), Ok(r));
        }
        assert_eq!(
            Request::parse("window ms=5000 at=1700000000000 dir=/tmp/my traces\r\n"),
            Ok(Request::Window(WindowReq {
                duration: Duration::from_millis(5000),
                steps: None,
                at_ms: Some(1_700_000_000_000),
                dir: Some(PathBuf::from("/tmp/my traces")),
            }))
        );
        match Request::parse("window") {
            Ok(Request::Window(w)) => assert_eq!(w.duration, DEFAULT_WINDOW),
            other => panic!("{other:?}"),
        }
        // Sub-millisecond durations go out as 1 ms, never as the refused 0.
        let tiny = Request::Window(WindowReq {
            duration: Duration::from_micros(10),
            steps: None,
            at_ms: None,
            dir: None,
        });
        assert_eq!(tiny.line(), "window ms=1\n");
    }

    #[test]
    fn bad_requests_are_refused() {
        for bad in [
            "window steps=0",
            "window ms=abc",
            "window ms=0",
            "window ms=86400001",
            "window ms=-5",
            "window at=soon",
            "window dir=",
            "window frob=1",
            "rm -rf /",
            "",
        ] {
            assert!(Request::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Request::parse("window ms=86400000").is_ok());
    }

    #[test]
    fn replies_round_trip() {
        for r in [
            Reply::Started(PathBuf::from("/t/gputrace-h-1.gtrace")),
            Reply::Done(PathBuf::from("/t/a b.gtrace")),
            Reply::Error("a window is already running".into()),
            Reply::State("dormant".into()),
        ] {
            assert_eq!(Reply::parse(&r.line()), Some(r));
        }
        assert_eq!(Reply::parse("what\n"), None);
        assert_eq!(Reply::parse(""), None);
    }

    #[test]
    fn socket_locations() {
        assert_eq!(
            socket_dir(Some(Path::new("/run/user/1000")), 1000),
            PathBuf::from("/run/user/1000/gputrace")
        );
        assert_eq!(
            socket_dir(Some(Path::new("")), 7),
            PathBuf::from("/tmp/gputrace-7")
        );
        assert_eq!(socket_dir(None, 7), PathBuf::from("/tmp/gputrace-7"));
        let dir = Path::new("/tmp/gputrace-7");
        let key = SocketKey {
            pid: 1,
            pidns: 4026532001,
            start: 98765,
        };
        assert_eq!(
            socket_path(dir, &key),
            PathBuf::from("/tmp/gputrace-7/1-4026532001-98765.sock")
        );
        assert_eq!(
            socket_tmp_path(dir, &key),
            PathBuf::from("/tmp/gputrace-7/1-4026532001-98765.sock.new")
        );
        assert_eq!(SocketKey::parse("1-4026532001-98765.sock"), Some(key));
        assert_eq!(SocketKey::parse("1-4026532001-98765.sock.new"), Some(key));
        // The same pid in another namespace is another socket.
        let other_ns = SocketKey {
            pidns: 4026532002,
            ..key
        };
        assert_ne!(socket_path(dir, &key), socket_path(dir, &other_ns));
        // A library before the key: the pid alone.
        let legacy = SocketKey::parse("42.sock").unwrap();
        assert_eq!((legacy.pid, legacy.pidns, legacy.start), (42, 0, 0));
        assert_eq!(socket_path(dir, &legacy), legacy_socket_path(dir, 42));
        assert_eq!(SocketKey::parse("42.sock.new").map(|k| k.pid), Some(42));
        for other in [
            "sock",
            ".sock",
            "x42.sock",
            "42.socket",
            "42",
            "-1.sock",
            "4 2.sock",
            "1-2.sock",
            "1-2-3-4.sock",
            "1--3.sock",
            "99999999999.sock",
        ] {
            assert_eq!(SocketKey::parse(other), None, "{other}");
        }
    }

    #[test]
    fn a_process_start_time_is_read_after_its_name() {
        let stat =
            "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(stat_start_time(stat), Some(98765));
        assert_eq!(stat_start_time("1234 (x"), None);
        let me = SocketKey::of(Path::new("/proc/self"), std::process::id());
        assert!(me.pidns != 0 && me.start != 0, "{me:?}");
        let again = SocketKey::of(
            Path::new(&format!("/proc/{}", std::process::id())),
            std::process::id(),
        );
        assert_eq!(me, again);
    }

    #[test]
    fn trace_names_round_trip() {
        for (host, pid, seq, name) in [
            ("node", 345, 0, "gputrace-node-345.gtrace"),
            ("node-12", 345, 0, "gputrace-node-12-345.gtrace"),
            ("node", 345, 2, "gputrace-node-345-2.gtrace"),
            ("a.b-c", 1, 17, "gputrace-a.b-c-1-17.gtrace"),
        ] {
            let t = TraceFileName {
                host: host.into(),
                pid,
                seq,
            };
            assert_eq!(t.name(), name);
            assert!(TraceFileName::parse(name).contains(&t), "{name}");
            assert_eq!(TraceFileName::is_of(name, host, pid), Some(seq));
            assert!(is_trace_file(Path::new(name)));
        }
        // Two numbers at the end: both readings, the plain one first.
        let both = TraceFileName::parse("gputrace-node-12-345.gtrace");
        assert_eq!(both.len(), 2);
        assert_eq!(
            (both[0].host.as_str(), both[0].pid, both[0].seq),
            ("node-12", 345, 0)
        );
        assert_eq!(
            (both[1].host.as_str(), both[1].pid, both[1].seq),
            ("node", 12, 345)
        );
        assert_eq!(TraceFileName::parse("gputrace-h-7.gtrace").len(), 1);
        assert_eq!(TraceFileName::is_of("gputrace-h-7.gtrace", "h", 8), None);
        for bad in [
            "gputrace-345.gtrace",
            "gputrace--345.gtrace",
            "gputrace-h-x.gtrace",
            "gputrace-h-1.gtrace.tmp",
            "trace-h-1.gtrace",
            "gputrace-h-.gtrace",
        ] {
            assert_eq!(TraceFileName::parse(bad), Vec::new(), "{bad}");
        }
        assert_eq!(env_file_name("node", 77, 0), "gputrace-env-node-77.gtrace");
        assert_eq!(
            env_file_name("node", 77, 2),
            "gputrace-env-node-77-2.gtrace"
        );
        assert!(is_trace_file(Path::new(&env_file_name("h", 1, 0))));
        // A zero at the end is a pid, never the 0th more file.
        assert_eq!(TraceFileName::parse("gputrace-h-5-0.gtrace").len(), 1);
        assert_eq!(TraceFileName::host_part("my host/é"), "my_host__");
    }

    #[test]
    fn ranks_in_order_of_precedence() {
        let vars = [
            ("LOCAL_RANK", "1"),
            ("PMI_RANK", "7"),
            ("RANK", "garbage"),
            ("SLURM_PROCID", "5"),
        ];
        assert_eq!(rank_from(&vars, RANK_VARS), Some((5, "SLURM_PROCID")));
        assert_eq!(rank_from(&vars, LOCAL_RANK_VARS), Some((1, "LOCAL_RANK")));
        let ours = [("RANK", "3"), ("gputrace_rank", " 9 ")];
        assert_eq!(rank_from(&ours, RANK_VARS), Some((9, "gputrace_rank")));
        let none: [(&str, &str); 1] = [("WORLD_SIZE", "8")];
        assert_eq!(rank_from(&none, RANK_VARS), None);
    }

    #[test]
    fn the_settings_table_is_well_formed() {
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        assert!(names.iter().all(|n| n.starts_with(SETTING_PREFIX)));
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a setting is listed twice");
        assert!(setting(settings::RANK).is_some());
        assert!(setting(settings::THREADS).is_some());
        assert!(setting("GPUTRACE_FROB").is_none());
    }
}
