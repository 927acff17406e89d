//! Which kernels the recorded runtime launches account for: the test behind recording
//! driver-API kernel launches only where a program makes them (`GPUTRACE_DRIVER_API`
//! `auto`, opt-in: docs/recording.md says why it is not the default).
//!
//! A kernel launched through the runtime carries the correlation id of its runtime
//! call, which the callbacks recorded. A kernel whose id no recorded call has was
//! launched through the driver API by the program itself (JAX/XLA, Triton, NCCL,
//! cuDNN's runtime-compiled kernels). Until such kernels are seen, the driver's launch
//! callbacks stay off: on a launch-bound PyTorch loop, CUPTI's two extra callbacks per
//! launch (the runtime's own cuLaunchKernel underneath, which we skip anyway) were a
//! measurable part of the tracer's cost. Once [`SWITCH_AFTER`] unclaimed kernels are
//! seen, the launch callbacks go on for the rest of the process.
//!
//! A driver call recorded from the start (a copy, a sync, a graph launch: those are on
//! in `auto`) that is the program's own, not one a runtime call makes underneath, says
//! the same sooner: XLA copies and syncs through the driver before its first kernel
//! completes, and CUPTI may hold a JAX program's kernel records for seconds. Such a call
//! switches the launch callbacks on at the next pass.
//!
//! Everything here runs on the writer thread: the rings' source notes the runtime
//! launches it drains, the CUPTI source the kernels it decodes. CUPTI's buffers are
//! drained before the rings in a pass, so a kernel not claimed yet is held until the
//! next pass has drained the rings (`resolve`). Kernels of CUDA graphs are left out
//! (their replay's launch is recorded by the graph-launch callbacks, always on).
//!
//! Kernels launched before our callbacks were on (in flight when a window opened) carry
//! ids below every recorded call's: the smallest id of any recorded call (a launch, a
//! copy, a sync, of either API) is the fence below which a kernel proves nothing.
//! Kernels that arrive while no call has been recorded at all are held until one is.
//!
//! Records a full ring dropped leave their kernels unclaimed too. A ring drops only
//! while full, that is after the records the next drain reads from it, and before those
//! the drain after reads: so when a drain reports drops, ids from its lowest to the
//! highest of the next drain that reads anything are excused (across threads, so more
//! than were lost; a program that launches through the driver goes on doing so, and
//! its later kernels switch the callbacks on).

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Unclaimed kernels that switch the driver's launch callbacks on. A few, not one: a
/// runtime launch record lost to a full ring leaves its kernel unclaimed too.
pub const SWITCH_AFTER: u32 = 4;
/// Kernels held while no call has been recorded yet (the oldest go first).
const MAX_HELD: usize = 1 << 16;
/// Excused ranges kept; beyond this the two oldest are merged.
const MAX_EXCUSED: usize = 64;
/// Launches waiting for their kernel; beyond this the oldest ids are forgotten (a
/// launch whose kernel record never came: a window's end, records CUPTI dropped).
const MAX_LAUNCHES: usize = 1 << 20;

/// Watching for unclaimed kernels (auto mode, launch callbacks still off).
static WATCHING: AtomicBool = AtomicBool::new(false);
/// Kernels are held for the next pass.
static HELD: AtomicBool = AtomicBool::new(false);
/// A driver call of the program's own was recorded: switch at the next pass.
static DRIVER_CALL: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<Option<Claims>> = Mutex::new(None);

/// Correlation ids are consecutive integers: a multiplicative hash spreads them well
/// and costs a fraction of SipHash on the writer thread.
#[derive(Default)]
struct CorrHasher(u64);

impl Hasher for CorrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | *b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Default)]
struct Claims {
    launched: HashSet<u32, BuildHasherDefault<CorrHasher>>,
    /// The launches' ids in arrival order, to forget the oldest.
    order: VecDeque<u32>,
    /// The smallest id of any recorded call (0: none yet).
    fence: u32,
    /// Kernels not claimed when decoded, looked at again after the next ring drain.
    held: Vec<u32>,
    unclaimed: u32,
    /// Id ranges (inclusive) where ring records were dropped.
    excused: Vec<(u32, u32)>,
    /// Drops were reported: ids from here up are excused until the range is closed.
    gap: Option<u32>,
    /// The highest id of any call drained.
    highest: u32,
    /// Kernels judged, by outcome (for the debug log).
    tally: Tally,
}

/// What became of the kernels looked at.
#[derive(Default, Debug, Clone, Copy)]
pub struct Tally {
    pub claimed: u64,
    pub before_fence: u64,
    pub around_drops: u64,
    pub unclaimed: u64,
    pub no_id: u64,
}

impl Claims {
    /// Kernel `c`, whose launch had every chance to be recorded: unclaimed?
    fn unclaimed(&mut self, c: u32) -> bool {
        let t = &mut self.tally;
        if self.launched.remove(&c) {
            t.claimed += 1;
        } else if c < self.fence {
            t.before_fence += 1;
        } else if self.gap.is_some_and(|g| c >= g)
            || self.excused.iter().any(|&(a, b)| (a..=b).contains(&c))
        {
            t.around_drops += 1;
        } else {
            t.unclaimed += 1;
            return true;
        }
        false
    }
}

fn with<R>(f: impl FnOnce(&mut Claims) -> R) -> R {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Claims::default))
}

/// Starts (or stops) watching, forgetting what an earlier window saw; returns what was
/// seen since the last call.
pub fn watch(on: bool) -> Tally {
    let t = with(|c| std::mem::take(c).tally);
    HELD.store(false, Ordering::Release);
    DRIVER_CALL.store(false, Ordering::Release);
    WATCHING.store(on, Ordering::Release);
    t
}

/// What became of the kernels looked at so far.
pub fn tally() -> Tally {
    with(|c| c.tally)
}

/// Are runtime launches and kernels to be noted?
#[inline]
pub fn watching() -> bool {
    WATCHING.load(Ordering::Acquire)
}

/// What one drain of the rings held: the ids of its runtime kernel launches that
/// returned success, the lowest and highest id of its calls (0: none), and whether any
/// ring reported dropped records.
#[derive(Default)]
pub struct Drained {
    pub launches: Vec<u32>,
    pub lowest: u32,
    pub highest: u32,
    pub dropped: bool,
    /// A driver-API call the program made itself (nested ones are never recorded).
    pub driver_call: bool,
}

impl Drained {
    /// An API call's id.
    #[inline]
    pub fn call(&mut self, id: u32) {
        if id != 0 {
            if self.lowest == 0 || id < self.lowest {
                self.lowest = id;
            }
            self.highest = self.highest.max(id);
        }
    }
}

/// The rings' source drained `d`; it is emptied for the next drain.
pub fn note_calls(d: &mut Drained) {
    if d.driver_call && watching() {
        DRIVER_CALL.store(true, Ordering::Release);
    }
    if !watching() || (d.lowest == 0 && !d.dropped) {
        d.launches.clear();
        (d.lowest, d.highest, d.dropped, d.driver_call) = (0, 0, false, false);
        return;
    }
    let (lowest, highest, dropped) = (d.lowest, d.highest, d.dropped);
    (d.lowest, d.highest, d.dropped, d.driver_call) = (0, 0, false, false);
    let launches = &mut d.launches;
    with(|c| {
        if lowest != 0 && (c.fence == 0 || lowest < c.fence) {
            c.fence = lowest;
        }
        if lowest != 0 {
            if let Some(g) = c.gap.take() {
                c.excused.push((g, highest));
                if c.excused.len() > MAX_EXCUSED {
                    let (a, _) = c.excused.remove(0);
                    c.excused[0].0 = a;
                }
            }
        }
        if dropped && c.gap.is_none() {
            c.gap = Some(if lowest != 0 { lowest } else { c.highest });
        }
        c.highest = c.highest.max(highest);
        for id in launches.drain(..) {
            if c.launched.insert(id) {
                c.order.push_back(id);
            }
        }
        while c.order.len() > MAX_LAUNCHES {
            if let Some(old) = c.order.pop_front() {
                c.launched.remove(&old);
            }
        }
        // Ids whose kernel came already are still in `order`: drop them as they reach
        // its front, so it does not grow with every launch.
        while c.order.front().is_some_and(|id| !c.launched.contains(id)) {
            c.order.pop_front();
        }
    });
}

/// The CUPTI source decoded these kernels (ids of kernels outside graphs; a 0 is a
/// kernel CUPTI gave no id, counted and left out).
/// True once the unclaimed ones reach [`SWITCH_AFTER`]: the caller switches the
/// driver's launch callbacks on; watching stops. Empties `kernels`.
pub fn note_kernels(kernels: &mut Vec<u32>) -> bool {
    if !watching() {
        kernels.clear();
        return false;
    }
    let switch = with(|c| {
        settle(c);
        for id in kernels.drain(..) {
            if id == 0 {
                c.tally.no_id += 1;
            } else if c.launched.remove(&id) {
                c.tally.claimed += 1;
            } else {
                c.held.push(id);
            }
        }
        if c.held.len() > MAX_HELD {
            let extra = c.held.len() - MAX_HELD;
            c.held.drain(..extra);
        }
        HELD.store(!c.held.is_empty(), Ordering::Release);
        c.unclaimed >= SWITCH_AFTER || DRIVER_CALL.load(Ordering::Acquire)
    });
    if switch {
        WATCHING.store(false, Ordering::Release);
    }
    switch
}

/// At the start of a CUPTI drain: the kernels held at the last one, looked at again
/// now that the rings were drained in between. True as [`note_kernels`].
pub fn resolve() -> bool {
    if !watching() || !(HELD.load(Ordering::Acquire) || DRIVER_CALL.load(Ordering::Acquire)) {
        return false;
    }
    note_kernels(&mut Vec::new())
}

/// The held kernels judged, once some call has been recorded (the fence exists).
fn settle(c: &mut Claims) {
    if c.fence == 0 || c.held.is_empty() {
        return;
    }
    let held = std::mem::take(&mut c.held);
    for id in held {
        if c.unclaimed(id) {
            c.unclaimed += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drain of the rings: these runtime launches, the calls' ids from `lowest` to
    /// `highest` (0: none), drops or not.
    fn calls(launches: impl IntoIterator<Item = u32>, lowest: u32, highest: u32, dropped: bool) {
        let mut d = Drained {
            launches: launches.into_iter().collect(),
            lowest,
            highest,
            dropped,
            driver_call: false,
        };
        note_calls(&mut d);
        assert!(d.launches.is_empty() && d.lowest == 0 && !d.dropped);
    }

    fn kernels(ids: impl IntoIterator<Item = u32>) -> bool {
        note_kernels(&mut ids.into_iter().collect())
    }

    // One test: the state is process-wide.
    #[test]
    fn unclaimed_kernels_switch_only_after_the_rings_had_their_chance() {
        // Runtime launches 100..110 recorded; their kernels come: nothing unclaimed.
        watch(true);
        calls(100..110, 100, 109, false);
        assert!(!kernels(100..110));
        assert!(!resolve());
        // In flight when the window opened (ids below the fence): never counted.
        assert!(!kernels(10..40));
        assert!(!resolve());
        // A kernel decoded before its launch's record was drained: held, then claimed.
        assert!(!kernels(111..116));
        calls(111..116, 111, 115, false);
        assert!(!resolve());
        // Driver launches: ids no call claims. Held first, counted at the next drain.
        assert!(!kernels([120, 121, 122]));
        assert!(!resolve(), "3 unclaimed are fewer than SWITCH_AFTER");
        assert!(!kernels([123]));
        assert!(resolve(), "the fourth switches");
        assert!(!watching());
        assert!(!kernels(200..205));

        // No call recorded at all yet (a JAX window): held until one is, then judged.
        watch(true);
        for _ in 0..3 {
            assert!(!kernels(500..505));
            assert!(!resolve());
        }
        calls([], 490, 490, false); // a driver sync, say
        assert!(resolve());

        // Full rings: a drain that reports drops excuses every id from its lowest to
        // the highest of the next drain that reads anything; ids beyond stay judged.
        watch(true);
        calls(1000..1100, 1000, 1099, true);
        assert!(!kernels(1000..1400), "held: the gap is open");
        assert!(!resolve());
        calls([], 0, 0, true); // drops again, nothing read
        calls(1500..1510, 1500, 1509, false);
        assert!(!resolve(), "1100..1400 lie in the excused range");
        assert!(!kernels(1500..1510));
        assert!(!kernels([1600, 1601, 1602, 1603]));
        assert!(resolve(), "beyond the range: unclaimed");

        // A driver call of the program's own switches at the next pass, kernels or not.
        watch(true);
        calls(2000..2010, 2000, 2009, false);
        let mut d = Drained {
            lowest: 2011,
            highest: 2011,
            driver_call: true,
            ..Drained::default()
        };
        note_calls(&mut d);
        assert!(!d.driver_call);
        assert!(resolve());
        assert!(!watching());

        // What became of the kernels, for the debug log.
        watch(true);
        calls(3000..3004, 3000, 3003, false);
        assert!(!kernels([2990, 3000, 3001, 0, 3100]));
        assert!(!resolve());
        let t = tally();
        assert_eq!(
            (t.claimed, t.before_fence, t.no_id, t.unclaimed),
            (2, 1, 1, 1)
        );

        // Launches whose kernels never come are forgotten, oldest first, and the queue
        // does not keep ids whose kernels came.
        watch(true);
        calls(
            1..=(MAX_LAUNCHES as u32 + 10),
            1,
            MAX_LAUNCHES as u32 + 10,
            false,
        );
        with(|c| {
            assert_eq!(c.launched.len(), MAX_LAUNCHES);
            assert!(!c.launched.contains(&10) && c.launched.contains(&11));
        });
        assert!(!kernels(11..1000));
        let last = MAX_LAUNCHES as u32 + 20;
        calls([last], last, last, false);
        with(|c| assert_eq!(c.order.len(), c.launched.len()));
        watch(false);
        assert!(!kernels(7..12) && !resolve());
    }
}
