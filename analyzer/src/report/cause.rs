//! Why a GPU sat idle: the causes an idle piece is charged to (their ids are the
//! findings' ids, or an unattributed cause's name). A leaf: the idle pass, the host
//! samples and the findings all name causes.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    DataStarvation = 0,
    PageableMemcpy = 1,
    SyncMemcpy = 2,
    ImplicitSync = 3,
    LaunchBound = 4,
    KernelFragmentation = 5,
    /// Unattributed: the next work was queued but the GPU did not run it.
    QueuedWait = 6,
    /// Unattributed: a host thread was in a CUDA call of no telling kind.
    OtherCall = 7,
    /// Unattributed: the collector was blind.
    NotObserved = 8,
    /// The feeding thread was on a CPU (or waiting for one) through a quiet stretch:
    /// host-side computing, measured by the host samples (host.rs).
    CpuBound = 9,
}

pub const NCAUSE: usize = 10;

impl Cause {
    pub const ALL: [Cause; NCAUSE] = [
        Cause::DataStarvation,
        Cause::PageableMemcpy,
        Cause::SyncMemcpy,
        Cause::ImplicitSync,
        Cause::LaunchBound,
        Cause::KernelFragmentation,
        Cause::QueuedWait,
        Cause::OtherCall,
        Cause::NotObserved,
        Cause::CpuBound,
    ];
    /// The cause's name in the breakdown: its finding's id, or an unattributed cause's name.
    pub fn id(self) -> &'static str {
        match self {
            Cause::QueuedWait => "queued_work_waiting",
            Cause::OtherCall => "other_cuda_call",
            Cause::NotObserved => "not_observed",
            // The others are named by their finding (`FindingId::about` says which).
            c => c.finding().map_or("", |f| f.as_str()),
        }
    }
    /// Causes that name a finding; the others are reported as unattributed.
    pub fn attributed(self) -> bool {
        self.finding().is_some()
    }
}
