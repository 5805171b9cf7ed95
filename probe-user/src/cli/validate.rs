//! `probed validate FILE`: every problem of a configuration at once, nothing applied.
#[allow(clippy::wildcard_imports)]
use super::*;

/// Exit 0 with a summary, or 2 with one error per line.
pub(super) fn validate(file: &std::path::Path) -> ExitCode {
    match probed::config::Config::load(file) {
        Ok(config) => {
            println!(
                "ok: {} profiles, {} endpoints",
                config.profiles.len(),
                config.endpoint_count()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in errors.iter() {
                println!("{e}");
            }
            ExitCode::from(2)
        }
    }
}
