//! The trace model: trace files decoded into tables, and the set of traces a command was
//! given, with the environment files matched to the processes they cover.

pub mod env_files;
pub mod job;
pub mod load;
pub mod table;
pub mod trace;
