package fencelock

// The C-callback glue of SetMetricsRecorder, all in this file: the exported callback the
// library calls, and the one C helper that hands it to fencelock_store_set_observer.

/*
#include <stdint.h>
#include "fencelock.h"

// Exported below; cgo declares it with a non-const event, hence the cast in the helper.
extern void fencelockGoObserver(void *context, fencelock_event *event);

// The context is the recorder's cgo.Handle, a number, not a pointer: it becomes a void * here,
// in C, since Go may not make a pointer of an integer (go vet and the race detector's checkptr
// refuse). static inline: the preamble of a file with an export is compiled twice, and a
// static function makes no symbol to clash.
static inline fencelock_status fencelock_go_set_observer(const fencelock_store *store,
		uintptr_t handle, fencelock_error **err) {
	if (handle == 0) {
		return fencelock_store_set_observer(store, NULL, NULL, err);
	}
	return fencelock_store_set_observer(store, (fencelock_observer_fn)fencelockGoObserver,
		(void *)handle, err);
}
*/
import "C"

import (
	"context"
	"runtime/cgo"
	"time"
	"unsafe"
)

// MetricsRecorder receives the lock events of a Store's operations in this process, shaped
// like the MetricsRecorder of ubgo's filelock so that one adapter to a metrics system serves
// both. Set it with Store.SetMetricsRecorder.
//
// Its methods are called synchronously, on the goroutine or thread whose operation ended (a
// keep-alive renewal's loss comes from a library thread), after the operation, from many at
// once: they must be safe for concurrent use and return quickly, since the operation's caller
// waits for them. They must not call the Store (Close above all: it waits for the call that is
// reporting), nor runtime.Goexit (t.Fatal in a test).
type MetricsRecorder interface {
	// AcquireAttempt is called once per lock name each time an Acquire (or AcquireAll, or
	// AcquireAndPut) ends: acquired says whether it was granted, wait how long it waited
	// (zero for one that did not wait: a try-once acquire, or a wait granted at once).
	AcquireAttempt(name string, acquired bool, wait time.Duration)
	// HoldDuration is called when a lease ends in this process, released or found lost, with
	// how long after its grant.
	HoldDuration(name string, held time.Duration)
	// ActiveLocksDelta is +1 after each grant's AcquireAttempt and -1 after each
	// HoldDuration: their sum is the leases of this Store's holders not yet released or known
	// lost (a lease that ran out unnoticed counts until its holder learns it or releases it).
	ActiveLocksDelta(name string, delta int)
}

// SetMetricsRecorder makes r receive the events of this Store's acquires and of the releases
// and losses of its holders, replacing the recorder set before; nil removes it. Each lease
// ends once: a release or a loss, whichever the holder learns first (a release of a lease
// already known lost tells nothing more).
//
// A panic in r is recovered, so that it does not cross into the library: that event's
// remaining calls are skipped (a panicking AcquireAttempt means no ActiveLocksDelta for it),
// the operation that reported it returns as it would have, and r stays set. It returns once
// no call of the recorder it replaces is running (the library waits for them), so no event
// reaches the old recorder afterwards. Close removes the recorder: holders that outlive their
// Store report nothing after it.
// An etcd store refuses a recorder (ErrInvalidArgument).
func (s *Store) SetMetricsRecorder(r MetricsRecorder) error {
	return s.call(context.Background(), func(sh *C.fencelock_store) error {
		c := s.core
		// One change at a time, so that the handle kept last is the one the library has.
		c.observerMu.Lock()
		defer c.observerMu.Unlock()
		var h cgo.Handle
		if r != nil {
			h = cgo.NewHandle(r)
		}
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_go_set_observer(sh, C.uintptr_t(h), e) }); err != nil {
			if h != 0 {
				h.Delete()
			}
			return err
		}
		// Only now, the replacing call having returned, is the old handle no longer the
		// library's.
		if c.observer != 0 {
			c.observer.Delete()
		}
		c.observer = h
		return nil
	})
}

// takeObserver, with the store's handle write-locked and not yet closed, removes the recorder
// from the library (so that holders outliving the store do not report to it) and returns its
// handle, for close to delete once the C store is closed.
func (c *storeCore) takeObserver() cgo.Handle {
	c.observerMu.Lock()
	defer c.observerMu.Unlock()
	h := c.observer
	if h != 0 {
		C.fencelock_go_set_observer(c.h, 0, nil)
		c.observer = 0
	}
	return h
}

// fencelockGoObserver is the observer callback: context is the recorder's handle.
//
//export fencelockGoObserver
func fencelockGoObserver(context unsafe.Pointer, event *C.fencelock_event) {
	// Nothing may panic across C frames: not the recorder, nor Value of a handle already
	// deleted (a late event, see SetMetricsRecorder). The event is then dropped.
	defer func() { _ = recover() }()
	r := cgo.Handle(uintptr(context)).Value().(MetricsRecorder)
	name := C.GoString(event.name) // valid during this call only
	switch event.event {
	case C.FENCELOCK_EVENT_ACQUIRE:
		acquired := event.status == C.FENCELOCK_OK
		r.AcquireAttempt(name, acquired, nanos(event.waited_ns))
		if acquired {
			r.ActiveLocksDelta(name, +1)
		}
	case C.FENCELOCK_EVENT_RELEASE, C.FENCELOCK_EVENT_LOST:
		r.HoldDuration(name, nanos(event.held_ns))
		r.ActiveLocksDelta(name, -1)
	}
}
