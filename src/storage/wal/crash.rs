//! Crash images of the log alone (docs/design/writes.md, "Steps to build it", step 2): a writer
//! appends records through [`SegmentLog`] on an in-process recorder of the files it creates,
//! writes, syncs and removes, and a power loss is cut at every point: at each sync of a segment,
//! with any subset of the writes not yet synced (of every segment), each torn at any 512-byte
//! sector of its file (the writes cut into sector pieces: every subset of up to 8 pieces, else the
//! empty and the full set and 254 at random). The scan of every such image must return every
//! record whose sync had returned (acknowledged), in order, and nothing but whole records that
//! were written, in the order written.
//!
//! Segments are made ahead (`prepare`) or by a write (the slow path), and retired behind the
//! checkpoint; a segment's creation and its removal are durable when they return (the file is
//! synced, linked and the directory synced), so an image holds the segments made and not removed
//! before its cut.
//!
//! The recorder stands below the log (the `LogDir` and `LogIo` traits), so the images come from
//! the offsets the log itself computed, as the `LD_PRELOAD` recorder of tests/crash.rs sees the
//! store file's. It runs inside `cargo test` in a few seconds: the store's recorder needs
//! processes and redb, and the log's writes are this module's own.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::storage::wal::file::{LogDir, LogIo, SegmentLog, HEADER_BLOCK};
use crate::storage::wal::record::Record;
use crate::storage::wal::scan::{scan, Memory};
use crate::storage::wal::Placement;

/// The sector size the images tear writes at.
const SECTOR: u64 = 512;

#[derive(Debug, Clone)]
enum Event {
    /// A segment made whole (durable when its creation returned).
    Create { path: PathBuf, bytes: Vec<u8> },
    Write {
        path: PathBuf,
        offset: u64,
        data: Vec<u8>,
    },
    /// `fdatasync` of a segment returned.
    Sync { path: PathBuf },
    /// A segment unlinked (durable: the directory was synced).
    Remove { path: PathBuf },
    /// The checkpoint moved to this position (durably, as redb's commit would make it), after
    /// a sync, before the next write.
    Checkpoint(u64),
}

type Files = Rc<RefCell<BTreeMap<PathBuf, Rc<RefCell<Vec<u8>>>>>>;
type Events = Rc<RefCell<Vec<Event>>>;

/// What reached the files, in order, and the files as they are now.
#[derive(Default)]
struct Recorder {
    files: Files,
    events: Events,
}

/// An open segment of the recorder: its inode (which outlives an unlink) and its name.
struct Recorded {
    inode: Rc<RefCell<Vec<u8>>>,
    path: PathBuf,
    events: Events,
}

fn apply(file: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let offset = usize::try_from(offset).unwrap();
    if file.len() < offset + data.len() {
        file.resize(offset + data.len(), 0);
    }
    file[offset..offset + data.len()].copy_from_slice(data);
}

impl LogIo for Recorded {
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        apply(&mut self.inode.borrow_mut(), offset, bytes);
        self.events.borrow_mut().push(Event::Write {
            path: self.path.clone(),
            offset,
            data: bytes.to_vec(),
        });
        Ok(())
    }

    fn read_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()> {
        let file = self.inode.borrow();
        let offset = usize::try_from(offset).unwrap();
        let source = file
            .get(offset..offset + bytes.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        bytes.copy_from_slice(source);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.events.borrow_mut().push(Event::Sync {
            path: self.path.clone(),
        });
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.inode.borrow().len() as u64)
    }
}

impl LogDir for Recorder {
    type File = Recorded;

    fn open(&self, path: &Path) -> io::Result<Recorded> {
        let inode = self
            .files
            .borrow()
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Recorded {
            inode,
            path: path.to_owned(),
            events: Rc::clone(&self.events),
        })
    }

    fn create(&self, path: &Path, header: &[u8], len: u64) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        if files.contains_key(path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let mut bytes = vec![0u8; usize::try_from(len).unwrap()];
        bytes[..header.len()].copy_from_slice(header);
        files.insert(path.to_owned(), Rc::new(RefCell::new(bytes.clone())));
        self.events.borrow_mut().push(Event::Create {
            path: path.to_owned(),
            bytes,
        });
        Ok(())
    }

    fn remove(&self, paths: &[PathBuf]) -> io::Result<()> {
        for path in paths {
            if self.files.borrow_mut().remove(path).is_some() {
                self.events
                    .borrow_mut()
                    .push(Event::Remove { path: path.clone() });
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        Ok(self
            .files
            .borrow()
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name().map(ToOwned::to_owned))
            .collect())
    }
}

/// splitmix64: a seeded generator of our own, so that a failure names the seed that repeats it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A record the writer appended: where, what, the index of its write event, and the index of
/// the first event after the sync that acknowledged it.
struct Appended {
    lsn: u64,
    end: u64,
    record: Record,
    event: usize,
    acked: usize,
}

/// The workload: `count` records of every kind (voids for refused writes among them) in
/// segments of `size`, from a position in segment 5, with a sync of what was written since the
/// last one after every one to four records. The next segment is made ahead, or not (then the
/// write makes it); now and then the checkpoint moves to a synced record and the segments
/// wholly below it are retired.
fn run(seed: u64, size: u64, count: u64) -> (Vec<Event>, Vec<Appended>, u64) {
    let mut rng = Rng(seed);
    let log = SegmentLog::on(Recorder::default(), Path::new("/crash/store.wal"), 9, size).unwrap();
    let start = 5 * size + 8 * rng.below(size / 8);
    let (mut end, mut checkpoint) = (start, start);
    let mut appended: Vec<Appended> = Vec::new();
    // The first record and position not synced yet.
    let (mut unsynced, mut unsynced_from) = (0, start);
    let mut until_sync = 1 + rng.below(4);
    let sync = |appended: &mut Vec<Appended>, unsynced: &mut usize, from: &mut u64, end: u64| {
        log.sync(*from, end).unwrap();
        let now = log.dir().events.borrow().len();
        for a in &mut appended[*unsynced..] {
            a.acked = now;
        }
        (*unsynced, *from) = (appended.len(), end);
    };
    for i in 0..count {
        let token = i + 1;
        let key = format!("key-{}", rng.below(5)).into_bytes();
        let record = match rng.below(10) {
            0 => Record::Delete {
                key,
                token,
                version: i,
            },
            1 => Record::Fence {
                resource: format!("resource-{}", rng.below(3)),
                token,
                version: i,
            },
            2 => Record::Void {
                len: u32::try_from(8 * rng.below(40)).unwrap(),
            },
            _ => Record::Put {
                key,
                value: vec![
                    u8::try_from(i % 251).unwrap();
                    usize::try_from(rng.below(700)).unwrap()
                ],
                token,
                version: i,
            },
        };
        let placed = Placement::of(size, end, record.encoded_len()).unwrap();
        if let Some(filler) = placed.filler_record().unwrap() {
            log.write_at(end, &filler).unwrap();
        }
        log.write_at(placed.lsn, &record.encode(placed.lsn).unwrap())
            .unwrap();
        appended.push(Appended {
            lsn: placed.lsn,
            end: placed.end,
            record,
            event: log.dir().events.borrow().len() - 1,
            acked: usize::MAX,
        });
        // Into the second half of a segment: the next one is made ahead, half of the time.
        if placed.lsn % size < size / 2 && placed.end % size >= size / 2 && rng.below(2) == 0 {
            log.prepare(placed.end / size + 1).unwrap();
        }
        end = placed.end;
        until_sync -= 1;
        if until_sync == 0 {
            sync(&mut appended, &mut unsynced, &mut unsynced_from, end);
            until_sync = 1 + rng.below(4);
            if rng.below(6) == 0 {
                // A checkpoint up to a synced record (it only moves forward), then the segments
                // wholly below it go.
                let synced: Vec<u64> = appended[..unsynced]
                    .iter()
                    .map(|a| a.lsn)
                    .filter(|&lsn| lsn >= checkpoint)
                    .collect();
                if let Some(&lsn) =
                    synced.get(usize::try_from(rng.below(synced.len() as u64 + 1)).unwrap())
                {
                    checkpoint = lsn;
                }
                log.dir()
                    .events
                    .borrow_mut()
                    .push(Event::Checkpoint(checkpoint));
                log.retire_below(checkpoint).unwrap();
            }
        }
    }
    if unsynced < appended.len() {
        sync(&mut appended, &mut unsynced, &mut unsynced_from, end);
    }
    let events = log.dir().events.borrow().clone();
    (events, appended, start)
}

/// Segment `seq` of a path of the log.
fn seq_of(path: &Path) -> u64 {
    let name = path.to_str().unwrap();
    u64::from_str_radix(&name[name.len() - 16..], 16).unwrap()
}

/// Checks one image (each segment's file by path): the scan from `checkpoint` returns the
/// records written from there, in order, every acknowledged one of them at least, none
/// unwritten.
fn check(
    image: &BTreeMap<PathBuf, Vec<u8>>,
    size: u64,
    checkpoint: u64,
    appended: &[Appended],
    cut: usize,
    what: &dyn Fn() -> String,
) {
    let log = Memory {
        size,
        segments: image
            .iter()
            .map(|(path, bytes)| {
                (
                    seq_of(path),
                    &bytes[usize::try_from(HEADER_BLOCK).unwrap()..],
                )
            })
            .collect(),
    };
    let scanned = scan(&log, checkpoint).unwrap_or_else(|err| panic!("{}: {err}", what()));
    let first = appended
        .iter()
        .position(|a| a.lsn >= checkpoint)
        .unwrap_or(appended.len());
    let acked = appended.iter().filter(|a| a.acked <= cut).count();
    let written = appended.iter().filter(|a| a.event < cut).count();
    // How many were taken: the scan's end lies between the last taken record and the next.
    let taken = appended[first..]
        .iter()
        .take_while(|a| a.end <= scanned.end)
        .count();
    let want: Vec<(u64, Record)> = appended[first..first + taken]
        .iter()
        .filter(|a| !matches!(a.record, Record::Void { .. }))
        .map(|a| (a.lsn, a.record.clone()))
        .collect();
    assert_eq!(scanned.records, want, "{}", what());
    assert!(
        first + taken >= acked && first + taken <= written,
        "{}: the scan took records up to {} (end {}); acknowledged {acked}, written {written}",
        what(),
        first + taken,
        scanned.end
    );
    if let Some(next) = appended.get(first + taken) {
        assert!(
            scanned.end <= next.lsn,
            "{}: the scan ended at {}, inside record {} at {}",
            what(),
            scanned.end,
            first + taken,
            next.lsn
        );
    }
    assert!(
        scanned.skipped.is_empty() && scanned.holes == 0,
        "{}",
        what()
    );
}

/// Each write cut at its file's sector boundaries.
fn pieces(writes: &[(PathBuf, u64, Vec<u8>)]) -> Vec<(PathBuf, u64, Vec<u8>)> {
    let mut pieces = Vec::new();
    for (path, offset, data) in writes {
        let mut at = 0;
        while at < data.len() {
            let file_at = offset + at as u64;
            let to_boundary = usize::try_from(SECTOR - file_at % SECTOR).unwrap();
            let len = to_boundary.min(data.len() - at);
            pieces.push((path.clone(), file_at, data[at..at + len].to_vec()));
            at += len;
        }
    }
    pieces
}

fn power_loss_images(seed: u64) -> usize {
    let size = 4096;
    let (events, appended, start) = run(seed, size, 300);
    let count = |kind: fn(&Event) -> bool| events.iter().filter(|e| kind(e)).count();
    let syncs = count(|e| matches!(e, Event::Sync { .. }));
    assert!(syncs > 40, "{syncs} syncs");
    assert!(
        count(|e| matches!(e, Event::Create { .. })) > 10,
        "few segments"
    );
    assert!(
        count(|e| matches!(e, Event::Remove { .. })) > 3,
        "few retired"
    );
    assert!(appended.last().unwrap().end > start + 10 * size);
    // The durable files, and the writes not synced yet.
    let mut base: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let mut pending: Vec<(PathBuf, u64, Vec<u8>)> = Vec::new();
    let mut checkpoint = start;
    let mut images = 0;
    // A cut before each sync, and at the end.
    for cut in 0..=events.len() {
        let event = events.get(cut);
        if matches!(event, None | Some(Event::Sync { .. })) {
            let what = |kind: &str| format!("seed {seed}, cut at event {cut}, {kind}");
            let pending_pieces = pieces(&pending);
            let subsets: Vec<u64> = if pending_pieces.len() <= 8 {
                (0..1u64 << pending_pieces.len()).collect()
            } else {
                let mut rng = Rng(seed ^ cut as u64);
                let all = (1u64 << pending_pieces.len().min(63)) - 1;
                [0, all]
                    .into_iter()
                    .chain((0..254).map(|_| rng.next() & all))
                    .collect()
            };
            for subset in subsets {
                let mut image = base.clone();
                for (i, (path, offset, data)) in pending_pieces.iter().enumerate() {
                    if i < 64 && subset & (1 << i) != 0 {
                        apply(image.get_mut(path).unwrap(), *offset, data);
                    }
                }
                check(&image, size, checkpoint, &appended, cut, &|| {
                    what(&format!("pieces {subset:#b} of {}", pending_pieces.len()))
                });
                images += 1;
            }
        }
        match event {
            None => {}
            Some(Event::Create { path, bytes }) => {
                base.insert(path.clone(), bytes.clone());
            }
            Some(Event::Write { path, offset, data }) => {
                pending.push((path.clone(), *offset, data.clone()));
            }
            Some(Event::Sync { path }) => {
                for (_, offset, data) in pending.iter().filter(|(p, _, _)| p == path) {
                    apply(base.get_mut(path).unwrap(), *offset, data);
                }
                pending.retain(|(p, _, _)| p != path);
            }
            Some(Event::Remove { path }) => {
                // Writes into an unlinked file reach no file of the directory.
                base.remove(path);
                pending.retain(|(p, _, _)| p != path);
            }
            Some(Event::Checkpoint(at)) => checkpoint = *at,
        }
    }
    images
}

#[test]
fn every_acknowledged_record_survives_every_power_loss() {
    for seed in [1, 2, 3] {
        let images = power_loss_images(seed);
        assert!(images > 1000, "{images} images");
    }
}
