//! What an engine is asked and answers with: the tables the queries read, the
//! [`Sql`] seam, result rows and the errors of a fleet analysis.

use serde_json::Value;

/// The tables the queries read.
pub const TABLES: &[&str] = &[
    "processes",
    "collectives",
    "nccl_calls",
    "findings",
    "idle_gaps",
    "python_samples",
];

/// One result row: column name to value (numbers, strings, null).
pub type Row = serde_json::Map<String, Value>;

/// What runs the SQL.
pub trait Sql {
    fn rows(&mut self, sql: &str) -> Result<Vec<Row>, FleetError>;
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{0}")]
    Dataset(String),
    #[error("query {query}: {message}")]
    Query { query: String, message: String },
    #[error("no job named {0:?} in the dataset (jobs: {1})")]
    NoJob(String, String),
}
