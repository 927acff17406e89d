-- Where each rank's main thread (tid = pid) was since its last collective began: the place
-- in the user's code its Python samples show most often then (a rank that stopped is
-- found where it stopped, not in the exit handlers its last sample may show), with the
-- time of its latest sample there. Other threads' samples count only where the main
-- thread has none (a main-thread sample weighs a million).
WITH lastc AS (
  SELECT rank, MAX(start_ns) AS t FROM collectives WHERE job = {job} GROUP BY rank
),
main AS (
  SELECT rank, MIN(pid) AS pid FROM processes WHERE job = {job} GROUP BY rank
),
s AS (
  SELECT p.rank, p.file, p.line, p.function,
         SUM(CASE WHEN p.tid = m.pid THEN 1000000 ELSE 1 END) AS n, MAX(p.ts_ns) AS ts_ns
  FROM python_samples p
  JOIN lastc c ON p.rank = c.rank
  JOIN main m ON p.rank = m.rank
  WHERE p.job = {job} AND p.ts_ns >= c.t
  GROUP BY p.rank, p.file, p.line, p.function
),
best AS (
  SELECT rank, MAX(n) AS n FROM s GROUP BY rank
)
SELECT s.rank, MAX(s.ts_ns) AS ts_ns, MIN(s.file) AS file, MIN(s.line) AS line,
       MIN(s.function) AS function
FROM s JOIN best b ON s.rank = b.rank AND s.n = b.n
GROUP BY s.rank
ORDER BY s.rank
