-- Where each rank's Python was last seen: its last stack sample's place in the user's code
-- (the latest sample per rank, joined back to its row).
WITH m AS (
  SELECT rank, MAX(ts_ns) AS ts FROM python_samples WHERE job = {job} GROUP BY rank
)
SELECT p.rank, p.ts_ns, MIN(p.file) AS file, MIN(p.line) AS line, MIN(p.function) AS function
FROM m JOIN python_samples p ON p.rank = m.rank AND p.ts_ns = m.ts
WHERE p.job = {job}
GROUP BY p.rank, p.ts_ns
ORDER BY p.rank
