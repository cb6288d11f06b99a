//! The GC-pause scenario, with real processes.
//!
//! A acquires `payment-export` and gets token N; A is paused (SIGSTOP, as by a long GC pause);
//! its lease expires; B acquires, gets N+1 and writes with it; A wakes up (SIGCONT) and its write
//! with N is refused, and B's data stays. Then the same run with a plain file and no fencing
//! shows A's late write overwriting B's.
//!
//! Run it with `cargo run --example gc_pause`. It exits non-zero if fencing did not hold.
//! `-- --db etcd://127.0.0.1:2379/demo` runs the fenced steps on an etcd cluster instead of a
//! file in a temporary directory (built with `--features etcd`; the lease is then etcd's
//! shortest, 2 s). `-- --events FILE` writes what the store keeps no record of to FILE, one JSON
//! object a line: when A was paused and resumed, B's accepted write and A's refused one, each
//! with its token and time, for `fencelock history payment-export --svg --events FILE` (`make
//! timeline` draws `docs/timeline.svg` so).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use fencelock::{Error, Store};

const LOCK: &str = "payment-export";
const KEY: &[u8] = b"payments/today.csv";
const TTL: Duration = Duration::from_millis(800);
/// etcd leases are whole seconds, at least 2.
const ETCD_TTL: Duration = Duration::from_secs(2);

fn ttl(db: &str) -> Duration {
    if db.starts_with("etcd://") {
        ETCD_TTL
    } else {
        TTL
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("process-a") => process_a(&args[2], &args[3], &args[4]),
        Some("process-b") => process_b(&args[2], &args[3], &args[4]),
        _ => match options(&args[1..]) {
            Some((db, events)) => demo(db, events),
            None => {
                Err("usage: gc_pause [--db PATH|etcd://HOST:PORT/PREFIX] [--events FILE]".into())
            }
        },
    };
    if let Err(err) = result {
        eprintln!("gc_pause: {err}");
        std::process::exit(1);
    }
}

type Outcome = Result<(), Box<dyn std::error::Error>>;

/// `--db` and `--events`, each at most once.
fn options(args: &[String]) -> Option<(Option<&str>, Option<&str>)> {
    let (mut db, mut events) = (None, None);
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--db" => &mut db,
            "--events" => &mut events,
            _ => return None,
        };
        if slot.replace(args.next()?.as_str()).is_some() {
            return None;
        }
    }
    Some((db, events))
}

/// Now, in Unix epoch milliseconds.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}

/// Process A: acquires, reports its token, waits (it is paused meanwhile), then writes late.
fn process_a(db: &str, mode: &str, plain_file: &str) -> Outcome {
    let store = Store::open(db)?;
    let holder = store.acquire(LOCK, ttl(db))?;
    println!("token {}", holder.token());
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?; // the parent says "go" after SIGCONT
    let data = b"A's stale export";
    if mode == "fenced" {
        let at = now_ms();
        match store.put(KEY, data, holder.token()) {
            Err(Error::StaleToken { token, highest }) => {
                println!("refused stale-token {token} {highest} {at}");
            }
            Ok(()) => println!("accepted"),
            Err(err) => return Err(err.into()),
        }
        match holder.put(KEY, data) {
            Err(Error::LockLost { .. }) => println!("holder-put lock-lost"),
            Ok(()) => println!("holder-put accepted"),
            Err(err) => return Err(err.into()),
        }
    } else {
        std::fs::write(plain_file, data)?;
        println!("accepted");
        println!("holder-put skipped");
    }
    Ok(())
}

/// Process B: waits for the lock (A's lease must expire first), then writes with its token.
fn process_b(db: &str, mode: &str, plain_file: &str) -> Outcome {
    let store = Store::open(db)?;
    let holder = store.acquire_wait(LOCK, Duration::from_secs(30), Duration::from_secs(30))?;
    let data = b"B's fresh export";
    let at = now_ms();
    if mode == "fenced" {
        store.put(KEY, data, holder.token())?;
    } else {
        std::fs::write(plain_file, data)?;
    }
    println!("token {}", holder.token());
    println!("wrote {at}");
    Ok(())
}

struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Process {
    fn start(role: &str, db: &Path, mode: &str, plain_file: &Path) -> std::io::Result<Process> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(role)
            .arg(db)
            .arg(mode)
            .arg(plain_file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Process {
            child,
            stdin,
            stdout,
        })
    }

    fn line(&mut self) -> Result<String, Box<dyn std::error::Error>> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            let status = self.child.wait()?;
            return Err(format!("child process ended early ({status})").into());
        }
        Ok(line.trim().to_owned())
    }

    fn token(&mut self) -> Result<u64, Box<dyn std::error::Error>> {
        let line = self.line()?;
        Ok(line
            .strip_prefix("token ")
            .ok_or_else(|| format!("unexpected output {line:?}"))?
            .parse()?)
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Runs the seven steps once; returns A's verdict, what the data holds at the end and the
/// events the store keeps no record of (JSON lines).
fn run(
    dir: &Path,
    db: Option<&str>,
    mode: &str,
) -> Result<(String, String, String), Box<dyn std::error::Error>> {
    let db = db.map_or_else(|| dir.join(format!("{mode}.db")), Into::into);
    let ttl = ttl(&db.to_string_lossy());
    let plain_file = dir.join("today.csv");
    let mut a = Process::start("process-a", &db, mode, &plain_file)?;
    let n = a.token()?;
    println!("1. A (pid {}) acquires {LOCK:?}: token {n}", a.child.id());
    a.signal(libc::SIGSTOP);
    let paused_at = now_ms();
    println!("2. A is paused (SIGSTOP), as by a long GC pause");
    std::thread::sleep(ttl + Duration::from_millis(200));
    println!("3. A's lease of {} ms has expired", ttl.as_millis());
    let mut b = Process::start("process-b", &db, mode, &plain_file)?;
    let b_token = b.token()?;
    let b_wrote = b.line()?;
    b.child.wait()?;
    println!(
        "4. B (pid {}) acquires {LOCK:?}: token {b_token}",
        b.child.id()
    );
    let target = if mode == "fenced" {
        "payments/today.csv"
    } else {
        "today.csv (no fencing)"
    };
    println!("5. B writes {target} with token {b_token}: accepted");
    a.signal(libc::SIGCONT);
    let resumed_at = now_ms();
    writeln!(a.stdin, "go")?;
    let verdict = a.line()?;
    let holder_put = a.line()?;
    a.child.wait()?;
    let event = |what: &str, token: u64, at: &str| {
        format!("{{\"event\":\"{what}\",\"token\":{token},\"at_ms\":{at},\"key\":\"payments/today.csv\"}}\n")
    };
    let mut events = format!(
        "{{\"event\":\"paused\",\"token\":{n},\"at_ms\":{paused_at}}}\n\
         {}{{\"event\":\"resumed\",\"token\":{n},\"at_ms\":{resumed_at}}}\n",
        event(
            "write-accepted",
            b_token,
            b_wrote.trim_start_matches("wrote ")
        )
    );
    let shown = match verdict.split(' ').collect::<Vec<_>>().as_slice() {
        ["refused", "stale-token", token, highest, at] => {
            events.push_str(&event("write-refused", n, at));
            format!("REFUSED (stale token {token}: token {highest} already wrote this key)")
        }
        _ => verdict.to_uppercase(),
    };
    println!("6. A resumes (SIGCONT) and writes with token {n}: {shown}");
    if holder_put == "holder-put lock-lost" {
        println!("   A's lease-checked write: REFUSED (lease lost)");
    }
    let (data, token) = if mode == "fenced" {
        let stored = Store::open(&db)?
            .get(KEY)?
            .ok_or("payments/today.csv is missing")?;
        (String::from_utf8(stored.value)?, Some(stored.token))
    } else {
        (std::fs::read_to_string(&plain_file)?, None)
    };
    match token {
        Some(token) => println!("7. payments/today.csv holds {data:?} (token {token})"),
        None => println!("7. today.csv holds {data:?}"),
    }
    Ok((verdict, data, events))
}

fn demo(db: Option<&str>, events_file: Option<&str>) -> Outcome {
    let dir = tempfile_dir()?;
    let shown = db.map_or_else(|| dir.display().to_string(), str::to_owned);
    println!("== With fencing (store in {shown}) ==");
    let (verdict, data, events) = run(&dir, db, "fenced")?;
    let fenced_ok = verdict.starts_with("refused") && data == "B's fresh export";
    if let Some(file) = events_file {
        std::fs::write(file, events)?;
        println!("   (pauses and writes written to {file})");
    }
    println!();
    println!("== Without fencing: the same steps writing a plain file ==");
    let (_, data, _) = run(&dir, None, "unfenced")?;
    if data == "A's stale export" {
        println!("   A's late write overwrote B's fresh data: the lease alone did not protect it.");
    }
    std::fs::remove_dir_all(&dir)?;
    println!();
    if fenced_ok {
        println!("Fencing held: A's stale write was refused and B's data stayed.");
        Ok(())
    } else {
        Err("fencing did not hold".into())
    }
}

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("fencelock-gc-pause-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
