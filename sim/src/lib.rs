//! The simulator: a seeded disk, the workload generator, the lockstep runner
//! that holds the engine to the model, shrinking and trace files, and the
//! `ext4sim` command line.
//!
//! Dependencies inside the crate point one way: `run` drives a
//! [`target::Target`] through [`lockstep`]; `cli` and `report` sit on top;
//! the disk, the workload and the text forms know nothing of the runner.

// Unsafe only where the oracle calls the kernel and the heap is tuned; each
// block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod bench;
pub mod cli;
pub mod cpu_cost;
pub mod disk;
pub mod draws;
pub mod engine_target;
pub mod failure;
pub mod figure;
pub mod fuzz_body;
pub mod heap;
pub mod layout_run;
pub mod layout_svg;
pub mod lockstep;
pub mod memory;
pub mod mke2fs;
pub mod oracle;
pub mod panics;
pub mod report;
pub mod run;
pub mod scheduler;
pub mod shrink;
pub mod sim_time;
pub mod swarm;
pub mod target;
pub mod trace;
pub mod workload;
pub mod workloads;
