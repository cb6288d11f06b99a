// Package gocronlock is a distributed Locker for gocron v2 (github.com/go-co-op/gocron/v2)
// over fencelock, so that of the schedulers of several processes (on one host, or on an etcd
// store across hosts) only one runs each job at a time:
//
//	scheduler, err := gocron.NewScheduler(gocron.WithDistributedLocker(gocronlock.New(store)))
//
// Each run of a job acquires the lock named after the job (gocron.WithName; gocron's default is
// the function's name) and releases it when the run ends; the lease is renewed in the
// background meanwhile (KeepAlive), so its TTL only bounds how long the lock stays taken after
// the process pauses or dies. By default a run tries once: while another scheduler's run holds
// the lock, gocron skips this one (its AfterLockError listener gets an error matching
// fencelock.ErrLocked). fencelock.Wait() among the options makes a run wait, as long as the
// job's context lasts.
//
// gocron does not hand the lock to the job, so Locker.Holder gives the job its run's lease: its
// Token fences the job's writes, which a later run's token then supersedes.
//
// It is a module of its own, so that only the programs that import it depend on gocron.
package gocronlock

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock-go"
	"github.com/go-co-op/gocron/v2"
)

// Locker is a gocron.Locker over a fencelock.Locker (a *fencelock.Store, or a fake in tests).
type Locker struct {
	locker fencelock.Locker
	opts   []fencelock.AcquireOption

	mu   sync.Mutex
	runs map[string]fencelock.Holder // the lease of each job's run in progress, by lock name
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a Locker that acquires with opts (WithTTL, Wait, Permits, ...) plus KeepAlive.
func New(locker fencelock.Locker, opts ...fencelock.AcquireOption) *Locker {
	return &Locker{
		locker: locker,
		opts:   append(opts[:len(opts):len(opts)], fencelock.KeepAlive()),
		runs:   map[string]fencelock.Holder{},
	}
}

// Lock acquires the lock key (the job's name) for one run of the job; gocron calls it with the
// job's context and skips the run when it returns an error (a *fencelock.LockedError while
// another run holds the lock).
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	holder, err := l.locker.Acquire(ctx, key, l.opts...)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.runs[key] = holder
	l.mu.Unlock()
	return &lock{locker: l, key: key, holder: holder}, nil
}

// Holder returns the lease of the run of job key in progress in this process (of the latest
// one, with Permits), and false when there is none.
func (l *Locker) Holder(key string) (fencelock.Holder, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	holder, ok := l.runs[key]
	return holder, ok
}

// lock is the gocron.Lock of one run.
type lock struct {
	locker *Locker
	key    string
	holder fencelock.Holder
}

// Unlock releases the run's lease; gocron calls it when the run ends.
func (k *lock) Unlock(context.Context) error {
	k.locker.mu.Lock()
	if k.locker.runs[k.key] == k.holder {
		delete(k.locker.runs, k.key)
	}
	k.locker.mu.Unlock()
	return k.holder.Release()
}
