//! The commands other than `run`: fenced writes and the read-only views of the store.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{Cancel, Error, LockInfo, LockState, Options, Store, DEFAULT_MAX_VALUE_LEN};
use serde_json::{json, Map, Value};

use crate::duration::format_duration;
use crate::output::{self, Cell, Colour};
use crate::{exit, listing, observe, procs, top, Command, Failure};

/// Where the store is: `--db`, else `$FENCELOCK_DB`, else the per-user default under
/// `$XDG_STATE_HOME` or `~/.local/state`, whose directory is created when `create` is set.
pub fn database_path(flag: Option<PathBuf>, create: bool) -> Result<PathBuf, Failure> {
    if let Some(path) = flag {
        return Ok(path);
    }
    if let Some(path) = std::env::var_os("FENCELOCK_DB").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    // The XDG spec says to ignore a relative XDG_STATE_HOME.
    let state_home = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local/state"))
        })
        .ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                "no database: neither XDG_STATE_HOME nor HOME is set; pass --db or set FENCELOCK_DB",
            )
        })?;
    let dir = state_home.join("fencelock");
    if create {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|err| {
                Failure::new(
                    exit::DATABASE,
                    format!("cannot create the directory {}: {err}", dir.display()),
                )
            })?;
    }
    Ok(dir.join("locks.db"))
}

/// Whether `path` is an etcd store string (`etcd://...`) rather than a file's path.
pub fn is_etcd(path: &Path) -> bool {
    path.to_str().is_some_and(|p| p.starts_with("etcd://"))
}

/// Opens the store. Read commands pass `create = false`: they get a clear error for a missing
/// file rather than a new, empty store at a mistyped path, and open it read-only, so that a
/// process paused inside a commit does not hold them up. The open, and every write after it,
/// waits at most `busy_timeout` for another process that holds the store; `cancel` ends the
/// open early.
pub fn open_store(
    path: &Path,
    create: bool,
    busy_timeout: Duration,
    cancel: Option<Cancel>,
) -> Result<Store, Failure> {
    // An etcd store is no file: etcd answers whether it exists.
    if !is_etcd(path) && !create && !path.exists() {
        return Err(Failure::new(
            exit::DATABASE,
            format!(
                "no database at {}: it is created by the first run, put, delete or fence",
                path.display()
            ),
        ));
    }
    let options = Options {
        busy_timeout,
        cancel,
        read_only: !create,
        ..Options::default()
    };
    // Every other failure to open is a database error, whatever the library's kind (a
    // directory given as the path is an invalid argument to the library, but a bad database to
    // the user).
    Store::open_with(path, &options).map_err(|err| match err {
        Error::Timeout { .. } => Failure::new(
            exit::TIMEOUT,
            format!(
                "timed out after {} opening database {}: another process holds it; one \
                 paused inside a commit or an open (Ctrl-Z, SIGSTOP, a debugger) holds it \
                 until it resumes (--busy-timeout sets the wait)",
                format_duration(busy_timeout),
                path.display()
            ),
        ),
        err => Failure::new(
            exit::DATABASE,
            format!("cannot open database {}: {err}", path.display()),
        ),
    })
}

/// Runs every command but `run`.
pub fn dispatch(
    db: Option<PathBuf>,
    busy_timeout: Duration,
    command: Command,
) -> Result<(), Failure> {
    let writes = matches!(
        command,
        Command::Put(_) | Command::Delete(_) | Command::Fence(_)
    );
    let path = database_path(db, writes)?;
    // Arguments are checked before the store is opened, so a usage error never creates a file.
    match command {
        Command::Put(args) => {
            let token = token_or_env(args.token)?;
            let value = read_value(args.file.as_deref())?;
            let store = open_store(&path, true, busy_timeout, None)?;
            store
                .put(args.key.as_bytes(), &value, token)
                .map_err(|err| Failure::from_lib(&err))
        }
        Command::Delete(args) => {
            let token = token_or_env(args.token)?;
            let store = open_store(&path, true, busy_timeout, None)?;
            store
                .delete(args.key.as_bytes(), token)
                .map(|_| ())
                .map_err(|err| Failure::from_lib(&err))
        }
        Command::Fence(args) => {
            let token = token_or_env(args.token)?;
            let store = open_store(&path, true, busy_timeout, None)?;
            store
                .fence(&args.resource, token)
                .map_err(|err| Failure::from_lib(&err))
        }
        Command::Get(args) => get(
            &open_store(&path, false, busy_timeout, None)?,
            &args.key,
            args.json,
        ),
        Command::Status(args) => status(
            &open_store(&path, false, busy_timeout, None)?,
            args.lock.as_deref(),
            args.json,
        ),
        Command::Top(args) => top::top(&open_store(&path, false, busy_timeout, None)?, &args),
        Command::Keys(args) => keys(
            &open_store(&path, false, busy_timeout, None)?,
            args.prefix.as_deref().unwrap_or_default(),
            args.json,
        ),
        Command::Info(args) => info(&open_store(&path, false, busy_timeout, None)?, args.json),
        Command::History(args) => {
            observe::check_lock_name(&args.lock)?;
            // A bad events file is refused before the store is opened.
            let events = match &args.events {
                Some(file) => crate::timeline::read_events(file)?,
                None => Vec::new(),
            };
            let format = if args.svg {
                observe::Format::Svg(&events)
            } else if args.json {
                observe::Format::Json
            } else {
                observe::Format::Table
            };
            observe::history(
                &open_store(&path, false, busy_timeout, None)?,
                &args.lock,
                format,
            )
        }
        Command::Metrics(args) => {
            // A store that cannot be read is said at once, not at the first scrape.
            let store = open_store(&path, false, busy_timeout, None)?;
            let top = usize::try_from(args.locks).unwrap_or(usize::MAX);
            match args.listen {
                Some(addr) => {
                    drop(store);
                    let open = move || open_store(&path, false, busy_timeout, None);
                    observe::listen(open, addr, top)
                }
                None => observe::metrics(&store, args.json, top),
            }
        }
        Command::Leader(args) => crate::elect::leader(&path, busy_timeout, &args),
        Command::Run(_)
        | Command::Hold(_)
        | Command::Elect(_)
        | Command::Serve(_)
        | Command::Generate { .. } => {
            unreachable!("dispatched by main")
        }
    }
}

/// The `--token` value, else `$FENCELOCK_TOKEN` as `fencelock run` sets it.
fn token_or_env(flag: Option<u64>) -> Result<u64, Failure> {
    if let Some(token) = flag {
        return Ok(token);
    }
    let Some(text) = std::env::var_os("FENCELOCK_TOKEN") else {
        return Err(Failure::new(
            exit::USAGE,
            "no token: pass --token N, or run under `fencelock run`, which sets FENCELOCK_TOKEN",
        ));
    };
    text.to_str().and_then(|t| t.parse().ok()).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!("FENCELOCK_TOKEN={text:?} is not a token (a positive integer)"),
        )
    })
}

/// Reads the value, stopping one byte past the store's limit, so that an endless input (a
/// pipe, `/dev/zero`) gives the usage error at once instead of filling the memory.
fn read_value(file: Option<&Path>) -> Result<Vec<u8>, Failure> {
    let limit = DEFAULT_MAX_VALUE_LEN;
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut value = Vec::new();
    let (read, source) = match file {
        Some(path) if path != Path::new("-") => (
            fs::File::open(path).and_then(|file| file.take(cap).read_to_end(&mut value)),
            path.display().to_string(),
        ),
        _ => (
            io::stdin().lock().take(cap).read_to_end(&mut value),
            "standard input".to_owned(),
        ),
    };
    read.map_err(|err| Failure::new(exit::IO, format!("cannot read {source}: {err}")))?;
    if value.len() > limit {
        return Err(Failure::new(
            exit::USAGE,
            format!("the value from {source} is over the limit of {limit} bytes"),
        ));
    }
    Ok(value)
}

/// Writes a command's output: every result the tool prints goes through here.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(|err| stdout_failure(&err))
}

/// A write to stdout that failed: status 86, said on stderr, but for a broken pipe: the reader
/// stopped reading (`fencelock keys | head`), which is no news to mail from a cron job.
pub(crate) fn stdout_failure(err: &io::Error) -> Failure {
    Failure {
        quiet: err.kind() == io::ErrorKind::BrokenPipe,
        ..Failure::new(exit::IO, format!("cannot write standard output: {err}"))
    }
}

pub(crate) fn print_json(value: &Value) -> Result<(), Failure> {
    let mut text = value.to_string();
    text.push('\n');
    write_stdout(text.as_bytes())
}

fn get(store: &Store, key: &OsStr, json: bool) -> Result<(), Failure> {
    let Some(fenced) = store
        .get(key.as_bytes())
        .map_err(|err| Failure::from_lib(&err))?
    else {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!("no value under key {}", key.to_string_lossy()),
        ));
    };
    if json {
        let mut object = Map::new();
        output::insert_bytes(&mut object, "key", key.as_bytes());
        output::insert_bytes(&mut object, "value", &fenced.value);
        object.insert("token".into(), fenced.token.into());
        print_json(&Value::Object(object))
    } else {
        write_stdout(&fenced.value)
    }
}

fn keys(store: &Store, prefix: &OsStr, json: bool) -> Result<(), Failure> {
    let keys = store
        .keys(prefix.as_bytes())
        .map_err(|err| Failure::from_lib(&err))?;
    if json {
        let list = keys
            .iter()
            .map(|key| {
                let mut object = Map::new();
                output::insert_bytes(&mut object, "key", key);
                Value::Object(object)
            })
            .collect();
        return print_json(&Value::Array(list));
    }
    let mut out = Vec::new();
    for key in keys {
        out.extend_from_slice(&key);
        out.push(b'\n');
    }
    write_stdout(&out)
}

fn status(store: &Store, lock: Option<&str>, json: bool) -> Result<(), Failure> {
    let views = listing::gather(store, lock)?;
    if let (Some(name), true) = (lock, views.is_empty()) {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!("no record of lock {name:?} in {}", store.path().display()),
        ));
    }
    if json {
        let rows = views.iter().flat_map(|view| {
            let grants = view.grants.iter().map(lock_json);
            grants.chain(view.waiters.iter().map(waiter_json))
        });
        return print_json(&Value::Array(rows.collect()));
    }
    if views.is_empty() {
        return write_stdout(b"no locks recorded\n");
    }
    let now = SystemTime::now();
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    for view in &views {
        let name = output::quote_for_terminal(&view.name);
        for info in &view.grants {
            rows.push(vec![
                Cell::from(name.clone()),
                Cell {
                    text: info.state.as_str().to_owned(),
                    colour: Some(state_colour(info.state)),
                },
                Cell::from(info.token.to_string()),
                Cell::from(info.pid.to_string()),
                Cell::from(relative(now, info.granted_at)),
                // Once released or dead, the expiry no longer means anything.
                Cell::from(match info.state {
                    LockState::Held | LockState::Expired => relative(now, info.expires_at),
                    _ => "-".to_owned(),
                }),
                Cell::from("-".to_owned()),
                Cell::from(info.kind.describe()),
                Cell::from(command_cell(info.pid, info.state)),
            ]);
        }
        for waiter in &view.waiters {
            rows.push(vec![
                Cell::from(name.clone()),
                Cell {
                    text: "waiting".to_owned(),
                    colour: Some(Colour::Yellow),
                },
                Cell::from("-".to_owned()),
                Cell::from(waiter.pid.to_string()),
                Cell::from("-".to_owned()),
                Cell::from("-".to_owned()),
                Cell::from(format_duration(waiter.waited)),
                Cell::from("-".to_owned()),
                Cell::from(command_cell(waiter.pid, LockState::Held)),
            ]);
        }
    }
    let text = output::table(
        &[
            "NAME", "STATE", "TOKEN", "PID", "GRANTED", "EXPIRES", "WAITED", "KIND", "COMMAND",
        ],
        &rows,
        output::colour_stdout(),
    );
    write_stdout(text.as_bytes())
}

/// The COMMAND of a row: the process's, for a holder that is alive; `-` for one that is gone
/// (its pid may be another process's by now).
fn command_cell(pid: u32, state: LockState) -> String {
    if state == LockState::HolderDead {
        return "-".to_owned();
    }
    output::quote_for_terminal(&procs::brief(pid, 60))
}

fn state_colour(state: LockState) -> Colour {
    match state {
        LockState::Held => Colour::Green,
        LockState::Expired => Colour::Yellow,
        LockState::HolderDead => Colour::Red,
        _ => Colour::Dim,
    }
}

/// `in 4.2s` for a time ahead of `now`, `3m10s ago` for one behind it.
fn relative(now: SystemTime, at: SystemTime) -> String {
    match at.duration_since(now) {
        Ok(ahead) => format!("in {}", format_duration(ahead)),
        Err(behind) => format!("{} ago", format_duration(behind.duration())),
    }
}

pub(crate) fn unix_ms(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

fn lock_json(info: &LockInfo) -> Value {
    json!({
        "name": info.name,
        "state": info.state.as_str(),
        "token": info.token,
        "pid": info.pid,
        "granted_at_ms": unix_ms(info.granted_at),
        "expires_at_ms": unix_ms(info.expires_at),
        "remaining_ms": u64::try_from(info.remaining.as_millis()).unwrap_or(u64::MAX),
        "kind": match info.kind {
            fencelock::Kind::Shared => "shared",
            fencelock::Kind::Semaphore(_) => "semaphore",
            _ => "exclusive",
        },
        "permits": match info.kind {
            fencelock::Kind::Semaphore(permits) => permits,
            _ => 0,
        },
        "command": (info.state != LockState::HolderDead).then(|| procs::command(info.pid)),
    })
}

/// A waiter as `status --json` lists it: a row of state "waiting", as `pg_locks` lists a
/// waiter with `granted = false`.
fn waiter_json(waiter: &fencelock::WaiterInfo) -> Value {
    json!({
        "name": waiter.name,
        "state": "waiting",
        "pid": waiter.pid,
        "command": procs::command(waiter.pid),
        "ticket": waiter.ticket,
        "waiting_since_ms": unix_ms(waiter.waiting_since),
        "waited_ms": u64::try_from(waiter.waited.as_millis()).unwrap_or(u64::MAX),
    })
}

fn info(store: &Store, json: bool) -> Result<(), Failure> {
    let info = store.info().map_err(|err| Failure::from_lib(&err))?;
    if json {
        return print_json(&json!({
            "file": info.path.display().to_string(),
            "size_bytes": info.file_size,
            "schema_version": info.schema_version,
            "last_token": info.last_token,
            "lock_records": info.lock_records,
            "keys": info.keys,
            "fences": info.fences,
            "server_pid": store.server(),
        }));
    }
    let rows = [
        ("file", info.path.display().to_string()),
        (
            "size",
            format!(
                "{} ({} bytes)",
                output::format_size(info.file_size),
                info.file_size
            ),
        ),
        ("schema version", info.schema_version.to_string()),
        ("last token", info.last_token.to_string()),
        ("lock records", info.lock_records.to_string()),
        ("keys", info.keys.to_string()),
        ("fences", info.fences.to_string()),
        (
            "path",
            match store.server() {
                Some(pid) => format!("through the server, pid {pid} (fencelock serve)"),
                None => "the file itself (no server)".to_owned(),
            },
        ),
    ];
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (label, value) in rows {
        let _ = writeln!(text, "{label:<width$}  {value}");
    }
    write_stdout(text.as_bytes())
}
