//! Leader election (`Store::campaign`, `leader`, `observe_leader`): one leader at a time,
//! terms rising, observers told every change in order, a resign that hands over at once, a
//! cancelled campaign that leaves no trace, and a deposed leader's writes refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use fencelock::{CampaignOptions, Cancel, Error, Leader, LeaderWatch, Store};

use crate::harness::Harness;

crate::on_every_backend! {
    [
        one_leader_at_a_time_and_terms_rise,
        observers_see_every_change_in_order,
        an_observer_that_looked_away_is_told_every_term_it_missed,
        a_waiting_observer_is_woken_by_a_resign_and_a_proclaim,
        an_observer_waits_through_a_vacancy_without_polling,
        resign_hands_over_at_once,
        a_cancelled_campaign_leaves_no_trace,
        a_deposed_leaders_writes_are_refused,
        bad_campaigns_are_refused_and_change_nothing,
    ]
}

const NAME: &str = "scheduler";

/// A lease that does not run out during a test: handovers are resigns.
fn long() -> CampaignOptions {
    CampaignOptions {
        ttl: Duration::from_secs(60),
        ..CampaignOptions::default()
    }
}

/// The next change the watch tells, within a generous bound (a missing change fails).
fn next(watch: &mut LeaderWatch) -> Leader {
    watch
        .next_change(Duration::from_secs(60))
        .expect("watch")
        .expect("a change within a minute")
}

fn at(leader: &Leader) -> (u64, u64, Vec<u8>) {
    (leader.term, leader.version, leader.value.clone())
}

fn one_leader_at_a_time_and_terms_rise(h: &Harness) {
    let leading = Arc::new(AtomicBool::new(false));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let candidates: Vec<_> = (0..3)
        .map(|candidate| {
            let (store, leading, terms) = (h.another(), leading.clone(), terms.clone());
            thread::spawn(move || {
                for round in 0..4 {
                    let value = format!("candidate {candidate}, round {round}");
                    let leadership = store.campaign(NAME, value.as_bytes(), &long()).unwrap();
                    assert!(!leading.swap(true, Ordering::SeqCst), "two leaders at once");
                    terms.lock().unwrap().push(leadership.term());
                    let leader = store.leader(NAME).unwrap().expect("it leads");
                    assert_eq!(
                        (leader.term, leader.value),
                        (leadership.term(), value.into_bytes())
                    );
                    thread::sleep(Duration::from_millis(2));
                    leading.store(false, Ordering::SeqCst);
                    leadership.resign().unwrap();
                }
            })
        })
        .collect();
    for candidate in candidates {
        candidate.join().unwrap();
    }
    let terms = terms.lock().unwrap();
    assert_eq!(terms.len(), 12);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms rise: {terms:?}"
    );
    assert_eq!(h.store().leader(NAME).unwrap(), None);
}

fn observers_see_every_change_in_order(h: &Harness) {
    let store = h.store();
    let mut watch = store.observe_leader(NAME).unwrap();
    let mut late = h.another().observe_leader(NAME).unwrap();
    let mut told = Vec::new();
    let first = store.campaign(NAME, b"a", &long()).unwrap();
    told.push(at(&next(&mut watch)));
    first.proclaim(b"a2").unwrap();
    told.push(at(&next(&mut watch)));
    first.resign().unwrap();
    let second = h.another().campaign(NAME, b"b", &long()).unwrap();
    told.push(at(&next(&mut watch)));
    second.proclaim(b"b2").unwrap();
    told.push(at(&next(&mut watch)));
    let (t1, t2) = (first.term(), second.term());
    assert_eq!(
        told,
        [
            (t1, 1, b"a".to_vec()),
            (t1, 2, b"a2".to_vec()),
            (t2, 1, b"b".to_vec()),
            (t2, 2, b"b2".to_vec()),
        ]
    );
    assert_eq!(watch.next_change(Duration::from_millis(50)).unwrap(), None);
    // The other watch looked at none of it as it happened: it is told each term, with the
    // value the term had last.
    let late_told: Vec<_> = (0..2).map(|_| at(&next(&mut late))).collect();
    assert_eq!(
        late_told,
        [(t1, 2, b"a2".to_vec()), (t2, 2, b"b2".to_vec())]
    );
    // A watch begun now starts at the leader of now.
    let mut now = store.observe_leader(NAME).unwrap();
    assert_eq!(at(&next(&mut now)), (t2, 2, b"b2".to_vec()));
}

fn an_observer_that_looked_away_is_told_every_term_it_missed(h: &Harness) {
    let store = h.store();
    let mut watch = store.observe_leader(NAME).unwrap();
    let mut terms = Vec::new();
    for round in 0..5 {
        let leadership = h.another().campaign(NAME, &[round], &long()).unwrap();
        terms.push(leadership.term());
        leadership.resign().unwrap();
    }
    let told: Vec<u64> = (0..5).map(|_| next(&mut watch).term).collect();
    assert_eq!(told, terms);
    // Nobody leads now: a watch begun now tells nothing of the past.
    let mut now = store.observe_leader(NAME).unwrap();
    assert_eq!(now.next_change(Duration::from_millis(50)).unwrap(), None);
}

fn a_waiting_observer_is_woken_by_a_resign_and_a_proclaim(h: &Harness) {
    let store = h.store();
    let first = store.campaign(NAME, b"a", &long()).unwrap();
    let mut watch = h.another().observe_leader(NAME).unwrap();
    assert_eq!(next(&mut watch).term, first.term());
    let (told, seen) = mpsc::channel();
    let observer = thread::spawn(move || {
        for _ in 0..3 {
            told.send(at(&next(&mut watch))).unwrap();
        }
    });
    thread::sleep(Duration::from_millis(20)); // the observer waits for a change by now
    first.proclaim(b"a2").unwrap();
    let proclaimed = seen.recv().unwrap();
    assert_eq!(proclaimed, (first.term(), 2, b"a2".to_vec()));
    first.resign().unwrap();
    let second = h.another().campaign(NAME, b"b", &long()).unwrap();
    assert_eq!(seen.recv().unwrap(), (second.term(), 1, b"b".to_vec()));
    second.proclaim(b"b2").unwrap();
    assert_eq!(seen.recv().unwrap(), (second.term(), 2, b"b2".to_vec()));
    observer.join().unwrap();
}

fn an_observer_waits_through_a_vacancy_without_polling(h: &Harness) {
    let first = h.store().campaign(NAME, b"a", &long()).unwrap();
    first.resign().unwrap();
    // Nobody leads, and no lock is held whose release could tell of the next term.
    let (candidate, mut watch) = (h.another(), h.another().observe_leader(NAME).unwrap());
    let observer = thread::spawn(move || (next(&mut watch), watch));
    // Nothing is written meanwhile: an observer that polled would read the records again and
    // again (every 5 ms before); one woken by the change reads them once before it sleeps.
    thread::sleep(Duration::from_millis(300));
    let second = candidate.campaign(NAME, b"b", &long()).unwrap();
    let (told, watch) = observer.join().unwrap();
    assert_eq!(at(&told), (second.term(), 1, b"b".to_vec()));
    // One read at the start, one before the sleep, and one a wake-up: the campaign writes the
    // record (and in single-process mode commits its grant too; etcd watches the records).
    assert!(
        watch.looks() <= 4,
        "the observer read the records {} times through a quiet vacancy",
        watch.looks()
    );
}

fn resign_hands_over_at_once(h: &Harness) {
    // A lease of ten minutes, and a next candidate that waits one at most: it is granted
    // because the first resigned, not because a lease ran out.
    let ten_minutes = CampaignOptions {
        ttl: Duration::from_secs(600),
        ..CampaignOptions::default()
    };
    let first = h.store().campaign(NAME, b"a", &ten_minutes).unwrap();
    let other = h.another();
    let next = thread::spawn(move || {
        let options = CampaignOptions {
            timeout: Some(Duration::from_secs(60)),
            ..long()
        };
        other.campaign(NAME, b"b", &options).map(|l| l.term())
    });
    thread::sleep(Duration::from_millis(20));
    first.resign().unwrap();
    assert!(first.is_lost());
    let term = next.join().unwrap().expect("granted after the resign");
    assert!(term > first.term());
}

fn a_cancelled_campaign_leaves_no_trace(h: &Harness) {
    let store = h.store();
    let first = store.campaign(NAME, b"a", &long()).unwrap();
    let keys = store.keys(b"").unwrap();
    let tokens = |store: &Store| -> Vec<(u64, u32)> {
        let holders = store.lock_holders(NAME).unwrap();
        holders.iter().map(|l| (l.token, l.pid)).collect()
    };
    let holders = tokens(&store);
    let cancel = Cancel::new();
    let waiter = {
        let (other, cancel) = (h.another(), cancel.clone());
        thread::spawn(move || {
            let options = CampaignOptions {
                cancel: Some(cancel),
                ..long()
            };
            other.campaign(NAME, b"b", &options).err()
        })
    };
    thread::sleep(Duration::from_millis(20));
    cancel.cancel();
    assert!(matches!(waiter.join().unwrap(), Some(Error::Cancelled)));
    assert_eq!(store.keys(b"").unwrap(), keys, "no key left behind");
    assert_eq!(tokens(&store), holders);
    assert_eq!(
        store.leader(NAME).unwrap().map(|l| l.term),
        Some(first.term())
    );
    // The cancelled candidate holds no place in the queue: the next one is granted at once.
    first.resign().unwrap();
    let quick = CampaignOptions {
        timeout: Some(Duration::from_secs(60)),
        ..long()
    };
    let next = h.another().campaign(NAME, b"c", &quick).unwrap();
    assert_eq!(
        store.leader(NAME).unwrap().map(|l| l.value),
        Some(b"c".to_vec())
    );
    drop(next);
}

fn a_deposed_leaders_writes_are_refused(h: &Harness) {
    let store = h.store();
    let first = store.campaign(NAME, b"a", &long()).unwrap();
    first.put(b"schedule", b"by a").unwrap();
    first.fence("s3://bucket/schedule").unwrap();
    let old_term = first.term();
    first.resign().unwrap();
    let second = h.another().campaign(NAME, b"b", &long()).unwrap();
    second.put(b"schedule", b"by b").unwrap();
    second.fence("s3://bucket/schedule").unwrap();
    assert!(matches!(
        first.put(b"schedule", b"late"),
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(
        first.proclaim(b"late"),
        Err(Error::LockLost { .. })
    ));
    // The term is the fencing token: a write with it, made any other way, is stale.
    assert!(matches!(
        store.put(b"schedule", b"late", old_term),
        Err(Error::StaleToken { .. })
    ));
    assert!(matches!(
        store.fence("s3://bucket/schedule", old_term),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(store.get(b"schedule").unwrap().unwrap().value, b"by b");
    assert_eq!(store.leader(NAME).unwrap().unwrap().value, b"b");
}

fn bad_campaigns_are_refused_and_change_nothing(h: &Harness) {
    let store: Store = h.store();
    let refused = |name: &str, options: CampaignOptions| {
        assert!(
            matches!(
                store.campaign(name, b"", &options),
                Err(Error::InvalidArgument(_))
            ),
            "{name:?} {options:?}"
        );
    };
    refused("", long());
    refused("a\0b", long());
    refused(&"n".repeat(1000), long());
    refused(
        NAME,
        CampaignOptions {
            margin: Some(Duration::from_secs(31)),
            ..long()
        },
    );
    refused(
        NAME,
        CampaignOptions {
            margin: Some(Duration::ZERO),
            ..long()
        },
    );
    refused(
        NAME,
        CampaignOptions {
            ttl: Duration::from_millis(1),
            ..long()
        },
    );
    assert!(matches!(store.leader(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        store.observe_leader(""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(store.locks().unwrap().is_empty());
    assert!(store.keys(b"").unwrap().is_empty());
}
