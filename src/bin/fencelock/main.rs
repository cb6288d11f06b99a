//! `fencelock`: leased locks with fencing tokens from the shell.
//!
//! A thin shell over the library: `fencelock run` holds a lock while a command runs and hands it
//! the fencing token; `put`, `get`, `delete` and `fence` use tokens; `status`, `keys` and `info`
//! show what the store holds, `history` who held a lock and how each lease ended, `metrics` what
//! the store counted. The lock rules are all the library's.
//!
//! # Database
//!
//! `--db PATH`, else `$FENCELOCK_DB`, else `$XDG_STATE_HOME/fencelock/locks.db`, else
//! `$HOME/.local/state/fencelock/locks.db`. The parent directory of the default path is created
//! (mode 0700: a per-user store). Processes that should share locks must name the same file;
//! for a store shared by several users, pass an explicit path in a directory they can all write.
//! Write commands (`run`, `put`, `delete`, `fence`) create the file; read commands (`get`,
//! `keys`, `status`, `info`, `history`, `metrics`) refuse a missing file, so a mistyped path is
//! not taken for an empty store.
//!
//! # Exit status
//!
//! One table, `exit::TABLE`, rendered by `--help` and copied into the README (a test checks
//! the copy). Any other status of `run` is the command's own.

// Messages go through `output::say` and results through `commands::write_stdout`: the print
// macros panic when their stream cannot be written, and the tool would exit 101.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod commands;
mod duration;
mod elect;
mod exit;
mod generate;
mod hold;
mod http;
mod listing;
mod notice;
mod notify;
mod observe;
mod output;
mod procs;
mod run;
mod serve;
mod timeline;
mod top;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

const TOP_DATABASE_HELP: &str = "\
Database:
  --db PATH, else $FENCELOCK_DB, else $XDG_STATE_HOME/fencelock/locks.db, else
  $HOME/.local/state/fencelock/locks.db (its directory is created, mode 0700). Processes
  share locks by naming the same file. Write commands create the file; read commands
  refuse a missing one.";

const TOP_EXAMPLE_HELP: &str = "\
Example:
  fencelock run --lock nightly-export --ttl 30s -w 10 -c \\
      'make-report | fencelock put reports/today --token \"$FENCELOCK_TOKEN\"'";

/// The top-level `--help` epilogue: the database, every exit status, an example.
fn top_after_help() -> String {
    format!(
        "{TOP_DATABASE_HELP}\n\nExit status:\n{}  Any other status of `run` is the command's own.\n\n\
         {TOP_EXAMPLE_HELP}",
        exit::help_all()
    )
}

const RUN_ABOUT_HELP: &str = "\
Options follow flock(1): -n fails at once, -w SECONDS waits up to that long (a bare number
is seconds, fractions allowed; 0 tries once; `forever` waits without a limit), -E N sets the
status of a conflict, -c STRING runs the string with `sh -c`; the command may follow with or
without `--`.

A conflict is silent, as in flock(1): when the lock is held (status 82, or -E's) or a -w
wait ran out (status 83, or -E's), run exits with that status and prints nothing, so that a
cron job that skips its run mails nothing. --verbose says why on stderr (who holds the lock,
or how long the wait was) and, once the lock is taken, how long that took. Every other error
prints.

Without -w, run fails at once (status 82), unlike flock(1), which waits by default. A lock is
often held by a job that hangs or is paused; a default that waits would silently queue every
later run (a cron job every minute piles up behind one stuck run). Say how long a wait is
acceptable with -w, or -w forever to wait as flock does.

The command gets FENCELOCK_TOKEN (the fencing token), FENCELOCK_LOCK and FENCELOCK_DB (the
store: a file's absolute path, or the etcd string as given) in its environment.

Lock kinds: --permits N takes one of N permits of a semaphore (up to N commands at once, each
with its own token; another N while permits are live is refused with status 80); -s/--shared
takes the lock shared (any number of shared holders, none with an exclusive one; a waiting
exclusive run is not overtaken by later shared ones). --lock A --lock B takes every lock at
once, all or none (a token for each; FENCELOCK_TOKEN is the last and highest,
FENCELOCK_TOKENS lists NAME=TOKEN pairs joined by commas, a name's '%', ',' and '=' written
%25, %2C and %3D; FENCELOCK_LOCK, for messages, joins the names by commas as they are). The
lease is renewed every third of --ttl while the command runs. SIGINT, SIGTERM, SIGHUP and
SIGQUIT sent to the tool are forwarded to the command (a Ctrl-C from the terminal already
reaches both and is not sent twice); while it waits for the lock, they end the wait without
running the command. If the tool dies, the command gets --lost-signal.

If the lease is lost while the command runs (the tool was paused past the TTL, or the store
was unreachable until the lease ran out), the tool says so on stderr, sends --lost-signal to
the command, waits for it and exits 85. Another holder may run by then: a command that
ignores --lost-signal gets SIGKILL --kill-after later (default 5s, as consul lock; timeout(1)
-k; 0 never), so that it cannot go on unfenced for ever. The status is 85 however the command
ended (stderr says how: its exit status, or killed by SIGKILL). Writes the command makes with
`fencelock put --token $FENCELOCK_TOKEN` after another holder wrote are refused with status
84. If the tool itself dies, the command gets --lost-signal only.";

const RUN_EXAMPLE_HELP: &str = "\
Examples:
  fencelock run --lock backup /usr/local/bin/backup.sh
  fencelock run --lock gpu --permits 4 -w forever ./train.sh
  fencelock run --lock config -s -w 10 cat /etc/app/config
  fencelock run --lock db --lock cache -w 60 ./migrate.sh
  fencelock run --lock backup -w 300 --ttl 1m rsync -a /data /backup
  fencelock run --lock backup -w forever -E 0 -c 'backup.sh && notify-send done'
  fencelock run --lock export -- sh -c 'fencelock put out.csv --file out.csv'";

/// `fencelock run --help`'s epilogue: the default and its reason, the statuses `run` gives.
fn run_after_help() -> String {
    format!(
        "{RUN_ABOUT_HELP}\n\nExit status: the command's own, or one of the tool's:\n{}\n\
         {RUN_EXAMPLE_HELP}",
        exit::help_run()
    )
}

const HOLD_AFTER_HELP: &str = "\
A lock around a section of a shell script (flock(1)'s `exec 9>f; flock 9`, `etcdctl lock`):
hold takes the lock as `run` does (the same options), prints the fencing token on a line of
its own on stdout, renews the lease every third of --ttl, and holds until the first of: its
standard input closes, SIGTERM, SIGINT, SIGHUP or SIGQUIT, or its parent exits. It then
releases the lock and exits 0. Standard input must be a pipe the script keeps open (a bash
coprocess, a FIFO): a script killed mid-way closes it, and the lock is let go at once; a hold
killed with SIGKILL is a dead holder, whose lock the next grant takes; a hold that is paused
loses the lease when --ttl runs out. A standard input that is /dev/null is refused (it would
end the hold at once), unless --no-stdin says to hold until a signal or the parent's exit.
Exit status: 0 held, then released; 85 the lease was lost while held (the token's fenced writes
are refused from then on); 82, 83 as `run` (held, or the wait ran out); 80 bad argument; 81
database error; 128+N a signal ended the wait for the lock.

Example (bash): the section's writes are fenced by the printed token
  coproc HOLD { fencelock hold --lock nightly-export -w 60; }
  read -r token <&\"${HOLD[0]}\" || exit 1     # no token: the lock was not taken
  make-report | fencelock put reports/today --token \"$token\"
  exec {HOLD[1]}>&-; wait \"$HOLD_PID\"       # release; 85 if the lease was lost";

const PUT_AFTER_HELP: &str = "\
The token defaults to $FENCELOCK_TOKEN, which `fencelock run` sets for its command.
Exit status: 0 stored; 84 stale token (a higher token wrote the key; the value is unchanged);
80 bad argument (e.g. a token this store never granted); 81 database error; 86 input error.

Examples:
  echo 'v2' | fencelock put config/current --token 7
  fencelock run --lock deploy -- sh -c 'fencelock put release --file ./release.txt'";

const GET_AFTER_HELP: &str = "\
The value is written to stdout as raw bytes. With --json: {\"key\": ..., \"value\": ...,
\"token\": N}; a key or value that is not UTF-8 is given as \"key_base64\" / \"value_base64\"
(standard base64) instead.
Exit status: 0 found; 1 no value under the key; 81 database error; 86 output error.

Examples:
  fencelock get config/current
  fencelock get config/current --json | jq .token";

const DELETE_AFTER_HELP: &str = "\
The delete is fenced like a put: the key keeps the delete's token, so a later write with an
older token is still refused. Deleting a key that holds no value succeeds.
Exit status: 0 deleted; 84 stale token; 80 bad argument; 81 database error.

Example:
  fencelock delete config/current --token \"$FENCELOCK_TOKEN\"";

const FENCE_AFTER_HELP: &str = "\
Checks a token against a resource of your own (a table, a bucket, a service) and records it as
the highest seen: a lower token is refused from then on.

A check followed by a separate write is not safe. In `fencelock fence R && aws s3 cp ...` a
pause between the two (a GC pause, SIGSTOP, a slow network) lets a newer holder fence and
write, and then the stale copy lands on top of it. The check and the write must be one step,
made where the write is applied:
  - keep the data, or a pointer to it, in fencelock: `fencelock put` checks the token and
    writes in one transaction;
  - or let the storage check the token itself: a conditional write that carries the token, or
    a service that applies writes one at a time and calls `fence` for each under the same
    mutex that applies it.

Exit status: 0 the token is current (equal to or higher than any seen); 84 stale token;
80 bad argument; 81 database error.

Example: write under a name of this token's own, then publish it with a fenced put (a stale
holder's late copy lands under its own old name, and its put is refused with 84):
  fencelock run --lock export -c '
    aws s3 cp out.csv \"s3://bucket/exports/$FENCELOCK_TOKEN.csv\" &&
    echo \"exports/$FENCELOCK_TOKEN.csv\" | fencelock put exports/current'
  fencelock get exports/current   # readers follow the pointer";

const STATUS_AFTER_HELP: &str = "\
States: held (live holder, not expired); expired (the TTL ran out); released (the holder let
go and its process still runs); holder-dead (the holder's process is gone, so once a
`fencelock run` has ended its lock shows this whether it released cleanly or died).
EXPIRES is \"-\" for released and holder-dead locks. Records of locks no longer held are
pruned a few at a time by later grants.
After a lock's grants come the acquires queued waiting for it (state waiting), oldest first,
the order they are served in, as lslocks(8) and pg_locks show waiters: the pid, WAITED (how
long it has waited) and the COMMAND. COMMAND is the process's command line from /proc (as
lslocks shows it; \"-\" for a holder that died, whose pid may be another's by now).
A semaphore or shared lock shows one row per grant it holds, with its KIND (exclusive, shared,
semaphore(N)). A name holding a control character, '\"' or '\\' is shown in double quotes with C
escapes, as git quotes paths (\"\\033[31m\" for ESC [31m), so that it cannot drive the terminal;
--json gives names as they are.
With --json: a list of {\"name\", \"state\", \"token\", \"pid\", \"granted_at_ms\",
\"expires_at_ms\" (Unix epoch milliseconds), \"remaining_ms\", \"kind\", \"permits\",
\"command\" (null for a dead holder)}, and for each waiter {\"name\", \"state\": \"waiting\",
\"pid\", \"command\", \"ticket\" (its place: lower is served first), \"waiting_since_ms\",
\"waited_ms\"}.
Exit status: 0; 1 --lock names a lock with no record; 81 database error.

Examples:
  fencelock status
  fencelock status --lock backup --json";

const KEYS_AFTER_HELP: &str = "\
Keys holding a value, in byte order, one a line. With --json: a list of {\"key\"} objects
(\"key_base64\" for keys that are not UTF-8).
Exit status: 0; 81 database error.

Example:
  fencelock keys reports/";

const INFO_AFTER_HELP: &str = "\
With --json: {\"file\", \"size_bytes\", \"schema_version\", \"last_token\", \"lock_records\",
\"keys\", \"fences\", \"server_pid\"} (null without a server).
Exit status: 0; 81 database error.

Example:
  fencelock info --db /var/lib/myapp/locks.db";

const TOP_AFTER_HELP: &str = "\
On a terminal, a full-screen view (as top(1) and htop): the store, its server, and the grants,
refusals and waits a second since the last refresh; then each lock's grants (STATE, TOKEN, PID,
HELD for how long, LEFT on the lease, KIND, COMMAND from /proc) and its waiters, oldest first
(WAITED for how long). Keys: s cycles the order (h held longest first, w longest waiter first,
n by name); Up and Down (or k, j) pick a lock; Enter shows its grant history (`fencelock
history`), Enter or Esc hides it; q, Esc or Ctrl-C quits.
When standard output is not a terminal (a pipe, a log), or with -n N, the same listing as
plain text, printed again every interval (N times with -n).
Exit status: 0; 81 database error; 86 output error.

Examples:
  fencelock top
  fencelock top --sort wait -d 500ms
  fencelock top -n 1 | grep waiting";

const HISTORY_AFTER_HELP: &str = "\
One row per grant of the lock, oldest first: the latest ended grants the store recorded (up to
32 a lock), then the current ones. GRANTED and ENDED are local times (TZ); ENDED is \"-\" for a
lease still held and \"?\" where the store cannot know (a holder that died, a release older
than the store's memory of releases). HELD FOR runs from the grant to its end (to now for a
lease still held).
HOW: held; released (its holder let go); expired (its TTL ran out first, and no grant took the
lock meanwhile); taken-over (a later grant took the lock after the TTL ran out while the holder
still held on: a paused or stuck holder, whose late writes fencing refuses); holder-died (its
process ended without a release on record).
A job that waited for the lock waited for the row before its own: HELD FOR says how long that
grant kept the lock, HOW why it let go (an expired or taken-over lease kept it until its TTL
ran out; the wait itself is in `fencelock metrics`).
With --json: a list of {\"name\", \"token\", \"kind\", \"permits\", \"pid\", \"granted_at_ms\",
\"expires_at_ms\", \"ended_at_ms\", \"recorded_at_ms\" (Unix epoch milliseconds, null when not
known; recorded_at_ms is null for a grant not recorded yet), \"ending\" (HOW)}.
With --svg: the same history as an SVG picture, one bar per lease on a common time axis, the
token on each bar; a lease taken over is drawn on, hatched, from its expiry to the grant that
took it over. The store keeps no record of a refused write (a refusal writes nothing) nor of
a pause: --events FILE adds them from the writers' own log, one JSON object a line:
{\"event\": \"paused\", \"resumed\", \"write-accepted\" or \"write-refused\", \"token\": N,
\"at_ms\": Unix epoch milliseconds, \"key\" (optional)}; events of other leases are left out
(said on standard error). The same history and events give the same bytes.
Exit status: 0; 1 the store has no grant of the lock on record; 80 bad lock name, a bad line
of the events file, or an etcd store (which keeps no history); 81 database error; 86 output
error, or the events file cannot be read.

Examples:
  fencelock history payment-export
  fencelock history payment-export --json | jq '.[] | select(.ending != \"released\")'
  fencelock history payment-export --svg --events writes.jsonl > timeline.svg";

const METRICS_AFTER_HELP: &str = "\
Prints the store's counters in Prometheus' text exposition format (version 0.0.4): leases
granted and released, refusals by reason, how replaced leases ended, commits, and a histogram
of how long acquires waited; and gauges read now: the live leases by kind (a semaphore's
permits counted one by one), the waiters queued, the file's size, and fencelock_build_info
with the version. Every series is named fencelock_* and labelled with store (the path) and
scope. The output suits node_exporter's textfile collector: write it to a temporary
file and rename it into the collector's directory, from cron or a timer.
The counts are those of every process on this host that has had the store open (scope
\"store\"), kept in shared memory beside it while any process has it open; once every process
has closed it they start again from zero (fencelock_start_time_seconds says when), which
Prometheus takes as a counter reset. Keep a long-running process on the store (a service, or
`fencelock serve`) for counts that last. With scope \"process\" (this process could not use
the shared memory, as for another user's store) the counts are this command's own: zeros.
Per lock, for at most --locks N (default 10) locks, those held longest, so that the series stay
bounded whatever the number of lock names: fencelock_lock_held_seconds (how long its oldest live
grant has been held) and fencelock_lock_waiters (its queued waiters), labelled with lock.
With --listen ADDR it serves /metrics over HTTP (GET or HEAD; text format 0.0.4) until SIGTERM
or SIGINT, for Prometheus to scrape; a PORT or :PORT alone listens on 127.0.0.1 only. Each
scrape opens the store and closes it again (a process that kept it open would keep a server
from starting), so its counts are those described above: they start again once every process
has closed the store. `fencelock serve --metrics-listen ADDR` serves the same page from the
server, whose counts last as long as it runs, across its clients' closes.
With --json: {\"store\", \"scope\", \"since_at_ms\" (Unix epoch milliseconds), \"grants\",
\"releases\", \"refused_locked\", \"refused_timeout\", \"refused_cancelled\", \"refused_other\",
\"stale_writes\", \"lock_lost\", \"waits\", \"wait_ns\", \"wait_buckets\" (a list of {\"up_to_ms\",
\"count\"}, not cumulative, the last one's bound null), \"ended_released\", \"ended_expired\",
\"ended_taken_over\", \"ended_holder_died\", \"leases_lost\", \"commits\", \"committed_ops\",
\"history_dropped\", \"live_exclusive\", \"live_shared\", \"live_permits\", \"queued_waiters\", \"file_bytes\"}.
Exit status: 0; 80 an etcd store (etcd exports metrics of its own); 81 database error; 86
output error.

Examples:
  fencelock metrics --listen 9464   # http://127.0.0.1:9464/metrics
  dir=/var/lib/node_exporter/textfile
  fencelock metrics --db /var/lib/myapp/locks.db > $dir/fencelock.prom.tmp &&
      mv $dir/fencelock.prom.tmp $dir/fencelock.prom";

/// Leased locks with fencing tokens, and fenced values, shared by the processes of one host.
#[derive(Parser, Debug)]
#[command(name = "fencelock", version, after_help = top_after_help())]
#[allow(clippy::doc_markdown)] // The doc comments are the --help text, printed verbatim.
struct Cli {
    /// The store file, or an etcd cluster as etcd://HOST:PORT[,HOST:PORT...]/PREFIX in a build
    /// with etcd support [default: $FENCELOCK_DB, else $XDG_STATE_HOME/fencelock/locks.db, else
    /// ~/.local/state/fencelock/locks.db]
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,

    /// How long to wait for another process that holds the store (one paused inside a commit
    /// or an open) before failing with status 83
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s",
          allow_hyphen_values = true, value_parser = duration::parse_duration)]
    busy_timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::doc_markdown)] // The doc comments are the --help text, printed verbatim.
enum Command {
    /// Run a command while holding a lock; the command gets the fencing token
    #[command(after_help = run_after_help())]
    Run(RunArgs),
    /// Take a lock for a section of a shell script: print the token, hold until stdin closes,
    /// a signal, or the parent's exit
    #[command(after_help = HOLD_AFTER_HELP)]
    Hold(HoldArgs),
    /// Run a command while leading an election; the command gets the term as its token
    #[command(after_help = elect::ELECT_AFTER_HELP)]
    Elect(elect::ElectArgs),
    /// Show the leader of an election, or each change of it
    #[command(after_help = elect::LEADER_AFTER_HELP)]
    Leader(elect::LeaderArgs),
    /// Store a value (from stdin or --file) under a key, fenced by a token
    #[command(after_help = PUT_AFTER_HELP)]
    Put(PutArgs),
    /// Print the value stored under a key
    #[command(after_help = GET_AFTER_HELP)]
    Get(GetArgs),
    /// Delete a key, fenced by a token
    #[command(after_help = DELETE_AFTER_HELP)]
    Delete(DeleteArgs),
    /// Check a token against an external resource, recording it as the highest seen
    #[command(after_help = FENCE_AFTER_HELP)]
    Fence(FenceArgs),
    /// Show the locks the store records
    #[command(visible_alias = "locks", after_help = STATUS_AFTER_HELP)]
    Status(StatusArgs),
    /// List the keys holding a value
    #[command(after_help = KEYS_AFTER_HELP)]
    Keys(KeysArgs),
    /// Show the store's file, size, counts, schema version and token counter
    #[command(after_help = INFO_AFTER_HELP)]
    Info(InfoArgs),
    /// A live view of the locks, their holders and waiters, and the grant, refusal and wait
    /// rates, refreshed every interval
    #[command(after_help = TOP_AFTER_HELP)]
    Top(TopArgs),
    /// Show who held a lock, with which token, from when to when, and how each lease ended
    #[command(after_help = HISTORY_AFTER_HELP)]
    History(HistoryArgs),
    /// Print the store's counters in Prometheus' text format (for node_exporter's textfile
    /// collector)
    #[command(after_help = METRICS_AFTER_HELP)]
    Metrics(MetricsArgs),
    /// Serve the store: hold it alone and commit for every process that opens it
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(ServeArgs),
    /// Write the man pages, or print a shell's completion script, rendered from these
    /// definitions (for packaging: `make install CLI=1` runs it)
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        what: Generated,
    },
}

#[derive(Subcommand, Debug)]
pub enum Generated {
    /// Write fencelock.1 and fencelock-COMMAND.1 for every command into DIR
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script of SHELL
    Completion {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

const SERVE_AFTER_HELP: &str = "\
Every process that opens the store (library, C, Python, Go, this tool) finds the server by
itself and sends it its operations, reads included; each batch is one durable commit with
one fsync instead of two. Without a server, or once it stops, they use the file themselves.
Releases never need the server. It ignores the terminal's stop keys (Ctrl-Z) and stops on
SIGTERM or SIGINT, finishing the batch at hand.
Under systemd (Type=notify, $NOTIFY_SOCKET) it sends READY=1 once it serves, WATCHDOG=1 from
its batch loop every half $WATCHDOG_USEC (WatchdogSec=), so that a hung server is restarted,
and STOPPING=1 as it stops; examples/systemd/fencelock-serve@.service is a unit.
With --metrics-listen ADDR it serves /metrics over HTTP (`fencelock metrics --help` says what
the page holds; a PORT or :PORT alone listens on 127.0.0.1 only): the counters are kept in the
store's shared memory, which the server keeps open, so they last as long as it runs.
A wait of more than a second for processes to move over is said on a terminal (not with -q).
Exit status: 0 stopped (signal or --idle-exit); 81 database error, or the store stayed in
use by processes that did not move over within --wait (their pids are printed).

Example:
  fencelock serve --db /var/lib/myapp/locks.db --idle-exit 10m";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Stop after this long without a request (e.g. 30s, 10m)
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_duration)]
    pub idle_exit: Option<Duration>,
    /// How long to wait for processes that have the store open to move over to the server
    #[arg(long, value_name = "DURATION", default_value = "10s",
          value_parser = duration::parse_duration)]
    pub wait: Duration,
    /// Record no grant history (`fencelock history`): about a fifth more grants a second
    /// (the metrics still count how leases ended)
    #[arg(long)]
    pub no_history: bool,
    /// Say nothing of the wait for processes to move over: without it, a wait on a terminal
    /// says after a second which processes it waits for
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Serve /metrics over HTTP at ADDR while serving: PORT or :PORT listens on the loopback
    /// address 127.0.0.1, HOST:PORT as given (0.0.0.0:9464 for every interface). The counters
    /// last as long as the server runs, across its clients' closes
    #[arg(long, value_name = "ADDR", value_parser = http::parse_listen)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Per-lock series of /metrics for at most the N locks held longest; 0 for none
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP_LOCKS,
          value_parser = clap::value_parser!(u32).range(0..=MAX_TOP_LOCKS))]
    pub metrics_locks: u32,
}

/// How a lock is taken: the options `run` and `hold` share.
#[derive(Args, Debug)]
pub struct LockArgs {
    /// Name of the lock; give it more than once to take several locks at once, all or none
    /// (exclusive only; deadlock-free)
    #[arg(long = "lock", value_name = "NAME", required = true)]
    pub locks: Vec<String>,
    /// Take one of N permits of a semaphore: up to N commands hold the name at once
    #[arg(long, value_name = "N", conflicts_with = "shared",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(fencelock::MAX_HOLDERS)))]
    pub permits: Option<u32>,
    /// Take the lock shared (flock's -s): any number of shared holders at once, none while an
    /// exclusive one holds it
    #[arg(short = 's', long, visible_alias = "read")]
    pub shared: bool,
    /// Take the lock exclusively, the default (flock's -x and -e)
    #[arg(short = 'x', long, visible_short_alias = 'e', conflicts_with_all = ["shared", "permits"])]
    pub exclusive: bool,
    /// Lease time; renewed every third of it while the command runs (e.g. 500ms, 30s, 2m;
    /// 3ms to 30 days)
    #[arg(long, value_name = "DURATION", default_value = "30s", allow_hyphen_values = true,
          value_parser = duration::parse_keep_alive_ttl)]
    pub ttl: Duration,
    /// Fail at once with status 82 when the lock is held: the default, accepted for flock(1)
    /// scripts
    #[arg(
        short = 'n',
        long = "nonblock",
        visible_alias = "nb",
        conflicts_with = "wait"
    )]
    pub nonblock: bool,
    /// Wait up to SECONDS for the lock, then fail with status 83: a number of seconds (10,
    /// 0.5), a duration (5m, 1h30m) or `forever`; 0 tries once
    #[arg(short = 'w', long = "timeout", visible_alias = "wait", value_name = "SECONDS",
          allow_hyphen_values = true, value_parser = duration::parse_wait)]
    pub wait: Option<duration::Wait>,
    /// Exit with N instead of 82 or 83 when the lock is held or the wait for it ran out
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "N")]
    pub conflict_exit_code: Option<u8>,
    /// Say on stderr why the lock was not taken (who holds it, or that the wait ran out) and,
    /// once taken, how long that took; without it a conflict prints nothing, as in flock(1)
    #[arg(long)]
    pub verbose: bool,
    /// Say nothing of a wait: without it, a wait on a terminal says after a second what it
    /// waits for, who holds the lock and for how long more (nothing is said when standard
    /// error is not a terminal)
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub lock: LockArgs,
    /// Run STRING with `sh -c` instead of a command and its arguments
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "command"
    )]
    pub shell_command: Option<OsString>,
    /// Signal sent to the command when the lease is lost or the tool dies (name or number)
    #[arg(long, value_name = "SIGNAL", default_value = "TERM", allow_hyphen_values = true,
          value_parser = run::parse_signal)]
    pub lost_signal: i32,
    /// Send SIGKILL this long after --lost-signal if the command still runs after a lost
    /// lease (timeout(1)'s -k; the default is consul lock's): seconds (5, 0.5) or a duration;
    /// 0 never sends it
    #[arg(long, value_name = "DURATION", default_value = "5s", allow_hyphen_values = true,
          value_parser = duration::parse_kill_after)]
    pub kill_after: Duration,
    /// The command and its arguments (`--` before it is optional)
    #[arg(trailing_var_arg = true, num_args = 1..,
          required_unless_present = "shell_command", value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl LockArgs {
    /// How the lock is taken.
    pub fn kind(&self) -> fencelock::Kind {
        match (self.shared, self.permits) {
            (true, _) => fencelock::Kind::Shared,
            (false, Some(permits)) => fencelock::Kind::Semaphore(permits),
            (false, None) => fencelock::Kind::Exclusive,
        }
    }

    /// The lock names as one string, for messages and `FENCELOCK_LOCK`.
    pub fn lock_names(&self) -> String {
        self.locks.join(",")
    }
}

// `run` reads the lock options as its own.
impl std::ops::Deref for RunArgs {
    type Target = LockArgs;

    fn deref(&self) -> &LockArgs {
        &self.lock
    }
}

impl RunArgs {
    /// The program and its arguments: the command, or `sh -c STRING`.
    pub fn argv(&self) -> Vec<OsString> {
        match &self.shell_command {
            Some(script) => vec!["sh".into(), "-c".into(), script.clone()],
            None => self.command.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    #[command(flatten)]
    pub lock: LockArgs,
    /// Hold until a signal or the parent's exit only: standard input is not read (for a hold
    /// started as `fencelock hold ... &`, whose input is /dev/null)
    #[arg(long)]
    pub no_stdin: bool,
}

#[derive(Args, Debug)]
#[allow(clippy::doc_markdown)] // The doc comments are the --help text, printed verbatim.
pub struct PutArgs {
    /// The key
    pub key: OsString,
    /// Fencing token [default: $FENCELOCK_TOKEN]
    #[arg(long, value_name = "N")]
    pub token: Option<u64>,
    /// Read the value from this file instead of standard input ("-" is standard input)
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// The key
    pub key: OsString,
    /// Print {"key", "value", "token"} as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[allow(clippy::doc_markdown)] // The doc comments are the --help text, printed verbatim.
pub struct DeleteArgs {
    /// The key
    pub key: OsString,
    /// Fencing token [default: $FENCELOCK_TOKEN]
    #[arg(long, value_name = "N")]
    pub token: Option<u64>,
}

#[derive(Args, Debug)]
#[allow(clippy::doc_markdown)] // The doc comments are the --help text, printed verbatim.
pub struct FenceArgs {
    /// Name of the external resource
    pub resource: String,
    /// Fencing token [default: $FENCELOCK_TOKEN]
    #[arg(long, value_name = "N")]
    pub token: Option<u64>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Show only this lock; status 1 when the store has no record of it
    #[arg(long, value_name = "NAME")]
    pub lock: Option<String>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct KeysArgs {
    /// Only keys starting with this prefix
    pub prefix: Option<OsString>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// How often to look at the store again (e.g. 1s, 500ms)
    #[arg(short = 'd', long, value_name = "DURATION", default_value = "1s",
          value_parser = duration::parse_interval)]
    pub interval: Duration,
    /// The order of the locks: held longest first, longest waiter first, or by name
    #[arg(long, value_enum, default_value_t = top::Sort::Hold)]
    pub sort: top::Sort,
    /// Print the listing N times as plain text, then exit (plain text is also what a standard
    /// output that is not a terminal gets, without an end)
    #[arg(short = 'n', long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Name of the lock
    #[arg(value_name = "NAME")]
    pub lock: String,
    /// Print JSON
    #[arg(long, conflicts_with = "svg")]
    pub json: bool,
    /// Print the history as an SVG picture: one bar per lease on a time axis
    #[arg(long)]
    pub svg: bool,
    /// With --svg: mark the pauses and writes a JSON-lines FILE tells of (- for standard
    /// input), each on its lease's row
    #[arg(long, value_name = "FILE", requires = "svg")]
    pub events: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[allow(clippy::doc_markdown)] // The doc comments are the --help text, printed verbatim.
pub struct MetricsArgs {
    /// Print JSON instead of Prometheus' text format
    #[arg(long, conflicts_with = "listen")]
    pub json: bool,
    /// Serve /metrics over HTTP at ADDR until SIGTERM or SIGINT instead of printing once:
    /// PORT or :PORT listens on the loopback address 127.0.0.1, HOST:PORT as given
    /// (0.0.0.0:9464 for every interface)
    #[arg(long, value_name = "ADDR", value_parser = http::parse_listen)]
    pub listen: Option<std::net::SocketAddr>,
    /// Per-lock series (fencelock_lock_held_seconds, fencelock_lock_waiters) for at most the N
    /// locks held longest; 0 for none
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP_LOCKS,
          value_parser = clap::value_parser!(u32).range(0..=MAX_TOP_LOCKS))]
    pub locks: u32,
}

/// The per-lock series of the metrics: for the 10 locks held longest by default, 1000 at most,
/// so that the series Prometheus stores stay bounded whatever the number of lock names.
pub const DEFAULT_TOP_LOCKS: u32 = 10;
pub const MAX_TOP_LOCKS: i64 = 1000;

/// A failure of the tool: what to print and the status to exit with.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// Exit with `code` without printing `message`: a conflict of `run` without `--verbose`.
    pub quiet: bool,
}

impl Failure {
    pub fn new(code: u8, message: impl fmt::Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
            quiet: false,
        }
    }

    /// A library error, with the exit code its kind maps to.
    pub(crate) fn from_lib(err: &fencelock::Error) -> Failure {
        Failure::new(lib_code(err), err)
    }
}

/// The exit code of a library error.
pub(crate) fn lib_code(err: &fencelock::Error) -> u8 {
    use fencelock::Error;
    match err {
        Error::Locked { .. } => exit::LOCKED,
        Error::Timeout { .. } => exit::TIMEOUT,
        Error::StaleToken { .. } => exit::STALE_TOKEN,
        Error::LockLost { .. } => exit::LOCK_LOST,
        Error::InvalidArgument(_) | Error::PermitsMismatch { .. } => exit::USAGE,
        _ => exit::DATABASE,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A usage error whose message cannot be written is still a usage error; help or a
        // version that cannot be written is an output error.
        Err(err) => {
            return match (err.print(), err.use_stderr()) {
                (_, true) => ExitCode::from(exit::USAGE),
                (Ok(()), false) => ExitCode::from(exit::OK),
                (Err(write), false) => fail(commands::stdout_failure(&write)),
            };
        }
    };
    let result = match cli.command {
        Command::Run(args) => commands::database_path(cli.db, true)
            .and_then(|db| run::run(&db, cli.busy_timeout, &args).map(ExitCode::from)),
        Command::Hold(args) => commands::database_path(cli.db, true)
            .and_then(|db| hold::hold(&db, cli.busy_timeout, &args).map(ExitCode::from)),
        Command::Elect(args) => commands::database_path(cli.db, true)
            .and_then(|db| run::elect(&db, cli.busy_timeout, &args).map(ExitCode::from)),
        Command::Serve(args) => commands::database_path(cli.db, true)
            .and_then(|db| serve::serve(&db, &args).map(|()| ExitCode::from(exit::OK))),
        Command::Generate { what } => match what {
            Generated::Man { dir } => generate::man_pages(&dir).map(|_| ()),
            Generated::Completion { shell } => generate::completion(shell),
        }
        .map(|()| ExitCode::from(exit::OK)),
        other => {
            commands::dispatch(cli.db, cli.busy_timeout, other).map(|()| ExitCode::from(exit::OK))
        }
    };
    result.unwrap_or_else(fail)
}

/// Tells `failure` (unless quiet) and gives its status.
#[allow(clippy::needless_pass_by_value)] // Takes it, as `unwrap_or_else(fail)` hands it over.
fn fail(failure: Failure) -> ExitCode {
    if !failure.quiet {
        output::say(&failure.message);
    }
    ExitCode::from(failure.code)
}
