package fencelock

/*
#include <stdlib.h>
#include "fencelock.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

// WaiterInfo is an acquire queued waiting for a lock: the waiting process, its place in the
// queue (a lower Ticket waits longer and is served first), when it took it and how long it
// has waited.
type WaiterInfo struct {
	Name         string
	PID          uint32
	Ticket       uint64
	WaitingSince time.Time // wall-clock estimate
	Waited       time.Duration
}

// Waiters lists the acquires of any process of this host queued waiting for the lock name,
// oldest first (the order they are served in); empty for a store opened in single-process
// mode, whose waits are not queued. An empty name, or an etcd store, is ErrInvalidArgument.
func (s *Store) Waiters(ctx context.Context, name string) ([]WaiterInfo, error) {
	cname, err := cString("lock name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	var waiters []WaiterInfo
	err = s.call(ctx, func(sh *C.fencelock_store) error {
		var list *C.fencelock_waiter_list
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_store_waiters(sh, cname, &list, e) }); err != nil {
			return err
		}
		defer C.fencelock_waiter_list_free(list)
		n := int(C.fencelock_waiter_list_len(list))
		waiters = make([]WaiterInfo, 0, n)
		for i := 0; i < n; i++ {
			var info C.fencelock_waiter_info
			if err := check(func(errOut) C.fencelock_status { return C.fencelock_waiter_list_get(list, C.size_t(i), &info) }); err != nil {
				return err
			}
			waiters = append(waiters, WaiterInfo{
				Name:         C.GoString(info.name),
				PID:          uint32(info.pid),
				Ticket:       uint64(info.ticket),
				WaitingSince: time.UnixMilli(int64(info.waiting_since_unix_ms)),
				Waited:       time.Duration(info.waited_ms) * time.Millisecond,
			})
		}
		return nil
	})
	return waiters, err
}
