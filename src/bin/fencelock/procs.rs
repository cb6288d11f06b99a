//! What `/proc` says of a process, for the views that name one (`status`, `top`, the wait
//! notice), as lslocks(8) does: its command line, else its name.

/// The command of `pid`: its arguments joined by spaces (`/proc/PID/cmdline`), else its name
/// (`/proc/PID/comm`: a process that has no arguments to show, as a zombie), else `?` (gone, or
/// hidden by `hidepid`).
pub fn command(pid: u32) -> String {
    if pid == 0 {
        return "?".to_owned();
    }
    if let Ok(bytes) = std::fs::read(format!("/proc/{pid}/cmdline")) {
        let args: Vec<String> = bytes
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        if !args.is_empty() {
            return args.join(" ");
        }
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "?".to_owned())
}

/// `command`, cut to `width` characters with a `…` at the end, for a table column.
pub fn short(command: &str, width: usize) -> String {
    if command.chars().count() <= width {
        return command.to_owned();
    }
    let mut cut: String = command.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
