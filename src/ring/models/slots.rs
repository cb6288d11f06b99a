//! The request slots (`slots.rs`): a posted request is run once and its reply reaches its own
//! requester, who is woken for it (no lost wake-up: a model's wait has no timeout); a request
//! withdrawn while a combiner takes it is either run or withdrawn, never both or neither; a
//! combiner that dies after taking a request, or after answering it, or at any step of a round
//! over two requests, leaves exactly one answer to each (or a request given up on, whose slot is
//! reclaimed).

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::{check, Procs};
use crate::ring::{Live, Phase, Posted, Ring};

/// Waits for the reply to `posted`, as `local/route.rs` does: sleeps on the slot's word while
/// the request is posted or taken.
fn await_reply(ring: &Ring, posted: Posted) -> Vec<u8> {
    loop {
        match ring.phase(&posted) {
            Phase::Done => return ring.reply(posted),
            Phase::Posted(seen) | Phase::Taken(_, seen) => {
                ring.wait(&posted, seen, std::time::Duration::MAX);
            }
            Phase::Lost => panic!("a live requester's slot was lost"),
        }
    }
}

/// A combiner (liveness id `id`): takes posted requests until it ran `count`, publishing each
/// request's bytes reversed as its reply.
fn combine(ring: &Ring, procs: &Procs, id: u64, count: usize) {
    let mut ran = 0;
    while ran < count {
        let taken = ring.take_posted(id, procs);
        for request in &taken {
            let reply: Vec<u8> = request.request.iter().rev().copied().collect();
            ring.publish(request, &reply).expect("a reply that fits");
        }
        ran += taken.len();
        if taken.is_empty() {
            thread::yield_now();
        }
    }
}

#[test]
fn each_requester_gets_its_own_reply_and_is_woken_for_it() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(3));
        let requesters: Vec<_> = [(1u64, b"ab".as_slice()), (2, b"xyz".as_slice())]
            .into_iter()
            .map(|(owner, request)| {
                let (ring, procs) = (ring.clone(), procs.clone());
                thread::spawn(move || {
                    let posted = ring
                        .try_post(owner, request, &*procs)
                        .expect("no bulk file")
                        .expect("a free slot");
                    await_reply(&ring, posted)
                })
            })
            .collect();
        combine(&ring, &procs, 3, 2);
        let replies: Vec<Vec<u8>> = requesters
            .into_iter()
            .map(|r| r.join().expect("a requester"))
            .collect();
        assert_eq!(replies, [b"ba".to_vec(), b"zyx".to_vec()]);
    });
}

#[test]
fn a_request_withdrawn_while_taken_is_run_or_withdrawn_never_both() {
    check(|| {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(2));
        let posted = ring
            .try_post(1, b"req", &*procs)
            .expect("no bulk file")
            .expect("a free slot");
        let combiner = {
            let (ring, procs) = (ring.clone(), procs.clone());
            thread::spawn(move || {
                let taken = ring.take_posted(2, &*procs);
                for request in &taken {
                    ring.publish(request, b"qer").expect("a reply that fits");
                }
                taken.len()
            })
        };
        let withdrawn = ring.withdraw(&posted);
        let reply = (!withdrawn).then(|| await_reply(&ring, posted));
        let ran = combiner.join().expect("the combiner");
        match (withdrawn, ran) {
            (true, 0) => {}
            (false, 1) => assert_eq!(reply.as_deref(), Some(b"qer".as_slice())),
            other => panic!("withdrawn and run: {other:?}"),
        }
        // The slot is free again either way: two posts find two slots.
        let a = ring
            .try_post(1, b"a", &*procs)
            .expect("no bulk")
            .expect("a slot");
        let b = ring
            .try_post(1, b"b", &*procs)
            .expect("no bulk")
            .expect("a slot");
        assert!(ring.withdraw(&a) && ring.withdraw(&b));
    });
}

/// Where the first combiner dies: right after it took the request, or right after it
/// published the reply.
#[derive(Clone, Copy)]
enum DiesAt {
    AfterTake,
    AfterPublish,
}

/// A combiner dies (its liveness lock dropped) at step `k`; its requester, seeing its request
/// taken by a dead combiner, posts it again, as `local/route.rs` does; the next combiner (in the
/// dead one's thread, once it died) runs it. The requester gets one reply, its own; a request run
/// again is marked as a re-run. (The requester polls here: a real one sleeps with a timeout,
/// which no model has.)
fn a_dead_combiners_request_is_run_again(k: DiesAt) {
    check(move || {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(3));
        let answered = Arc::new(AtomicBool::new(false));
        let posted = ring
            .try_post(1, b"req", &*procs)
            .expect("no bulk file")
            .expect("a free slot");
        let combiners = {
            let (ring, procs, answered) = (ring.clone(), procs.clone(), answered.clone());
            thread::spawn(move || {
                let taken = ring.take_posted(2, &*procs);
                if let (DiesAt::AfterPublish, Some(request)) = (k, taken.first()) {
                    ring.publish(request, b"qer").expect("a reply that fits");
                }
                procs.kill(2);
                // The next combiner runs what is posted until the requester has its reply.
                let mut reruns = Vec::new();
                while !answered.load(Ordering::SeqCst) {
                    for request in ring.take_posted(3, &*procs) {
                        reruns.push(request.rerun);
                        ring.publish(&request, b"qer").expect("a reply that fits");
                    }
                    thread::yield_now();
                }
                (taken.len(), reruns)
            })
        };
        let reply = loop {
            match ring.phase(&posted) {
                Phase::Done => break ring.reply(posted),
                Phase::Taken(combiner, _) if !procs.is_held(combiner).expect("liveness") => {
                    ring.repost(&posted);
                }
                Phase::Lost => panic!("a live requester's slot was lost"),
                _ => thread::yield_now(),
            }
        };
        answered.store(true, Ordering::SeqCst);
        assert_eq!(reply, b"qer");
        let (took, reruns) = combiners.join().expect("the combiners");
        match (k, took) {
            // Taken and not answered: run again, once, as a re-run.
            (DiesAt::AfterTake, 1) => assert_eq!(reruns, [true]),
            // Answered before its combiner died: not run again.
            (DiesAt::AfterPublish, 1) => assert!(reruns.is_empty(), "{reruns:?}"),
            // Not taken by the first: run once by the next.
            _ => assert_eq!(reruns, [false]),
        }
    });
}

#[test]
fn a_combiner_that_dies_after_taking_leaves_its_request_to_the_next() {
    a_dead_combiners_request_is_run_again(DiesAt::AfterTake);
}

#[test]
fn a_combiner_that_dies_after_publishing_leaves_one_reply() {
    a_dead_combiners_request_is_run_again(DiesAt::AfterPublish);
}

/// How far the first combiner gets before it dies, at each step of its round over two taken
/// requests: before it takes anything, after taking both, after publishing the first reply,
/// after publishing both.
const STEPS: [usize; 4] = [0, 1, 2, 3];

/// A combiner that dies at step `k` (of [`STEPS`]) of a round over two requests of two
/// requesters. The first requester, seeing its request taken by a dead combiner, posts it
/// again; the second gives up on it (abandons it, as a timed-out wait does), and the slot of a
/// dead combiner's abandoned request is reclaimed by the next post that finds the slots full.
/// Each requester that waits gets exactly one reply, its own; a request is re-run (marked so)
/// exactly when its first combiner took it and died before publishing; and every slot is free
/// again at the end.
fn a_combiner_dies_at(k: usize) {
    check(move || {
        let ring = Arc::new(Ring::heap());
        let procs = Arc::new(Procs::new(4));
        // How many requesters are done (answered, or gave up).
        let done = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let first = ring
            .try_post(1, b"ab", &*procs)
            .expect("no bulk file")
            .expect("a free slot");
        let second = ring
            .try_post(2, b"xyz", &*procs)
            .expect("no bulk file")
            .expect("a free slot");
        let combiners = {
            let (ring, procs, done) = (ring.clone(), procs.clone(), done.clone());
            thread::spawn(move || {
                let taken = if k == 0 {
                    Vec::new()
                } else {
                    ring.take_posted(3, &*procs)
                };
                for request in taken.iter().take(k.saturating_sub(1)) {
                    let reply: Vec<u8> = request.request.iter().rev().copied().collect();
                    ring.publish(request, &reply).expect("a reply that fits");
                }
                procs.kill(3);
                let published: Vec<Vec<u8>> = taken
                    .iter()
                    .take(k.saturating_sub(1))
                    .map(|request| request.request.clone())
                    .collect();
                let unanswered: Vec<Vec<u8>> = taken
                    .iter()
                    .skip(k.saturating_sub(1))
                    .map(|request| request.request.clone())
                    .collect();
                // The next combiner runs what is posted until both requesters are done.
                let mut reruns = Vec::new();
                while done.load(Ordering::SeqCst) < 2 {
                    for request in ring.take_posted(4, &*procs) {
                        reruns.push((request.request.clone(), request.rerun));
                        let reply: Vec<u8> = request.request.iter().rev().copied().collect();
                        ring.publish(&request, &reply).expect("a reply that fits");
                    }
                    thread::yield_now();
                }
                (published, unanswered, reruns)
            })
        };
        // The requesters, one after the other (both processes' waits in this thread: a
        // polling thread more is too many branches for loom). The first posts again a request
        // a dead combiner took; the second gives up on it.
        let reply = loop {
            match ring.phase(&first) {
                Phase::Done => break ring.reply(first),
                Phase::Taken(combiner, _) if !procs.is_held(combiner).expect("liveness") => {
                    ring.repost(&first);
                }
                Phase::Lost => panic!("a live requester's slot was lost"),
                _ => thread::yield_now(),
            }
        };
        assert_eq!(reply, b"ba", "a reply to another request");
        let second_reply = loop {
            match ring.phase(&second) {
                Phase::Done => break Some(ring.reply(second)),
                Phase::Taken(combiner, _) if !procs.is_held(combiner).expect("liveness") => {
                    if ring.abandon(&second) {
                        break None;
                    }
                }
                Phase::Lost => panic!("a live requester's slot was lost"),
                _ => thread::yield_now(),
            }
        };
        done.store(2, Ordering::SeqCst);
        let (published, unanswered, reruns) = combiners.join().expect("the combiners");
        let ab = b"ab".to_vec();
        let xyz = b"xyz".to_vec();
        // The first request: answered by the dead combiner, re-run after it took it, or run
        // once by the next.
        let first_runs: Vec<bool> = reruns
            .iter()
            .filter(|(request, _)| *request == ab)
            .map(|&(_, rerun)| rerun)
            .collect();
        if published.contains(&ab) {
            assert!(first_runs.is_empty(), "answered and run again");
        } else if unanswered.contains(&ab) {
            assert_eq!(first_runs, [true], "taken by the dead one, re-run once");
        } else {
            assert_eq!(first_runs, [false], "run once by the next");
        }
        // The second: its own reply, or given up on only while a dead combiner had it.
        let second_runs = reruns.iter().filter(|(request, _)| *request == xyz).count();
        match second_reply {
            Some(reply) => {
                assert_eq!(reply, b"zyx", "a reply to another request");
                assert!(second_runs + usize::from(published.contains(&xyz)) == 1);
            }
            None => {
                assert!(unanswered.contains(&xyz), "gave up on a live combiner's");
                assert_eq!(second_runs, 0, "an abandoned request run again");
            }
        }
        // Every slot is free again: an abandoned slot of the dead combiner is reclaimed by a
        // post that finds the slots full.
        let a = ring
            .try_post(1, b"a", &*procs)
            .expect("no bulk")
            .expect("a slot");
        let b = ring
            .try_post(1, b"b", &*procs)
            .expect("no bulk")
            .expect("a slot, after reclaiming the abandoned one");
        assert!(ring.withdraw(&a) && ring.withdraw(&b));
    });
}

#[test]
fn a_combiner_that_dies_at_each_step_leaves_one_reply_per_request_to_its_own_requester() {
    for k in STEPS {
        a_combiner_dies_at(k);
    }
}
