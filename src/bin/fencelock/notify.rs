//! systemd's notification protocol (`sd_notify(3)`), for `fencelock serve` as a `Type=notify`
//! service: each state is a datagram of `KEY=VALUE` lines sent to the socket `$NOTIFY_SOCKET`
//! names (a path, or after `@` an abstract name), and the watchdog's period is `$WATCHDOG_USEC`
//! when `$WATCHDOG_PID` is unset or this process.
//!
//! Written here, not taken from the `sd-notify` crate: its latest release (0.5.0) connects to
//! `$NOTIFY_SOCKET` as a path only, so an abstract name, which `sd_notify(3)` specifies and
//! service managers in containers hand out, would fail; the protocol is these lines on std.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The service manager's notification socket.
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
}

impl Notifier {
    /// The socket `$NOTIFY_SOCKET` names; `None` when it is unset (not run by systemd as a
    /// `Type=notify` service).
    pub fn from_env() -> io::Result<Option<Notifier>> {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(name) => Notifier::to(&name).map(Some),
            None => Ok(None),
        }
    }

    fn to(name: &OsStr) -> io::Result<Notifier> {
        let bytes = name.as_bytes();
        let to = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None if bytes.starts_with(b"/") => SocketAddr::from_pathname(name)?,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("NOTIFY_SOCKET={name:?} is neither an absolute path nor @name"),
                ))
            }
        };
        Ok(Notifier {
            socket: UnixDatagram::unbound()?,
            to,
        })
    }

    /// Sends `state`: lines such as `READY=1`, `WATCHDOG=1`, `STOPPING=1`, `STATUS=...`.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.socket.send_to_addr(state.as_bytes(), &self.to)?;
        Ok(())
    }
}

/// The watchdog's period, when the service manager watches this process: it expects
/// `WATCHDOG=1` at least that often, and restarts the service otherwise (`WatchdogSec=`).
pub fn watchdog_period() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let for_us =
        std::env::var("WATCHDOG_PID").map_or(true, |pid| pid.parse() == Ok(std::process::id()));
    (for_us && usec > 0).then(|| Duration::from_micros(usec))
}
