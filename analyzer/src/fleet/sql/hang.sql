-- How far each rank got on each communicator: the highest sequence number whose kernel
-- its GPU started, beside the highest any rank reached. A rank behind the others on a
-- communicator never arrived at the next collective there, if it stopped: its last
-- collective on any communicator began before the first rank reached that next one. (A
-- rank that went on with other collectives was not stuck: a collective only some ranks
-- run, at start-up say, leaves it "behind" on that key alone.) Times across hosts are
-- compared on one timeline (the aligned collectives of aligned.sqlpart); how far a rank
-- got on its own is read from the table as it is.
WITH ac AS {aligned},
r AS (
  SELECT rank, comm, MAX(seq) AS reached, MAX(start_ns) AS last_start_ns
  FROM collectives WHERE job = {job}
  GROUP BY rank, comm
),
top AS (
  SELECT comm, MAX(reached) AS most, COUNT(*) AS ranks FROM r GROUP BY comm
),
first_arrival AS (
  SELECT comm, seq, MIN(start_ns) AS first_ns
  FROM ac
  GROUP BY comm, seq
),
last_any AS (
  SELECT rank, MAX(start_ns) AS last_ns FROM ac GROUP BY rank
)
SELECT r.comm, r.rank, r.reached, t.most, t.ranks, r.last_start_ns
FROM r
JOIN top t ON r.comm = t.comm
JOIN first_arrival f ON f.comm = r.comm AND f.seq = r.reached + 1
JOIN last_any a ON a.rank = r.rank
WHERE r.reached < t.most AND a.last_ns < f.first_ns
ORDER BY r.comm, r.reached, r.rank
