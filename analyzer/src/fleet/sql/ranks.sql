-- One row per process of the job: its rank, how it ended, its steady state and steps, its
-- top finding (processes table, one row per trace).
SELECT rank, host, pid, steps, step_ns_median, steady_busy_pct, ended_how, ended_detail,
       ended_normal, damaged, top_finding, kernels
FROM processes
WHERE job = {job}
ORDER BY rank, host, pid
