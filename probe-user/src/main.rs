//! The probed binary: daemon and command-line interface.
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
