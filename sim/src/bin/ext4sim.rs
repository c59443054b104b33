//! `ext4sim`: seeded lockstep simulation of the ext4 model and engine.

fn main() -> std::process::ExitCode {
    ext4_sim::cli::main_with(ext4_sim::engine_target::EngineFactory)
}
