package fencelock

/*
#include "fencelock.h"
*/
import "C"

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// forever is a C timeout with no limit (the library saturates it).
const forever = C.uint64_t(math.MaxUint64)

// waitCancel is the fencelock_cancel of one blocking C call: the only way the package ends a
// wait early. It fires when ctx is done or when the handle the call blocks on is closed
// (waits.closeAll); the call then ends within about a millisecond with StatusCancelled,
// having changed nothing. One C call per wait, so no layer here cuts waits into slices.
type waitCancel struct {
	c     *C.fencelock_cancel
	stop  func() bool
	fired chan struct{} // closed once the ctx callback has fired c
	ws    *waits
}

// newWaitCancel makes the cancel of one call and registers it with ws. Call free once the C
// call has returned. deadlineIsTimeout says that the call's C timeout is ctx's deadline: the
// cancel then does not fire for the deadline, which the C timeout ends the call at (within
// the millisecond it is rounded up to), so that the library counts it as the timeout it is
// (Metrics.RefusedTimeout), not as a cancel.
func newWaitCancel(ctx context.Context, ws *waits, deadlineIsTimeout bool) (*waitCancel, error) {
	var c *C.fencelock_cancel
	if err := check(func(e errOut) C.fencelock_status { return C.fencelock_cancel_new(&c, e) }); err != nil {
		return nil, err
	}
	w := &waitCancel{c: c, fired: make(chan struct{}), ws: ws}
	w.stop = context.AfterFunc(ctx, func() {
		if !deadlineIsTimeout || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			C.fencelock_cancel_fire(c)
		}
		close(w.fired)
	})
	ws.add(c)
	return w, nil
}

// newBoundCancel is newWaitCancel for a call with no timeout of its own (a write, an Extend, a
// try-once acquire): ctx's deadline, if it has one, is set on the cancel
// (fencelock_cancel_set_timeout), so that the library ends the call there with StatusTimeout
// instead of at the store's busy timeout; ctx's cancellation fires it.
func newBoundCancel(ctx context.Context, ws *waits) (*waitCancel, error) {
	deadline, hasDeadline := ctx.Deadline()
	w, err := newWaitCancel(ctx, ws, hasDeadline)
	if err != nil || !hasDeadline {
		return w, err
	}
	ms, _ := millis("deadline", max(time.Until(deadline), 0))
	if err := check(func(e errOut) C.fencelock_status { return C.fencelock_cancel_set_timeout(w.c, ms, e) }); err != nil {
		w.free()
		return nil, err
	}
	return w, nil
}

// boundError is the error of a call made with a newBoundCancel: ctx's own error when ctx ended
// the call (its deadline, which the library reports as a timeout, or its cancellation), and
// closed when closing the handle the call was made on did (it fired the cancel); else err.
func boundError(ctx context.Context, ws *waits, closed, err error) error {
	deadline, hasDeadline := ctx.Deadline()
	switch {
	case errors.Is(err, ErrTimeout) && hasDeadline && !time.Now().Before(deadline):
		return context.DeadlineExceeded
	case errors.Is(err, ErrCancelled) && ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrCancelled) && ws.isClosed():
		return closed
	}
	return err
}

// free unregisters and frees the cancel, after a ctx callback already running has finished
// with it.
func (w *waitCancel) free() {
	w.ws.remove(w.c)
	if !w.stop() {
		<-w.fired
	}
	C.fencelock_cancel_free(w.c)
}

// waits is the set of cancels of the calls blocked on one handle, so that closing the handle
// ends them at once instead of waiting for them.
type waits struct {
	mu     sync.Mutex
	closed bool
	set    map[*C.fencelock_cancel]struct{}
}

// add registers c; once the handle is closing, c fires at once.
func (ws *waits) add(c *C.fencelock_cancel) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		C.fencelock_cancel_fire(c)
		return
	}
	if ws.set == nil {
		ws.set = map[*C.fencelock_cancel]struct{}{}
	}
	ws.set[c] = struct{}{}
}

func (ws *waits) remove(c *C.fencelock_cancel) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.set, c)
}

// closeAll fires every registered cancel and every later one.
func (ws *waits) closeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	for c := range ws.set {
		C.fencelock_cancel_fire(c)
	}
}

// isClosed reports whether closeAll ran: a StatusCancelled then came from the close.
func (ws *waits) isClosed() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.closed
}

// endHandle ends a handle that calls use under mu's read lock (a holder's lease, a
// leadership): it ends their waits for a busy store (ws), runs end (the release, the resign)
// under the read lock, so that it also wakes the goroutine waiting on the handle out of its
// wait, then frees the handle under the write lock, which waits for the calls in progress,
// and closes ch once. The first end's error is returned; a later end does nothing.
func endHandle[P comparable](mu *sync.RWMutex, h *P, ws *waits, end func(P) error, free func(P), once *sync.Once, ch chan struct{}) error {
	var none P // nil: P is the handle pointer, as cgo's C types are incomplete and cannot be type arguments
	ws.closeAll()
	var err error
	mu.RLock()
	if *h != none {
		err = end(*h)
	}
	mu.RUnlock()
	mu.Lock()
	if *h != none {
		free(*h)
		*h = none
	}
	mu.Unlock()
	once.Do(func() { close(ch) })
	return err
}
