//! Log lines on standard error, in the form where they end up: under systemd, journald adds
//! the time and reads the level from a `<N>` prefix (sd-daemon(3)), so the line carries neither
//! a timestamp nor a word for the level; on a terminal, a UTC timestamp and the level; with
//! `--log-format json`, one JSON object per line for log shippers. `PROBED_LOG` sets the level.
use std::io::Write;

use clap::ValueEnum;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `journal` when standard error goes to the journal (systemd sets `JOURNAL_STREAM`), else
    /// `text`.
    Auto,
    /// `2026-12-02T01:02:03.456Z warn: message`.
    Text,
    /// `<4>message`: journald takes the priority from the prefix and adds the time itself.
    Journal,
    /// `{"ts":"2026-12-02T01:02:03.456Z","level":"warn","target":"probed::dns","msg":"..."}`.
    Json,
}

impl LogFormat {
    /// `Auto` decided from the environment.
    fn resolve(self) -> LogFormat {
        match self {
            LogFormat::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => LogFormat::Journal,
            LogFormat::Auto => LogFormat::Text,
            other => other,
        }
    }
}

/// Installs the logger; `PROBED_LOG=trace|debug|info|warn|error` sets the level (info).
pub fn install(format: LogFormat) {
    let level = match std::env::var("PROBED_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("trace") => log::LevelFilter::Trace,
        Ok("warn") => log::LevelFilter::Warn,
        Ok("error") => log::LevelFilter::Error,
        _ => log::LevelFilter::Info,
    };
    let logger = StderrLog {
        level,
        format: format.resolve(),
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(level);
    }
}

struct StderrLog {
    level: log::LevelFilter,
    format: LogFormat,
}

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let line = render(self.format, r.level(), r.target(), &r.args().to_string(), now_unix_ms());
            // One write per line, so lines of two threads never interleave.
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One log line, its newline included. A message's own newlines stay inside the line (JSON
/// escapes them; the other forms indent the continuation, so journald keeps it one entry).
pub fn render(format: LogFormat, level: log::Level, target: &str, msg: &str, unix_ms: u64) -> String {
    let word = level.as_str().to_ascii_lowercase();
    match format {
        LogFormat::Json => {
            let v = serde_json::json!({ "ts": rfc3339(unix_ms), "level": word, "target": target, "msg": msg });
            format!("{v}\n")
        }
        LogFormat::Journal => format!("<{}>{}\n", priority(level), msg.replace('\n', "\n  ")),
        LogFormat::Text | LogFormat::Auto => {
            format!("{} {word}: {}\n", rfc3339(unix_ms), msg.replace('\n', "\n  "))
        }
    }
}

/// syslog priorities, as journald reads them from a line's prefix.
fn priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

pub(crate) use probed::calendar::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-02T01:02:03.456Z
    const AT: u64 = 1_796_173_323_456;

    #[test]
    fn each_format_renders_one_line() {
        use log::Level::{Error, Info, Warn};
        assert_eq!(
            render(LogFormat::Journal, Warn, "probed::dns", "no answer", AT),
            "<4>no answer\n"
        );
        assert_eq!(render(LogFormat::Journal, Error, "probed", "gone", AT), "<3>gone\n");
        assert_eq!(
            render(LogFormat::Text, Info, "probed", "two\nlines", AT),
            "2026-12-02T01:02:03.456Z info: two\n  lines\n"
        );
        let json = render(LogFormat::Json, Warn, "probed::dns", "a \"quoted\"\nline", AT);
        assert_eq!(json.matches('\n').count(), 1, "{json}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["ts"], "2026-12-02T01:02:03.456Z");
        assert_eq!(v["level"], "warn");
        assert_eq!(v["target"], "probed::dns");
        assert_eq!(v["msg"], "a \"quoted\"\nline");
    }
}
