package fencelock

import (
	"context"
	"errors"
	"fmt"
)

// WithLock acquires the lock name as Acquire does with opts (it tries once unless Wait is
// among them, and waits per ctx then), runs fn with the holder, and releases the lease once fn
// returns, or panics (the panic then goes on). It returns fn's error, joined with the
// release's (errors.Join) if that failed too, or Acquire's error without running fn. A lease
// lost before the release (it expired, or another holder took the lock over while fn ran)
// makes the release's error a *LockLostError, matching ErrLockLost: what fn did may have
// overlapped another holder's work (see Holder.Release).
//
// The lease is renewed while fn runs: WithLock adds KeepAlive to opts, the package's way to
// keep a lease (the library renews it in the background every third of the TTL, on a thread
// of its own that Go's scheduler and GC do not hold up). How long fn runs is fn's business, so
// the TTL (WithTTL; at least 3ms) only bounds how long the lock stays taken when this process
// pauses or dies, not how long fn may run.
//
// fn's ctx is ctx, also cancelled when the lease is known lost (Holder.Lost: a renewal found
// it taken over, after a pause longer than the TTL, or a write through h found it lost); its
// context.Cause is then a *LockLostError, matching ErrLockLost. That watch costs one OS thread
// blocked in the library while fn runs. A loss is learned late by nature: write through h
// (h.Put, checked against the lease in the same transaction) or with h.Token() as the fence,
// so that a write after an unnoticed loss is refused.
func (s *Store) WithLock(ctx context.Context, name string, fn func(ctx context.Context, h Holder) error, opts ...AcquireOption) (err error) {
	h, err := s.Acquire(ctx, name, append(opts[:len(opts):len(opts)], KeepAlive())...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer func() {
		cancel(nil)
		if releaseErr := h.Release(); releaseErr != nil {
			err = errors.Join(err, releaseErr)
		}
	}()
	go func() {
		select {
		case <-h.Lost():
			cancel(&LockLostError{Token: h.Token(), Message: fmt.Sprintf(
				"lease of lock %q with token %d was lost while WithLock's function ran", name, h.Token())})
		case <-fnCtx.Done():
		}
	}()
	return fn(fnCtx, h)
}
