package fencelock

/*
#include "fencelock.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Locker hands out leases. *Store implements it; application code can depend on Locker and
// tests can swap in a fake.
type Locker interface {
	Acquire(ctx context.Context, name string, opts ...AcquireOption) (Holder, error)
}

// Holder is a granted lease. The holders a Store returns release their lease when the garbage
// collector finds them unreachable, but only as a safety net: call Release.
type Holder interface {
	// Name is the lock's name.
	Name() string
	// Token is the lease's fencing token, higher than that of every earlier grant of the store.
	Token() uint64
	// Release ends the lease at once for every process. The first Release of a lease lost
	// before it (it expired, or another holder took the lock over) frees what is still its
	// own and returns a *LockLostError (matching ErrLockLost), as bsm/redislock's
	// ErrLockNotHeld and redsync's ErrLockAlreadyExpired do: the work done under the lease may
	// have overlapped another holder's. Its fenced writes after the loss were refused; side
	// effects no fence checked must be checked by the caller. Every later Release returns nil.
	Release() error
	// Extend renews the lease for ttl from now, only while this holder still owns it;
	// otherwise a *LockLostError.
	Extend(ctx context.Context, ttl time.Duration) error
	// Held reports whether the lease is still this holder's: not released, expired or taken over.
	Held(ctx context.Context) (bool, error)
	// Put writes value under key with the holder's token, checking in the same transaction that
	// the lease is still current (*LockLostError) and that the key accepted no higher token
	// (*StaleTokenError).
	Put(ctx context.Context, key string, value []byte) error
	// Delete deletes key, checked like Put. It reports whether the key held a value.
	Delete(ctx context.Context, key string) (bool, error)
	// Lost returns a channel closed once the lease is known lost: released, its TTL passed
	// without renewal, an Extend or Put found it taken over, or a KeepAlive renewal failed.
	Lost() <-chan struct{}
}

// KindHolder is a Holder that tells how it holds its name. The holders a Store returns
// implement it: kind, _ := holder.(fencelock.KindHolder). (It is apart from Holder so that
// fakes written against Holder keep compiling.)
type KindHolder interface {
	Holder
	// Kind is how the lease holds its name: exclusive, shared, or a permit of a semaphore.
	Kind() Kind
	// Permits is the permit count of the semaphore this is a permit of; 0 for another kind.
	Permits() uint32
}

// RemainingHolder is a Holder that tells the time left on its lease. The holders a Store
// returns implement it: left := holder.(fencelock.RemainingHolder).Remaining(). (It is apart
// from Holder so that fakes written against Holder keep compiling.)
type RemainingHolder interface {
	Holder
	// Remaining is the time left on the lease as this holder last set it (millisecond
	// precision); zero once it ran out or was released. It reads no storage and cannot fail:
	// whether another holder took the lock over is answered by Held.
	Remaining() time.Duration
}

var _ Locker = (*Store)(nil)
var _ KindHolder = (*lease)(nil)
var _ RemainingHolder = (*lease)(nil)

// lease is the Holder of a Store. The cleanup attached to it frees the C holder, which
// releases the lease if it is still held.
type lease struct {
	core *leaseCore
}

type leaseCore struct {
	// mu is read-held by every call that uses h and write-held while h is freed.
	mu      sync.RWMutex
	h       *C.fencelock_holder // nil once released
	name    string
	token   uint64
	kind    Kind
	permits uint32

	lost      chan struct{}
	closeLost sync.Once
	watch     sync.Once

	// waits ends the writes blocked on h at Release, so that Release does not wait for them.
	waits waits
}

// newLease wraps a granted C holder.
func newLease(h *C.fencelock_holder, name string, settings AcquireSettings) (Holder, error) {
	core := &leaseCore{
		h:       h,
		name:    name,
		token:   uint64(C.fencelock_holder_token(h)),
		kind:    Kind(C.fencelock_holder_kind(h)),
		permits: uint32(C.fencelock_holder_permits(h)),
		lost:    make(chan struct{}),
	}
	l := &lease{core: core}
	runtime.AddCleanup(l, func(c *leaseCore) { _ = c.end() }, core)
	if settings.KeepAlive {
		ttl, _ := millis("ttl", settings.TTL)
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_holder_keep_alive(h, ttl, e) }); err != nil {
			core.end()
			return nil, err
		}
	}
	return l, nil
}

func (l *lease) Name() string    { return l.core.name }
func (l *lease) Kind() Kind      { return l.core.kind }
func (l *lease) Permits() uint32 { return l.core.permits }
func (l *lease) Token() uint64   { return l.core.token }

func (l *lease) String() string {
	return fmt.Sprintf("fencelock.Holder(%q, token %d)", l.core.name, l.core.token)
}

// released is the error of a write through a released holder, as the library gives it.
func (c *leaseCore) released() error {
	return &LockLostError{Token: c.token, Message: fmt.Sprintf("lease with token %d was lost: it expired or was released", c.token)}
}

// call runs fn with the live handle after checking ctx (ctxDone); a released holder gives
// released().
func (l *lease) call(ctx context.Context, fn func(h *C.fencelock_holder) error) error {
	if err := ctxDone(ctx); err != nil {
		return err
	}
	c := l.core
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return c.released()
	}
	err := fn(c.h)
	runtime.KeepAlive(l)
	return err
}

// bounded runs fn, one C call with no timeout of its own, with the live handle and a cancel
// that ends it with ctx, as Store.bounded does; a Release ends it with released().
func (l *lease) bounded(ctx context.Context, fn func(h *C.fencelock_holder, cancel *C.fencelock_cancel) error) error {
	c := l.core
	return l.call(ctx, func(h *C.fencelock_holder) error {
		cancel, err := newBoundCancel(ctx, &c.waits)
		if err != nil {
			return err
		}
		defer cancel.free()
		return boundError(ctx, &c.waits, c.released(), fn(h, cancel.c))
	})
}

func (l *lease) Release() error {
	err := l.core.end()
	runtime.KeepAlive(l)
	return err
}

// end releases the lease, frees the handle and closes the Lost channel (endHandle).
func (c *leaseCore) end() error {
	return endHandle(&c.mu, &c.h, &c.waits,
		func(h *C.fencelock_holder) error {
			return check(func(e errOut) C.fencelock_status { return C.fencelock_holder_release(h, e) })
		},
		func(h *C.fencelock_holder) { C.fencelock_holder_free(h) },
		&c.closeLost, c.lost)
}

func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	ms, err := millis("ttl", ttl)
	if err != nil {
		return err
	}
	return l.bounded(ctx, func(h *C.fencelock_holder, cancel *C.fencelock_cancel) error {
		return check(func(e errOut) C.fencelock_status { return C.fencelock_holder_extend_cancellable(h, ms, cancel, e) })
	})
}

func (l *lease) Held(ctx context.Context) (bool, error) {
	if err := ctxDone(ctx); err != nil {
		return false, err
	}
	c := l.core
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return false, nil
	}
	var held C.bool
	err := check(func(e errOut) C.fencelock_status { return C.fencelock_holder_is_held(c.h, &held, e) })
	runtime.KeepAlive(l)
	if err != nil {
		return false, err
	}
	return bool(held), nil
}

func (l *lease) Remaining() time.Duration {
	c := l.core
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return 0
	}
	var ms C.uint64_t
	err := check(func(e errOut) C.fencelock_status { return C.fencelock_holder_remaining_ms(c.h, &ms, e) })
	runtime.KeepAlive(l)
	if err != nil {
		// Only a panic in the library: zero, the safe answer for code that must stop writing.
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

func (l *lease) Put(ctx context.Context, key string, value []byte) error {
	return l.bounded(ctx, func(h *C.fencelock_holder, cancel *C.fencelock_cancel) error {
		err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_holder_put_cancellable(h, stringPtr(key), C.size_t(len(key)), bytesPtr(value), C.size_t(len(value)), cancel, e)
		})
		runtime.KeepAlive(value)
		return err
	})
}

func (l *lease) Delete(ctx context.Context, key string) (bool, error) {
	var existed C.bool
	err := l.bounded(ctx, func(h *C.fencelock_holder, cancel *C.fencelock_cancel) error {
		return check(func(e errOut) C.fencelock_status {
			return C.fencelock_holder_delete_cancellable(h, stringPtr(key), C.size_t(len(key)), cancel, &existed, e)
		})
	})
	return bool(existed), err
}

// Lost starts, on first use, one goroutine that waits for the loss in one C call, which the
// library ends when the lease is released (Release wakes it at once), runs out unrenewed or is
// found taken over. The goroutine ends with the lease.
//
// That call has no cancel handle on purpose: the library looks at a cancel handle every
// millisecond (measured: 15 ms of CPU a second per watched holder), while a wait without one
// sleeps until the lease ends. Release, which ends the lease, is what needs to end it.
func (l *lease) Lost() <-chan struct{} {
	c := l.core
	c.watch.Do(func() { go c.watchLost() })
	return c.lost
}

func (c *leaseCore) watchLost() {
	defer c.closeLost.Do(func() { close(c.lost) })
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return
	}
	var lost C.bool
	// An error means the library could not say (a panic or a bad handle): the lease is then
	// reported lost all the same, the safe answer for code that must stop writing.
	_ = check(func(e errOut) C.fencelock_status { return C.fencelock_holder_wait_lost(c.h, forever, &lost, e) })
}
