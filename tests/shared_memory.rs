//! The leases of a multi-process store live in its shared memory: what holds when that memory
//! is not shared by luck, is removed or cut short under its users, or when a process stops
//! anywhere in its lease operations.
//!
//! Children are this test binary run again with `FENCELOCK_TEST_ROLE` set; the `child` test
//! then plays the role and reports on stdout in lines marked with `@@ `.

mod common;

use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fencelock::{Error, Options, Store};

use common::{ring_of, say, Kid, DB, ROLE};

/// Not a test of its own: the entry point of child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let path = std::env::var(DB).unwrap();
    match role.as_str() {
        // Holds "job" until told to go.
        "hold" => {
            let store = Store::open(&path).unwrap();
            let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
            say(format!("token {}", holder.token()));
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            drop(holder);
        }
        // Opens the store and tries "job" once: how that went.
        "try" => match Store::open(&path) {
            Err(err) => say(format!("refused {err}")),
            Ok(store) => match store.acquire("job", Duration::from_secs(60)) {
                Ok(holder) => say(format!("token {}", holder.token())),
                Err(Error::Locked { token, .. }) => say(format!("locked {token}")),
                Err(err) => say(format!("error {err}")),
            },
        },
        // Acquires, extends and releases "cycling" as fast as it can, until killed.
        "cycle" => {
            let store = Store::open(&path).unwrap();
            say("cycling");
            loop {
                // A stop longer than the TTL loses the lease, and the parent takes the lock:
                // the extend is refused then, the release reports the loss, and the next
                // acquire waits its turn.
                let holder = store
                    .acquire_wait(
                        "cycling",
                        Duration::from_millis(100),
                        Duration::from_secs(60),
                    )
                    .unwrap();
                let _ = holder.extend(Duration::from_millis(100));
                match holder.release() {
                    Ok(()) | Err(Error::LockLost { .. }) => {}
                    Err(err) => panic!("a release: {err}"),
                }
            }
        }
        // Takes "job" and ends without closing the store, as a crash does: the store seals
        // nothing, and its shared memory is left behind.
        "take-and-crash" => {
            let store = Store::open(&path).unwrap();
            let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
            say(format!("token {}", holder.token()));
            std::process::exit(0);
        }
        // Holds "job" until told the ring was cut short, then reports how each kind of
        // operation fares: an acquire, a holder's write, a listing, a release.
        "cut" => cut_short_under(&path),
        // As "cut", with a SIGBUS handler of the host program's installed before the store is
        // opened (as Python's faulthandler or a language runtime does); then faults on a
        // mapping of its own, which must reach that handler.
        "cut-with-handler" => {
            install_host_handler();
            cut_short_under(&path);
            fault_outside_the_ring();
        }
        // Opens the store (its ring mapped) and faults on a mapping of its own: the process
        // must die of that SIGBUS, as it would without the library.
        "foreign-fault" => {
            let store = Store::open(&path).unwrap();
            let _holder = store.acquire("job", Duration::from_secs(600)).unwrap();
            say("faulting");
            fault_outside_the_ring();
            say("survived");
        }
        other => panic!("unknown role {other}"),
    }
}

/// What the role "cut" does (see `child`).
fn cut_short_under(path: &str) {
    let store = Store::open(path).unwrap();
    let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
    say(format!("held {}", holder.token()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let outcome = |what: &str, result: Result<(), Error>| match result {
        Ok(()) => say(format!("{what} ok")),
        Err(err) => say(format!("{what} error {err}")),
    };
    outcome(
        "acquire",
        store.acquire("other", Duration::from_secs(60)).map(drop),
    );
    outcome("put", holder.put(b"key", b"value"));
    outcome("locks", store.locks().map(drop));
    outcome("release", holder.release());
    drop(holder);
    drop(store);
    say("alive");
}

/// The exit status of the host program's own SIGBUS handler (`install_host_handler`).
const HOST_HANDLER_EXIT: i32 = 3;

extern "C" fn host_handler(_signal: libc::c_int) {
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        let line = b"@@ host handler\n";
        libc::write(1, line.as_ptr().cast(), line.len());
        libc::_exit(HOST_HANDLER_EXIT);
    }
}

/// Installs a plain (not `SA_SIGINFO`) SIGBUS handler, as a host program might.
fn install_host_handler() {
    // SAFETY: a zeroed sigaction with a handler and an empty mask is valid.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = host_handler as *const () as libc::sighandler_t;
        libc::sigemptyset(&raw mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &raw const action, std::ptr::null_mut())
    };
    assert_eq!(rc, 0);
}

/// Reads a page of a mapping of a file cut short: SIGBUS, in no ring.
fn fault_outside_the_ring() {
    use std::os::fd::AsRawFd;
    let file = tempfile::tempfile().unwrap();
    file.set_len(4096).unwrap();
    // SAFETY: a fresh shared read-only mapping of one page of a file of that length.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED);
    file.set_len(0).unwrap();
    // SAFETY: inside the mapping; the read faults, which is the point.
    let byte = unsafe { std::ptr::read_volatile(page.cast::<u8>()) };
    println!("read {byte}");
}

/// The token of the lock a child playing "cut" took.
fn held(victim: &mut Kid) -> u64 {
    let report = victim.report().expect("the child reported its lock");
    report.strip_prefix("held ").unwrap().parse().unwrap()
}

/// The reports of a child playing "cut" after it was told its ring was cut, up to its end.
fn after_the_cut(victim: &mut Kid) -> Vec<String> {
    writeln!(victim.stdin, "cut").unwrap();
    std::iter::from_fn(|| victim.report()).collect()
}

/// Cuts the ring of the store at `path` to nothing, as anyone who may write it can.
fn cut_ring(path: &std::path::Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(ring_of(path))
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// How a child ended, for a failure message.
fn ended(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(libc::SIGBUS) => "killed by SIGBUS".into(),
        Some(signal) => format!("killed by signal {signal}"),
        None => format!("exited with {status}"),
    }
}

/// The message an operation on a ring cut short fails with.
const CUT: &str =
    "was cut short while in use: its leases are lost to this process; reopen the store";

fn assert_each_operation_failed_on_the_cut(seen: &[String]) {
    for what in ["acquire", "put", "locks", "release"] {
        let report = seen
            .iter()
            .find(|report| report.starts_with(&format!("{what} ")))
            .unwrap_or_else(|| panic!("no report of the {what}: {seen:?}"));
        assert!(
            report.starts_with(&format!("{what} error ")) && report.contains(CUT),
            "{report}"
        );
    }
}

/// This test binary, run in a mount namespace of its own with a /dev/shm of its own (an empty
/// tmpfs), playing `role`: as a process of another container that bind-mounts the store file.
fn spawn_in_private_shm(role: &str, db: &std::path::Path) -> std::process::Output {
    let out = common::in_private_shm()
        .env(ROLE, role)
        .env(DB, db)
        .stdin(Stdio::null())
        .output()
        .expect("unshare(1) from util-linux runs");
    assert!(
        out.status.success(),
        "a private /dev/shm needs root and unshare(1): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The report lines of a child's output.
fn reports(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_once("@@ ").map(|(_, report)| report.to_owned()))
        .collect()
}

#[test]
fn a_process_that_cannot_share_the_stores_shared_memory_is_refused_while_others_use_it() {
    let (_dir, path, store) = common::temp_store();
    let mut holder = Kid::spawn("hold", &path);
    let token = holder.token();
    // Another /dev/shm: it would keep a lease table of its own, and grant the lock again.
    let out = spawn_in_private_shm("try", &path);
    let seen = reports(&out);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("refused") && seen[0].contains("another copy of its shared memory"),
        "{seen:?}"
    );
    // This side still excludes.
    assert!(matches!(
        store.acquire("job", Duration::from_secs(1)),
        Err(Error::Locked { token: t, .. }) if t == token
    ));
    // Once every process of this side closed the store, the other side may use it.
    writeln!(holder.stdin, "go").unwrap();
    assert!(holder.child.wait().unwrap().success());
    drop(store);
    let out = spawn_in_private_shm("try", &path);
    let seen = reports(&out);
    assert!(seen.len() == 1 && seen[0].starts_with("token "), "{seen:?}");
    let other_side: u64 = seen[0]["token ".len()..].parse().unwrap();
    assert!(
        other_side > token,
        "tokens went back: {other_side} after {token}"
    );
    // And this side is refused while... nobody there holds it any more: it opens again.
    let again = Store::open(&path).unwrap();
    assert!(
        again
            .acquire("job", Duration::from_secs(1))
            .unwrap()
            .token()
            > other_side
    );
}

#[test]
fn removing_the_shared_memory_under_a_live_holder_grants_the_lock_to_nobody_else() {
    let (_dir, path, store) = common::temp_store();
    let mut holder = Kid::spawn("hold", &path);
    let token = holder.token();
    drop(store);
    // As systemd-logind's RemoveIPC or a tmp cleaner does.
    std::fs::remove_file(ring_of(&path)).unwrap();
    let mut late = Kid::spawn("try", &path);
    let seen = late.report().unwrap();
    assert!(
        seen.starts_with("refused") && seen.contains("another copy of its shared memory"),
        "{seen}"
    );
    assert!(late.child.wait().unwrap().success());
    writeln!(holder.stdin, "go").unwrap();
    assert!(holder.child.wait().unwrap().success());
    // The holder gone, the store opens on a new ring, and its tokens go on.
    let store = Store::open(&path).unwrap();
    assert!(
        store
            .acquire("job", Duration::from_secs(1))
            .unwrap()
            .token()
            > token
    );
}

#[test]
fn a_process_stopped_anywhere_in_its_lease_operations_delays_nobody_else() {
    let (_dir, path, _store) = common::temp_store();
    let mut cycler = Kid::spawn("cycle", &path);
    assert_eq!(cycler.report().as_deref(), Some("cycling"));
    // Others grant, extend and release locks of their own all along; while the process is
    // stopped they must go on completing (were they waiting for it, none would complete until
    // it resumes).
    let options = Options {
        busy_timeout: Duration::from_secs(30),
        ..Options::default()
    };
    let store = Store::open_with(&path, &options).unwrap();
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for i in 0..2 {
            let (store, stop, done) = (&store, &stop, &done);
            scope.spawn(move || {
                let name = format!("other-{i}");
                while !stop.load(Ordering::Relaxed) {
                    let holder = store
                        .acquire_wait(&name, Duration::from_secs(60), Duration::from_secs(30))
                        .unwrap_or_else(|err| panic!("an acquire of {name}: {err}"));
                    holder
                        .extend(Duration::from_secs(60))
                        .unwrap_or_else(|err| panic!("an extend of {name}: {err}"));
                    holder
                        .release()
                        .unwrap_or_else(|err| panic!("a release of {name}: {err}"));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Stopped 50 times at random moments of its loop, for longer than its TTL (100 ms).
        let mut seed = u64::from(std::process::id());
        for _ in 0..50 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            std::thread::sleep(Duration::from_micros(200 + (seed >> 33) % 3000));
            cycler.stop();
            let before = done.load(Ordering::Relaxed);
            // A bound that catches operations held up until the process resumes, not slow ones.
            let stuck = std::time::Instant::now() + Duration::from_secs(60);
            while done.load(Ordering::Relaxed) < before + 3 {
                assert!(
                    std::time::Instant::now() < stuck,
                    "no other operation completed while the process was stopped"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            // Whatever the stop interrupted, the lock it cycles is granted again once its lease
            // has ended (within its TTL, 100 ms; the wait's limit only catches a hang).
            let granted = store
                .acquire_wait(
                    "cycling",
                    Duration::from_millis(50),
                    Duration::from_secs(60),
                )
                .unwrap_or_else(|err| panic!("the stopped process's lock: {err}"));
            drop(granted);
            cycler.signal(libc::SIGCONT);
        }
        stop.store(true, Ordering::Relaxed);
    });
    cycler.signal(libc::SIGKILL);
    let _ = cycler.child.wait();
    store.verify().unwrap();
}

#[test]
fn shared_memory_left_behind_by_its_last_user_is_set_up_anew_and_tokens_never_go_back() {
    let (_dir, path, store) = common::temp_store();
    let first = store
        .acquire("job", Duration::from_secs(60))
        .unwrap()
        .token();
    // The shared memory as its last user leaves it: that user seals the file (its last token
    // is the counter), and a process that exits before its store is dropped (a thread of the
    // store still running) leaves the memory behind in /dev/shm.
    let ring = ring_of(&path);
    let left = std::fs::read(&ring).unwrap();
    drop(store);
    assert!(!ring.exists(), "the last user removes the shared memory");
    std::fs::write(&ring, &left).unwrap();
    // The next process is alone with that memory.
    crash_then_reboot(&path, first);
}

/// A process takes a lease after token `first` and crashes; then a reboot (or a cleaner of
/// /dev/shm) ends the store's shared memory, and the file alone says which tokens may have been
/// handed out: the next grant's token is above the crashed process's.
fn crash_then_reboot(path: &std::path::Path, first: u64) {
    let mut crashed = Kid::spawn("take-and-crash", path);
    let second = crashed.token();
    assert!(crashed.child.wait().unwrap().success());
    assert!(second > first);
    std::fs::remove_file(ring_of(path)).unwrap();
    let store = Store::open(path).unwrap();
    let third = store
        .acquire("job", Duration::from_secs(60))
        .unwrap()
        .token();
    assert!(
        third > second,
        "token {third} after {second}: a token was handed out twice"
    );
}

/// Sets the store file's reservation (and the seal of it) to `bound`, as a store whose lease
/// map refilled its reservation a few times (its block doubles at each refill, about every 2^19
/// grants) leaves them when its last user closes it cleanly.
fn seal_far_ahead(path: &std::path::Path, bound: u64) {
    use redb::ReadableTable;
    let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("fencelock.meta");
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(meta).unwrap();
        assert_eq!(
            table.get("sealed_reservation").unwrap().map(|v| v.value()),
            table.get("reserved_token").unwrap().map(|v| v.value()),
            "the clean close sealed the reservation"
        );
        table.insert("reserved_token", bound).unwrap();
        table.insert("sealed_reservation", bound).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn a_token_is_never_handed_out_twice_after_a_clean_close_then_a_crash() {
    let (_dir, path, store) = common::temp_store();
    let first = store
        .acquire("job", Duration::from_secs(60))
        .unwrap()
        .token();
    // The last user closes cleanly: the counter is the last token, and the seal says that no
    // token above it was handed out. Its reservation reaches far beyond the next block.
    drop(store);
    seal_far_ahead(&path, first + (1 << 24));
    // The next map goes on from the counter; a process takes a lease and dies, and so does
    // the map (a reboot, or /dev/shm cleaned).
    crash_then_reboot(&path, first);
}

#[test]
fn leases_commit_nothing_but_a_flush_of_their_history_now_and_then() {
    let (_dir, _path, store) = common::temp_store();
    let before = store.metrics().unwrap().commits;
    // One lock, granted again and again: its record keeps the latest ends only, and each
    // flush writes them.
    let grants = 5_000u64;
    for _ in 0..grants {
        store
            .acquire("job", Duration::from_secs(60))
            .unwrap()
            .release()
            .unwrap();
    }
    let commits = store.metrics().unwrap().commits - before;
    // A flush per 512 ends recorded, and a token reservation ahead of need.
    assert!(
        commits <= grants / 512 + 2,
        "{commits} commits for {grants} grants"
    );
}

#[test]
fn more_waiters_than_the_queue_holds_are_each_granted_the_lock_in_turn() {
    let (_dir, _path, store) = common::temp_store();
    let held = store.acquire("job", Duration::from_secs(60)).unwrap();
    // The queue in shared memory holds 63 waiters; the others wait without a place.
    let waiters = 100;
    let granted = AtomicU64::new(0);
    let inside = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..waiters {
            scope.spawn(|| {
                let holder = store
                    .acquire_wait("job", Duration::from_secs(60), Duration::from_secs(120))
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                granted.fetch_add(1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                holder.release().unwrap();
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        held.release().unwrap();
    });
    assert_eq!(granted.load(Ordering::SeqCst), waiters);
}

#[test]
fn stores_opened_while_the_last_user_closes_are_never_refused() {
    // The last user of a store removes its shared memory as it closes; a store opened at that
    // moment (here in one thread while another drops the previous store, as a garbage
    // collector's finalizer closes an old handle) sets up a new one, and must not find the old
    // one's claim still held.
    let (_dir, path, store) = common::temp_store();
    drop(store);
    let (give, take) = std::sync::mpsc::sync_channel::<Store>(1);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while let Ok(store) = take.recv() {
                drop(store);
            }
        });
        for round in 0..300 {
            let store =
                Store::open(&path).unwrap_or_else(|err| panic!("open {round} refused: {err}"));
            give.send(store).unwrap();
        }
        drop(give);
    });
}

#[test]
fn a_ring_cut_short_under_its_users_fails_their_operations_and_kills_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let mut victim = Kid::spawn("cut", &path);
    let token = held(&mut victim);
    cut_ring(&path);
    // A store opened now does not map the short file, and says why.
    let mut late = Kid::spawn("try", &path);
    let seen = late.report().unwrap();
    assert!(
        seen.starts_with("refused") && seen.contains("cut short"),
        "{seen}"
    );
    assert!(late.child.wait().unwrap().success());
    let seen = after_the_cut(&mut victim);
    let status = victim.child.wait().unwrap();
    assert!(status.success(), "the victim {}: {seen:?}", ended(status));
    assert_each_operation_failed_on_the_cut(&seen);
    assert_eq!(seen.last().map(String::as_str), Some("alive"));
    // Its last user gone, the store opens on a new ring, and its tokens go on.
    let store = Store::open(&path).unwrap();
    let next = store
        .acquire("job", Duration::from_secs(1))
        .unwrap()
        .token();
    assert!(next > token, "tokens went back: {next} after {token}");
}

#[test]
fn a_sigbus_in_no_ring_still_kills_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let mut child = Kid::spawn("foreign-fault", &path);
    assert_eq!(child.report().as_deref(), Some("faulting"));
    let status = child.child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGBUS),
        "the child {}",
        ended(status)
    );
}

#[test]
fn a_sigbus_handler_of_the_host_program_still_gets_faults_outside_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let mut victim = Kid::spawn("cut-with-handler", &path);
    held(&mut victim);
    cut_ring(&path);
    let seen = after_the_cut(&mut victim);
    let status = victim.child.wait().unwrap();
    // The ring's fault is the library's (the host's handler is not called for it); the
    // mapping of the program's own is the host's.
    assert_each_operation_failed_on_the_cut(&seen);
    assert_eq!(
        &seen[seen.len() - 2..],
        ["alive", "host handler"],
        "{seen:?}"
    );
    assert_eq!(
        status.code(),
        Some(HOST_HANDLER_EXIT),
        "the child {}",
        ended(status)
    );
}
