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
	"io/fs"
	"syscall"
	"time"
)

// Status is a stable status code of the fencelock C ABI. A retired code is never reused.
type Status int32

// The status codes of the C ABI (include/fencelock.h).
const (
	StatusOK                  Status = 0
	StatusLocked              Status = 1
	StatusStaleToken          Status = 2
	StatusLockLost            Status = 3
	StatusTimeout             Status = 4
	StatusInvalidArgument     Status = 5
	StatusNullPointer         Status = 6
	StatusIO                  Status = 7
	StatusCorrupt             Status = 8
	StatusNotAStore           Status = 9
	StatusIncompatibleVersion Status = 10
	StatusInUse               Status = 11
	StatusForked              Status = 12
	StatusStorage             Status = 13
	StatusNotFound            Status = 14
	StatusPanic               Status = 15
	StatusCancelled           Status = 16
	StatusReplaced            Status = 17
	StatusPermitsMismatch     Status = 18
	StatusWouldDeadlock       Status = 19
)

// String returns the library's static description of the status.
func (s Status) String() string {
	return C.GoString(C.fencelock_status_str(C.fencelock_status(s)))
}

// Sentinel errors, one per status code, for errors.Is. Every error the package returns for a
// failed C call matches exactly one of them; the typed errors below carry the details.
// ErrTimeout is a waiting Acquire whose ctx deadline passed (the error then also matches
// context.DeadlineExceeded), or an open or a write that waited past the busy timeout behind
// another process (see WithBusyTimeout).
var (
	ErrLocked              = errors.New("fencelock: lock is held by another live lease")
	ErrStaleToken          = errors.New("fencelock: stale token")
	ErrLockLost            = errors.New("fencelock: lease lost")
	ErrTimeout             = errors.New("fencelock: timed out waiting")
	ErrInvalidArgument     = errors.New("fencelock: invalid argument")
	ErrNullPointer         = errors.New("fencelock: null pointer")
	ErrIO                  = errors.New("fencelock: I/O error")
	ErrCorrupt             = errors.New("fencelock: store is damaged")
	ErrNotAStore           = errors.New("fencelock: not a fencelock store")
	ErrIncompatibleVersion = errors.New("fencelock: store written by a newer fencelock")
	ErrInUse               = errors.New("fencelock: store in use")
	ErrForked              = errors.New("fencelock: store used after fork; open a new store")
	ErrStorage             = errors.New("fencelock: storage error")
	ErrNotFound            = errors.New("fencelock: not found")
	ErrPanic               = errors.New("fencelock: internal panic")
	// ErrCancelled: a wait was ended through its cancel handle; nothing changed. The package
	// cancels a wait only for its ctx or a Close, and then returns ctx.Err() (wrapped) or
	// ErrClosed instead, so it is seldom seen.
	ErrCancelled = errors.New("fencelock: wait cancelled")
	// ErrReplaced: the store file was deleted, renamed or replaced at its path since the Store
	// opened it; writes and grants are refused. Open the store again.
	ErrReplaced = errors.New("fencelock: store file was replaced since it was opened")
	// ErrPermitsMismatch: a semaphore acquire asked for another permit count than the live
	// permits of the name were granted with; nothing changed. See *PermitsMismatchError.
	ErrPermitsMismatch = errors.New("fencelock: semaphore has live permits of another count")
	// ErrWouldDeadlock: the library refused a waiting acquire for a lease granted to the same
	// OS thread through the same store. Stores this package opens never refuse so (goroutines
	// move between OS threads, so the thread says nothing of the goroutine): a goroutine that
	// waits for a lock it holds itself waits until the lease ends, as with a sync.Mutex. The
	// sentinel is here for the status table.
	ErrWouldDeadlock = errors.New("fencelock: the wait would wait for this thread's own lease")
	// ErrClosed is returned by every method of a Store after Close. It has no C status code.
	ErrClosed = errors.New("fencelock: store is closed")
)

// sentinels is the one table from status code to sentinel error.
var sentinels = map[Status]error{
	StatusLocked:              ErrLocked,
	StatusStaleToken:          ErrStaleToken,
	StatusLockLost:            ErrLockLost,
	StatusTimeout:             ErrTimeout,
	StatusInvalidArgument:     ErrInvalidArgument,
	StatusNullPointer:         ErrNullPointer,
	StatusIO:                  ErrIO,
	StatusCorrupt:             ErrCorrupt,
	StatusNotAStore:           ErrNotAStore,
	StatusIncompatibleVersion: ErrIncompatibleVersion,
	StatusInUse:               ErrInUse,
	StatusForked:              ErrForked,
	StatusStorage:             ErrStorage,
	StatusNotFound:            ErrNotFound,
	StatusPanic:               ErrPanic,
	StatusCancelled:           ErrCancelled,
	StatusReplaced:            ErrReplaced,
	StatusPermitsMismatch:     ErrPermitsMismatch,
	StatusWouldDeadlock:       ErrWouldDeadlock,
}

// Error is a failure reported by the library that has no more specific type below.
// errors.Is(err, ErrX) matches the sentinel of its Status. An I/O error (StatusIO) that the
// system reported with an error number carries it in Errno and unwraps to it, so that
// errors.Is(err, fs.ErrNotExist) and errors.Is(err, fs.ErrPermission) work as for package os.
type Error struct {
	Status  Status
	Message string
	Errno   syscall.Errno // fencelock_error_os_code: 0 when the error has no system cause
}

func (e *Error) Error() string { return "fencelock: " + e.Message }

// Is matches the sentinel of the error's status.
func (e *Error) Is(target error) bool { return target == sentinels[e.Status] && target != nil }

// Unwrap returns Errno, or nil when there is none.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// withPath makes an I/O error that carries an error number a *fs.PathError for path, as
// package os reports a failed open ("open PATH: fencelock: I/O error: no such file or
// directory": the path once, the system's error as syscall.Errno words it); other errors are
// returned as they are.
func withPath(op, path string, err error) error {
	var lib *Error
	if errors.As(err, &lib) && lib.Errno != 0 {
		lib.Message = "I/O error: " + lib.Errno.Error()
		return &fs.PathError{Op: op, Path: path, Err: err}
	}
	return err
}

// WaitError is the error of a waiting Acquire that its ctx ended. It unwraps to ctx's error
// (context.DeadlineExceeded or context.Canceled) and, for a deadline, matches ErrTimeout too.
// Its text names the lock and the wait, as Python's filelock.Timeout names its lock file.
type WaitError struct {
	Lock   string        // the lock waited for
	Waited time.Duration // how long the Acquire waited, in whole milliseconds
	Err    error         // ctx's error
}

func (e *WaitError) Error() string {
	if e.timedOut() {
		return fmt.Sprintf("fencelock: timed out after %v waiting for lock %q (%v)", e.Waited, e.Lock, e.Err)
	}
	return fmt.Sprintf("fencelock: waiting for lock %q for %v: %v", e.Lock, e.Waited, e.Err)
}

// Is matches ErrTimeout when the deadline passed.
func (e *WaitError) Is(target error) bool { return target == ErrTimeout && e.timedOut() }

// Unwrap returns ctx's error.
func (e *WaitError) Unwrap() error { return e.Err }

func (e *WaitError) timedOut() bool { return errors.Is(e.Err, context.DeadlineExceeded) }

// LockedError says the lock is held by a live lease. It matches ErrLocked.
type LockedError struct {
	Lock      string        // the lock's name
	Token     uint64        // token of the current lease
	PID       uint32        // process id of the current holder
	Remaining time.Duration // time left before the current lease expires
	Message   string
}

func (e *LockedError) Error() string { return "fencelock: " + e.Message }

// Is matches ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// StaleTokenError says a fenced write carried a token lower than the highest one the key or
// resource accepted; nothing was written. It matches ErrStaleToken.
type StaleTokenError struct {
	Token   uint64 // the token the write carried
	Highest uint64 // the highest token already accepted
	Message string
}

func (e *StaleTokenError) Error() string { return "fencelock: " + e.Message }

// Is matches ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// LockLostError says the holder's lease expired, was taken over or was released. It matches
// ErrLockLost.
type LockLostError struct {
	Token   uint64 // the token of the lost lease
	Current uint64 // the token now recorded for the lock; 0 if none
	Message string
}

func (e *LockLostError) Error() string { return "fencelock: " + e.Message }

// Is matches ErrLockLost.
func (e *LockLostError) Is(target error) bool { return target == ErrLockLost }

// PermitsMismatchError says a semaphore acquire asked for Requested permits while live permits
// of the name were granted with Permits; nothing changed. It matches ErrPermitsMismatch.
type PermitsMismatchError struct {
	Permits   uint32 // the permit count stored with the name
	Requested uint32 // the permit count the acquire asked for
	Message   string
}

func (e *PermitsMismatchError) Error() string { return "fencelock: " + e.Message }

// Is matches ErrPermitsMismatch.
func (e *PermitsMismatchError) Is(target error) bool { return target == ErrPermitsMismatch }

// newError turns a failed status and its optional error object into a Go error, and frees the
// object. The status decides the type; the object supplies message and details.
func newError(s Status, obj *C.fencelock_error) error {
	msg := s.String()
	var token, highest, remainingMs uint64
	var pid uint32
	var errno syscall.Errno
	var lock string
	if obj != nil {
		msg = C.GoString(C.fencelock_error_message(obj))
		token = uint64(C.fencelock_error_token(obj))
		highest = uint64(C.fencelock_error_highest(obj))
		pid = uint32(C.fencelock_error_pid(obj))
		remainingMs = uint64(C.fencelock_error_remaining_ms(obj))
		errno = syscall.Errno(C.fencelock_error_os_code(obj))
		if name := C.fencelock_error_name(obj); name != nil {
			lock = C.GoString(name)
		}
		C.fencelock_error_free(obj)
	}
	switch s {
	case StatusLocked:
		return &LockedError{Lock: lock, Token: token, PID: pid, Remaining: time.Duration(remainingMs) * time.Millisecond, Message: msg}
	case StatusStaleToken:
		return &StaleTokenError{Token: token, Highest: highest, Message: msg}
	case StatusLockLost:
		return &LockLostError{Token: token, Current: highest, Message: msg}
	case StatusPermitsMismatch:
		return &PermitsMismatchError{Permits: uint32(token), Requested: uint32(highest), Message: msg}
	}
	if _, known := sentinels[s]; !known {
		msg = fmt.Sprintf("unknown status %d: %s", int32(s), msg)
	}
	return &Error{Status: s, Message: msg, Errno: errno}
}

// errOut is the optional error out-parameter that every fallible C call takes last.
type errOut = **C.fencelock_error

// check makes one fallible C call, handing it the error out-parameter, and returns its
// failure as a Go error (newError, which frees the error object), or nil for FENCELOCK_OK.
// Like wasmtime-go's mkError it makes every C call site one statement, with no status variable
// and no branch of its own:
//
//	err := check(func(e errOut) C.fencelock_status { return C.fencelock_store_fence(sh, cres, tok, e) })
//
// A call that has no error out-parameter (a list's get) ignores e: its failure is a status alone.
func check(call func(e errOut) C.fencelock_status) error {
	var eobj *C.fencelock_error
	if status := call(&eobj); status != 0 {
		return newError(Status(status), eobj)
	}
	return nil
}

// invalid is an InvalidArgument error found on the Go side, before any C call (for example a
// name with a NUL byte, which a C string cannot carry).
func invalid(format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Message: "invalid argument: " + fmt.Sprintf(format, args...)}
}
