//! The environment session: while a trace is open, a thread of its own writes the
//! facts once (versions, limits, modes: `gputrace_env::facts`) and samples NVML every
//! `GPUTRACE_NVML_MS` (clocks, throttle reasons, power, PCIe, the processes on the
//! GPU: `gputrace_env::sampler`), first when the trace opens and last when it closes.
//! Nothing runs while dormant. NVML is initialised when the session starts and shut
//! down when it ends; a missing or refusing NVML gives one `nvml` fact saying why, and
//! the trace goes on without samples.
//!
//! The session hands its items to the writer through one queue, drained on the writer
//! thread by [`EnvSource`], which interns their strings.

use crate::base::log;
use crate::base::opts::{NvmlLib, Opts};
use crate::base::worker::{lock, Spec, Worker, POLICY};
use crate::writer::{Sink, Source};
use gputrace_env::sampler::{self, Item, Sampler};
use gputrace_env::{Nvml, NvmlError};
use gputrace_format::Event;
use std::sync::Mutex;
use std::time::Duration;

static QUEUE: Mutex<Vec<Item>> = Mutex::new(Vec::new());
static WORKER: Worker = Worker::new();

/// Starts the session for a trace that just opened (after the writer started).
pub fn start(o: &Opts) {
    if !WORKER.claim() {
        // The previous window's thread is still in an NVML call: this window goes
        // without environment data rather than with two samplers.
        log::debug("environment sampler still busy from the last window; not sampling");
        return;
    }
    lock(&QUEUE).clear();
    let lib = o.nvml_lib();
    let period = Duration::from_millis(o.nvml_ms);
    let skip = o.nvml_skip;
    let spec = Spec::new(
        "gputrace-env",
        "internal error in the environment sampler; NVML sampling off",
    );
    if let Err(e) = WORKER.spawn_claimed(&POLICY, spec, move || run(&lib, period, skip)) {
        log::debug(&format!("environment sampler not started: {e}"));
    }
}

/// Ends the session: the thread takes its last sample and ends. Waits at most
/// `wait` for it (an NVML call may be slow), so the writer's last pass has it.
pub fn stop(wait: Duration) {
    if !WORKER.stop(wait) {
        log::debug("environment sampler did not end in time; its last sample is lost");
    }
}

/// The session's queue as the writer drains it.
pub struct EnvSource;

impl Source for EnvSource {
    fn drain(&mut self, out: &mut Sink<'_>) {
        let items = std::mem::take(&mut *lock(&QUEUE));
        let Sink { names, events } = out;
        for it in items {
            it.into_events(
                &mut |t: &str, o: &mut Vec<Event>| names.intern(t, o),
                events,
            );
        }
    }
}

/// In a forked child: the parent's sampler thread does not exist here.
pub fn forget_after_fork() {
    WORKER.forget_after_fork();
    if let Ok(mut q) = QUEUE.try_lock() {
        q.clear();
    }
}

fn push(items: &mut Vec<Item>) {
    if !items.is_empty() {
        lock(&QUEUE).append(items);
    }
}

fn load(lib: &NvmlLib) -> Option<Result<Nvml, NvmlError>> {
    match lib {
        NvmlLib::Off => None,
        NvmlLib::Default => Some(Nvml::load(None)),
        NvmlLib::Path(p) => Some(Nvml::load(Some(p))),
    }
}

fn run(lib: &NvmlLib, period: Duration, skip: sampler::Skip) {
    let t0 = sampler::now_ns();
    let nvml = load(lib);
    log::debug("environment sampler: NVML loaded");
    let facts = match &nvml {
        Some(r) => sampler::trace_facts(r.as_ref()),
        None => {
            let mut f = gputrace_env::facts::host_facts();
            f.push(gputrace_env::facts::Fact {
                device: gputrace_format::FACT_HOST,
                key: gputrace_env::facts::keys::NVML,
                value: "off: GPUTRACE_NVML=1 turns it on".into(),
            });
            f
        }
    };
    let mut items: Vec<Item> = sampler::fact_items(t0, facts).collect();
    push(&mut items);
    log::debug("environment sampler: facts read");
    let Some(Ok(nvml)) = nvml else {
        if let Some(Err(e)) = &nvml {
            log::debug(&format!("no NVML samples: {e}"));
        }
        return;
    };
    if period.is_zero() || skip.ticks {
        return;
    }
    let mut s = Sampler::new(&nvml, std::process::id(), t0, skip);
    log::debug("environment sampler: devices opened");
    let mut n = 0u64;
    loop {
        s.tick(sampler::now_ns(), &mut items);
        n += 1;
        if n <= 3 {
            log::debug(&format!("environment sampler: tick {n} done"));
        }
        push(&mut items);
        if WORKER.wait_stop(period) {
            // The last sample, as the trace closes.
            s.tick(sampler::now_ns(), &mut items);
            push(&mut items);
            return;
        }
    }
}
