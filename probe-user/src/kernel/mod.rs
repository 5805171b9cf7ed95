//! The kernel-facing layer: the embedded eBPF object, loading, attaching and pinning, the
//! netdev netlink query and the socket and interface system calls.
//!
//! Everything that talks to the bpf() syscall, netlink or libc lives under this module and is
//! kept thin; callers get typed handles and errors that say what to try.
pub mod caps;
pub mod creds;
pub mod event;
pub mod fdpass;
pub mod l4;
pub mod mmap;
pub mod mmsg;
pub mod netlink;
pub mod nft;
pub mod notrack;
pub mod passive;
pub mod pin;
pub mod ports;
pub mod process;
pub mod route;
pub mod rx;
pub mod sockdiag;
pub mod sys;
pub mod term;
pub mod tun;

pub use sys::if_index;

use std::path::PathBuf;

/// The eBPF object built by `build.rs` from probe-ebpf, embedded so the daemon is one file.
/// It holds probe_rx only: test fixtures are built into an object of their own.
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probe.bpf.o"));

/// The passive observers' object (`passive.rs`), loaded only when a profile asks for them.
pub static PASSIVE_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/passive.bpf.o"));

/// The fixtures' eBPF object (test_reflector), for the tests crate and the benchmarks only.
#[cfg(feature = "fixtures")]
pub static FIXTURE_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fixtures.bpf.o"));

/// Errors from loading, attaching or pinning the kernel programs.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("loading the eBPF object failed{hint}", hint = privilege_hint(.0))]
    Load(#[source] aya::EbpfError),
    #[error("program {name} is missing from the eBPF object")]
    MissingProgram { name: &'static str },
    #[error("map {name} is missing from the eBPF object")]
    MissingMap { name: &'static str },
    #[error("program {name} in the eBPF object is not of the type probed expects")]
    WrongProgramType {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("reading the kernel's record of program {name}")]
    ProgramInfo {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("the kernel refused to load program {name}")]
    Verifier {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("no network interface named {iface:?} in this network namespace")]
    NoSuchInterface { iface: String },
    #[error("attaching {name} to {iface} failed")]
    Attach {
        name: &'static str,
        iface: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error(
        "{iface} already has an XDP program attached (id {prog_id}{name}), which probed does not \
         replace or detach; set `hook = \"tcx\"` in [source] to match replies at tc ingress beside it \
         (Linux 6.6+), or give probed an interface of its own"
    )]
    ForeignXdp { iface: String, prog_id: u32, name: String },
    #[error(
        "attaching probe_rx_tc at tcx ingress of {iface} failed: `hook = \"tcx\"` needs Linux 6.6 or \
         later and this kernel is {version}; use `hook = \"xdp\"` on an interface of probed's own"
    )]
    TcxUnsupported {
        iface: String,
        version: aya::util::KernelVersion,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("asking the kernel which XDP programs are attached to {iface}")]
    XdpQuery {
        iface: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{op} {path}")]
    Pin {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("mapping map {name} into memory (mmap) failed")]
    Mmap {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("running program {name}")]
    Run {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
}

fn privilege_hint(err: &aya::EbpfError) -> &'static str {
    let mut cause: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = cause {
        let text = e.to_string();
        if text.contains("Operation not permitted") || text.contains("EPERM") {
            return " (probed needs root, or CAP_BPF + CAP_NET_ADMIN + CAP_PERFMON, to load and attach XDP programs)";
        }
        cause = e.source();
    }
    ""
}

/// How probe_rx is attached to its interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Native (driver) XDP when the driver takes it, else generic: the production default.
    #[default]
    Auto,
    /// Native XDP only: fail when the driver cannot run it.
    Driver,
    /// Generic (skb) XDP: works on every device, at the cost of an skb per packet.
    Skb,
}

impl AttachMode {
    pub const NAMES: [&'static str; 3] = ["auto", "driver", "skb"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Self::Auto),
            "driver" => Some(Self::Driver),
            "skb" => Some(Self::Skb),
            _ => None,
        }
    }
}

impl std::fmt::Display for AttachMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Driver => "driver",
            Self::Skb => "skb",
        })
    }
}

/// Where the reply matcher runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// probe_rx at XDP: the fastest, but XDP has one owner per interface.
    #[default]
    Xdp,
    /// probe_rx_tc at tcx ingress (Linux 6.6+), first in the chain: several programs share
    /// the hook, so it runs beside a load balancer that owns the interface's XDP.
    Tcx,
}

impl Hook {
    pub const NAMES: [&'static str; 2] = ["xdp", "tcx"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "xdp" => Some(Self::Xdp),
            "tcx" => Some(Self::Tcx),
            _ => None,
        }
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Xdp => "xdp",
            Self::Tcx => "tcx",
        })
    }
}

/// Fails when `iface` already runs an XDP program: probed is about to take the hook, and an
/// attach beside someone else's program either fails with an obscure error or (in `auto`,
/// generic over a native program) is refused anyway. Never touches the program found.
pub fn refuse_foreign_xdp(iface: &str) -> Result<(), KernelError> {
    let index = if_index(iface)?;
    let ids = netlink::attached_xdp_programs(index).map_err(|source| KernelError::XdpQuery {
        iface: iface.to_string(),
        source,
    })?;
    let Some(&prog_id) = ids.first() else {
        return Ok(());
    };
    let name = aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == prog_id)
        .and_then(|p| p.name_as_str().map(|n| format!(", named {n}")))
        .unwrap_or_default();
    Err(KernelError::ForeignXdp {
        iface: iface.to_string(),
        prog_id,
        name,
    })
}

/// Attaches a loaded XDP program (`name`, for errors) in `mode` and returns the mode it runs
/// in (Driver or Skb).
///
/// `Auto` asks for native mode first: a driver may implement XDP yet refuse a given setup
/// (MTU too large for one page, too few queues for XDP_TX), and generic mode then still works.
pub fn attach_xdp(
    prog: &mut aya::programs::Xdp,
    name: &'static str,
    iface: &str,
    mode: AttachMode,
) -> Result<AttachMode, KernelError> {
    use aya::programs::XdpMode;
    let attach = |prog: &mut aya::programs::Xdp, m: XdpMode| {
        prog.attach(iface, m).map(drop).map_err(|source| KernelError::Attach {
            name,
            iface: iface.to_string(),
            source,
        })
    };
    match mode {
        AttachMode::Driver => attach(prog, XdpMode::Driver).map(|()| AttachMode::Driver),
        AttachMode::Skb => attach(prog, XdpMode::Skb).map(|()| AttachMode::Skb),
        AttachMode::Auto => match attach(prog, XdpMode::Driver) {
            Ok(()) => Ok(AttachMode::Driver),
            Err(e) => {
                let why = std::error::Error::source(&e)
                    .map(ToString::to_string)
                    .unwrap_or_default();
                // Not info: generic XDP on a production NIC has side effects that outlive us.
                log::warn!(
                    "native XDP on {iface} refused ({why}); using generic (skb) mode, which turns \
                     LRO and hardware GRO off on {iface} for as long as the device lives (the kernel \
                     does not turn them back on when probed detaches) and costs an skb per packet; \
                     set xdp_mode = \"driver\" to fail instead, or hook = \"tcx\""
                );
                attach(prog, XdpMode::Skb).map(|()| AttachMode::Skb)
            }
        },
    }
}
