//! Timestamps for the symbol hooks: the CPU's time-stamp counter where the kernel
//! trusts it, else CLOCK_REALTIME.
//!
//! A traced hook reads the time twice. clock_gettime(CLOCK_REALTIME) costs about 20 ns
//! through the vDSO (2-core CPU box, bench/cpu-hooks.md); `rdtsc` about 9 ns. So when
//! the kernel's clocksource is `tsc` (it has checked that the counter is invariant and
//! in step across CPUs) and the CPU says `constant_tsc` and `nonstop_tsc`, hooks stamp
//! their records with raw TSC values, and the writer thread converts them to the
//! trace's time base (CLOCK_REALTIME ns), so hook events line up with CUPTI's and the
//! callbacks' timestamps. Otherwise hooks read CLOCK_REALTIME directly.
//!
//! Conversion: `real = base_real + (tsc - base_tsc) * ns_per_tick`, where
//! (`base_tsc`, `base_real`) is a pair read together (TSC, CLOCK_REALTIME, TSC; the
//! narrowest of three brackets) at most [`REFRESH_NS`] before, and `ns_per_tick` comes
//! from that pair and one read when the library was loaded, usually seconds apart
//! (at least [`MIN_BASELINE_NS`]: the writer waits that long once if it must). With
//! pairs good to ~20 ns, a 1 s baseline gives a rate error near 2e-8; offsets are
//! re-anchored every 50 ms, so an NTP slew or step of CLOCK_REALTIME is followed
//! within one refresh.
//!
//! The mode is chosen once, by the library constructor or by the first stamp taken
//! (whichever comes first), and never changes, so every record means the same thing.

use super::clock;
use super::ffi::{errno, set_errno};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const REALTIME: u8 = 1;
const TSC: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);
static ANCHOR_TSC: AtomicU64 = AtomicU64::new(0);
static ANCHOR_REAL: AtomicU64 = AtomicU64::new(0);

/// Re-anchor the offset this often (CLOCK_REALTIME ns).
pub const REFRESH_NS: u64 = 50_000_000;
/// Shortest anchor-to-now baseline the rate is taken from.
pub const MIN_BASELINE_NS: u64 = 2_000_000;

#[inline(always)]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; it is available on every x86_64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        clock::now_ns()
    }
}

/// A hook's timestamp: raw TSC in TSC mode, else CLOCK_REALTIME ns.
#[inline(always)]
pub fn stamp() -> u64 {
    match MODE.load(Ordering::Acquire) {
        TSC => rdtsc(),
        REALTIME => clock::now_ns(),
        _ => {
            init();
            stamp()
        }
    }
}

/// Are stamps TSC values?
pub fn is_tsc() -> bool {
    if MODE.load(Ordering::Acquire) == UNDECIDED {
        init();
    }
    MODE.load(Ordering::Acquire) == TSC
}

/// (TSC, CLOCK_REALTIME) read together: the midpoint of the narrowest of three TSC
/// brackets around the clock read.
pub fn pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..3 {
        let a = rdtsc();
        let real = clock::now_ns();
        let b = rdtsc();
        let w = b.wrapping_sub(a);
        if w < best.0 {
            best = (w, a + w / 2, real);
        }
    }
    (best.1, best.2)
}

/// Is the TSC usable as a clock here? `clocksource` is the kernel's current clocksource
/// and `cpuinfo` the text of /proc/cpuinfo.
pub fn usable(clocksource: &str, cpuinfo: &str) -> bool {
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    cfg!(target_arch = "x86_64")
        && clocksource.trim() == "tsc"
        && has("constant_tsc")
        && has("nonstop_tsc")
}

/// Chooses the mode, once. Threads racing here all reach the same verdict (it only
/// depends on the machine); the first to store it wins, and its anchor with it.
#[cold]
pub fn init() {
    if MODE.load(Ordering::Acquire) != UNDECIDED {
        return;
    }
    let saved = errno();
    let cs =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    let ci = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mode = if usable(&cs, &ci) { TSC } else { REALTIME };
    static ANCHOR_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ANCHOR_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if MODE.load(Ordering::Acquire) == UNDECIDED {
        let (t, r) = pair();
        ANCHOR_TSC.store(t, Ordering::Relaxed);
        ANCHOR_REAL.store(r, Ordering::Relaxed);
        MODE.store(mode, Ordering::Release);
    }
    set_errno(saved);
}

/// Turns hook stamps into CLOCK_REALTIME ns (the writer thread's side).
#[derive(Clone, Copy, Debug)]
pub struct Converter {
    tsc: bool,
    base_tsc: u64,
    base_real: u64,
    ns_per_tick: f64,
    refresh_at_real: u64,
}

impl Converter {
    /// A converter for the current mode.
    pub fn new() -> Converter {
        let mut c = Converter {
            tsc: is_tsc(),
            base_tsc: 0,
            base_real: 0,
            ns_per_tick: 1.0,
            refresh_at_real: 0,
        };
        if c.tsc {
            c.refresh();
        }
        c
    }

    /// Stamps are CLOCK_REALTIME already.
    pub fn identity() -> Converter {
        Converter {
            tsc: false,
            base_tsc: 0,
            base_real: 0,
            ns_per_tick: 1.0,
            refresh_at_real: u64::MAX,
        }
    }

    /// A converter from explicit values (tests).
    pub fn with(base_tsc: u64, base_real: u64, ns_per_tick: f64) -> Converter {
        Converter {
            tsc: true,
            base_tsc,
            base_real,
            ns_per_tick,
            refresh_at_real: u64::MAX,
        }
    }

    fn refresh(&mut self) {
        let (at, ar) = (
            ANCHOR_TSC.load(Ordering::Relaxed),
            ANCHOR_REAL.load(Ordering::Relaxed),
        );
        let (mut t, mut r) = pair();
        // Too short a baseline for a good rate: wait (once, on the writer thread).
        while r.saturating_sub(ar) < MIN_BASELINE_NS {
            std::thread::sleep(std::time::Duration::from_micros(500));
            (t, r) = pair();
        }
        if t > at {
            self.ns_per_tick = (r - ar) as f64 / (t - at) as f64;
        }
        self.base_tsc = t;
        self.base_real = r;
        self.refresh_at_real = r + REFRESH_NS;
    }

    /// Re-anchors when the last pair is older than [`REFRESH_NS`].
    pub fn tick(&mut self) {
        if self.tsc && clock::now_ns() >= self.refresh_at_real {
            self.refresh();
        }
    }

    /// A difference of two stamps in ns.
    #[inline]
    pub fn ns(&self, ticks: u64) -> u64 {
        if !self.tsc {
            return ticks;
        }
        (ticks as f64 * self.ns_per_tick).round() as u64
    }

    /// One stamp in CLOCK_REALTIME ns.
    #[inline]
    pub fn to_real(&self, stamp: u64) -> u64 {
        if !self.tsc {
            return stamp;
        }
        // In i64 and f64, which the CPU converts between in one instruction (i128 took
        // library calls, ~80 instructions a stamp on the writer thread): a TSC delta
        // fits in i64 for a century at any clock rate, and `as` saturates.
        let d = stamp.wrapping_sub(self.base_tsc) as i64;
        let ns = (d as f64 * self.ns_per_tick).round() as i64;
        self.base_real.saturating_add_signed(ns)
    }
}

impl Default for Converter {
    fn default() -> Self {
        Converter::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_only_with_the_kernels_tsc_clocksource_and_invariant_flags() {
        let good = "processor: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc rdtscp\n";
        assert!(usable("tsc\n", good));
        assert!(!usable("kvm-clock\n", good));
        assert!(!usable("tsc", "flags : fpu tsc constant_tsc\n"));
        assert!(!usable("tsc", ""));
    }

    #[test]
    fn conversion_is_linear_around_the_base_pair() {
        let c = Converter::with(1_000_000, 5_000_000_000, 0.5);
        assert_eq!(c.to_real(1_000_000), 5_000_000_000);
        assert_eq!(c.to_real(1_000_200), 5_000_000_100);
        assert_eq!(c.to_real(999_800), 4_999_999_900, "before the base too");
        assert_eq!(c.to_real(0), 4_999_500_000);
    }

    #[test]
    fn realtime_mode_passes_stamps_through() {
        assert_eq!(Converter::identity().to_real(123), 123);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_tsc_tracks_the_realtime_clock_here() {
        // Only where the kernel itself trusts the TSC.
        let cs = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        let ci = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if !usable(&cs, &ci) {
            return;
        }
        let (t0, r0) = pair();
        ANCHOR_TSC.store(t0, Ordering::Relaxed);
        ANCHOR_REAL.store(r0, Ordering::Relaxed);
        let mut c = Converter {
            tsc: true,
            base_tsc: 0,
            base_real: 0,
            ns_per_tick: 1.0,
            refresh_at_real: 0,
        };
        c.refresh();
        // A later stamp converts to a time between the clock reads that bracket it, give
        // or take the conversion's own error (a preemption only widens the bracket).
        let before = clock::now_ns();
        let s = rdtsc();
        let after = clock::now_ns();
        let got = c.to_real(s);
        let slack = 20_000;
        assert!(
            got + slack >= before && got <= after + slack,
            "{before} <= {got} <= {after}"
        );
    }
}
