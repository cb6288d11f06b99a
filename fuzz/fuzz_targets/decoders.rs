//! Every decoder of bytes that another process or an older version wrote: requests, replies and
//! answers in the ring's slots, the blobs of the lease map's buckets, lease records (of each
//! format), history entries and a lock's stored history, fenced values, the redo log's records
//! and its recovery scan over arbitrary log bytes. The first byte picks the decoder
//! (`fencelock::fuzzing::DECODERS`), the rest is its input. Garbage must be refused with
//! the decoder's typed error, never a panic, and a value that decoded must survive its encoding.

#![no_main]

use fencelock::fuzzing::DECODERS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&which, bytes)) = data.split_first() {
        let (_, decode) = DECODERS[usize::from(which) % DECODERS.len()];
        decode(bytes);
    }
});
