-- Each rank's findings: the largest share of its steady state each finding put at stake.
SELECT rank, id, MAX(CAST(at_stake_pct AS DOUBLE)) AS pct
FROM findings
WHERE job = {job}
GROUP BY rank, id
ORDER BY id, rank
