//! Host time and process identity.
//!
//! Lease times are read from `CLOCK_BOOTTIME`: one clock for every process of the host, never
//! stepped by NTP or by setting the date, counting time spent suspended. Its values mean nothing
//! across a reboot, so every lease also records the boot id; a lease of an earlier boot is dead.
//!
//! A Linux time namespace (`unshare --time --boottime N`) shifts `CLOCK_BOOTTIME`, and the start
//! times in `/proc/<pid>/stat`, by an offset of its own, which `/proc/self/timens_offsets` shows
//! relative to the host. Both are read back to the host's clock here, so processes in different
//! time namespaces agree on when a lease ends and on who started when. The offset is read once
//! per process: one that moves itself to another time namespace later (`setns`) is not seen.

use std::fs;
use std::io;
use std::sync::OnceLock;

/// This process's time namespace's boot-time offset from the host, in nanoseconds (0 on the
/// host, and on kernels without time namespaces).
fn boottime_offset_ns() -> i128 {
    static OFFSET: OnceLock<i128> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        fs::read_to_string("/proc/self/timens_offsets")
            .ok()
            .and_then(|text| parse_boottime_offset(&text))
            .unwrap_or(0)
    })
}

/// The `boottime SECONDS NANOSECONDS` line of `/proc/self/timens_offsets`.
fn parse_boottime_offset(text: &str) -> Option<i128> {
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with("boottime"))?;
    let mut fields = line.split_whitespace().skip(1);
    let secs: i128 = fields.next()?.parse().ok()?;
    let nanos: i128 = fields.next()?.parse().ok()?;
    Some(secs * 1_000_000_000 + nanos)
}

/// Nanoseconds since boot on the host's `CLOCK_BOOTTIME`, whatever time namespace this process
/// is in.
#[must_use]
pub fn now_ns() -> u64 {
    // CLOCK_BOOTTIME exists on every Linux since 2.6.39.
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let raw = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
    u64::try_from(raw - boottime_offset_ns()).unwrap_or(0)
}

/// The 16 bytes of `/proc/sys/kernel/random/boot_id`, which change at every boot.
pub fn boot_id() -> io::Result<[u8; 16]> {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    let hex: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    if hex.len() != 32 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected format of /proc/sys/kernel/random/boot_id",
        ));
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digits = std::str::from_utf8(pair).expect("hex digits are ASCII");
        id[i] = u8::from_str_radix(digits, 16).expect("checked hex digits");
    }
    Ok(id)
}

/// A process named without the risk of pid reuse: its pid and its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The process id.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks after boot.
    pub start_time: u64,
}

impl ProcessId {
    /// The calling process.
    pub fn current() -> io::Result<ProcessId> {
        let pid = std::process::id();
        let start_time = start_time(pid)?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "/proc/self/stat is not readable")
        })?;
        Ok(ProcessId { pid, start_time })
    }

    /// Whether this process still runs (a zombie counts as dead).
    #[must_use]
    pub fn is_alive(self) -> bool {
        matches!(start_time(self.pid), Ok(Some(start)) if start == self.start_time)
    }
}

/// The start time of a live (non-zombie) process, or `None` when there is no such process.
fn start_time(pid: u32) -> io::Result<Option<u64>> {
    let stat = match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    // The command name (field 2) is in parentheses and may itself hold spaces or parentheses,
    // so fields are counted from the last ')'.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc stat"))?;
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    if matches!(state, Some("Z" | "X")) {
        return Ok(None);
    }
    // `rest` starts at field 3 (state); field 22 is 19 further on.
    let start: u64 = fields
        .nth(18)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc stat"))?;
    // Shown shifted by the reader's time namespace, in clock ticks: read back to the host's.
    let ticks_per_s = i128::from(rustix::param::clock_ticks_per_second().max(1));
    let offset_ticks = boottime_offset_ns() * ticks_per_s / 1_000_000_000;
    Ok(Some(
        u64::try_from(i128::from(start) - offset_ticks).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_advances() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(now_ns() >= a + 2_000_000);
    }

    #[test]
    fn current_process_is_alive_and_a_made_up_one_is_not() {
        let me = ProcessId::current().unwrap();
        assert!(me.is_alive());
        let impostor = ProcessId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!impostor.is_alive());
    }

    #[test]
    fn the_boottime_offset_line_is_parsed() {
        let text = "monotonic           0         0\nboottime         1000       250\n";
        assert_eq!(parse_boottime_offset(text), Some(1_000_000_000_250));
        assert_eq!(
            parse_boottime_offset("boottime -5 0\n"),
            Some(-5_000_000_000)
        );
        assert_eq!(parse_boottime_offset("monotonic 0 0\n"), None);
    }

    #[test]
    fn boot_id_is_stable() {
        assert_eq!(boot_id().unwrap(), boot_id().unwrap());
    }
}
