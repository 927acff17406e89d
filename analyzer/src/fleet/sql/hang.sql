-- How far each rank got on each communicator: the highest sequence number whose kernel
-- its GPU started, beside the highest any rank reached. A rank behind the others on a
-- communicator never arrived at the next collective there.
WITH r AS (
  SELECT rank, comm, MAX(seq) AS reached, MAX(start_ns) AS last_start_ns
  FROM collectives WHERE job = {job}
  GROUP BY rank, comm
),
top AS (
  SELECT comm, MAX(reached) AS most, COUNT(*) AS ranks FROM r GROUP BY comm
)
SELECT r.comm, r.rank, r.reached, t.most, t.ranks, r.last_start_ns
FROM r JOIN top t ON r.comm = t.comm
WHERE r.reached < t.most
ORDER BY r.comm, r.reached, r.rank
