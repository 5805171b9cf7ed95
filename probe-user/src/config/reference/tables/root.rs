//! The keys of The top level of the file.
use super::*;

/// The top level of the file: its tables.
pub const ROOT: Section = Section {
    path: "",
    header: "",
    about: "The top level of the file holds these tables and nothing else; each is optional.",
    kinds: &[],
    own: &[
        Key::new(
            "daemon",
            Table,
            said("every key at its default"),
            Allowed::Any,
            PerKey,
            "The daemon's own settings: the API, the events output, the pin directory, the state file \
             and the threads and paths of HTTP checks.",
        ),
        Key::new(
            "source",
            Table,
            said("every key at its default"),
            Allowed::Any,
            Restart,
            "Where probes leave from and how the reply matcher attaches.",
        ),
        Key::new(
            "profile",
            Tables,
            said("none: nothing is probed"),
            Allowed::Any,
            PerKey,
            "A named group of endpoints with one health check and one routing method; one table per \
             profile.",
        ),
        Key::new(
            "sink",
            Tables,
            said("none"),
            Allowed::Any,
            Applies,
            "A forwarding structure of the node kept equal to one profile's eligible endpoints; one \
             table per sink.",
        ),
        Key::new(
            "dns",
            Table,
            said("none: no DNS server"),
            Allowed::Any,
            Restart,
            "The authoritative DNS server. Adding or removing the table needs a restart; its keys say \
             what a reload does with each.",
        ),
        Key::new(
            "cluster",
            Table,
            said("none: the node probes alone"),
            Allowed::Any,
            Restart,
            "Several nodes sharing the probing and their verdicts.",
        ),
    ],
};
