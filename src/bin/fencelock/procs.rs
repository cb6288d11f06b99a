//! What `/proc` says of a process, for the views that name one (`status`, `top`, the wait
//! notice), as lslocks(8) does: its command line, else its name.

/// The arguments of `pid` (`/proc/PID/cmdline`); `None` when it shows none (gone, a zombie,
/// hidden by `hidepid`).
fn arguments(pid: u32) -> Option<Vec<String>> {
    if pid == 0 {
        return None;
    }
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

/// The name of `pid` (`/proc/PID/comm`), else `?`.
fn name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .ok()
        .filter(|name| !name.is_empty() && pid != 0)
        .unwrap_or_else(|| "?".to_owned())
}

/// The command of `pid`: its arguments joined by spaces, else its name, else `?`.
pub fn command(pid: u32) -> String {
    arguments(pid).map_or_else(|| name(pid), |args| args.join(" "))
}

/// As [`command`], the program named without its directory, cut to `width` characters with a
/// `…` at the end: for a table column or a line of a terminal.
pub fn brief(pid: u32, width: usize) -> String {
    let text = match arguments(pid) {
        Some(mut args) => {
            if let Some(base) = args[0].rsplit('/').next().map(str::to_owned) {
                args[0] = base;
            }
            args.join(" ")
        }
        None => name(pid),
    };
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
