//! The store file opened in redb's exclusive mode for a server, through a storage backend that
//! leaves out the bytes fencelock locks for liveness: redb's exclusive mode locks every byte of
//! the file, which would otherwise take holders' liveness locks away.

use std::ops::Bound;
use std::path::Path;

use redb::backends::FileBackend;
use redb::{BackendError, ConcurrencyMode, StorageBackend};

use crate::base::error::Result;
use crate::storage::db::{damaged, open_database_with, redb_builder, Db};
use crate::storage::liveness::LOCKED_BYTES;

/// Opens the store file at `path` exclusively, through [`Carved`].
pub(crate) fn open_carved(path: &Path) -> Result<Db> {
    let existing = crate::storage::file::is_existing_database(path, true)?;
    let builder = redb_builder(ConcurrencyMode::ExclusiveWriter);
    let backend = || -> std::result::Result<Carved, redb::DatabaseError> {
        let file = crate::storage::mode::open_or_create(path)?;
        Ok(Carved(FileBackend::new(file)?))
    };
    crate::base::quiet::catch(|| {
        open_database_with(
            existing,
            false,
            || builder.open_read_only_with_backend(backend()?),
            || builder.create_with_backend(backend()?),
        )
        .map(Db::Writable)
    })
    .unwrap_or_else(damaged)
}

/// redb's file backend with the bytes fencelock locks ([`LOCKED_BYTES`]) left out of every
/// lock redb takes: redb's exclusive mode locks the whole file, which would otherwise take
/// holders' liveness locks away.
#[derive(Debug)]
struct Carved(FileBackend);

type Range = (Bound<u64>, Bound<u64>);

/// The parts of `range` outside [`LOCKED_BYTES`] (one or two; all of it when they do not meet).
fn carve(range: Range) -> Vec<Range> {
    let (hole_start, hole_end) = LOCKED_BYTES;
    let start = match range.0 {
        Bound::Unbounded => 0,
        Bound::Included(x) => x,
        Bound::Excluded(x) => x.saturating_add(1),
    };
    let end = match range.1 {
        Bound::Unbounded => None,
        Bound::Included(x) => Some(x.saturating_add(1)),
        Bound::Excluded(x) => Some(x),
    };
    if start >= hole_end || end.is_some_and(|end| end <= hole_start) {
        return vec![range];
    }
    let mut parts = Vec::with_capacity(2);
    if start < hole_start {
        parts.push((range.0, Bound::Excluded(hole_start)));
    }
    if end.is_none_or(|end| end > hole_end) {
        parts.push((Bound::Included(hole_end), range.1));
    }
    parts
}

impl Carved {
    fn lock_parts(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
        lock: impl Fn(&FileBackend, Bound<u64>, Bound<u64>) -> std::result::Result<bool, BackendError>,
    ) -> std::result::Result<bool, BackendError> {
        let parts = carve((start, end));
        for (i, part) in parts.iter().enumerate() {
            match lock(&self.0, part.0, part.1) {
                Ok(true) => {}
                other => {
                    // Refused or failed: nothing of it stays locked.
                    for taken in &parts[..i] {
                        let _ = self.0.unlock_range(taken.0, taken.1);
                    }
                    return other;
                }
            }
        }
        Ok(true)
    }
}

impl StorageBackend for Carved {
    fn len(&self) -> std::result::Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::result::Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::result::Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::result::Result<(), std::io::Error> {
        self.0.close()
    }
    fn try_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.lock_parts(start, end, redb::StorageBackend::try_lock_range)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.lock_parts(start, end, redb::StorageBackend::try_lock_shared_range)
    }
    fn lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.lock_parts(start, end, |b, s, e| b.lock_range(s, e).map(|()| true))
            .map(|_| ())
    }
    fn lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.lock_parts(start, end, |b, s, e| {
            b.lock_shared_range(s, e).map(|()| true)
        })
        .map(|_| ())
    }
    fn unlock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        let mut result = Ok(());
        for part in carve((start, end)) {
            if let Err(err) = self.0.unlock_range(part.0, part.1) {
                result = Err(err);
            }
        }
        result
    }
    fn query_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        for part in carve((start, end)) {
            if self.0.query_lock_range(part.0, part.1)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carving_leaves_out_exactly_the_liveness_bytes() {
        let (a, b) = LOCKED_BYTES;
        let whole = (Bound::Unbounded, Bound::Unbounded);
        assert_eq!(
            carve(whole),
            vec![
                (Bound::Unbounded, Bound::Excluded(a)),
                (Bound::Included(b), Bound::Unbounded)
            ]
        );
        let header = (Bound::Included(0), Bound::Excluded(320));
        assert_eq!(carve(header), vec![header]);
        let above = (Bound::Included(b + 5), Bound::Unbounded);
        assert_eq!(carve(above), vec![above]);
        let to_mode_byte = (Bound::Unbounded, Bound::Included(b + 1));
        assert_eq!(
            carve(to_mode_byte),
            vec![
                (Bound::Unbounded, Bound::Excluded(a)),
                (Bound::Included(b), Bound::Included(b + 1))
            ]
        );
        let inside = (Bound::Included(a + 1), Bound::Excluded(a + 2));
        assert!(carve(inside).is_empty());
    }
}
