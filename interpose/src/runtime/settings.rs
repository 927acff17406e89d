//! The settings, read once from the environment (`base::opts`), for the whole runtime.

use crate::base::opts::Opts;
use std::sync::OnceLock;

static OPTS: OnceLock<Opts> = OnceLock::new();

pub fn opts() -> &'static Opts {
    OPTS.get_or_init(Opts::from_env)
}
