//! Command lines as the `gputrace` command stores and shows them: redacted
//! (`gputrace_format::redact`) unless this process's `GPUTRACE_KEEP_SECRETS` is on. The
//! analyzer redacts what it shows even where the library already did, so a trace written
//! before the library redacted, or with the setting on, does not leak through a report
//! someone passes on; whoever runs the analyzer with the setting sees what was stored.

use gputrace_format::redact::redact_cmdline;

/// Whether this process's environment asks for command lines as they are.
pub fn keep_secrets() -> bool {
    gputrace_format::settings::Values::from_env().0.keep_secrets
}

/// `cmdline` as the command stores or shows it.
pub fn cmdline(cmdline: &[String]) -> Vec<String> {
    if keep_secrets() {
        cmdline.to_vec()
    } else {
        redact_cmdline(cmdline)
    }
}
