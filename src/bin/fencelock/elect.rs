//! `fencelock elect`: run a command while leading an election (run.rs runs it, as `run` does);
//! `fencelock leader`: who leads an election, or each change of its leader.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use clap::Args;
use fencelock::Leader;
use serde_json::{Map, Value};

use crate::commands::{open_store, print_json, unix_ms, write_stdout};
use crate::duration::{self, Wait};
use crate::observe::{check_lock_name, local_time};
use crate::{exit, output, run, Failure, LockArgs, RunArgs};

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Name of the election (the lock its leader holds)
    #[arg(long = "lock", value_name = "NAME", required = true)]
    pub lock: String,
    /// The leader's value, which `fencelock leader` shows (its address, say)
    #[arg(long, value_name = "V", default_value = "")]
    pub value: OsString,
    /// Lease time; renewed every third of it while the command runs (e.g. 2s, 15s, 1m; 3ms to
    /// 30 days)
    #[arg(long, value_name = "DURATION", default_value = "15s", allow_hyphen_values = true,
          value_parser = duration::parse_keep_alive_ttl)]
    pub ttl: Duration,
    /// How long before its lease could run out the leadership ends and the command gets
    /// --lost-signal (client-go's lease minus its renew deadline) [default: a third of --ttl;
    /// at most half of it]
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true,
          value_parser = duration::parse_duration)]
    pub margin: Option<Duration>,
    /// Wait up to SECONDS to lead, then fail with status 83: a number of seconds (10, 0.5), a
    /// duration (5m) or `forever` (the default); 0 tries once
    #[arg(short = 'w', long = "timeout", visible_alias = "wait", value_name = "SECONDS",
          allow_hyphen_values = true, value_parser = duration::parse_wait)]
    pub wait: Option<Wait>,
    /// Say on stderr when the wait to lead ran out, and once leading, after how long
    #[arg(long)]
    pub verbose: bool,
    /// Say nothing while waiting to lead (on a terminal, a wait of a second or more says who
    /// leads, with which term)
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Run STRING with `sh -c` instead of a command and its arguments
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "command"
    )]
    pub shell_command: Option<OsString>,
    /// Signal sent to the command when the leadership ends or the tool dies (name or number)
    #[arg(long, value_name = "SIGNAL", default_value = "TERM", allow_hyphen_values = true,
          value_parser = run::parse_signal)]
    pub lost_signal: i32,
    /// Send SIGKILL this long after --lost-signal if the command still runs after the
    /// leadership ended: seconds (5, 0.5) or a duration; 0 never sends it
    #[arg(long, value_name = "DURATION", default_value = "5s", allow_hyphen_values = true,
          value_parser = duration::parse_kill_after)]
    pub kill_after: Duration,
    /// The command and its arguments (`--` before it is optional)
    #[arg(trailing_var_arg = true, num_args = 1..,
          required_unless_present = "shell_command", value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl ElectArgs {
    /// Refuses what the library would refuse once the store is open, so that a usage error
    /// never creates a store.
    pub fn check(&self) -> Result<(), Failure> {
        check_lock_name(&self.lock)?;
        if let Some(margin) = self.margin {
            if margin > self.ttl / 2 {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "--margin {} is more than half of --ttl {}",
                        duration::format_duration(margin),
                        duration::format_duration(self.ttl)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The arguments as `run` takes them: one exclusive lock, the election's.
    pub fn as_run_args(&self) -> RunArgs {
        RunArgs {
            lock: LockArgs {
                locks: vec![self.lock.clone()],
                permits: None,
                shared: false,
                exclusive: true,
                ttl: self.ttl,
                nonblock: false,
                wait: self.wait,
                conflict_exit_code: None,
                verbose: self.verbose,
                quiet: self.quiet,
            },
            shell_command: self.shell_command.clone(),
            lost_signal: self.lost_signal,
            kill_after: self.kill_after,
            command: self.command.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct LeaderArgs {
    /// Name of the election
    pub name: String,
    /// Print each change of the leader as it happens (each new term, each new value), until
    /// interrupted
    #[arg(long)]
    pub watch: bool,
    /// Print JSON: one object a leader
    #[arg(long)]
    pub json: bool,
}

pub const ELECT_AFTER_HELP: &str = "\
Campaigns to lead the election NAME: waits its turn (candidates are granted oldest first,
across processes; by default without a limit, -w sets one), then runs the command while it
leads. The command gets FENCELOCK_TOKEN (the term: the fencing token of its writes, higher
than every earlier leader's), FENCELOCK_LOCK (the election's name) and FENCELOCK_DB in its
environment. The lease is renewed every third of --ttl.

The leadership ends a safety margin (--margin) before its lease could be granted to another
candidate: when the lease was not renewed in time (the tool was paused, the store was
unreachable), the command gets --lost-signal while no other leader can have started yet, and
SIGKILL --kill-after later if it still runs; the tool then exits 85. A leader's writes with
`fencelock put --token $FENCELOCK_TOKEN` after a later leader wrote are refused with 84.
When the command ends, the tool resigns at once: the next candidate leads without waiting for
the lease to run out. Signals are forwarded to the command as `run` forwards them.

Exit status: the command's own, or 83 the wait to lead ran out; 85 the leadership ended while
the command ran; 80 bad argument; 81 database error; 126 and 127 as `run`; 128+N interrupted
by signal N while waiting.

Examples:
  fencelock elect --lock scheduler --value \"$(hostname):8080\" -- ./scheduler
  fencelock elect --lock compactor --ttl 10s -w 60 -c 'compact --token \"$FENCELOCK_TOKEN\"'";

pub const LEADER_AFTER_HELP: &str = "\
Prints the current leader of the election NAME: its term (the token of its grant), the
version of its value within the term (one more at each proclaim), its pid, since when it
leads and its value. With --watch, prints the leader at the start (if one leads) and then each
change, as it happens, in order of terms: a term that began and ended between two looks is
still printed. With --json: {\"name\", \"term\", \"version\", \"pid\", \"since_ms\" (Unix epoch
milliseconds), \"value\"} (\"value_base64\" for a value that is not UTF-8), one a line.
Exit status: 0; 1 nobody leads the election now (without --watch); 80 bad name; 81 database
error; 86 output error.

Examples:
  fencelock leader scheduler
  fencelock leader scheduler --watch --json | jq -c '{term, value}'";

/// Runs `fencelock leader` on the store at `path`, which it does not create.
pub fn leader(path: &Path, busy_timeout: Duration, args: &LeaderArgs) -> Result<(), Failure> {
    let lib = |err: fencelock::Error| Failure::from_lib(&err);
    check_lock_name(&args.name)?;
    let store = open_store(path, false, busy_timeout, None)?;
    if !args.watch {
        let Some(leader) = store.leader(&args.name).map_err(lib)? else {
            return Err(Failure::new(
                exit::NOT_FOUND,
                format!("nobody leads election {:?} now", args.name),
            ));
        };
        return print(&leader, args.json);
    }
    // A watch only reads: it waits for the store's change bell (a read-only store that cannot
    // use the store's shared memory looks again every 10 ms instead).
    let mut watch = store.observe_leader(&args.name).map_err(lib)?;
    loop {
        if let Some(leader) = watch.next_change(Duration::from_secs(3600)).map_err(lib)? {
            print(&leader, args.json)?;
        }
    }
}

fn print(leader: &Leader, json: bool) -> Result<(), Failure> {
    if json {
        let mut object = Map::new();
        object.insert("name".into(), leader.name.clone().into());
        object.insert("term".into(), leader.term.into());
        object.insert("version".into(), leader.version.into());
        object.insert("pid".into(), leader.pid.into());
        object.insert("since_ms".into(), unix_ms(leader.since).into());
        output::insert_bytes(&mut object, "value", &leader.value);
        return print_json(&Value::Object(object));
    }
    let value = String::from_utf8_lossy(&leader.value);
    let line = format!(
        "term {} version {} pid {} since {} value {}\n",
        leader.term,
        leader.version,
        leader.pid,
        local_time(leader.since),
        output::quote_for_terminal(&value)
    );
    write_stdout(line.as_bytes())
}
