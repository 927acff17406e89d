use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::*;
use std::sync::Arc;
use std::time::Instant;

// usage: dfq query DIR SQLFILE | dfq schema DIR
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let spill = std::env::var("SPILL_DIR").unwrap_or("/tmp/engine-eval/spill-df".into());
    std::fs::create_dir_all(&spill)?;
    let rt = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(2 << 30)))
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Directories(vec![spill.into()])),
        )
        .build_arc()?;
    let cfg = SessionConfig::new().with_target_partitions(2);
    let ctx = SessionContext::new_with_config_rt(cfg, rt);
    let dir = &args[2];
    let t = Instant::now();
    ctx.register_parquet(
        "nccl_calls",
        &format!("{dir}/nccl_calls/"),
        ParquetReadOptions::default().table_partition_cols(vec![("rank".to_string(), DataType::Int64)]),
    )
    .await?;
    match args[1].as_str() {
        "query" => {
            let q = std::fs::read_to_string(&args[3])?;
            let batches = ctx.sql(&q).await?.collect().await?;
            let el = t.elapsed().as_secs_f64();
            println!("{}", pretty_format_batches(&batches)?);
            eprintln!("query: {el:.2}s");
        }
        "schema" => {
            println!("explicit: {:?}", ctx.table("nccl_calls").await?.schema().field_with_unqualified_name("rank")?);
            // what plain SQL DDL infers
            ctx.sql(&format!("CREATE EXTERNAL TABLE t2 STORED AS PARQUET LOCATION '{dir}/nccl_calls/'")).await?;
            println!("DDL no types: {}", ctx.table("t2").await?.schema());
        }
        _ => panic!("bad cmd"),
    }
    if let Ok(p) = std::env::var("PQ_FILE") {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let r = SerializedFileReader::new(std::fs::File::open(p)?)?;
        eprintln!("pq rows={}", r.metadata().file_metadata().num_rows());
    }
    Ok(())
}
