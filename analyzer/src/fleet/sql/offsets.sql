-- Each host's clock offset, to put the collectives of every host on one timeline (the
-- aligned collectives of aligned.sqlpart move each host's times back by it). The ranks of
-- one collective leave it together (none can finish an all-reduce before the last one
-- arrives), so a host whose ends come later than the earliest end of each collective, on
-- average, has its clock ahead by that much. Ranks of one host share its clock; a job on
-- one host has no row (nothing to move). Collectives only one host ran do not count. The
-- small side of the join is written first (the side an engine that cannot spill a join
-- holds in memory): a row per collective. A row per host comes back.
SELECT x.host, CAST(SUM(x.end_ns - e.first_end) / COUNT(*) AS BIGINT) AS off_ns
FROM (
  SELECT comm, seq, MIN(end_ns) AS first_end
  FROM collectives WHERE job = {job}
  GROUP BY comm, seq
  HAVING MIN(host) < MAX(host)
) e
JOIN collectives x ON x.comm = e.comm AND x.seq = e.seq
WHERE x.job = {job}
GROUP BY x.host
ORDER BY x.host
