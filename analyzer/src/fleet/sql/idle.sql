-- Each rank's steady-state idle time by cause.
SELECT rank, cause, SUM(dur_ns) AS ns
FROM idle_gaps
WHERE job = {job} AND phase = 'steady'
GROUP BY rank, cause
ORDER BY rank, ns DESC
