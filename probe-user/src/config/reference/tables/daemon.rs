//! The keys of `[daemon]`.
use super::*;

pub const DAEMON: Section = Section {
    path: "daemon",
    header: "[daemon]",
    about: "The daemon's own settings. The api_* keys decide where the API listens and who may change \
            state through it; the API keeps all of them until a restart, never a mix of old and new.",
    kinds: &[],
    own: &[
        Key::new(
            "api_listen",
            Type::String,
            Value("\"unix:/run/probed/api.sock\""),
            words(
                "\"unix:\" and an absolute path, or ADDRESS:PORT; an address other than loopback only \
                 with api_allow_remote = true",
            ),
            Restart,
            "Where the API listens: a unix socket, or a TCP address (plain HTTP, no TLS).",
        ),
        Key::new(
            "api_allow_remote",
            Boolean,
            Value("false"),
            Allowed::Any,
            Applies,
            "Lets api_listen name an address other than loopback. Whoever reaches it can read \
             everything, and its traffic is cleartext. It only decides whether api_listen is valid; the \
             listener changes at a restart.",
        ),
        Key::new(
            "api_socket_group",
            Type::String,
            said("probed, if that group exists; else the socket is owner-only (mode 0600) and the log says so"),
            words(
                "a group name (letters, digits, '_', '-' and '.', at most 32, not starting with '-') or a \
                 numeric gid",
            ),
            Restart,
            "The group that owns the API socket; its members may use the routes that change state. A \
             group named here that does not exist stops the start.",
        )
        .only("a unix socket"),
        Key::new(
            "api_socket_mode",
            Integer,
            Value("0o660"),
            Octal(0o600, 0o777),
            Restart,
            "The API socket's file mode, in octal, with the owner's read and write bits set. Whatever \
             the mode, only root, the daemon's user and the group's members may change state.",
        )
        .only("a unix socket"),
        Key::new(
            "api_token_file",
            Type::String,
            said("none: changes are refused over TCP"),
            words("an absolute file path"),
            Restart,
            "A file holding the bearer token that routes which change state require over TCP \
             (Authorization: Bearer TOKEN).",
        )
        .only("a TCP listener"),
        Key::new(
            "events",
            Type::String,
            Value("\"-\""),
            words("\"-\" for standard output, or a file path"),
            Applies,
            "Where transition events go, one JSON object per line. A reload opens the new file before \
             it changes anything; SIGUSR1 reopens the file at its path (for logrotate).",
        ),
        Key::new(
            "pin_dir",
            Type::String,
            Value("\"/sys/fs/bpf/probed\""),
            words("an absolute path on bpffs"),
            Restart,
            "Where the BPF maps are pinned, bpf sinks' under sinks/. The daemon locks it: a second \
             daemon with the same directory does not start.",
        ),
        Key::new(
            "state_file",
            Type::String,
            Value("\"/var/lib/probed/state.json\""),
            words("an absolute file path"),
            Restart,
            "Where the last known health of every endpoint is kept, so that a restart resumes it. \
             Locked like pin_dir.",
        ),
        Key::new(
            "l7_workers",
            Integer,
            said("one per CPU core"),
            Int(1, Daemon::MAX_L7_WORKERS as i64),
            Restart,
            "Threads that run HTTP and HTTPS probes through sockets and UDP request/response probes.",
        ),
        Key::new(
            "http_probes",
            Type::String,
            Value("\"kernel\""),
            OneOf(&HttpProbes::NAMES),
            Restart,
            "Where plain HTTP checks run. kernel: inside probe_rx, without a socket, for each check \
             that allows it (protocol http, no body_match, a request of at most 256 bytes), the others \
             through sockets; sockets: every HTTP check through a socket.",
        ),
    ],
};
