# Fallback DuckDB runner (same engine version 2.0.1 as crate duckdb 1.20001.0 bundles),
# same SQL and settings as duck/src/main.rs. usage: duck_py.py gen DIR NRANKS | query DIR SQLFILE | schema DIR | noop
import sys, time, duckdb
tmp = "/tmp/engine-eval/spill-duck"
con = duckdb.connect()
con.execute(f"SET memory_limit='2GB'; SET temp_directory='{tmp}'; SET threads=2; SET preserve_insertion_order=false;")
cmd = sys.argv[1]
if cmd == "gen":
    d, n = sys.argv[2], int(sys.argv[3])
    t = time.time()
    con.execute(f"""COPY (
      SELECT 'c' || c AS comm_id, s AS seq,
        ['AllReduce','AllGather','ReduceScatter','Broadcast'][(s % 4) + 1] AS op,
        ((c * 250000 + s) * 100000 +
          CASE WHEN hash(c, s) % 10 < 6 AND r = 17 THEN 64017
               ELSE (hash(c, s, r) % 1000) * 64 + r END)::BIGINT AS start_ns,
        ((c * 250000 + s) * 100000 + 70000 + (hash(r, s) % 20000))::BIGINT AS end_ns,
        r AS rank
      FROM range({n}) t1(r), range(4) t2(c), range(250000) t3(s)
      WHERE NOT (r = 42 AND c = 3 AND s >= 200000)
    ) TO '{d}/nccl_calls' (FORMAT parquet, PARTITION_BY (rank), FILENAME_PATTERN 'part-{{i}}', OVERWRITE_OR_IGNORE)""")
    print(f"gen: {time.time()-t:.2f}s", file=sys.stderr)
elif cmd == "query":
    d, q = sys.argv[2], open(sys.argv[3]).read()
    t = time.time()
    con.execute(f"CREATE VIEW nccl_calls AS SELECT * FROM read_parquet('{d}/nccl_calls/*/*.parquet', hive_partitioning = true)")
    rows = con.execute(q).fetchall()
    el = time.time() - t
    for r in rows: print(" | ".join(map(str, r)))
    print(f"query: {el:.2f}s", file=sys.stderr)
elif cmd == "schema":
    d = sys.argv[2]
    print(con.execute(f"DESCRIBE SELECT * FROM read_parquet('{d}/nccl_calls/*/*.parquet', hive_partitioning = true)").fetchall())
elif cmd == "noop":
    print(con.execute("SELECT 42").fetchall())
