//! An etcd cluster whose members reach each other through proxies (`proxy.rs`), one link per
//! pair of members: a test freezes a pair's link (a partition between two members) or slows
//! it, while the members' clients connect as they like.
//!
//! Each member advertises a proxy's port to its peers, so every connection between members goes
//! through the proxy of the member dialed. The proxy tells which member dialed by the process
//! that owns the dialing socket (`/proc/net/tcp` and `/proc/PID/fd`, among this test process's
//! etcd children, by their `--name`), and forwards the connection on the link of that pair.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::proxy::{pump, Link};

type Shared = Arc<(Mutex<Link>, Condvar)>;

pub struct Peers {
    pub cluster: Cluster,
    /// `links[a][b]` and `links[b][a]` are the one link between members `a` and `b`.
    links: Vec<Vec<Shared>>,
    stop: Arc<AtomicBool>,
}

impl Peers {
    /// `size` members on loopback with a link between each pair, answering once the cluster
    /// has a leader.
    pub fn start(size: usize) -> Peers {
        let pairs: Vec<Shared> = (0..size * size)
            .map(|_| Arc::new((Mutex::new(Link::default()), Condvar::new())))
            .collect();
        let links: Vec<Vec<Shared>> = (0..size)
            .map(|a| {
                (0..size)
                    .map(|b| Arc::clone(&pairs[a.min(b) * size + a.max(b)]))
                    .collect()
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let cluster = Cluster::start_advertising(size, |member, peer_port| {
            listen(member, peer_port, links[member].clone(), Arc::clone(&stop))
        });
        Peers {
            cluster,
            links,
            stop,
        }
    }

    fn set(&self, a: usize, b: usize, change: impl FnOnce(&mut Link)) {
        let (lock, changed) = &*self.links[a][b];
        change(&mut lock.lock().unwrap());
        changed.notify_all();
    }

    /// Holds everything sent between `member` and each other member from now on.
    pub fn cut_off(&self, member: usize) {
        for other in (0..self.links.len()).filter(|&o| o != member) {
            self.set(member, other, |link| link.frozen = true);
        }
    }

    /// Delays each chunk sent between members `a` and `b` by `delay`, each way.
    pub fn slow(&self, a: usize, b: usize, delay: Duration) {
        self.set(a, b, |link| link.delay = delay);
    }

    /// Passes what every link held, and what follows, without delay.
    pub fn heal(&self) {
        for a in 0..self.links.len() {
            for b in a + 1..self.links.len() {
                self.set(a, b, |link| *link = Link::default());
            }
        }
    }

    /// The store string of the members `members` only, with key prefix `prefix`.
    pub fn url_of(&self, members: &[usize], prefix: &str) -> String {
        let endpoints = members
            .iter()
            .map(|&m| format!("127.0.0.1:{}", self.cluster.members[m].client_port))
            .collect::<Vec<_>>()
            .join(",");
        format!("etcd://{endpoints}/{prefix}")
    }

    /// The member among `members` that says it is the leader, asked again until `timeout`.
    pub fn leader_among(&self, members: &[usize], timeout: Duration) -> Option<usize> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < timeout {
            for &i in members {
                let endpoint = format!("http://127.0.0.1:{}", self.cluster.members[i].client_port);
                let asked = runtime.block_on(async {
                    tokio::time::timeout(Duration::from_secs(1), async {
                        let mut client = etcd_client::Client::connect([endpoint], None).await?;
                        client.status().await
                    })
                    .await
                });
                if let Ok(Ok(status)) = asked {
                    if status.leader()
                        == status
                            .header()
                            .map_or(0, etcd_client::ResponseHeader::member_id)
                    {
                        return Some(i);
                    }
                }
            }
            thread::sleep(Duration::from_millis(200));
        }
        None
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.heal();
    }
}

/// Starts the proxy in front of `member`'s peer port; returns the port it listens on.
fn listen(member: usize, peer_port: u16, links: Vec<Shared>, stop: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    listener.set_nonblocking(true).expect("nonblocking");
    // Connections whose dialer is not found pass on a link of their own, never frozen.
    let open: Shared = Arc::new((Mutex::new(Link::default()), Condvar::new()));
    thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((client, from)) => {
                    let (links, open, stop) = (links.clone(), Arc::clone(&open), Arc::clone(&stop));
                    thread::spawn(move || {
                        let link = match dialer(from, port) {
                            Some(dialer) if dialer != member => &links[dialer],
                            _ => &open,
                        };
                        let Ok(server) = TcpStream::connect(("127.0.0.1", peer_port)) else {
                            return;
                        };
                        client.set_nonblocking(false).expect("blocking");
                        pump(&client, &server, link, &stop);
                        pump(&server, &client, link, &stop);
                    });
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    port
}

/// The member (`--name mN`) whose process owns the socket that connected from `from` to the
/// loopback port `to`: looked for a few times, as a new socket shows in /proc at once but its
/// owner's table is read in steps.
fn dialer(from: SocketAddr, to: u16) -> Option<usize> {
    (0..20).find_map(|_| {
        let found = socket_inode(from.port(), to).and_then(|inode| owner(&inode));
        if found.is_none() {
            thread::sleep(Duration::from_millis(5));
        }
        found
    })
}

/// The inode of the TCP socket from local port `local` to remote port `remote`.
fn socket_inode(local: u16, remote: u16) -> Option<String> {
    let (local, remote) = (format!(":{local:04X}"), format!(":{remote:04X}"));
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            text.lines().skip(1).find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.len() > 9
                    && fields[1].ends_with(&local)
                    && fields[2].ends_with(&remote)
                    && fields[9] != "0")
                    .then(|| fields[9].to_string())
            })
        })
}

/// The member index of the etcd child of this process that holds socket `inode`.
fn owner(inode: &str) -> Option<usize> {
    let link = format!("socket:[{inode}]");
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let dir = entry.path();
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // The parent is the second field after the command, which is in parentheses.
            let parent = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            if parent != me {
                return None;
            }
            let cmdline = std::fs::read_to_string(dir.join("cmdline")).ok()?;
            let args: Vec<&str> = cmdline.split('\0').collect();
            let name = args.windows(2).find(|w| w[0] == "--name")?[1];
            let index: usize = name.strip_prefix('m')?.parse().ok()?;
            std::fs::read_dir(dir.join("fd"))
                .ok()?
                .flatten()
                .any(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|target| target.as_os_str() == link.as_str())
                })
                .then_some(index)
        })
}
