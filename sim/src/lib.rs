//! The simulator: a seeded disk, the workload generator, the lockstep runner
//! that holds the engine to the model, shrinking and trace files, and the
//! `ext4sim` command line.

pub mod disk;
pub mod lockstep;
pub mod shrink;
pub mod trace;
pub mod workload;
pub mod driver;
pub mod report;
pub mod cli;
pub mod fuzz_body;
pub mod bench;
pub mod engine_target;
pub mod layout;
pub mod faults;
pub mod oracle;
pub mod scheduler;
pub mod heap;
