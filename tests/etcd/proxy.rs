//! A TCP proxy on loopback that a test controls: it forwards every connection made to its port
//! to an etcd member, and can hold what it forwards (a partition: bytes wait, as TCP would
//! retransmit them, and pass at the heal) or delay it (a slow link).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What one proxied link does to the bytes it forwards.
#[derive(Default)]
pub struct Link {
    pub frozen: bool,
    pub delay: Duration,
}

pub struct Proxy {
    pub port: u16,
    link: Arc<(Mutex<Link>, Condvar)>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let link = Arc::new((Mutex::new(Link::default()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (link2, stop2) = (Arc::clone(&link), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            continue;
                        };
                        client.set_nonblocking(false).expect("blocking");
                        pump(&client, &server, &link2, &stop2);
                        pump(&server, &client, &link2, &stop2);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { port, link, stop }
    }

    /// Holds everything sent either way from now on.
    pub fn freeze(&self) {
        self.link.0.lock().unwrap().frozen = true;
    }

    /// Passes what was held, and what follows.
    pub fn thaw(&self) {
        self.link.0.lock().unwrap().frozen = false;
        self.link.1.notify_all();
    }

    /// Delays each chunk by `delay`, each way.
    pub fn delay(&self, delay: Duration) {
        self.link.0.lock().unwrap().delay = delay;
        self.link.1.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.thaw();
    }
}

/// Forwards `from` to `to` through a queue, so that reading goes on while a chunk waits.
pub fn pump(
    from: &TcpStream,
    to: &TcpStream,
    link: &Arc<(Mutex<Link>, Condvar)>,
    stop: &Arc<AtomicBool>,
) {
    let (sender, receiver) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut from = from.try_clone().expect("clone");
    thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if sender.send((Instant::now(), buffer[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut to = to.try_clone().expect("clone");
    let (link, stop) = (Arc::clone(link), Arc::clone(stop));
    thread::spawn(move || {
        for (read_at, chunk) in receiver {
            let (lock, changed) = &*link;
            let mut state = lock.lock().unwrap();
            loop {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let due = read_at + state.delay;
                let now = Instant::now();
                if state.frozen {
                    state = changed.wait(state).unwrap();
                } else if now < due {
                    state = changed.wait_timeout(state, due - now).unwrap().0;
                } else {
                    break;
                }
            }
            drop(state);
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
