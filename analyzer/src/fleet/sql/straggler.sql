-- Who reaches each collective last. A collective is one (comm, seq) of the collectives
-- table (the same key on every rank, once per rank); only those every member of the
-- communicator reached are counted (a member: a rank seen on it at least once). Arrival is
-- when the rank's GPU started the collective's kernel. Per rank: how many times it was
-- last, and the time the others waited for it then (the sum over them of last arrival -
-- their arrival, over the number of others: the mean other rank's wait).
-- Times on one timeline across hosts (the aligned collectives of aligned.sqlpart: one
-- join of the big table with a row per collective). Otherwise aggregations only (no per-group distinct sets), so memory
-- stays that of the groups; times relative to the job's first arrival, so sums fit 64
-- bits; the last rank is the low 16 bits of the largest (time, rank + 1) packed in one
-- integer.
WITH c AS (
  SELECT rank, comm, seq, start_ns FROM {aligned} a
),
base AS (
  SELECT MIN(start_ns) AS t0 FROM c
),
members AS (
  SELECT comm, COUNT(DISTINCT rank) AS n FROM c GROUP BY comm
),
g AS (
  SELECT c.comm, c.seq, COUNT(*) AS arrivals,
         MAX((c.start_ns - b.t0) * 65536 + (c.rank + 1)) % 65536 - 1 AS last_rank,
         MAX(c.start_ns - b.t0) AS last_rel,
         SUM(c.start_ns - b.t0) AS sum_rel
  FROM c CROSS JOIN base b
  GROUP BY c.comm, c.seq
),
whole AS (
  SELECT g.last_rank, g.arrivals, g.last_rel, g.sum_rel
  FROM g JOIN members m ON g.comm = m.comm
  WHERE g.arrivals = m.n AND m.n > 1
)
SELECT last_rank AS rank, COUNT(*) AS times_last,
       SUM(CAST((arrivals * last_rel - sum_rel) / (arrivals - 1) AS BIGINT)) AS others_waited_ns,
       (SELECT COUNT(*) FROM whole) AS collectives
FROM whole
GROUP BY last_rank
ORDER BY times_last DESC, rank
