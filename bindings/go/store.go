// Package fencelock is the Go binding of fencelock: leased locks with fencing tokens, and
// fenced values, in one file-backed database that the threads and processes of one Linux host
// share.
//
// A process that pauses while holding a lock (a GC pause, a SIGSTOP, a slow disk) can wake up
// after its lease expired and another process took over. Every grant carries a token higher
// than every earlier grant of the store, and a fenced write is refused with ErrStaleToken when
// its token is lower than the highest its key has accepted:
//
//	store, err := fencelock.Open("/var/lib/myapp/locks.db")
//	if err != nil { return err }
//	defer store.Close()
//	holder, err := store.Acquire(ctx, "payment-export", fencelock.Wait())
//	if err != nil { return err }
//	defer holder.Release()
//	fence := holder.Token() // monotonic uint64
//	if err := store.PutWithFence(ctx, "payments/today.csv", data, fence); err != nil { return err }
//
// Example (example_test.go) runs the same as a test.
//
// The package calls the C ABI of the Rust library (include/fencelock.h), linked statically.
//
// Keys are Go strings and binary-safe: any bytes, including NUL, passed to the library as
// (pointer, length). Lock names and fence resources are C strings and cannot contain NUL.
// Every call checks ctx before it starts (canceled, or its deadline passed). A write
// (PutWithFence, Delete, Fence, AcquireAndPut, a try-once Acquire or AcquireAll, Holder.Put,
// Holder.Delete, Holder.Extend) then honours ctx as a waiting Acquire does while it waits
// behind another process that holds the store: it ends at ctx's deadline with
// context.DeadlineExceeded (a ctx without a deadline leaves the busy timeout, WithBusyTimeout,
// to bound it) and once ctx is canceled with context.Canceled, having changed nothing. Reads
// run to completion.
// Every type is safe for concurrent use.
//
// Errors match the sentinels (ErrLocked, ErrTimeout, ...) with errors.Is and the standard
// ones where they apply: an Open whose directory is missing returns a *fs.PathError that
// matches fs.ErrNotExist (fs.ErrPermission when it may not be created), and a waiting Acquire
// whose deadline passed matches context.DeadlineExceeded.
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
	"runtime/cgo"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// DefaultTTL is the lease length of Acquire without WithTTL.
const DefaultTTL = 30 * time.Second

// Version is the version of the linked fencelock library.
func Version() string { return C.GoString(C.fencelock_version()) }

// VersionNumber is the version of the linked fencelock library as one number, MAJOR*1000000 +
// MINOR*1000 + PATCH (fencelock_version_number): 1000 for 0.1.0.
func VersionNumber() int { return int(C.fencelock_version_number()) }

// HeaderVersionNumber is the FENCELOCK_VERSION_NUMBER of the fencelock.h the module carries (a
// Go literal, so that go doc shows it; constants_internal_test.go checks it against the
// header). VersionNumber differs from it only when the build tag fencelock_system links a
// system library of another version.
const HeaderVersionNumber = 1000

// Mode says how processes share the store file.
type Mode int32

const (
	// MultiProcess lets any number of processes open the file at once. The default.
	MultiProcess Mode = 0
	// SingleProcess refuses the open of a second process (ErrInUse); commits are cheaper.
	SingleProcess Mode = 1
)

// OpenOption configures Open.
type OpenOption func(*openConfig)

type openConfig struct {
	mode        Mode
	maxValueLen uint64
	busyTimeout time.Duration
	readOnly    bool
	noHistory   bool
	writeLog    bool
}

// WithMode sets how processes share the file (default MultiProcess).
func WithMode(mode Mode) OpenOption { return func(c *openConfig) { c.mode = mode } }

// WithMaxValueLen sets the largest fenced value accepted, in bytes (default 16 MiB).
func WithMaxValueLen(n uint64) OpenOption { return func(c *openConfig) { c.maxValueLen = n } }

// WithBusyTimeout bounds how long Open, and each later write whose ctx has no deadline, waits
// behind another process that holds the store (one paused inside a commit or its open) before
// giving up with ErrTimeout, having changed nothing (default 10s; rounded up to whole
// milliseconds). A write whose ctx has a deadline waits until that deadline instead, shorter or
// longer, and a canceled ctx ends it at once.
func WithBusyTimeout(d time.Duration) OpenOption { return func(c *openConfig) { c.busyTimeout = d } }

// WithReadOnly opens an existing store for reading only: grants and writes fail with
// ErrInvalidArgument, and Open never waits behind a process paused inside a commit, creates
// nothing and needs no write permission.
func WithReadOnly() OpenOption { return func(c *openConfig) { c.readOnly = true } }

// WithoutHistory makes the grants this Store commits record no grant history (Store.History),
// which makes a grant about a fifth cheaper in single-process mode; Metrics still counts how
// leases ended. Through a server, the server's setting decides.
func WithoutHistory() OpenOption { return func(c *openConfig) { c.noHistory = true } }

// WithWriteLog makes fenced writes (puts, deletes, fences, an acquire's write) of a
// multi-process store go to a redo log beside the store file (PATH.wal.*) instead of a commit
// of the file: one fdatasync shared by the processes writing at that moment, and no process
// stopped in a write holds another's. The first process that opens the store decides for every
// process that has it open at the same time (the others follow it, whatever their options); the
// last to close it leaves it one file again. No effect in single-process mode. Off by default
// while it is new.
func WithWriteLog() OpenOption { return func(c *openConfig) { c.writeLog = true } }

// Store is an open fencelock store. Close it when done; a forgotten Store is closed when the
// garbage collector finds it unreachable, but only as a safety net.
type Store struct {
	core *storeCore
}

// storeCore owns the C handle. It is separate from Store so that the cleanup attached to Store
// can reach it without keeping Store alive.
type storeCore struct {
	// mu is read-held by every call that uses h and write-held by close, so the handle is
	// never freed under a running call.
	mu   sync.RWMutex
	h    *C.fencelock_store
	path string

	gatesMu sync.Mutex
	gates   map[string]*gate

	// waits ends the waiting Acquires at Close, so that Close does not wait for them.
	waits waits

	// observer is the handle of the MetricsRecorder the library has (observer.go), 0 for
	// none; observerMu, taken inside mu, orders its changes.
	observerMu sync.Mutex
	observer   cgo.Handle
}

// gate lets one goroutine per lock name of a Store wait inside C at a time; the others wait on
// a Go channel, which holds no OS thread. It only schedules: who gets the lock is decided by
// the library. A release in this process wakes the goroutine waiting in C at once.
type gate struct {
	slot  chan struct{}
	users int
}

// Open opens the store at path, creating it if it does not exist. path may instead name an
// etcd cluster, etcd://HOST:PORT[,HOST:PORT...][/PREFIX], when the library is built with the
// etcd feature (FENCELOCK_FEATURES=etcd scripts/go-lib.sh).
func Open(path string, opts ...OpenOption) (*Store, error) {
	var cfg openConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	busy, err := millis("busy timeout", cfg.busyTimeout) // 0: the library's default
	if err != nil {
		return nil, err
	}
	cpath, err := cString("path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cpath))
	// The library's refusal of a wait for a lease of the calling OS thread is off: a goroutine
	// is not a thread, and another goroutine run on the thread that acquired a lease must
	// wait for it, not be refused.
	var flags C.uint32_t = C.FENCELOCK_OPEN_ALLOW_OWN_WAITS
	if cfg.readOnly {
		flags |= C.FENCELOCK_OPEN_READ_ONLY
	}
	if cfg.noHistory {
		flags |= C.FENCELOCK_OPEN_NO_HISTORY
	}
	if cfg.writeLog {
		flags |= C.FENCELOCK_OPEN_WRITE_LOG
	}
	var h *C.fencelock_store
	if err := check(func(e errOut) C.fencelock_status {
		return C.fencelock_store_open_cancellable(cpath, C.int32_t(cfg.mode), flags, C.uint64_t(cfg.maxValueLen), busy, nil, &h, e)
	}); err != nil {
		return nil, withPath("open", path, err)
	}
	s := &Store{core: &storeCore{h: h, path: path, gates: map[string]*gate{}}}
	runtime.AddCleanup(s, (*storeCore).close, s.core)
	return s, nil
}

// Path is the store file.
func (s *Store) Path() string { return s.core.path }

// Close closes the store. It ends waiting Acquires at once (they return ErrClosed) and waits
// for other calls in progress. Holders outlive it: they keep the file open until released.
// Closing again does nothing.
func (s *Store) Close() error {
	s.core.close()
	return nil
}

func (c *storeCore) close() {
	c.waits.closeAll() // before the lock, which waits for the calls holding the handle
	c.mu.Lock()
	var observer cgo.Handle
	if c.h != nil {
		observer = c.takeObserver()
		C.fencelock_store_close(c.h)
		c.h = nil
	}
	c.mu.Unlock()
	if observer != 0 {
		observer.Delete() // after the close: the library no longer has it
	}
}

// bounded runs fn, one C call with no timeout of its own (a write, a try-once acquire), with
// the live handle and a cancel that ends it with ctx (newBoundCancel): at ctx's deadline with
// context.DeadlineExceeded, instead of at the busy timeout, and once ctx is canceled with
// context.Canceled; a Close ends it with ErrClosed.
func (s *Store) bounded(ctx context.Context, fn func(h *C.fencelock_store, cancel *C.fencelock_cancel) error) error {
	return s.call(ctx, func(sh *C.fencelock_store) error {
		cancel, err := newBoundCancel(ctx, &s.core.waits)
		if err != nil {
			return err
		}
		defer cancel.free()
		return boundError(ctx, &s.core.waits, ErrClosed, fn(sh, cancel.c))
	})
}

// call runs fn with the live handle, after checking ctx (ctxDone); ErrClosed after Close.
func (s *Store) call(ctx context.Context, fn func(h *C.fencelock_store) error) error {
	if err := ctxDone(ctx); err != nil {
		return err
	}
	s.core.mu.RLock()
	defer s.core.mu.RUnlock()
	if s.core.h == nil {
		return ErrClosed
	}
	err := fn(s.core.h)
	runtime.KeepAlive(s)
	return err
}

// ctxDone is the error of a ctx a call must not start with: ctx.Err(), or
// context.DeadlineExceeded once the deadline passed, before ctx's timer fired (ctx.Err() is
// nil until then).
func ctxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// AcquireOption configures Acquire.
type AcquireOption func(*AcquireSettings)

// AcquireSettings is what the options of one Acquire call asked for. A fake Locker in a test
// reads it with SettingsOf.
type AcquireSettings struct {
	TTL       time.Duration // lease length; DefaultTTL unless WithTTL
	Wait      bool          // wait until the lock is free or ctx is done
	KeepAlive bool          // renew the lease in the background
	Shared    bool          // a shared (read) lock
	Permits   uint32        // a permit of a semaphore of this many permits; 0 for a lock
}

// SettingsOf applies opts to the defaults.
func SettingsOf(opts ...AcquireOption) AcquireSettings {
	settings := AcquireSettings{TTL: DefaultTTL}
	for _, opt := range opts {
		opt(&settings)
	}
	return settings
}

// WithTTL sets the lease length (default 30s; from 1ms to 30 days; rounded up to whole
// milliseconds).
func WithTTL(ttl time.Duration) AcquireOption { return func(s *AcquireSettings) { s.TTL = ttl } }

// Wait makes Acquire wait until the lock is free or ctx is done, instead of returning
// ErrLocked. When ctx's deadline passes the error matches both ErrTimeout and
// context.DeadlineExceeded; when ctx is canceled it matches context.Canceled.
func Wait() AcquireOption { return func(s *AcquireSettings) { s.Wait = true } }

// KeepAlive renews the lease in the background (every third of its TTL) until it is released
// or lost; Holder.Lost tells of a loss. The TTL must then be at least 3ms.
func KeepAlive() AcquireOption { return func(s *AcquireSettings) { s.KeepAlive = true } }

// Shared makes Acquire take the lock shared: any number of shared holders at once, none while an
// exclusive holder holds it, and an exclusive Acquire waits for every shared holder to go. A
// shared holder reads: its Put and Delete are refused with ErrInvalidArgument, since a shared
// lock promises its holders that nobody writes. Its token still fences writes made with it.
func Shared() AcquireOption { return func(s *AcquireSettings) { s.Shared = true } }

// Permits makes Acquire take one permit of a semaphore of n permits (1 to MaxHolders): up to n
// holders at once, each with its own token, lease and TTL. Asking for another n while permits
// of the name are live fails with a *PermitsMismatchError (matching ErrPermitsMismatch) and
// changes nothing.
func Permits(n uint32) AcquireOption { return func(s *AcquireSettings) { s.Permits = n } }

// MaxHolders is the most holders of one name at once (the largest semaphore, the most shared
// holders), and the most names of one AcquireAll.
const MaxHolders = 1024

// Kind is how a lease holds its name.
type Kind int32

const (
	KindExclusive Kind = 0 // one holder at a time
	KindShared    Kind = 1 // any number of shared holders
	KindSemaphore Kind = 2 // up to the name's permit count of holders
)

func (k Kind) String() string {
	switch k {
	case KindExclusive:
		return "exclusive"
	case KindShared:
		return "shared"
	case KindSemaphore:
		return "semaphore"
	}
	return fmt.Sprintf("Kind(%d)", int32(k))
}

// kind is the C kind and permit count that settings ask for.
func (settings AcquireSettings) kind() (C.int32_t, C.uint32_t, error) {
	switch {
	case settings.Shared && settings.Permits > 0:
		return 0, 0, invalid("an acquire is Shared or takes Permits, not both")
	case settings.Shared:
		return C.FENCELOCK_KIND_SHARED, 0, nil
	case settings.Permits > 0:
		return C.FENCELOCK_KIND_SEMAPHORE, C.uint32_t(settings.Permits), nil
	}
	return C.FENCELOCK_KIND_EXCLUSIVE, 0, nil
}

// Acquire acquires the lock name (exclusively, or as Shared or Permits say). Without Wait it
// tries once and returns a *LockedError (matching ErrLocked) when the lock is held in a way
// that excludes this grant. A grant that would join live holders (another shared holder,
// another permit) stands behind every waiting acquire of the name, so a stream of shared
// acquires does not starve a waiting exclusive one.
//
// It returns the Holder interface, not a concrete type, so that *Store implements Locker: Go
// has no covariant results, and code written against Locker (and Holder) takes a *Store in
// production and a fake in tests (see locker_test.go). Every method a lease has is on Holder.
func (s *Store) Acquire(ctx context.Context, name string, opts ...AcquireOption) (Holder, error) {
	settings := SettingsOf(opts...)
	kind, permits, err := settings.kind()
	if err != nil {
		return nil, err
	}
	return s.grant(name, settings, func(cname *C.char, ttl C.uint64_t) (*C.fencelock_holder, error) {
		opts := acquireOptions(ttl)
		opts.kind, opts.permits = kind, permits
		hs, err := s.acquire(ctx, name, &cname, 1, opts, settings.Wait)
		return hs[0], err
	})
}

// AcquireAll acquires every lock of names exclusively, all or none, in one transaction, and
// returns one Holder per name in the order given. It is deadlock-free by construction: it never
// holds some of the locks while it waits for others. Each holder has its own token (they follow
// each other), lease and TTL, and is released, extended and lost on its own. Without Wait it
// tries once (*LockedError naming the first held lock); with Wait it waits until all are free
// at once or ctx is done. WithTTL and KeepAlive apply to every holder; Shared and Permits are
// refused with ErrInvalidArgument.
func (s *Store) AcquireAll(ctx context.Context, names []string, opts ...AcquireOption) ([]Holder, error) {
	settings := SettingsOf(opts...)
	if settings.Shared || settings.Permits > 0 {
		return nil, invalid("AcquireAll acquires exclusive locks only")
	}
	if len(names) == 0 {
		return nil, invalid("AcquireAll needs at least one lock name")
	}
	ttl, err := millis("ttl", settings.TTL)
	if err != nil {
		return nil, err
	}
	cnames := C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof((*C.char)(nil))))
	defer C.free(cnames)
	carray := unsafe.Slice((**C.char)(cnames), len(names))
	for i := range carray {
		carray[i] = nil
	}
	defer func() {
		for _, cname := range carray {
			C.free(unsafe.Pointer(cname))
		}
	}()
	for i, name := range names {
		if carray[i], err = cString("lock name", name); err != nil {
			return nil, err
		}
	}
	hs, err := s.acquire(ctx, strings.Join(names, ","), (**C.char)(cnames), len(names), acquireOptions(ttl), settings.Wait)
	if err != nil {
		return nil, err
	}
	holders := make([]Holder, 0, len(names))
	for i, h := range hs {
		holder, err := newLease(h, names[i], settings)
		if err != nil {
			for _, held := range holders {
				_ = held.Release()
			}
			for _, rest := range hs[i+1:] {
				C.fencelock_holder_free(rest)
			}
			return nil, err
		}
		holders = append(holders, holder)
	}
	return holders, nil
}

// grant runs one granting call with the lock name and TTL converted for C, and wraps the
// holder it returns.
func (s *Store) grant(name string, settings AcquireSettings, call func(cname *C.char, ttl C.uint64_t) (*C.fencelock_holder, error)) (Holder, error) {
	ttl, err := millis("ttl", settings.TTL)
	if err != nil {
		return nil, err
	}
	cname, err := cString("lock name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	h, err := call(cname, ttl)
	if err != nil {
		return nil, err
	}
	return newLease(h, name, settings)
}

// acquireOptions is the fencelock_acquire_options of a try-once acquire of one exclusive lock
// for ttl; the callers set what differs.
func acquireOptions(ttl C.uint64_t) C.fencelock_acquire_options {
	return C.fencelock_acquire_options{size: C.size_t(unsafe.Sizeof(C.fencelock_acquire_options{})), ttl_ms: ttl}
}

// acquire makes the one C call of every acquire, fencelock_store_acquire_opts, for the count C
// names at cnames with opts: tried once, bounded by ctx (bounded), or with wait in acquireWait,
// behind the gate of gateName. It fills in the options' timeout and cancel handle. Neither opts
// nor the array of names may hold a pointer to Go memory (cgo's rule for memory passed to C).
func (s *Store) acquire(ctx context.Context, gateName string, cnames **C.char, count int, opts C.fencelock_acquire_options, wait bool) ([]*C.fencelock_holder, error) {
	hs := make([]*C.fencelock_holder, count)
	call := func(sh *C.fencelock_store, timeout C.uint64_t, cancel *C.fencelock_cancel, _ **C.fencelock_holder, e errOut) C.fencelock_status {
		o := opts
		o.cancel = cancel
		if wait {
			o.flags |= C.FENCELOCK_ACQUIRE_WAIT
			o.timeout_ms = timeout
		}
		return C.fencelock_store_acquire_opts(sh, cnames, C.size_t(count), &o, &hs[0], e)
	}
	var err error
	if wait {
		_, err = s.acquireWait(ctx, gateName, call)
	} else {
		err = s.bounded(ctx, func(sh *C.fencelock_store, cancel *C.fencelock_cancel) error {
			return check(func(e errOut) C.fencelock_status { return call(sh, 0, cancel, nil, e) })
		})
	}
	return hs, err
}

// waitCall is one waiting C acquire with its timeout and cancel handle.
type waitCall func(sh *C.fencelock_store, timeout C.uint64_t, cancel *C.fencelock_cancel, h **C.fencelock_holder, e errOut) C.fencelock_status

// acquireWait waits in one C call, behind the lock name's gate (see gate), until the lock is
// granted, ctx's deadline passes (the C timeout) or ctx is done or the store closed (the
// call's cancel fires).
func (s *Store) acquireWait(ctx context.Context, name string, call waitCall) (*C.fencelock_holder, error) {
	start := time.Now()
	g := s.core.enterGate(name)
	defer s.core.leaveGate(name, g)
	select {
	case g.slot <- struct{}{}:
		defer func() { <-g.slot }()
	case <-ctx.Done():
		return nil, waitError(name, start, ctx.Err())
	}
	timeout := forever
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		left := time.Until(deadline)
		if left <= 0 {
			// ctx.Err() may still be nil here: its timer need not have fired yet.
			return nil, waitError(name, start, context.DeadlineExceeded)
		}
		timeout, _ = millis("timeout", left)
	}
	var h *C.fencelock_holder
	err := s.call(ctx, func(sh *C.fencelock_store) error {
		cancel, err := newWaitCancel(ctx, &s.core.waits, hasDeadline)
		if err != nil {
			return err
		}
		defer cancel.free()
		return check(func(e errOut) C.fencelock_status { return call(sh, timeout, cancel.c, &h, e) })
	})
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, ErrTimeout) && hasDeadline:
		// The C timeout is the deadline, though ctx's own timer may not have fired yet.
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
}

// waitError is the error of a wait begun at start that ctx ended with ctxErr (never nil).
func waitError(name string, start time.Time, ctxErr error) error {
	return &WaitError{Lock: name, Waited: time.Since(start).Truncate(time.Millisecond), Err: ctxErr}
}

func (c *storeCore) enterGate(name string) *gate {
	c.gatesMu.Lock()
	defer c.gatesMu.Unlock()
	g := c.gates[name]
	if g == nil {
		g = &gate{slot: make(chan struct{}, 1)}
		c.gates[name] = g
	}
	g.users++
	return g
}

func (c *storeCore) leaveGate(name string, g *gate) {
	c.gatesMu.Lock()
	defer c.gatesMu.Unlock()
	g.users--
	if g.users == 0 {
		delete(c.gates, name)
	}
}

// AcquireAndPut acquires the lock name and writes value under key with the new token, in one
// transaction: either both happen or neither. Without Wait it tries once; with Wait it waits its
// turn as Acquire does, and writes with the grant. Shared and Permits are refused with
// ErrInvalidArgument: only an exclusive grant writes.
func (s *Store) AcquireAndPut(ctx context.Context, name, key string, value []byte, opts ...AcquireOption) (Holder, error) {
	settings := SettingsOf(opts...)
	if settings.Shared || settings.Permits > 0 {
		return nil, invalid("AcquireAndPut acquires an exclusive lock only")
	}
	return s.grant(name, settings, func(cname *C.char, ttl C.uint64_t) (*C.fencelock_holder, error) {
		// Copies in C memory: the options passed to C may point to no Go memory.
		ckey, cvalue := cBytes([]byte(key)), cBytes(value)
		defer C.free(unsafe.Pointer(ckey))
		defer C.free(unsafe.Pointer(cvalue))
		o := acquireOptions(ttl)
		o.flags = C.FENCELOCK_ACQUIRE_PUT
		o.key, o.key_len = ckey, C.size_t(len(key))
		o.value, o.value_len = cvalue, C.size_t(len(value))
		hs, err := s.acquire(ctx, name, &cname, 1, o, settings.Wait)
		return hs[0], err
	})
}

// PutWithFence stores data under key with the fencing token fence. It returns a
// *StaleTokenError (matching ErrStaleToken), and writes nothing, when the key accepted a
// higher token before; an equal token is accepted, so one holder can write many times.
func (s *Store) PutWithFence(ctx context.Context, key string, data []byte, fence uint64) error {
	return s.bounded(ctx, func(sh *C.fencelock_store, cancel *C.fencelock_cancel) error {
		err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_put_cancellable(sh, stringPtr(key), C.size_t(len(key)), bytesPtr(data), C.size_t(len(data)), C.uint64_t(fence), cancel, e)
		})
		runtime.KeepAlive(data)
		return err
	})
}

// Get returns the value of key and the token of the write that stored it, or ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	var value []byte
	var token uint64
	err := s.call(ctx, func(sh *C.fencelock_store) error {
		var buf *C.uint8_t
		var n C.size_t
		var tok C.uint64_t
		if err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_get(sh, stringPtr(key), C.size_t(len(key)), &buf, &n, &tok, e)
		}); err != nil {
			return err
		}
		value = C.GoBytes(unsafe.Pointer(buf), C.int(n))
		C.fencelock_buffer_free(buf, n)
		token = uint64(tok)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return value, token, nil
}

// Delete deletes key with the fencing token fence, refused like PutWithFence. It reports
// whether the key held a value.
func (s *Store) Delete(ctx context.Context, key string, fence uint64) (bool, error) {
	var existed C.bool
	err := s.bounded(ctx, func(sh *C.fencelock_store, cancel *C.fencelock_cancel) error {
		return check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_delete_cancellable(sh, stringPtr(key), C.size_t(len(key)), C.uint64_t(fence), cancel, &existed, e)
		})
	})
	return bool(existed), err
}

// Fence records that the external resource accepted token, or returns a *StaleTokenError when
// it accepted a higher one. Use it to guard a resource the store does not hold.
func (s *Store) Fence(ctx context.Context, resource string, token uint64) error {
	cres, err := cString("fence resource", resource)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cres))
	return s.bounded(ctx, func(sh *C.fencelock_store, cancel *C.fencelock_cancel) error {
		return check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_fence_cancellable(sh, cres, C.uint64_t(token), cancel, e)
		})
	})
}

// FenceToken returns the highest token the external resource has accepted through Fence, or 0
// when it has accepted none (the store never grants token 0).
func (s *Store) FenceToken(ctx context.Context, resource string) (uint64, error) {
	cres, err := cString("fence resource", resource)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cres))
	var token C.uint64_t
	err = s.call(ctx, func(sh *C.fencelock_store) error {
		return check(func(e errOut) C.fencelock_status { return C.fencelock_store_fence_token(sh, cres, &token, e) })
	})
	return uint64(token), err
}

// ServerPID is the process id of the server (`fencelock serve`) the store's operations go
// through now; ok is false when the store uses the file itself.
func (s *Store) ServerPID() (pid int, ok bool) {
	var out C.uint32_t
	err := s.call(context.Background(), func(sh *C.fencelock_store) error {
		return check(func(e errOut) C.fencelock_status { return C.fencelock_store_server_pid(sh, &out, e) })
	})
	return int(out), err == nil && out != 0
}

// LockState is the state of a lock record.
type LockState int32

const (
	LockHeld       LockState = 0 // held by a live holder and not expired
	LockExpired    LockState = 1 // the TTL ran out; the next Acquire takes the lock
	LockReleased   LockState = 2 // the holder released it
	LockHolderDead LockState = 3 // the holder's process died, or the lease is from an earlier boot
)

func (s LockState) String() string {
	switch s {
	case LockHeld:
		return "held"
	case LockExpired:
		return "expired"
	case LockReleased:
		return "released"
	case LockHolderDead:
		return "holder-dead"
	}
	return fmt.Sprintf("LockState(%d)", int32(s))
}

// LockInfo is what the store records of one lock.
type LockInfo struct {
	Name      string
	Token     uint64 // token of the last grant
	PID       uint32 // the holder's process id
	State     LockState
	GrantedAt time.Time     // wall-clock estimate
	ExpiresAt time.Time     // wall-clock estimate
	Remaining time.Duration // zero once expired
	// Kind is how the grant holds the name. A semaphore or shared lock lists one LockInfo per
	// grant it holds, under one name.
	Kind    Kind
	Permits uint32 // the name's permit count for a semaphore; 0 for another kind
}

// Locks lists every lock record of the store.
func (s *Store) Locks(ctx context.Context) ([]LockInfo, error) {
	var locks []LockInfo
	err := s.call(ctx, func(sh *C.fencelock_store) error {
		var list *C.fencelock_lock_list
		if err := check(func(e errOut) C.fencelock_status { return C.fencelock_store_locks(sh, &list, e) }); err != nil {
			return err
		}
		defer C.fencelock_lock_list_free(list)
		n := int(C.fencelock_lock_list_len(list))
		locks = make([]LockInfo, 0, n)
		for i := 0; i < n; i++ {
			var info C.fencelock_lock_info
			if err := check(func(errOut) C.fencelock_status { return C.fencelock_lock_list_get(list, C.size_t(i), &info) }); err != nil {
				return err
			}
			var kind C.int32_t
			var permits C.uint32_t
			if err := check(func(errOut) C.fencelock_status {
				return C.fencelock_lock_list_kind(list, C.size_t(i), &kind, &permits)
			}); err != nil {
				return err
			}
			locks = append(locks, LockInfo{
				Name:      C.GoString(info.name),
				Token:     uint64(info.token),
				PID:       uint32(info.pid),
				State:     LockState(info.state),
				GrantedAt: time.UnixMilli(int64(info.granted_unix_ms)),
				ExpiresAt: time.UnixMilli(int64(info.expires_unix_ms)),
				Remaining: time.Duration(info.remaining_ms) * time.Millisecond,
				Kind:      Kind(kind),
				Permits:   uint32(permits),
			})
		}
		return nil
	})
	return locks, err
}

// Keys lists the keys that hold a value and start with prefix ("" for all), in byte order.
func (s *Store) Keys(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := s.call(ctx, func(sh *C.fencelock_store) error {
		var list *C.fencelock_key_list
		if err := check(func(e errOut) C.fencelock_status {
			return C.fencelock_store_keys(sh, stringPtr(prefix), C.size_t(len(prefix)), &list, e)
		}); err != nil {
			return err
		}
		defer C.fencelock_key_list_free(list)
		n := int(C.fencelock_key_list_len(list))
		keys = make([]string, 0, n)
		for i := 0; i < n; i++ {
			var key *C.uint8_t
			var keyLen C.size_t
			if err := check(func(errOut) C.fencelock_status {
				return C.fencelock_key_list_get(list, C.size_t(i), &key, &keyLen)
			}); err != nil {
				return err
			}
			keys = append(keys, C.GoStringN((*C.char)(unsafe.Pointer(key)), C.int(keyLen)))
		}
		return nil
	})
	return keys, err
}

// cString copies s to C memory (free with C.free); a NUL inside gives ErrInvalidArgument,
// since a C string would silently cut it there.
func cString(what, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, invalid("%s %q contains a NUL byte", what, s)
	}
	return C.CString(s), nil
}

// stringPtr passes the bytes of s to C for the duration of one call without copying: they
// hold no Go pointers and the library keeps none. NULL for "" as the ABI allows.
func stringPtr(s string) *C.uint8_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s)))
}

// cBytes copies b into C memory, to be freed with C.free; NULL for an empty b.
func cBytes(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(C.CBytes(b))
}

// bytesPtr is stringPtr for a byte slice.
func bytesPtr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

// millis converts a duration to whole milliseconds, rounding up so that a positive duration
// never becomes 0. A negative one is ErrInvalidArgument.
func millis(what string, d time.Duration) (C.uint64_t, error) {
	if d < 0 {
		return 0, invalid("%s %v is negative", what, d)
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return C.uint64_t(ms), nil
}
