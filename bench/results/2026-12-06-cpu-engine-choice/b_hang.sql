WITH m AS (
  SELECT comm_id, rank, MAX(seq) AS max_seq FROM nccl_calls GROUP BY comm_id, rank
), cm AS (
  SELECT comm_id, MAX(max_seq) AS comm_max FROM m GROUP BY comm_id
)
SELECT m.comm_id, m.rank, m.max_seq, cm.comm_max
FROM m JOIN cm ON m.comm_id = cm.comm_id
WHERE m.max_seq < cm.comm_max
ORDER BY m.comm_id, m.rank
