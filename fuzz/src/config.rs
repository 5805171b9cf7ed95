//! The configuration reader over arbitrary text: `Config::parse` either resolves a config or
//! returns errors that each render with a place, never panics.
use probed::config::Config;

pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, "fuzz.toml") {
        Ok(config) => {
            // A resolved config is usable: every endpoint has an address to probe.
            let n: usize = config.profiles.iter().map(|p| p.endpoints.len()).sum();
            assert_eq!(n, config.endpoint_count());
            for p in &config.profiles {
                for ep in &p.endpoints {
                    let _ = ep.socket_addr();
                }
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "an error list is never empty");
            let lines = text.split('\n').count();
            for e in errors.iter() {
                assert!(
                    e.line <= lines,
                    "error line {} past the end ({lines} lines): {e}",
                    e.line
                );
                assert!(!e.problem.is_empty(), "every error says what is wrong: {e:?}");
                let _ = e.to_string();
            }
        }
    }
}
