package fencelock

/*
#include <stdlib.h>
#include "fencelock.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"
)

// Scope says whose operations a Metrics snapshot counts.
type Scope int32

const (
	// ScopeStore: every process on this host that opened the store since Metrics.Since (the
	// counters are in shared memory beside the store, kept while any process has it open).
	ScopeStore Scope = 0
	// ScopeProcess: this open Store only (SingleProcess mode, or no shared area usable).
	ScopeProcess Scope = 1
)

// String is "store" or "process", as the Prometheus text's scope label says.
func (s Scope) String() string {
	switch s {
	case ScopeStore:
		return "store"
	case ScopeProcess:
		return "process"
	}
	return fmt.Sprintf("Scope(%d)", int32(s))
}

// Metrics is a snapshot of a store's counters (Store.Metrics). Every counter only grows while
// Since stays the same: compare two snapshots to count what happened between them.
type Metrics struct {
	Scope Scope
	Since time.Time // when counting started

	Grants   uint64 // leases granted (each name of an AcquireAll counts)
	Releases uint64 // leases released by their holders

	RefusedLocked uint64 // acquires refused because the lock was held
	// RefusedTimeout counts waiting acquires whose timeout passed first: a waiting Acquire
	// whose ctx deadline passed.
	RefusedTimeout   uint64
	RefusedCancelled uint64 // waiting acquires cancelled (ctx canceled, Store closed)
	RefusedOther     uint64 // acquires refused for another reason

	StaleWrites uint64 // writes and fences refused with ErrStaleToken
	LockLost    uint64 // holders' writes and extends refused with ErrLockLost

	Waits    uint64        // acquires that waited (a try-once acquire never does)
	WaitTime time.Duration // their total wait
	// WaitBuckets counts the waits by length: at most 1ms, 10ms, 100ms, 1s, 10s, 60s, 600s,
	// and longer. Not cumulative: each wait is in one bucket, and they add up to Waits.
	WaitBuckets [8]uint64

	// How the leases that later grants replaced had ended (see Ending).
	EndedReleased   uint64
	EndedExpired    uint64
	EndedTakenOver  uint64
	EndedHolderDied uint64

	Commits      uint64 // write transactions committed
	CommittedOps uint64 // the operations they carried

	// Gauges, read with the snapshot, of the whole store: the live leases (granted, not
	// expired, holder alive) by kind: exclusive leases, shared holders, semaphore permits.
	LiveExclusive uint64
	LiveShared    uint64
	LivePermits   uint64
	// QueuedWaiters counts the waiting acquires of live processes in the store's waiting queue
	// (0 without a shared ring, as for ScopeProcess).
	QueuedWaiters uint64
	FileBytes     uint64 // the store file's size
	// HistoryDropped counts lease ends left out of the history: while it could not be written
	// to the store file, the shared memory kept at most 2,048 pending ends and dropped later
	// ones rather than refuse grants.
	HistoryDropped uint64
}

// LeasesLost is the leases that ended other than by a release: expired, taken over, or whose
// holder died.
func (m Metrics) LeasesLost() uint64 {
	return m.EndedExpired + m.EndedTakenOver + m.EndedHolderDied
}

// Metrics returns a snapshot of the store's counters: of every process on this host that has
// the store open, or of this Store alone, as Scope says. An etcd store keeps none
// (ErrInvalidArgument).
func (s *Store) Metrics() (Metrics, error) {
	var m C.fencelock_metrics
	err := s.call(context.Background(), func(sh *C.fencelock_store) error {
		return check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_metrics(sh, &m, C.size_t(unsafe.Sizeof(m)), e)
		})
	})
	if err != nil {
		return Metrics{}, err
	}
	out := Metrics{
		Scope:            Scope(m.scope),
		Since:            time.UnixMilli(int64(m.since_unix_ms)),
		Grants:           uint64(m.grants),
		Releases:         uint64(m.releases),
		RefusedLocked:    uint64(m.refused_locked),
		RefusedTimeout:   uint64(m.refused_timeout),
		RefusedCancelled: uint64(m.refused_cancelled),
		RefusedOther:     uint64(m.refused_other),
		StaleWrites:      uint64(m.stale_writes),
		LockLost:         uint64(m.lock_lost),
		Waits:            uint64(m.waits),
		WaitTime:         nanos(m.wait_ns),
		EndedReleased:    uint64(m.ended_released),
		EndedExpired:     uint64(m.ended_expired),
		EndedTakenOver:   uint64(m.ended_taken_over),
		EndedHolderDied:  uint64(m.ended_holder_died),
		Commits:          uint64(m.commits),
		CommittedOps:     uint64(m.committed_ops),
		LiveExclusive:    uint64(m.live_exclusive),
		LiveShared:       uint64(m.live_shared),
		LivePermits:      uint64(m.live_permits),
		QueuedWaiters:    uint64(m.queued_waiters),
		FileBytes:        uint64(m.file_bytes),
		HistoryDropped:   uint64(m.history_dropped),
	}
	for i := range out.WaitBuckets {
		out.WaitBuckets[i] = uint64(m.wait_buckets[i])
	}
	return out, nil
}

// MetricsPrometheus returns the store's counters in Prometheus' text exposition format
// (version 0.0.4), every series named fencelock_... and labelled with the store's path and
// scope, for a /metrics handler to write as it is.
func (s *Store) MetricsPrometheus() (string, error) {
	var text string
	err := s.call(context.Background(), func(sh *C.fencelock_store) error {
		var buf *C.uint8_t
		var n C.size_t
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_store_metrics_prometheus(sh, &buf, &n, e) }); err != nil {
			return err
		}
		text = C.GoStringN((*C.char)(unsafe.Pointer(buf)), C.int(n))
		C.fencelock_buffer_free(buf, n)
		return nil
	})
	return text, err
}

// Ending is how a lease ended, or that it has not.
type Ending int32

const (
	// EndingHeld: not ended yet, live and unexpired.
	EndingHeld Ending = 0
	// EndingReleased: its holder released it.
	EndingReleased Ending = 1
	// EndingExpired: its TTL ran out before its holder let go, and nobody took it over.
	EndingExpired Ending = 2
	// EndingTakenOver: a later grant took the lock after the TTL ran out while the holder still
	// held on (a paused holder: what fencing tokens are for).
	EndingTakenOver Ending = 3
	// EndingHolderDied: its holder's process ended without a release on record (or the host
	// restarted).
	EndingHolderDied Ending = 4
)

// String is "held", "released", "expired", "taken-over" or "holder-died", as the library and
// the fencelock command name them.
func (e Ending) String() string {
	switch e {
	case EndingHeld:
		return "held"
	case EndingReleased:
		return "released"
	case EndingExpired:
		return "expired"
	case EndingTakenOver:
		return "taken-over"
	case EndingHolderDied:
		return "holder-died"
	}
	return fmt.Sprintf("Ending(%d)", int32(e))
}

// HistoryEntry is one grant of a lock (Store.History). A time the store does not know is the
// zero time.Time (IsZero).
type HistoryEntry struct {
	Name    string
	Token   uint64
	Kind    Kind
	Permits uint32 // the semaphore's permit count; 0 for another kind
	PID     uint32 // the holder's process id
	Ending  Ending
	// GrantedAt is when it was granted; zero when not known (granted before the host
	// restarted).
	GrantedAt time.Time
	// ExpiresAt is when the lease expires or expired, as last extended.
	ExpiresAt time.Time
	// EndedAt is when it ended, where that is known: the release's time, an expired lease's
	// expiry, the grant that took it over. Zero for a held lease, and where the store cannot
	// know (a holder's death; a release older than the store's memory of releases).
	EndedAt time.Time
	// RecordedAt is when the store wrote the entry; zero for a grant still in the lock's
	// record (a current grant), whose Ending is its state now.
	RecordedAt time.Time
}

// History returns the grant history of the lock name, oldest first: its latest ended grants
// (up to 32), then its current grants with their state now; empty for a lock the store knows
// nothing of. An empty name, or one with a NUL byte, gives ErrInvalidArgument; an etcd store
// keeps no history (ErrInvalidArgument).
func (s *Store) History(name string) ([]HistoryEntry, error) {
	cname, err := cString("lock name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	var entries []HistoryEntry
	err = s.call(context.Background(), func(sh *C.fencelock_store) error {
		var list *C.fencelock_history
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_store_history(sh, cname, &list, e) }); err != nil {
			return err
		}
		defer C.fencelock_history_free(list)
		n := int(C.fencelock_history_len(list))
		entries = make([]HistoryEntry, 0, n)
		for i := 0; i < n; i++ {
			var e C.fencelock_history_entry
			if err := check(func(errOut) C.fencelock_status { return C.fencelock_history_get(list, C.size_t(i), &e) }); err != nil {
				return err
			}
			entries = append(entries, HistoryEntry{
				Name:       name,
				Token:      uint64(e.token),
				Kind:       Kind(e.kind),
				Permits:    uint32(e.permits),
				PID:        uint32(e.pid),
				Ending:     Ending(e.ending),
				GrantedAt:  unixMilliOrZero(e.granted_unix_ms),
				ExpiresAt:  unixMilliOrZero(e.expires_unix_ms),
				EndedAt:    unixMilliOrZero(e.ended_unix_ms),
				RecordedAt: unixMilliOrZero(e.recorded_unix_ms),
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// unixMilliOrZero is the time of ms milliseconds since the Unix epoch, the zero time for 0
// (the ABI's "not known").
func unixMilliOrZero(ms C.int64_t) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}

// nanos is a C count of nanoseconds as a Duration, saturated (the library saturates too).
func nanos(ns C.uint64_t) time.Duration {
	if uint64(ns) > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}
