//! An ext4 implementation over a [`device::BlockDevice`], held to `ext4-model`
//! in lockstep by the simulator.

pub mod device;
