package fencelock

/*
#include <stdlib.h>
#include "fencelock.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Leader election over the C ABI's fencelock_leadership, fencelock_leader and
// fencelock_leader_watch. The rules (fair campaigns, the safety margin, fencing by the term,
// the order of changes) live in the library; this file shapes them into Go: a ctx for every
// wait, a Done channel, and a channel of changes.

// Leader is the leader of an election, as Store.Leader and Store.Observe tell it.
type Leader struct {
	// Name is the election's name.
	Name string
	// Term is the token of the leader's grant: higher than every earlier term's, and the
	// fencing token of the leader's writes.
	Term uint64
	// Version counts the leader's values within its term: 1 at the start, one more at each
	// Proclaim.
	Version uint64
	// Value is the leader's value (its address, say).
	Value []byte
	// PID is the leader's process id.
	PID int
	// Since is when the term began (the leader's wall clock).
	Since time.Time
}

// CampaignOption configures Campaign.
type CampaignOption func(*campaignConfig)

type campaignConfig struct {
	value  []byte
	ttl    time.Duration
	margin time.Duration
}

// WithValue sets the candidate's value (its address, say), which the leader record carries.
func WithValue(value []byte) CampaignOption {
	return func(c *campaignConfig) { c.value = value }
}

// WithLeaseTTL sets the leader's lease, renewed in the background every third of it (default
// 15 s).
func WithLeaseTTL(ttl time.Duration) CampaignOption {
	return func(c *campaignConfig) { c.ttl = ttl }
}

// WithMargin sets how long before its lease could be granted to another the leadership ends
// for its holder (default: a third of the lease; at most half of it), as client-go's renew
// deadline.
func WithMargin(margin time.Duration) CampaignOption {
	return func(c *campaignConfig) { c.margin = margin }
}

// Leadership is a won campaign. Its lease is kept alive in the background; it ends for its
// holder a safety margin before that lease could be granted to another, and Done is closed
// then. Its writes (Put, Delete, Fence) are fenced by Term and refused once it ended. Resign
// steps down at once; a Leadership the garbage collector finds unreachable is resigned too, but
// only as a safety net. Safe for concurrent use.
type Leadership struct {
	core *leadershipCore
}

type leadershipCore struct {
	// mu is read-held by every call that uses h and write-held while h is freed.
	mu   sync.RWMutex
	h    *C.fencelock_leadership // nil once resigned
	name string
	term uint64

	valueMu sync.Mutex
	value   []byte // the C ABI tells no leadership's value: kept as Campaign or Proclaim set it

	done      chan struct{}
	closeDone sync.Once
	watch     sync.Once

	// waits ends the calls blocked on h at Resign, so that Resign does not wait for them.
	waits waits
}

// Campaign waits, fairly (candidates are granted oldest first, across processes), to lead the
// election name, and returns the Leadership once it leads. ctx bounds the wait: its deadline
// or cancellation ends it (a *WaitError matching ctx's error), and Close of the store ends it
// with ErrClosed; a campaign ended while it waits leaves nothing behind.
func (s *Store) Campaign(ctx context.Context, name string, opts ...CampaignOption) (*Leadership, error) {
	cfg := campaignConfig{ttl: 15 * time.Second}
	for _, opt := range opts {
		opt(&cfg)
	}
	ttl, err := millis("ttl", cfg.ttl)
	if err != nil {
		return nil, err
	}
	margin, err := millis("margin", cfg.margin)
	if err != nil {
		return nil, err
	}
	cname, err := cString("election name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	value := append([]byte(nil), cfg.value...)
	start := time.Now()
	timeout := forever
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, waitError(name, start, context.DeadlineExceeded)
		}
		timeout, _ = millis("timeout", left)
	}
	var h *C.fencelock_leadership
	err = s.call(ctx, func(sh *C.fencelock_store) error {
		cancel, err := newWaitCancel(ctx, &s.core.waits, hasDeadline)
		if err != nil {
			return err
		}
		defer cancel.free()
		err = check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_campaign(sh, cname, bytesPtr(value), C.size_t(len(value)), ttl, margin, timeout, cancel.c, &h, e)
		})
		runtime.KeepAlive(value)
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrTimeout) && hasDeadline:
		return nil, waitError(name, start, context.DeadlineExceeded)
	case errors.Is(err, ErrCancelled) && ctx.Err() != nil:
		return nil, waitError(name, start, ctx.Err())
	case errors.Is(err, ErrCancelled) && s.core.waits.isClosed():
		return nil, ErrClosed
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return nil, waitError(name, start, err) // ctx was done before the call began
	default:
		return nil, err
	}
	core := &leadershipCore{
		h:     h,
		name:  name,
		term:  uint64(C.fencelock_leadership_term(h)),
		value: value,
		done:  make(chan struct{}),
	}
	l := &Leadership{core: core}
	runtime.AddCleanup(l, func(c *leadershipCore) { _ = c.end() }, core)
	return l, nil
}

// Name is the election's name.
func (l *Leadership) Name() string { return l.core.name }

// Term is the token of the grant: higher than every earlier term's, and the fencing token of
// the leader's writes.
func (l *Leadership) Term() uint64 { return l.core.term }

// Value is the leader's value, as Campaign or the last Proclaim of this Leadership set it.
func (l *Leadership) Value() []byte {
	l.core.valueMu.Lock()
	defer l.core.valueMu.Unlock()
	return append([]byte(nil), l.core.value...)
}

func (l *Leadership) String() string {
	return fmt.Sprintf("fencelock.Leadership(%q, term %d)", l.core.name, l.core.term)
}

// ended is the error of a call on a resigned Leadership.
func (c *leadershipCore) ended() error {
	return &LockLostError{Token: c.term, Message: fmt.Sprintf("leadership of %q with term %d ended: it was resigned", c.name, c.term)}
}

// call runs fn with the live handle after checking ctx; a resigned Leadership gives ended().
func (l *Leadership) call(ctx context.Context, fn func(h *C.fencelock_leadership) error) error {
	if err := ctxDone(ctx); err != nil {
		return err
	}
	c := l.core
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return c.ended()
	}
	err := fn(c.h)
	runtime.KeepAlive(l)
	return err
}

// IsLost reports whether the leadership ended for its holder: resigned, its lease lost, or
// less than the safety margin left on it. Once true, always true. It reads no storage.
func (l *Leadership) IsLost() bool {
	c := l.core
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return true
	}
	lost := bool(C.fencelock_leadership_is_lost(c.h))
	runtime.KeepAlive(l)
	return lost
}

// Done returns a channel closed once the leadership ends for its holder (see IsLost): stop
// leading when it is. The first call starts one goroutine that waits for the end in one C
// call, which the library wakes at the end itself; it ends with the leadership.
func (l *Leadership) Done() <-chan struct{} {
	c := l.core
	c.watch.Do(func() { go c.watchDone() })
	return c.done
}

func (c *leadershipCore) watchDone() {
	defer c.closeDone.Do(func() { close(c.done) })
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return
	}
	var lost C.bool
	// No cancel handle: the library wakes this wait at the end of the leadership, which
	// Resign brings about at once. An error (a panic in the library) reports it ended all the
	// same, the safe answer for code that must stop leading.
	_ = check(func(e errOut) C.fencelock_status {
		return C.fencelock_leadership_wait_lost(c.h, forever, nil, &lost, e)
	})
}

// Proclaim changes the leader's value: the next version of the leader record, fenced by the
// term, told to every observer. Once the leadership ended, a *LockLostError (ErrLockLost) and
// nothing written.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	err := l.call(ctx, func(h *C.fencelock_leadership) error {
		err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_leadership_proclaim(h, bytesPtr(value), C.size_t(len(value)), e)
		})
		runtime.KeepAlive(value)
		return err
	})
	if err == nil {
		l.core.valueMu.Lock()
		l.core.value = append([]byte(nil), value...)
		l.core.valueMu.Unlock()
	}
	return err
}

// Put writes value under key fenced by the term, with the lease checked in the same
// transaction: a *LockLostError (ErrLockLost) once the leadership ended, a *StaleTokenError
// (ErrStaleToken) when the key accepted a higher token.
func (l *Leadership) Put(ctx context.Context, key string, value []byte) error {
	return l.call(ctx, func(h *C.fencelock_leadership) error {
		err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_leadership_put(h, stringPtr(key), C.size_t(len(key)), bytesPtr(value), C.size_t(len(value)), e)
		})
		runtime.KeepAlive(value)
		runtime.KeepAlive(key)
		return err
	})
}

// Delete deletes key fenced by the term, checked like Put. It reports whether the key held a
// value.
func (l *Leadership) Delete(ctx context.Context, key string) (bool, error) {
	var existed C.bool
	err := l.call(ctx, func(h *C.fencelock_leadership) error {
		err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_leadership_delete(h, stringPtr(key), C.size_t(len(key)), &existed, e)
		})
		runtime.KeepAlive(key)
		return err
	})
	return bool(existed), err
}

// Fence checks the term at the external fence resource (Store.Fence), for storage of your
// own: a *LockLostError once the leadership ended, a *StaleTokenError when the fence accepted
// a higher token.
func (l *Leadership) Fence(ctx context.Context, resource string) error {
	cres, err := cString("fence resource", resource)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cres))
	return l.call(ctx, func(h *C.fencelock_leadership) error {
		return check(func(e errOut) C.fencelock_status { return C.fencelock_leadership_fence(h, cres, e) })
	})
}

// Resign steps down at once: the next candidate leads without waiting for the lease to run
// out, and Done is closed. The first Resign of a leadership whose lease was lost before it
// returns a *LockLostError (ErrLockLost): the work done as leader may have overlapped the
// next leader's (its fenced writes after the loss were refused). Every later Resign returns
// nil. ctx is checked before the resign, which does not wait.
func (l *Leadership) Resign(ctx context.Context) error {
	if err := ctxDone(ctx); err != nil {
		return err
	}
	err := l.core.end()
	runtime.KeepAlive(l)
	return err
}

// end resigns, frees the handle and closes Done (endHandle).
func (c *leadershipCore) end() error {
	return endHandle(&c.mu, &c.h, &c.waits,
		func(h *C.fencelock_leadership) error {
			return check(func(e errOut) C.fencelock_status { return C.fencelock_leadership_resign(h, e) })
		},
		func(h *C.fencelock_leadership) { C.fencelock_leadership_free(h) },
		&c.closeDone, c.done)
}

// leaderFrom copies a C leader into a Leader and frees it.
func leaderFrom(p *C.fencelock_leader) Leader {
	defer C.fencelock_leader_free(p)
	var n C.size_t
	value := C.fencelock_leader_value(p, &n)
	return Leader{
		Name:    C.GoString(C.fencelock_leader_name(p)),
		Term:    uint64(C.fencelock_leader_term(p)),
		Version: uint64(C.fencelock_leader_version(p)),
		Value:   C.GoBytes(unsafe.Pointer(value), C.int(n)),
		PID:     int(C.fencelock_leader_pid(p)),
		Since:   time.UnixMilli(int64(C.fencelock_leader_since_unix_ms(p))),
	}
}

// Leader returns the current leader of the election name: the live holder of its lock, with
// its record; ErrNotFound while nobody leads.
func (s *Store) Leader(ctx context.Context, name string) (Leader, error) {
	cname, err := cString("election name", name)
	if err != nil {
		return Leader{}, err
	}
	defer C.free(unsafe.Pointer(cname))
	var leader Leader
	err = s.call(ctx, func(sh *C.fencelock_store) error {
		var p *C.fencelock_leader
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_store_leader(sh, cname, &p, e) }); err != nil {
			return err
		}
		leader = leaderFrom(p)
		return nil
	})
	return leader, err
}

// Observe watches the election name: the returned channel gets the leader of the time of the
// call first (if one leads), then every change (each new term, each Proclaim) in order of
// terms, never going back, woken by the change, not by polling. It is closed when ctx is done
// or the store is closed (and, should the library fail to read the store, then too). An
// observer changes nothing the candidates see. Receive from it promptly: while a change waits
// for the receiver, two proclaims within one term are told as the later one, though no term is
// passed over (unless more than 64 began meanwhile).
func (s *Store) Observe(ctx context.Context, name string) (<-chan Leader, error) {
	cname, err := cString("election name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	var watch *C.fencelock_leader_watch
	err = s.call(ctx, func(sh *C.fencelock_store) error {
		return check(func(e errOut) C.fencelock_status { return C.fencelock_store_observe_leader(sh, cname, &watch, e) })
	})
	if err != nil {
		return nil, err
	}
	changes := make(chan Leader)
	go s.observe(ctx, watch, changes)
	return changes, nil
}

// observe sends each change of watch to changes until ctx is done or the store closed, then
// frees watch and closes changes.
func (s *Store) observe(ctx context.Context, watch *C.fencelock_leader_watch, changes chan<- Leader) {
	defer close(changes)
	defer C.fencelock_leader_watch_free(watch)
	for {
		var p *C.fencelock_leader
		err := s.call(ctx, func(*C.fencelock_store) error {
			cancel, err := newWaitCancel(ctx, &s.core.waits, false)
			if err != nil {
				return err
			}
			defer cancel.free()
			return check(func(e errOut) C.fencelock_status {
				return C.fencelock_leader_watch_next(watch, forever, cancel.c, &p, e)
			})
		})
		if err != nil {
			return
		}
		select {
		case changes <- leaderFrom(p):
		case <-ctx.Done():
			return
		}
	}
}
