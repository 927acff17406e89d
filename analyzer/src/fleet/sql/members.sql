-- Each communicator's size as NCCL gave it, and how many of its ranks have a trace in the
-- job: a rank with no trace at all is a member that never showed up.
SELECT comm_id AS comm, MAX(comm_size) AS size, COUNT(DISTINCT comm_rank) AS seen
FROM nccl_calls
WHERE job = {job} AND comm_size > 0
GROUP BY comm_id
ORDER BY comm_id
