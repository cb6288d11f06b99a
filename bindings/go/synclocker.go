package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// SyncLocker is a sync.Locker over one lock name of a Locker (a *Store), as etcd's
// concurrency.NewLocker is over an etcd mutex: Lock waits until the lease is granted, Unlock
// releases it. Each Lock takes a new lease, renewed in the background (KeepAlive) until
// Unlock: a mutex has no time limit, and the TTL (WithTTL, default 30s) only bounds how long
// the lock stays taken after this process pauses or dies.
//
// The goroutines sharing l take turns on a mutex of l before they take the lease: from Lock to
// Unlock no other Lock of l runs, so each Unlock releases the lease of the Lock before it. The
// lease excludes the holders of other processes (and of other SyncLockers). A lease can be
// lost while l is locked (this process paused past the TTL): another process may then take the
// lock, but a goroutine waiting in Lock of l still waits for the Unlock, as on a sync.Mutex, and
// takes a new lease after it; the late Unlock releases only the lost lease.
//
// sync.Locker's methods return no error, so they panic with it, as etcd's do: Lock when the
// lease cannot be acquired (a closed store, an I/O error; the panic value is the error, which
// errors.Is matches), Unlock when the release fails or the SyncLocker is not locked. A lease
// lost while held is not a panic, also not at Unlock (whose release of a lost lease returns
// ErrLockLost, see Holder.Release): Holder().Lost() tells of it before Unlock, and writes
// fenced with Holder().Token() are refused once a later holder wrote.
//
// It is not reentrant: a goroutine that locks it twice without Unlock blocks for ever, as with
// a sync.Mutex.
type SyncLocker struct {
	locker Locker
	name   string
	opts   []AcquireOption

	// turn is held from Lock to Unlock, so that a Lock never replaces the lease of a Lock not
	// yet unlocked. Unlock may run on another goroutine than Lock, as sync.Mutex allows.
	turn sync.Mutex

	mu     sync.Mutex // guards holder, the lease of the current Lock
	holder Holder
}

var _ sync.Locker = (*SyncLocker)(nil)

// NewSyncLocker returns a sync.Locker for the lock name of locker. Every Lock acquires it with
// opts plus Wait and KeepAlive; WithTTL sets the lease length. Shared and Permits make no
// mutex and panic here.
func NewSyncLocker(locker Locker, name string, opts ...AcquireOption) *SyncLocker {
	if settings := SettingsOf(opts...); settings.Shared || settings.Permits > 0 {
		panic("fencelock: NewSyncLocker takes an exclusive lock: Shared and Permits make no mutex")
	}
	all := append(opts[:len(opts):len(opts)], Wait(), KeepAlive())
	return &SyncLocker{locker: locker, name: name, opts: all}
}

// Lock blocks until l is unlocked and a new lease is granted. It panics with the error when
// the acquire fails, leaving l unlocked.
func (l *SyncLocker) Lock() {
	l.turn.Lock()
	holder, err := l.locker.Acquire(context.Background(), l.name, l.opts...)
	if err != nil {
		l.turn.Unlock()
		panic(err)
	}
	l.mu.Lock()
	l.holder = holder
	l.mu.Unlock()
}

// Unlock releases the lease of the Lock before it, then lets the next Lock of l go on. It
// panics when l is not locked, and with the error when the release fails; l is unlocked
// either way.
func (l *SyncLocker) Unlock() {
	l.mu.Lock()
	holder := l.holder
	l.holder = nil
	l.mu.Unlock()
	if holder == nil {
		panic(fmt.Sprintf("fencelock: Unlock of unlocked SyncLocker %q", l.name))
	}
	defer l.turn.Unlock()
	if err := holder.Release(); err != nil && !errors.Is(err, ErrLockLost) {
		panic(err)
	}
}

// Holder is the lease of the current Lock, or nil while l is unlocked: its Token fences the
// writes made under the lock.
func (l *SyncLocker) Holder() Holder {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder
}
