//! systemd's readiness protocol (sd_notify): one datagram to `$NOTIFY_SOCKET`, a path or, with
//! a leading '@', an abstract socket name. Nothing happens when the variable is unset, so
//! `probed run` outside systemd behaves the same.
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. "READY=1") to the service manager, if one asked for it.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = (|| -> std::io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)?
            }
            None => SocketAddr::from_pathname(&path)?,
        };
        socket.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    if let Err(e) = sent {
        log::warn!("cannot tell the service manager {state:?}: {e}");
    }
}
