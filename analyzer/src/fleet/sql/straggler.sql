-- Who reaches each collective last. A collective is one (comm, seq) of the collectives
-- table (the same key on every rank); only those every member of the communicator reached
-- are counted (a member: a rank seen on it at least once). Arrival is when the rank's GPU
-- started the collective's kernel. Per rank: how many times it was last, and the time the
-- others waited for it then (the sum over them of last arrival - their arrival, over the
-- number of others: the mean other rank's wait). Differences only: no sum of raw times,
-- which would overflow 64 bits.
WITH c AS (
  SELECT rank, comm, seq, start_ns FROM collectives WHERE job = {job}
),
members AS (
  SELECT comm, COUNT(DISTINCT rank) AS n FROM c GROUP BY comm
),
whole AS (
  SELECT c.comm, c.seq, MAX(c.start_ns) AS last_ns, COUNT(*) AS arrivals
  FROM c JOIN members m ON c.comm = m.comm
  GROUP BY c.comm, c.seq, m.n
  HAVING COUNT(DISTINCT c.rank) = m.n AND m.n > 1
),
waits AS (
  SELECT w.comm, w.seq, MAX(w.last_ns) AS last_ns,
         CAST(SUM(w.last_ns - c.start_ns) / (MAX(w.arrivals) - 1) AS BIGINT) AS wait_ns
  FROM c JOIN whole w ON c.comm = w.comm AND c.seq = w.seq
  GROUP BY w.comm, w.seq
),
last_ AS (
  SELECT c.rank, x.wait_ns
  FROM c JOIN waits x ON c.comm = x.comm AND c.seq = x.seq AND c.start_ns = x.last_ns
)
SELECT rank, COUNT(*) AS times_last, SUM(wait_ns) AS others_waited_ns,
       (SELECT COUNT(*) FROM whole) AS collectives
FROM last_
GROUP BY rank
ORDER BY times_last DESC, rank
