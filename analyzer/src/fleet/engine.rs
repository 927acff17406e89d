//! The embedded engine: DataFusion over the dataset's Parquet files, in a memory pool of
//! a fixed size that spills sorts, joins and aggregations to disk when full.
//!
//! Why DataFusion (docs/dataset.md has the measurements): it is Rust (no C++ toolchain,
//! no second build system), it builds on the same Arrow/Parquet crates the exporter uses,
//! it reads Hive-partitioned directories as tables, and its memory pool bounds what a
//! query holds.

use super::rows::{FleetError, Row, Sql, TABLES};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// The partition columns, as the dataset writes them.
fn partition_cols() -> Vec<(String, DataType)> {
    vec![
        ("job".into(), DataType::Utf8),
        ("host".into(), DataType::Utf8),
        ("rank".into(), DataType::Int64),
        ("window".into(), DataType::Int64),
    ]
}

pub struct DataFusion {
    ctx: SessionContext,
    rt: tokio::runtime::Runtime,
}

fn df_err(e: impl std::fmt::Display) -> FleetError {
    FleetError::Query {
        query: String::new(),
        message: e.to_string(),
    }
}

impl DataFusion {
    /// The dataset at `root`, its tables registered; queries hold at most `memory`
    /// bytes, spilling to `spill` (a temporary directory when None); `workers` threads.
    pub fn open(
        root: &Path,
        memory: usize,
        spill: Option<&Path>,
        workers: usize,
    ) -> Result<DataFusion, FleetError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .enable_all()
            .build()
            .map_err(|e| FleetError::Dataset(format!("cannot start the engine's threads: {e}")))?;
        let mut b = RuntimeEnvBuilder::new().with_memory_pool(Arc::new(FairSpillPool::new(memory)));
        if let Some(dir) = spill {
            b = b.with_temp_file_path(dir);
        }
        let runtime = b.build_arc().map_err(df_err)?;
        let config = SessionConfig::new()
            .with_target_partitions(workers.max(1))
            .with_information_schema(false);
        let ctx = SessionContext::new_with_config_rt(config, runtime);
        for t in TABLES {
            let dir = root.join(t);
            if !dir.is_dir() {
                return Err(FleetError::Dataset(format!(
                    "{}: no {t} table (a dataset written by an older gputrace, or not a dataset)",
                    root.display()
                )));
            }
            let opts = ParquetReadOptions::default()
                .table_partition_cols(partition_cols())
                .file_extension(".parquet");
            let url = format!("{}/", dir.display());
            rt.block_on(ctx.register_parquet(*t, &url, opts))
                .map_err(|e| FleetError::Dataset(format!("{}: {e}", dir.display())))?;
        }
        Ok(DataFusion { ctx, rt })
    }
}

/// One column's value at `i` as JSON: integers and floats as numbers, the rest as text.
fn value(a: &dyn Array, i: usize) -> Value {
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).into(),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i).into(),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i).into(),
        DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i).into(),
        DataType::Float64 => a.as_primitive::<Float64Type>().value(i).into(),
        DataType::Boolean => a.as_boolean().value(i).into(),
        _ => match ArrayFormatter::try_new(a, &FormatOptions::default()) {
            Ok(f) => Value::String(f.value(i).to_string()),
            Err(_) => Value::Null,
        },
    }
}

fn rows_of(batches: &[RecordBatch]) -> Vec<Row> {
    let mut out = Vec::new();
    for b in batches {
        let schema = b.schema();
        for i in 0..b.num_rows() {
            let mut r = Row::new();
            for (c, f) in b.columns().iter().zip(schema.fields()) {
                r.insert(f.name().clone(), value(c.as_ref(), i));
            }
            out.push(r);
        }
    }
    out
}

impl Sql for DataFusion {
    fn rows(&mut self, sql: &str) -> Result<Vec<Row>, FleetError> {
        let ctx = &self.ctx;
        let batches = self
            .rt
            .block_on(async { ctx.sql(sql).await?.collect().await })
            .map_err(df_err)?;
        Ok(rows_of(&batches))
    }
}
