//! The server's doorbell (`server.rs`): a server that goes to sleep as a request is posted is
//! woken for it, or sees it before it sleeps (a model's wait has no timeout).

use loom::sync::Arc;
use loom::thread;

use super::{check, Procs};
use crate::ring::Ring;

#[test]
fn a_post_wakes_a_sleeping_server_or_is_seen_before_it_sleeps() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(1));
        let server = {
            let ring = ring.clone();
            thread::spawn(move || {
                while !ring.any_posted() {
                    ring.await_posted(std::time::Duration::MAX);
                }
            })
        };
        let posted = ring
            .try_post(1, b"r", &*procs)
            .expect("no bulk file")
            .expect("a free slot");
        server.join().expect("the server");
        assert!(ring.withdraw(&posted));
    });
}
