//! One worker per core over a list (the traces of a multi-rank job): results come back
//! in input order, whatever order the workers finish in.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How many workers to use: `GPUTRACE_THREADS` if set (1 = everything on the calling
/// thread), else the cores this process may run on.
pub fn workers() -> usize {
    gputrace_format::settings::Values::from_env()
        .0
        .threads
        .map(|n| n as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `f(i, &items[i])` for every item, on up to `workers` threads; the results in order.
pub fn map<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let n = workers.min(items.len());
    if n <= 1 {
        return items.iter().enumerate().map(|(i, x)| f(i, x)).collect();
    }
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(x) = items.get(i) else { break };
                let r = f(i, x);
                out.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    out.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every item was taken by a worker"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_input_order_with_any_worker_count() {
        let v: Vec<u64> = (0..100).collect();
        for w in [1, 2, 7, 200] {
            let r = map(&v, w, |i, x| {
                // Uneven work so that workers finish out of order.
                std::thread::sleep(std::time::Duration::from_micros((x % 7) * 50));
                (i as u64) * 1000 + x
            });
            assert_eq!(
                r,
                v.iter().map(|x| x * 1001).collect::<Vec<_>>(),
                "workers {w}"
            );
        }
        assert!(map(&[] as &[u8], 4, |_, _| 0).is_empty());
    }
}
