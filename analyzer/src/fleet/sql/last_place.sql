-- Where each rank's Python was last seen: its last stack sample's place in the user's code.
WITH s AS (
  SELECT rank, ts_ns, file, line, function,
         ROW_NUMBER() OVER (PARTITION BY rank ORDER BY ts_ns DESC) AS n
  FROM python_samples
  WHERE job = {job}
)
SELECT rank, ts_ns, file, line, function FROM s WHERE n = 1 ORDER BY rank
