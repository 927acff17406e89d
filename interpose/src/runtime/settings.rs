//! The settings, read once from the environment (`base::opts`), for the whole runtime.

use crate::base::opts::Opts;
use std::sync::OnceLock;

static OPTS: OnceLock<Opts> = OnceLock::new();

/// The library was loaded into a running program by `gputrace attach`: dormant, and no
/// symbol hooks (the program bound its calls before we came). Before the first `opts()`.
pub fn set_loaded_late() {
    let mut o = Opts::from_env();
    o.mode = crate::base::opts::Mode::Dormant;
    o.hooks = false;
    // Windows come through `gputrace attach` only: no signal handler over the program's
    // own, no timer.
    o.signal = None;
    o.start_after = None;
    o.duration = None;
    let _ = OPTS.set(o);
}

pub fn opts() -> &'static Opts {
    OPTS.get_or_init(Opts::from_env)
}
