#!/bin/sh
# The seeded mutants of the ring's protocols, of the token rules, of the redo log's segments and of
# the fenced write's claims: each one is a small change
# that breaks a protocol as a plausible slip would, applied to a copy of the tree's file, and
# each must make its model (or property test) fail. Run by `make test-mutants`; the file is put
# back after each, whatever happens. Prints one line per mutant and fails if any survives.
#
# Usage: sh scripts/mutants.sh [NAME...]   (all of them by default)
set -eu
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}

# name ~ file ~ the text replaced (exactly once, \n for a new line) ~ its replacement ~ the test
# that must fail (with any arguments after it: `NAME -- --ignored` for a slow model; a library
# test, or `--test FILE NAME` for one of tests/) ~ loom (empty: an ordinary test)
MUTANTS='
post-relaxed~src/ring/slots.rs~head.state.store(word(generation, POSTED), Ordering::SeqCst);~head.state.store(word(generation, POSTED), Ordering::Relaxed);~ring::models::slots::each_requester~loom
publish-not-release~src/ring/slots.rs~            Ordering::AcqRel,\n            Ordering::Acquire,\n        ) {\n            Ok(_) => futex_wake(&head.state),~            Ordering::Acquire,\n            Ordering::Acquire,\n        ) {\n            Ok(_) => futex_wake(&head.state),~ring::models::slots::each_requester~loom
dropped-wake~src/ring/slots.rs~Ok(_) => futex_wake(&head.state),~Ok(_) => {}~ring::models::slots::each_requester~loom
dropped-queue-wake~src/ring/queue.rs~            entry.wake.fetch_add(1, Ordering::AcqRel);\n            futex_wake(&entry.wake);~            entry.wake.fetch_add(1, Ordering::AcqRel);~ring::models::queue~loom
no-generation~src/ring/map.rs~Word((((self.0 >> GEN_SHIFT) + 1) << GEN_SHIFT) | head as u64)~Word(((self.0 >> GEN_SHIFT) << GEN_SHIFT) | head as u64)~ring::models::map::a_reader_stopped~loom
sweep-frees-published~src/ring/map.rs~                (PUBLIC, true) => {}\n                (PUBLIC, false) => self.release_garbage(index, generation, owner),~                (PUBLIC, _) => self.release_garbage(index, generation, owner),~ring::models::map::a_sweep_beside~loom
token-load-store~src/ring/tokens.rs~            if header\n                .last_token\n                .compare_exchange(last, end, Ordering::AcqRel, Ordering::Acquire)\n                .is_ok()\n            {~            if {\n                header.last_token.store(end, Ordering::Release);\n                true\n            } {~ring::models::tokens~loom
no-floor~src/share/buckets.rs~        token >= self.0\n~        let _ = self.0;\n        true\n~ring::models::map::a_grant_stopped~loom
doorbell-no-fence~src/ring/server.rs~        // checks (loom takes SeqCst loads and stores for AcqRel, and would see both miss).\n        fence(Ordering::SeqCst);~        // checks (loom takes SeqCst loads and stores for AcqRel, and would see both miss).~ring::models::server~loom
flush-past-gap~src/ring/flush.rs~            if !marks(word, at) || word & STATE_MASK == SKIPPING {\n                break;\n            }\n            at += span(word);~            at += span(word).max(GRANULE);~ring::models::flush::writers_share_syncs~loom
flush-dropped-wake~src/ring/flush.rs~        // before this either sleeps and is woken below or finds it changed and does not sleep.\n        words.generation.fetch_add(1, Ordering::Release);\n        futex_wake(&words.generation);~        // before this either sleeps and is woken below or finds it changed and does not sleep.\n        words.generation.fetch_add(1, Ordering::Release);~ring::models::flush::writers_share_syncs~loom
flush-mark-not-release~src/ring/flush.rs~                Ordering::AcqRel,\n                Ordering::Acquire,\n            ) {\n                Ok(_) => break,~                Ordering::Acquire,\n                Ordering::Acquire,\n            ) {\n                Ok(_) => break,~ring::models::flush::writers_share_syncs~loom
flush-wake-before-step-down~src/ring/flush.rs~                if lead {\n                    self.unlead();\n                }\n                let moved = moved?;\n                if moved {\n                    self.bump();\n                } else {~                let moved = moved?;\n                if moved {\n                    self.bump();\n                }\n                if lead {\n                    self.unlead();\n                }\n                if !moved {~ring::models::flush::writers_share_syncs~loom
fate-unguarded~src/ring/flush.rs~        if self.words().flushed.load(Ordering::Acquire) <= lsn {\n            return Fate::Pending;\n        }\n~~ring::models::flush::a_reader_learns~loom
fate-relaxed~src/ring/flush.rs~        if self.words().flushed.load(Ordering::Acquire) <= lsn {~        if self.words().flushed.load(Ordering::Relaxed) <= lsn {~ring::models::flush::a_reader_learns~loom
flush-clears-fate~src/ring/flush.rs~        words.flushed.fetch_max(to, Ordering::AcqRel);\n        Ok(true)~        words.flushed.fetch_max(to, Ordering::AcqRel);\n        let mut at = flushed;\n        while at < to {\n            at += span(self.mark_of(at).swap(0, Ordering::Release)).max(GRANULE);\n        }\n        Ok(true)~ring::models::flush::a_reader_learns~loom
late-mark-over-later-lap~src/ring/flush.rs~            if !before(seen, lsn) {~            if marks(seen, lsn) {~ring::models::flush::a_writer_stopped_past~loom
overflow-no-fence~src/ring/queue.rs~        // until its poll (the loom model of the overflow path found it: a deadlock there).\n        fence(Ordering::SeqCst);~        // until its poll (the loom model of the overflow path found it: a deadlock there).~ring::models::queue::a_waiter_without -- --ignored~loom
reclaim-keeps-abandoned~src/ring/slots.rs~                ABANDONED => {\n                    if combiner_lives() {~                ABANDONED => {\n                    if true || combiner_lives() {~ring::models::slots::a_combiner_that_dies_at_each~loom
sweep-frees-live~src/ring/map.rs~(state > PUBLIC && !live.is_held(state).unwrap_or(true))~state > PUBLIC~ring::models::map::a_writer_killed~loom
sweep-frees-dead-reached~src/ring/map.rs~                    let now = if reachable { PUBLIC } else { BLOCK_FREE };~                    let now = if reachable { BLOCK_FREE } else { BLOCK_FREE };~ring::models::map::a_writer_killed~loom
seal-survives~src/rules/tokens.rs~            reserved: self.reserved.max(at_least),\n            sealed: 0,~            reserved: self.reserved.max(at_least),~rules::tokens::tests::tokens_never_repeat~
bell-no-wake~src/ring/activity.rs~        if self.sleepers.load(sync::Ordering::SeqCst) != 0 {\n            sync::futex_wake(&self.changes);\n        }~        let _ = self.sleepers.load(sync::Ordering::SeqCst);~ring::models::bell~loom
bell-no-fence~src/ring/activity.rs~        sync::fence(sync::Ordering::SeqCst);\n        if self.sleepers~        if self.sleepers~ring::models::bell~loom
bell-counted-late~src/ring/activity.rs~        self.sleepers.fetch_add(1, sync::Ordering::SeqCst);\n~~ring::models::bell~loom
wal-sync-last-segment~src/storage/wal/file.rs~for seq in from / self.size..=(to - 1) / self.size {~for seq in (to - 1) / self.size..=(to - 1) / self.size {~storage::wal::crash~
wal-remake-retired~src/storage/wal/file.rs~                return Err(LogError::Retired {\n                    path: self.path(seq),\n                });\n            }\n            let first = newest.map_or(seq, |newest| newest + 1);~            }\n            let first = newest.map_or(seq, |newest| (newest + 1).min(seq));~storage::wal::late~
segment-crossed~src/ring/flush.rs~    if len <= space {\n        len\n    } else {\n        space\n    }~    let _ = space;\n    len~ring::flush::tests::no_record_crosses_a_segment_end~
checkpoint-unbounded~src/ring/flush.rs~            if end + take > bound(size, words.checkpointed~            if false && end + take > bound(size, words.checkpointed~ring::flush::tests::a_writer_past_max_segments~
late-write-fails-log~src/ring/flush.rs~            // Its mark is not even tried: nothing of it is in the log.\n            Ok(Written::Gone) => Err(Error::timed_out()),~            Ok(Written::Gone) => Err(self.failed_by(&io::Error::other("gone"))),~ring::flush::tests::a_late_write_into_a_retired_segment~
ahead-every-record~src/ring/flush.rs~        if at <= half && half < at + len {~        if half < at + len {~ring::flush::tests::the_reservation_that_crosses~
keys-raced-as-won~src/share/keys.rs~        Publish::Raced => Ok(false),~        Publish::Raced => Ok(true),~ring::models::keys~loom
claims-settle-by-flushed~src/share/claims.rs~            let fate = sync.fate_in_log(at)?;~            let fate = if sync.flushed() > at { Fate::Counts } else { Fate::Pending };~share::claims::tests::a_writer_stopped_at_each_step~
claims-over-pending~src/share/claims.rs~        if read.is_some_and(|entry| entry.pending.is_some()) {\n            return Ok(Attempt::Raced);\n        }\n~~ring::models::claims::writers_of_one_key_racing -- --ignored~loom
prune-drops-voided~src/share/keys.rs~entry.pending.is_some() || entry.newest >= below || entry.voided >= below~entry.pending.is_some() || entry.newest >= below~share::keys::tests::prune_removes~
retired-not-void~src/storage/wal/file.rs~        if self.retired(lsn / self.size)? {\n            return Ok(true);\n        }~~storage::wal::file::tests::a_record_is_read_back~
log-follows-unset~src/ring/flush.rs~                setter if live.is_held(setter).unwrap_or(true) => return LogTurn::Wait,~                setter if live.is_held(setter).unwrap_or(true) => return LogTurn::Off,~ring::models::flush::processes_opening_at_once~loom
void-keeps-highest~src/share/claims.rs~                Fate::Void => Entry {\n                    highest: now.before,~                Fate::Void => Entry {~share::claims::tests::a_writer_stopped_at_each_step~
skipper-never-passed~src/ring/flush.rs~        if held != 0 && !pass_live && (held == self.id || self.live.is_held(held)?) {~        if held != 0 && (held == self.id || self.live.is_held(held)?) {~ring::models::flush::a_skipper_stopped~loom
late-skipped-stored~src/ring/flush.rs~        let _ = self.mark_of(at).compare_exchange(\n            claim,\n            mark(at, len, SKIPPED),\n            Ordering::Release,\n            Ordering::Relaxed,\n        );~        let _ = claim;\n        self.mark_of(at).store(mark(at, len, SKIPPED), Ordering::Release);~ring::models::flush::a_skipper_stopped~loom
stored-value-not-applied~src/storage/wal/apply.rs~                        encode_value(newest.token, Some(value.value()))~                        { drop(value); encode_value(newest.token, None) }~storage::wal::apply::tests::a_stored_put_moves~
skipper-claim-not-inherited~src/ring/flush.rs~        } else {\n            claimed_by_a_skipper(seen, at)\n        };~        } else {\n            false\n        };~ring::models::flush::a_skipper_killed~loom
flusher-never-taken-over~src/ring/flush.rs~(!ask || self.live.is_held(held)?)~(!ask || held != 0)~ring::models::flush::a_flusher_that_dies~loom
acquire-write-checks-lease~src/local/acquire.rs~&stored, token, None, wait)~&stored, token, Some(name), wait)~local::log_user::tests::an_acquire_stopped_past~
acquire-rerun-refused-for-certain~src/rules/ops.rs~Op::Put { .. } | Op::Fence { .. } | Op::Acquire { write: Some(_), .. }~Op::Put { .. } | Op::Fence { .. }~local::route::tests::an_acquire_and_put_run_again~
acquire-regrant-by-withdraw~src/local/acquire.rs~#[cfg(test)]\n                            crate::local::lease_map::hooks::after_stale();\n                            self.lease_map\n                                .regrant_in_map(self, member, name, ttl, self.me, grant.live, token)~self.lease_map.withdraw_in_map(self, member, name, grant.live);\n                            #[cfg(test)]\n                            crate::local::lease_map::hooks::after_stale();\n                            Ok(None)~local::log_user::tests::an_acquire_whose_write_is_refused~
acquire-stale-past-its-wait~src/local/acquire.rs~                        Error::StaleToken { .. } => wait.step().and_then(|()| {~                        Error::StaleToken { token, highest } => wait.step().map_err(|_| Error::StaleToken { token, highest }).and_then(|()| {~local::log_user::tests::an_acquire_refused_as_stale_past~
acquire-lost-as-locked~src/local/acquire.rs~(Error::Locked { token: current, .. }, Some(token)) => {~(Error::Locked { token: current, .. }, Some(token)) if false => {~local::log_user::tests::an_acquire_stopped_past~
admit-blocker-asked-again~src/rules/admit.rs~Some(first) => (Some(ticket.unwrap_or(u64::MAX)), Some(*first)),~Some(_) => (Some(ticket.unwrap_or(u64::MAX)), blocker(cx, record, now)?),~rules::admit::tests::a_refusal_for_a_queued~
crashed-log-kept-past-a-recovery~src/local/crashed.rs~                recoveries: self.pending.recoveries,~                recoveries: state.map_or(0, |state| state.recoveries),~--test write_log a_read_only_store_left_open~
crashed-scan-shown-unsynced~src/local/crashed.rs~                log.sync(pending.from, pending.end)?;~                let _ = &log;~--test crash multi_process_write_log_read_after_a_crash~
log-place-after-on~src/ring/flush.rs~        words.log_name.store(place.name, Ordering::Relaxed);\n        // Relaxed: published by the Release below, before any writer reserves.\n        words.end.store(end, Ordering::Relaxed);\n        words.flushed.store(end, Ordering::Relaxed);\n        words.checkpointed.store(end, Ordering::Relaxed);\n        // Release: pairs with the Acquire of `decide_log`.\n        words.log_state.store(LOG_ON, Ordering::Release);~        words.end.store(end, Ordering::Relaxed);\n        words.flushed.store(end, Ordering::Relaxed);\n        words.checkpointed.store(end, Ordering::Relaxed);\n        words.log_state.store(LOG_ON, Ordering::Release);\n        words.log_name.store(place.name, Ordering::Relaxed);~ring::models::flush::processes_opening_at_once~loom
log-joined-elsewhere~src/local/log_user.rs~        if name.place != member.ring().log_place() {~        if false && name.place != member.ring().log_place() {~--test write_log a_store_renamed_while_open~
log-gone-read-as-checkpointed~src/local/log_user.rs~            None if entry.newest >= self.member.ring().log_checkpointed() => {~            None if false && entry.newest >= self.member.ring().log_checkpointed() => {~--test write_log a_process_whose_store_directory_was_renamed~
crashed-fence-over-the-file-alone~src/local/crashed.rs~            if let Some(&token) = pending.and_then(|pending| pending.fences.get(resource)) {~            if let Some(&token) = pending.and_then(|_| None::<&u64>) {~--test write_log a_read_only_open_after_every_process_was_killed~
'

want="$*"
mkdir -p target
rm -f target/mutants-survived
printf '%s\n' "$MUTANTS" | while IFS='~' read -r name file from to test loom; do
    [ -n "$name" ] || continue
    if [ -n "$want" ] && ! echo " $want " | grep -q " $name "; then continue; fi
    cp "$file" "$file.unmutated"
    # Put back with a new modification time: the copy's is older than the mutant's build, and
    # cargo, which goes by times, would keep running the mutant (make test-loom-long once did).
    trap 'mv "$file.unmutated" "$file"; touch "$file"' EXIT INT TERM
    python3 - "$file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace('\\n', '\n'), sys.argv[3].replace('\\n', '\n')
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"mutant's text found {text.count(old)} times in {path}: {old!r}")
open(path, 'w').write(text.replace(old, new))
PY
    if [ -n "$loom" ]; then
        # As make test-loom runs them (the same flags: the same build).
        run() { RUSTFLAGS="--cfg fencelock_loom" CARGO_TARGET_DIR=target/loom \
            LOOM_MAX_PREEMPTIONS=2 $CARGO test --release --lib $test; }
    else
        case $test in
            # An integration test of real processes: `--test FILE NAME`.
            --test*) run() { $CARGO test $test; } ;;
            *) run() { $CARGO test --lib "$test"; } ;;
        esac
    fi
    if run >"target/mutant-$name.log" 2>&1; then
        echo "SURVIVED $name: $test passed (target/mutant-$name.log)"
        echo 1 >target/mutants-survived
    elif grep -q "could not compile" "target/mutant-$name.log"; then
        # A mutant that does not build proves nothing.
        echo "BROKEN   $name: it does not build (target/mutant-$name.log)"
        echo 1 >target/mutants-survived
    else
        echo "caught   $name by $test"
    fi
    mv "$file.unmutated" "$file"
    touch "$file"
    trap - EXIT INT TERM
done
if [ -e target/mutants-survived ]; then rm -f target/mutants-survived; exit 1; fi
