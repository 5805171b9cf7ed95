//! The agent's answer, read as HAProxy's agent-check reads it: one line, ended by the first CR
//! or LF, of words separated by spaces, tabs or commas, in any order and any case; a `#`
//! starts a description that runs to the end of the line. A word is a health (`up`; `down`,
//! `fail`, `stopped`), an admin state (`ready`, `drain`, `maint`), a weight in percent of the
//! configured one (`75%`) or a connection limit (`maxconn:N`, which probed has no use for and
//! reads past). Of several words of one kind, the last counts. A word of none of these kinds
//! is kept as the first oddity and changes nothing.
use std::fmt;

/// The longest answer read: a line not ended within it is ignored, as one cut short is.
pub const MAX_LINE: usize = 1024;

/// The largest relative weight taken, in percent (HAProxy's bound against overflow).
pub const MAX_PERCENT: u16 = 25_600;

/// What the agent says of the backend's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentHealth {
    Up,
    /// `down`, `fail` or `stopped`: the backend is down whatever its health check says.
    Down(DownWord),
}

/// Which word said down (they act alike; the word is shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownWord {
    Down,
    Fail,
    Stopped,
}

/// What the agent sets the backend's admin state to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentAdmin {
    /// Cancels a drain or maintenance the agent set.
    Ready,
    /// No new traffic; flows already on it stay where the data path can keep them.
    Drain,
    /// Out of service: no traffic, its health check stops (the agent goes on).
    Maint,
}

/// One parsed agent line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentReply {
    pub health: Option<AgentHealth>,
    pub admin: Option<AgentAdmin>,
    /// A relative weight, in percent of the configured weight (at most `MAX_PERCENT`).
    pub percent: Option<u16>,
    /// The first word that meant nothing (or a weight written wrong), kept to be shown.
    pub oddity: Option<String>,
    /// The text after `#`, trimmed.
    pub description: String,
}

impl AgentReply {
    /// Reads the line at the start of `bytes`; None when no CR or LF ends it there.
    pub fn parse(bytes: &[u8]) -> Option<AgentReply> {
        let end = bytes.iter().position(|b| *b == b'\n' || *b == b'\r')?;
        let line = String::from_utf8_lossy(&bytes[..end]);
        let (words, description) = match line.split_once('#') {
            Some((words, rest)) => (words, rest.trim()),
            None => (&line[..], ""),
        };
        let mut reply = AgentReply {
            description: description.to_string(),
            ..AgentReply::default()
        };
        for word in words.split([' ', '\t', ',']).filter(|w| !w.is_empty()) {
            reply.take(word);
        }
        Some(reply)
    }

    fn take(&mut self, word: &str) {
        let lower = word.to_ascii_lowercase();
        match lower.as_str() {
            "up" => self.health = Some(AgentHealth::Up),
            "down" => self.health = Some(AgentHealth::Down(DownWord::Down)),
            "fail" => self.health = Some(AgentHealth::Down(DownWord::Fail)),
            "stopped" => self.health = Some(AgentHealth::Down(DownWord::Stopped)),
            "ready" => self.admin = Some(AgentAdmin::Ready),
            "drain" => self.admin = Some(AgentAdmin::Drain),
            "maint" => self.admin = Some(AgentAdmin::Maint),
            w if w.starts_with("maxconn:") => {}
            w if w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('%') => match percent(w) {
                Some(p) => self.percent = Some(p),
                None => self.odd(word),
            },
            _ => self.odd(word),
        }
    }

    fn odd(&mut self, word: &str) {
        if self.oddity.is_none() {
            self.oddity = Some(word.to_string());
        }
    }
}

/// `N%` with nothing after the sign; N saturates at `MAX_PERCENT`.
fn percent(word: &str) -> Option<u16> {
    let digits = word.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(u16::try_from(value.min(u64::from(MAX_PERCENT))).unwrap_or(MAX_PERCENT))
}

impl AgentHealth {
    pub fn word(self) -> &'static str {
        match self {
            AgentHealth::Up => "up",
            AgentHealth::Down(DownWord::Down) => "down",
            AgentHealth::Down(DownWord::Fail) => "fail",
            AgentHealth::Down(DownWord::Stopped) => "stopped",
        }
    }
}

impl AgentAdmin {
    pub fn word(self) -> &'static str {
        match self {
            AgentAdmin::Ready => "ready",
            AgentAdmin::Drain => "drain",
            AgentAdmin::Maint => "maint",
        }
    }
}

impl fmt::Display for AgentReply {
    /// The words that count, in a fixed order: `down drain 50% # disk full`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = Vec::new();
        words.extend(self.health.map(|h| h.word().to_string()));
        words.extend(self.admin.map(|a| a.word().to_string()));
        words.extend(self.percent.map(|p| format!("{p}%")));
        if let Some(o) = &self.oddity {
            words.push(format!("(unknown word {o:?})"));
        }
        if words.is_empty() {
            words.push("(no words)".to_string());
        }
        write!(f, "{}", words.join(" "))?;
        if !self.description.is_empty() {
            write!(f, " # {}", self.description)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> AgentReply {
        AgentReply::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn words_of_each_kind_in_any_order_and_case() {
        let r = parse("DRAIN, 75%\tdown\n");
        assert_eq!(r.health, Some(AgentHealth::Down(DownWord::Down)));
        assert_eq!(r.admin, Some(AgentAdmin::Drain));
        assert_eq!(r.percent, Some(75));
        assert_eq!(r.oddity, None);
        let r = parse("Up Ready 100%\r\n");
        assert_eq!(
            (r.health, r.admin, r.percent),
            (Some(AgentHealth::Up), Some(AgentAdmin::Ready), Some(100))
        );
        assert_eq!(parse("stopped\n").health, Some(AgentHealth::Down(DownWord::Stopped)));
        assert_eq!(parse("fail\n").health, Some(AgentHealth::Down(DownWord::Fail)));
        assert_eq!(parse("maint\n").admin, Some(AgentAdmin::Maint));
    }

    #[test]
    fn the_last_word_of_a_kind_counts() {
        let r = parse("down up 10% 20% drain ready\n");
        assert_eq!(
            (r.health, r.admin, r.percent),
            (Some(AgentHealth::Up), Some(AgentAdmin::Ready), Some(20))
        );
    }

    #[test]
    fn a_line_needs_its_end() {
        assert_eq!(AgentReply::parse(b"up"), None);
        assert_eq!(AgentReply::parse(b""), None);
        // Only the first line counts.
        assert_eq!(parse("up\ndown\n").health, Some(AgentHealth::Up));
        assert_eq!(parse("\n"), AgentReply::default());
    }

    #[test]
    fn the_description_follows_a_sharp() {
        let r = parse("fail # disk full, read-only\n");
        assert_eq!(r.health, Some(AgentHealth::Down(DownWord::Fail)));
        assert_eq!(r.description, "disk full, read-only");
        assert_eq!(r.to_string(), "fail # disk full, read-only");
        // Words after the sharp are not read.
        assert_eq!(parse("up #down\n").health, Some(AgentHealth::Up));
    }

    #[test]
    fn weights_are_whole_percentages_and_saturate() {
        assert_eq!(parse("0%\n").percent, Some(0));
        assert_eq!(parse("150%\n").percent, Some(150));
        assert_eq!(parse("99999999999999999999%\n").percent, Some(MAX_PERCENT));
        for bad in ["5%x", "5.5%", "5%%"] {
            let r = parse(&format!("{bad}\n"));
            assert_eq!(r.percent, None, "{bad}");
            assert_eq!(r.oddity.as_deref(), Some(bad));
        }
        // A bare number is no weight (HAProxy reads absolute weights only from its CLI).
        assert_eq!(parse("50\n").percent, None);
    }

    #[test]
    fn unknown_words_and_maxconn_change_nothing() {
        let r = parse("hello maxconn:30 world\n");
        assert_eq!((r.health, r.admin, r.percent), (None, None, None));
        assert_eq!(r.oddity.as_deref(), Some("hello"));
        assert_eq!(r.to_string(), "(unknown word \"hello\")");
    }
}
