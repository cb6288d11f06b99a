//! The floor of a durable write, in Rust: the group sync of `ring/flush.rs` (reserve, pwrite,
//! mark, await; one process at a time syncing for all) over one preallocated log file, with 1,
//! 4, 8 and 16 processes, beside the C prototype of docs/design/writes.md
//! (`benches/floor/group_commit.c`, the same algorithm with fixed-size records) in the same run.
//!
//! ```text
//! cargo bench --bench group_sync                 # 3 s per row, the log under target/
//! cargo bench --bench group_sync -- --seconds 5 --dir /some/disk
//! ```
//!
//! Each process (this program with the role `writer`) appends 128-byte records as fast as it
//! can for the duration. Printed per row: acknowledged writes per second, fdatasync calls per
//! write, and the p50 and p99 of one append (from reserve to acknowledgement) over all
//! processes. The machine is shared: quote medians of quiet runs, and read the two rows of one
//! N side by side rather than against another run.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fencelock::SharedLogFile;

const RECORD: usize = 128;
const LOG_SIZE: u64 = 256 << 20;
const ROLE: &str = "FENCELOCK_BENCH_ROLE";

/// The role `writer DIR SECONDS INDEX`: appends until the time is up, then writes its
/// latencies (ns, u64 LE) to DIR/lat-INDEX and prints its appends and syncs.
fn writer(dir: &Path, seconds: f64, index: usize) {
    let log = SharedLogFile::open(Path::new("/dev/shm"), &dir.join("store"), &dir.join("log"))
        .expect("open the group sync");
    let record = [b'r'; RECORD];
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut latencies = Vec::with_capacity(1 << 20);
    let mut skipped = 0u64;
    while Instant::now() < until {
        let start = Instant::now();
        match log.append(&record) {
            Ok(_) => latencies.push(u64::try_from(start.elapsed().as_nanos()).unwrap()),
            // Descheduled between its reserve and its mark for longer than GAP_PATIENCE: its
            // gap was skipped (counted, and printed when any).
            Err(fencelock::Error::Timeout { .. }) => skipped += 1,
            Err(err) => panic!("an append: {err}"),
        }
    }
    let bytes: Vec<u8> = latencies.iter().flat_map(|l| l.to_le_bytes()).collect();
    std::fs::write(dir.join(format!("lat-{index}")), bytes).unwrap();
    println!("{} {} {skipped}", latencies.len(), log.syncs());
}

fn prepare(dir: &Path) {
    std::fs::write(dir.join("store"), b"").unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for at in (0..LOG_SIZE).step_by(zeros.len()) {
        log.write_all_at(&zeros, at).unwrap();
    }
    log.sync_all().unwrap();
}

fn row(base: &Path, processes: usize, seconds: f64) {
    let dir = base.join(format!("group-sync-{processes}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    prepare(&dir);
    let mut kids: Vec<_> = (0..processes)
        .map(|index| {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .env(
                    ROLE,
                    format!("writer {} {seconds} {index}", dir.to_str().unwrap()),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            (child, out)
        })
        .collect();
    for (child, _) in &mut kids {
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    }
    let (mut writes, mut syncs, mut skipped) = (0u64, 0u64, 0u64);
    for (mut child, mut out) in kids {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let counts: Vec<u64> = line
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        writes += counts[0];
        syncs += counts[1];
        skipped += counts[2];
        assert!(child.wait().unwrap().success());
    }
    let mut all: Vec<u64> = (0..processes)
        .flat_map(|index| {
            std::fs::read(dir.join(format!("lat-{index}")))
                .unwrap()
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort_unstable();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // An index in 0..len.
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)] as f64 / 1e3;
    println!(
        "rust  processes {processes:2}: {:6.0} writes/s, {:.2} fdatasync per write, p50 {:4.0} us, p99 {:5.0} us",
        writes as f64 / seconds,
        syncs as f64 / writes as f64,
        at(0.5),
        at(0.99)
    );
    if skipped > 0 {
        println!("      ({skipped} appends skipped: descheduled past GAP_PATIENCE)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The C prototype, built from `benches/floor/group_commit.c`, if a C compiler is here.
fn prototype(base: &Path) -> Option<PathBuf> {
    let binary = base.join("group_commit");
    let built = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/floor/group_commit.c"
        ))
        .status()
        .ok()?;
    built.success().then_some(binary)
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        let words: Vec<&str> = role.split(' ').collect();
        writer(
            Path::new(words[1]),
            words[2].parse().unwrap(),
            words[3].parse().unwrap(),
        );
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|at| args.get(at + 1).cloned())
    };
    let seconds: f64 = value("--seconds").map_or(3.0, |s| s.parse().unwrap());
    let base = PathBuf::from(
        value("--dir").unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/target").into()),
    );
    let prototype = prototype(&base);
    for processes in [1, 4, 8, 16] {
        row(&base, processes, seconds);
        if let Some(binary) = &prototype {
            let out = Command::new(binary)
                .arg(&base)
                .arg(processes.to_string())
                .arg(seconds.to_string())
                .output()
                .unwrap();
            print!("C     {}", String::from_utf8_lossy(&out.stdout));
        }
    }
}
