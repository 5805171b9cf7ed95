//! The node's ephemeral port settings, as they concern probe source ports: the live
//! `ip_local_port_range` (the kernel's own choice of source ports must not land in the probe
//! range, or a connection's reply could be taken for a probe's) and `ip_local_reserved_ports`,
//! where the probe range is reserved while probed runs so that no local socket is given one of
//! its ports. Both are per network namespace.
use std::path::Path;

const RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
const RESERVED: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

/// The kernel's ephemeral port range, from `ip_local_port_range`.
pub fn local_port_range() -> std::io::Result<(u16, u16)> {
    parse_range(&std::fs::read_to_string(RANGE)?)
        .ok_or_else(|| std::io::Error::other(format!("{RANGE}: unexpected content")))
}

fn parse_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// The probe range reserved in `ip_local_reserved_ports` for as long as this lives; what was
/// there before is put back when it is dropped.
pub struct Reservation {
    before: String,
}

impl Reservation {
    /// Adds `first..=last` to the reserved ports.
    pub fn take(first: u16, last: u16) -> std::io::Result<Reservation> {
        Self::take_at(Path::new(RESERVED), first, last)
    }

    fn take_at(path: &Path, first: u16, last: u16) -> std::io::Result<Reservation> {
        let before = std::fs::read_to_string(path)?.trim().to_string();
        let ours = format!("{first}-{last}");
        let with = if before.is_empty() {
            ours
        } else {
            format!("{before},{ours}")
        };
        std::fs::write(path, with)?;
        Ok(Reservation { before })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // An empty write needs a newline to be taken as "no ports".
        let _ = std::fs::write(RESERVED, format!("{}\n", self.before));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_port_range() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("garbage"), None);
    }
}
