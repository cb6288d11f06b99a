//! An etcd cluster of this test's own: `etcd` processes on free loopback ports with data in a
//! temporary directory, killed when the cluster drops. The binary is `$FENCELOCK_ETCD` or
//! `etcd` on the PATH; without it the test fails and says how to install it.
//!
//! Each member also dies with the thread that started it (`PR_SET_PDEATHSIG`), so that a test
//! process that ends without dropping its cluster (killed, aborted, or holding it in a static)
//! leaves no etcd running: start a cluster from a thread that lives as long as its use.

#![allow(dead_code)] // each test target uses part of it

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fencelock::{Options, Store};

pub struct Member {
    pub name: String,
    pub client_port: u16,
    /// Where the member listens for its peers.
    peer_port: u16,
    /// Where its peers reach it: `peer_port`, or a proxy in front of it.
    advertised_peer_port: u16,
    dir: PathBuf,
    log: PathBuf,
    /// Flags it starts with beside the cluster's own.
    flags: Vec<String>,
    child: Option<Child>,
}

pub struct Cluster {
    pub members: Vec<Member>,
    dir: tempfile::TempDir,
}

/// A loopback port free now, never handed out before in this process, and below the kernel's
/// range of ephemeral ports (`ip_local_port_range`, 32768 and up by default): a port the kernel
/// picked for `bind(0)` could be picked again for another test's listener, or as the source port
/// of any connection, between this test letting it go and etcd binding it (etcd then exits with
/// "address already in use").
fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let random = std::collections::hash_map::RandomState::new();
    for attempt in 0u64.. {
        let mut hasher = random.build_hasher();
        hasher.write_u64(attempt);
        let port = 20_000 + (hasher.finish() % 12_000) as u16;
        let mut given = GIVEN.lock().unwrap();
        let given = given.get_or_insert_with(HashSet::new);
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
        assert!(attempt < 10_000, "no free loopback port in 20000-31999");
    }
    unreachable!()
}

fn binary() -> String {
    std::env::var("FENCELOCK_ETCD").unwrap_or_else(|_| "etcd".into())
}

impl Cluster {
    /// One node.
    pub fn single() -> Cluster {
        Cluster::start(1)
    }

    /// `size` members on loopback, answering once the cluster has a leader.
    pub fn start(size: usize) -> Cluster {
        Cluster::start_advertising(size, |_, peer_port| peer_port)
    }

    /// One node started with `flags` as well (etcd's own, such as its keep-alive timing).
    pub fn single_with(flags: &[&str]) -> Cluster {
        Cluster::start_with(1, |_, peer_port| peer_port, flags)
    }

    /// Like [`Cluster::start`], with the peers of member `i` reaching it at the port
    /// `advertise(i, peer_port)` returns for the port it listens on (a proxy in front of it,
    /// started before the member).
    pub fn start_advertising(size: usize, advertise: impl FnMut(usize, u16) -> u16) -> Cluster {
        Cluster::start_with(size, advertise, &[])
    }

    fn start_with(
        size: usize,
        mut advertise: impl FnMut(usize, u16) -> u16,
        flags: &[&str],
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<Member> = (0..size)
            .map(|i| {
                let peer_port = free_port();
                Member {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port,
                    advertised_peer_port: advertise(i, peer_port),
                    dir: dir.path().join(format!("m{i}.etcd")),
                    log: dir.path().join(format!("m{i}.log")),
                    flags: flags.iter().map(std::string::ToString::to_string).collect(),
                    child: None,
                }
            })
            .collect();
        let mut cluster = Cluster { members, dir };
        let initial = cluster.initial();
        for i in 0..size {
            cluster.members[i].spawn(&initial);
        }
        cluster.wait_ready();
        cluster
    }

    /// The store string of the whole cluster with key prefix `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        let endpoints = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",");
        format!("etcd://{endpoints}/{prefix}")
    }

    pub fn open(&self, prefix: &str) -> Store {
        Store::open(self.url(prefix)).expect("open the etcd store")
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        let options = Options {
            busy_timeout: Duration::from_secs(2),
            ..Options::default()
        };
        loop {
            let opened = Store::open_with(self.url("ready"), &options)
                .and_then(|store| store.acquire("ready", Duration::from_secs(2)).map(drop));
            match opened {
                Ok(()) => return,
                Err(err) if start.elapsed() > Duration::from_secs(60) => {
                    panic!("etcd did not answer within 60 s: {err}\n{}", self.logs())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
            for member in &mut self.members {
                if let Some(status) = member
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                {
                    panic!(
                        "etcd {} exited with {status}\n{}",
                        member.name,
                        member.tail()
                    );
                }
            }
        }
    }

    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(Member::tail)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Member {
    fn spawn(&mut self, initial: &str) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let advertised = format!("http://127.0.0.1:{}", self.advertised_peer_port);
        let log = std::fs::File::create(&self.log).expect("etcd log file");
        let mut command = Command::new(binary());
        // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
        // which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &advertised,
            ])
            .args([
                "--initial-cluster",
                initial,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--initial-cluster-token", "fencelock-test"])
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn();
        match child {
            Ok(child) => self.child = Some(child),
            Err(err) => panic!(
                "cannot start `{}` ({err}): these tests need etcd; install it with \
                 `apt-get install etcd-server` or set FENCELOCK_ETCD to the binary",
                binary()
            ),
        }
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| i32::try_from(c.id()).unwrap())
    }

    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: a signal to our own child, which we have not reaped.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// SIGKILLs the member and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed member again with its data.
    pub fn restart(&mut self, initial: &str) {
        self.kill();
        self.spawn(initial);
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "--- {} ---\n{}",
            self.name,
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }
}

impl Cluster {
    pub fn initial(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.advertised_peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Cluster {
    /// Kills every member and removes their data: what dropping the cluster does, for a
    /// cluster that is never dropped.
    pub fn shut_down(&mut self) {
        for member in &mut self.members {
            member.signal(libc::SIGCONT);
            member.kill();
        }
        let _ = std::fs::remove_dir_all(self.dir.path());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shut_down();
    }
}
