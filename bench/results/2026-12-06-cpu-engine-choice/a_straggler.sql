WITH g AS (
  SELECT comm_id, seq, MAX(start_ns) AS mx, COUNT(*) AS n
  FROM nccl_calls GROUP BY comm_id, seq
), nr AS (SELECT COUNT(DISTINCT rank) AS k FROM nccl_calls)
SELECT c.rank, COUNT(*) AS cnt
FROM nccl_calls c
JOIN g ON c.comm_id = g.comm_id AND c.seq = g.seq AND c.start_ns = g.mx
WHERE g.n = (SELECT k FROM nr)
GROUP BY c.rank
ORDER BY cnt DESC, c.rank
LIMIT 3
