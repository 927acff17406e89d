//! The verdict sentence once every process is analysed: the top finding's sentence
//! qualified by what else the user must know first (a damaged trace, a process that did
//! not end normally, a loop that is a small part of the run).

use super::out::id::FindingId;
use super::out::{Finding, ProcessReport};
use super::units::{dur, pct};
use super::{damage, endings, phases};

/// The verdict, with the loss of any trace stated: "no GPU activity" only when nothing
/// was lost.
pub(crate) fn damage(verdict: String, procs: &[ProcessReport]) -> String {
    let hit: Vec<&ProcessReport> = procs.iter().filter(|p| p.damage.is_some()).collect();
    let what = match hit[..] {
        [] => return verdict,
        [p] => {
            let brief = p.damage.as_ref().map(|d| d.brief.as_str()).unwrap_or("");
            if procs.len() == 1 {
                brief.to_string()
            } else {
                format!("{brief} for {}", p.label)
            }
        }
        _ => format!(
            "{} of {} traces damaged or cut short (see their notes)",
            hit.len(),
            procs.len()
        ),
    };
    if verdict == damage::NO_GPU {
        format!("No GPU activity in what could be read: {what}")
    } else {
        format!("{verdict}; {what}: the report covers what could be read")
    }
}

/// The verdict, led by what makes the trace's GPU figures untrustworthy, so the user
/// knows before reading them (a hang's verdict is left as it is):
/// - GPU times the host's synchronisations contradict (`env_bad_records` critical: device
///   syncs that returned while a recorded kernel still ran): "The trace's GPU times
///   contradict the host's synchronisations (48 of 164 cudaDeviceSynchronize calls returned
///   while a recorded kernel still ran): kernel durations and idle time are not to be
///   trusted.";
/// - the collector's losses where they are a quarter of the records or more
///   (`env_dropped_records` critical): "The trace lost 76% of its records (...): GPU work
///   is undercounted, so the idle shares and causes below are not to be trusted; re-record
///   with more buffer space (...)."
pub(crate) fn untrusted(
    verdict: String,
    top: Option<FindingId>,
    procs: &[ProcessReport],
    all: &[Finding],
) -> String {
    if top == Some(FindingId::Hang) {
        return verdict;
    }
    // The process a finding is about, named where the report has several.
    let owner = |f: &Finding| {
        f.process
            .and_then(|i| procs.get(i))
            .filter(|_| procs.len() > 1)
            .map(|p| p.label.as_str())
    };
    let mut leads: Vec<String> = Vec::new();
    if let Some(f) = all
        .iter()
        .find(|f| f.id == FindingId::EnvBadRecords && f.metrics.contains_key("syncs_contradicted"))
    {
        let whose = owner(f).map_or("The trace's".to_string(), |l| format!("{l}'s"));
        let n = |k: &str| f.metrics.get(k).copied().unwrap_or(0.0);
        leads.push(format!(
            "{whose} GPU times contradict the host's synchronisations ({:.0} of {:.0} cudaDeviceSynchronize calls returned while a recorded kernel still ran): kernel durations and idle time are not to be trusted.",
            n("syncs_contradicted"),
            n("syncs")
        ));
    }
    let lossy: Vec<(&Finding, f64)> = all
        .iter()
        .filter(|f| f.id == FindingId::EnvDroppedRecords)
        .filter_map(|f| Some((f, *f.metrics.get("dropped_pct")?)))
        .filter(|(_, pct)| *pct >= super::findings::DROPPED_CRITICAL_PCT)
        .collect();
    let lost = match lossy[..] {
        [] => None,
        [(f, pct)] => {
            let whose = owner(f).map_or("The trace".to_string(), |l| format!("{l}'s trace"));
            Some(format!("{whose} lost {pct:.0}% of its records"))
        }
        _ => Some(format!(
            "{} of {} traces lost a quarter of their records or more",
            lossy.len(),
            procs.len()
        )),
    };
    if let Some(lost) = lost {
        leads.push(format!(
            "{lost} (the collector ran out of buffer space or fell behind): GPU work is undercounted, so the idle shares and causes below are not to be trusted; re-record with more buffer space (GPUTRACE_BUFFER_POOL_MB) or a shorter window."
        ));
    }
    leads.push(verdict);
    leads.join(" ")
}

/// The verdict, led by how its processes ended where one did not end normally:
/// "The process exited with status 1 [after cudaMalloc of 1.0 GiB failed with
/// cudaErrorMemoryAllocation at +9.5 s]. <verdict>"; several: "2 of 8 processes did not end
/// normally: rank 3 was killed by SIGSEGV, rank 5 exited with status 1. <verdict>".
/// A hang's verdict names the end itself ("the job ended by SIGTERM at +1.2 s").
pub(crate) fn endings(verdict: String, top: Option<FindingId>, procs: &[ProcessReport]) -> String {
    if top == Some(FindingId::Hang) {
        return verdict;
    }
    let odd: Vec<(&str, String)> = procs
        .iter()
        .filter_map(|p| {
            let what = endings::phrase(&p.ended)?;
            // What it most likely died of, when a call that ends processes failed last.
            let what = match &p.fatal_call {
                Some(fc) => format!("{what} after {}", fc.phrase()),
                None => what,
            };
            Some((p.label.as_str(), what))
        })
        .collect();
    let lead = match odd[..] {
        [] => return verdict,
        [(_, ref what)] if procs.len() == 1 => format!("The process {what}"),
        [(label, ref what)] => format!("{label} {what}"),
        _ => {
            let shown: Vec<String> = odd
                .iter()
                .take(4)
                .map(|(l, w)| format!("{l} {w}"))
                .collect();
            let more = if odd.len() > 4 {
                format!(", and {} more", odd.len() - 4)
            } else {
                String::new()
            };
            format!(
                "{} of {} processes did not end normally: {}{more}",
                odd.len(),
                procs.len(),
                shown.join(", ")
            )
        }
    };
    format!("{lead}. {verdict}")
}

/// The verdict, with the whole run after it when the loop it diagnoses is a small part
/// of it (else with the part that keeps interrupting the loop, when that is a tenth of
/// its time or more): "<verdict> (the loop is 12% of the 22.9 s run: compilation 74% (16.9 s, 98
/// times), loop 12% (2.7 s), start-up 9% (2.1 s))". One process only (several: each
/// process's run is in its section); a hang's verdict is about the end, left as it is.
pub(crate) fn phases(verdict: String, top: Option<FindingId>, procs: &[ProcessReport]) -> String {
    let [p] = procs else {
        return verdict;
    };
    let Some(r) = &p.run else {
        return verdict;
    };
    let looped = r.time(phases::Kind::Loop);
    if top == Some(FindingId::Hang) || looped == 0 {
        return verdict;
    }
    if looped * 2 >= r.span_ns {
        // The loop is most of the run: name what keeps interrupting it, when that is
        // a tenth of its time or more.
        return match r.periodic.first().filter(|p| p.pct_of_loop >= 10.0) {
            Some(p) => format!("{verdict} ({})", p.short_words()),
            None => verdict,
        };
    }
    format!(
        "{verdict} (the loop is {} of the {} run: {})",
        phases::share_words(pct(looped, r.span_ns)),
        dur(r.span_ns),
        r.words(3)
    )
}

/// The report's verdict over processes that are not one job's ranks: each process with
/// its top finding ("healthy" without one); each has its own verdict in its section.
pub(crate) fn unrelated(procs: &[ProcessReport]) -> String {
    let each: Vec<String> = procs
        .iter()
        .take(4)
        .map(|p| match p.top_finding {
            Some(id) => format!("{} {id}", p.label),
            None if p.devices.is_empty() => format!("{} no GPU activity", p.label),
            None => format!("{} healthy", p.label),
        })
        .collect();
    let more = if procs.len() > 4 {
        format!(", and {} more", procs.len() - 4)
    } else {
        String::new()
    };
    format!(
        "{} processes that are not one job's ranks, each with its own verdict below: {}{more}",
        procs.len(),
        each.join(", ")
    )
}
