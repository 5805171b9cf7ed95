//! The terminal of `probed status --watch`: raw input (each key at once, no echo, Ctrl-C as a
//! key) on the alternate screen, and everything restored when the guard drops, a panic's
//! unwinding included (the CLI's; here with the other libc calls).
use std::{
    io::Write,
    os::fd::{AsRawFd, RawFd},
    time::Duration,
};

/// Whether descriptor `fd` is a terminal.
pub fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// The terminal in watch mode; dropping it gives the terminal back as it was.
pub struct RawTerminal {
    fd: RawFd,
    saved: libc::termios,
}

impl RawTerminal {
    /// Takes the terminal on standard input; None when standard input is not one (then keys
    /// cannot be read, and signals stop the watch as usual).
    pub fn enter() -> Option<RawTerminal> {
        let fd = std::io::stdin().as_raw_fd();
        if !is_tty(fd) {
            return None;
        }
        // SAFETY: termios is plain data; tcgetattr fills it for a descriptor that is a tty.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `saved` outlives the call.
        if unsafe { libc::tcgetattr(fd, &raw mut saved) } != 0 {
            return None;
        }
        let mut raw = saved;
        // Keys one at a time, not echoed; Ctrl-C arrives as a byte, so quitting always goes
        // through the restoring path.
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
        raw.c_cc[libc::VMIN] = 0;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: `raw` is a termios derived from the terminal's own.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw const raw) } != 0 {
            return None;
        }
        // The alternate screen (the shell's screen comes back untouched), cursor hidden.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\x1b[?1049h\x1b[?25l");
        let _ = out.flush();
        Some(RawTerminal { fd, saved })
    }

    /// A key pressed within `wait`, if any.
    pub fn key(&self, wait: Duration) -> Option<u8> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&raw mut pfd, 1, ms) } <= 0 {
            return None;
        }
        let mut b = 0u8;
        // SAFETY: reads at most one byte into `b`, which outlives the call.
        let n = unsafe { libc::read(self.fd, (&raw mut b).cast(), 1) };
        (n == 1).then_some(b)
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        // SAFETY: restores the settings tcgetattr returned for the same descriptor.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &raw const self.saved) };
    }
}
