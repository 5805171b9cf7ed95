//! The node's ephemeral port settings, as they concern probe source ports: the live
//! `ip_local_port_range` (the kernel's own choice of source ports must not land in the probe
//! range, or a connection's reply could be taken for a probe's) and `ip_local_reserved_ports`,
//! where the probe range is reserved while probed runs so that no local socket is given one of
//! its ports. Both are per network namespace.
use std::{
    fmt,
    fs::{File, OpenOptions},
    os::unix::fs::FileExt,
    path::Path,
};

const RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
const RESERVED: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";
/// The longest `ip_local_reserved_ports` can print: every other port alone, "65535," each.
const RESERVED_MAX_TEXT: usize = 32_768 * 6 + 1;

/// The kernel's ephemeral port range, from `ip_local_port_range`.
pub fn local_port_range() -> std::io::Result<(u16, u16)> {
    parse_range(&std::fs::read_to_string(RANGE)?)
        .ok_or_else(|| std::io::Error::other(format!("{RANGE}: unexpected content")))
}

fn parse_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// A set of ports as `ip_local_reserved_ports` lists it (`1000,8080-8090`): inclusive ranges,
/// kept sorted, disjoint and with no two touching, so that equal sets compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSet(Vec<(u16, u16)>);

impl PortSet {
    /// `first..=last` (empty when `first > last`).
    pub fn range(first: u16, last: u16) -> PortSet {
        PortSet::from_ranges(vec![(first, last)])
    }

    /// Reads the kernel's list: ports and `a-b` ranges separated by commas, whitespace around
    /// them ignored; an empty text is the empty set.
    pub fn parse(text: &str) -> Option<PortSet> {
        let text = text.trim();
        if text.is_empty() {
            return Some(PortSet::default());
        }
        let ranges = text
            .split(',')
            .map(|part| {
                let part = part.trim();
                let (a, b) = part.split_once('-').unwrap_or((part, part));
                let (a, b) = (a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?);
                (a <= b).then_some((a, b))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PortSet::from_ranges(ranges))
    }

    /// Sorts and merges overlapping or touching ranges; drops empty ones.
    fn from_ranges(mut ranges: Vec<(u16, u16)>) -> PortSet {
        ranges.retain(|(a, b)| a <= b);
        ranges.sort_unstable();
        let mut out: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match out.last_mut() {
                Some(last) if u32::from(a) <= u32::from(last.1) + 1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        PortSet(out)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.0
    }

    /// Every port in either set.
    #[must_use]
    pub fn union(&self, other: &PortSet) -> PortSet {
        PortSet::from_ranges(self.0.iter().chain(&other.0).copied().collect())
    }

    /// The ports of `self` that are not in `other`.
    #[must_use]
    pub fn minus(&self, other: &PortSet) -> PortSet {
        let mut out = Vec::new();
        for &(a, b) in &self.0 {
            // What is left of `a..=b`, cut by each range of `other` that meets it, in order.
            let mut from = u32::from(a);
            let to = u32::from(b);
            for &(c, d) in &other.0 {
                let (c, d) = (u32::from(c), u32::from(d));
                if d < from || c > to {
                    continue;
                }
                if c > from {
                    out.push((from, c - 1));
                }
                from = d + 1;
            }
            if from <= to {
                out.push((from, to));
            }
        }
        // Every bound lies within a u16 range of `self`.
        let out = out
            .into_iter()
            .filter_map(|(a, b)| Some((u16::try_from(a).ok()?, u16::try_from(b).ok()?)))
            .collect();
        PortSet::from_ranges(out)
    }
}

impl fmt::Display for PortSet {
    /// As the kernel prints it: `1000,8080-8090`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(a, b)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

/// The probe range reserved in `ip_local_reserved_ports` for as long as this lives. Dropping
/// it takes out of the list only the ports it put in: ports that were reserved before stay,
/// and so does whatever others reserved meanwhile.
pub struct Reservation {
    /// The sysctl, opened in the network namespace the ports were reserved in: a /proc/sys/net
    /// file stays bound to the namespace it was opened in, so the drop edits that namespace's
    /// list whichever thread runs it.
    file: File,
    /// The ports this reservation added (the probe range minus what was reserved before).
    added: PortSet,
}

impl Reservation {
    /// Adds `first..=last` to the reserved ports.
    pub fn take(first: u16, last: u16) -> std::io::Result<Reservation> {
        Self::take_at(Path::new(RESERVED), first, last)
    }

    fn take_at(path: &Path, first: u16, last: u16) -> std::io::Result<Reservation> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let before = read_set(&file)?;
        let ours = PortSet::range(first, last);
        let added = ours.minus(&before);
        if !added.is_empty() {
            write_set(&file, &before.union(&ours))?;
        }
        Ok(Reservation { file, added })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.added.is_empty() {
            return;
        }
        // Read, take ours out, write back: the list is one value, so a change someone makes
        // between the two system calls is lost; the window is a few microseconds.
        let done = read_set(&self.file).and_then(|now| write_set(&self.file, &now.minus(&self.added)));
        if let Err(e) = done {
            log::warn!("cannot give back the probe ports {} in {RESERVED}: {e}", self.added);
        }
    }
}

/// The list as it is now. The kernel prints it whole at offset 0 and nothing after, so it is
/// read in one call with room for the longest list (a read in pieces would cut it short).
fn read_set(file: &File) -> std::io::Result<PortSet> {
    let mut buf = vec![0u8; RESERVED_MAX_TEXT];
    let n = file.read_at(&mut buf, 0)?;
    let text = String::from_utf8_lossy(&buf[..n]);
    PortSet::parse(&text).ok_or_else(|| std::io::Error::other(format!("{RESERVED}: unexpected content {text:?}")))
}

fn write_set(file: &File, set: &PortSet) -> std::io::Result<()> {
    // The newline lets an empty list be taken as "no ports".
    let text = format!("{set}\n");
    let n = file.write_at(text.as_bytes(), 0)?;
    if n != text.len() {
        return Err(std::io::Error::other(format!(
            "{RESERVED}: short write ({n} of {})",
            text.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> PortSet {
        PortSet::parse(text).unwrap_or_else(|| panic!("{text:?} parses"))
    }

    #[test]
    fn reads_the_port_range() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("garbage"), None);
    }

    #[test]
    fn reads_and_prints_the_reserved_list_as_the_kernel_does() {
        assert_eq!(set("\n"), PortSet::default());
        assert_eq!(set(""), PortSet::default());
        let s = set("1000-1005,2000,3000-3010,61000-65095\n");
        assert_eq!(s.ranges(), [(1000, 1005), (2000, 2000), (3000, 3010), (61000, 65095)]);
        assert_eq!(s.to_string(), "1000-1005,2000,3000-3010,61000-65095");
        assert_eq!(PortSet::default().to_string(), "");
        // Out of order, overlapping and touching ranges come out merged.
        assert_eq!(set("9,1-3, 4 ,7-8,2").to_string(), "1-4,7-9");
        assert_eq!(set("0-65535").to_string(), "0-65535");
        for bad in ["x", "1-", "5-3", "70000", "1,,2", "-4"] {
            assert_eq!(PortSet::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn adds_and_takes_out_ranges() {
        let ours = PortSet::range(61000, 65095);
        assert_eq!(set("8080").union(&ours).to_string(), "8080,61000-65095");
        assert_eq!(set("60990-61005").union(&ours).to_string(), "60990-65095");
        assert_eq!(set("65096").union(&ours).to_string(), "61000-65096");

        // Only the part that was not there already is ours to take out later.
        let before = set("1000,61000-61009,62000");
        let added = ours.minus(&before);
        assert_eq!(added.to_string(), "61010-61999,62001-65095");
        // Someone reserves 7000-7010 and 65090-65100 while probed holds its range.
        let now = before.union(&ours).union(&set("7000-7010,65090-65100"));
        assert_eq!(now.to_string(), "1000,7000-7010,61000-65100");
        assert_eq!(
            now.minus(&added).to_string(),
            "1000,7000-7010,61000-61009,62000,65096-65100"
        );

        assert_eq!(ours.minus(&ours), PortSet::default());
        assert_eq!(ours.minus(&PortSet::default()), ours);
        assert_eq!(set("0-65535").minus(&set("0,65535")).to_string(), "1-65534");
        assert_eq!(set("5-9").minus(&set("1-2,6,8,20-30")).to_string(), "5,7,9");
        assert_eq!(PortSet::range(9, 3), PortSet::default());
    }
}
