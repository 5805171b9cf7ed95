//! What each node's route sinks announce, gossiped beside its verdicts (one key, `routes`), so
//! that `probed cluster` and `/v1/cluster` show which node announces which prefix. Pure: the
//! value's format and its reading.
use serde::{Deserialize, Serialize};

/// The gossip key.
pub const KEY: &str = "routes";

/// One prefix of a node's route sinks, and what the node says of it: "announced",
/// "demoted" or "withdrawn".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Announcement {
    pub prefix: String,
    pub state: String,
}

/// The value: `PREFIX=STATE` entries, comma-separated, in order.
pub fn encode(list: &[Announcement]) -> String {
    list.iter()
        .map(|a| format!("{}={}", a.prefix, a.state))
        .collect::<Vec<_>>()
        .join(",")
}

/// The entries of a value; one that does not read (another version's) is left out.
pub fn decode(value: &str) -> Vec<Announcement> {
    value
        .split(',')
        .filter_map(|e| e.split_once('='))
        .filter(|(p, s)| {
            p.parse::<ipnet::IpNet>().is_ok() && !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase())
        })
        .map(|(p, s)| Announcement {
            prefix: p.to_string(),
            state: s.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip_and_a_bad_entry_is_left_out() {
        let list = vec![
            Announcement {
                prefix: "198.51.100.10/32".into(),
                state: "announced".into(),
            },
            Announcement {
                prefix: "2001:db8::10/128".into(),
                state: "demoted".into(),
            },
        ];
        let text = encode(&list);
        assert_eq!(text, "198.51.100.10/32=announced,2001:db8::10/128=demoted");
        assert_eq!(decode(&text), list);
        assert_eq!(decode(""), []);
        assert_eq!(
            decode("vip=announced,198.51.100.10/32=UP,198.51.100.10/32=announced"),
            list[..1]
        );
    }
}
