package fencelock_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

func TestAMissingDirectoryIsAPathErrorMatchingErrNotExist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "locks.db")
	store, err := fencelock.Open(path)
	if err == nil {
		store.Close()
		t.Fatal("Open of a path in a missing directory succeeded")
	}
	pathErr, ok := err.(*fs.PathError)
	if !ok {
		t.Fatalf("Open returned %T (%v), not *fs.PathError", err, err)
	}
	if pathErr.Op != "open" || pathErr.Path != path {
		t.Errorf("PathError{Op: %q, Path: %q}", pathErr.Op, pathErr.Path)
	}
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENOENT) || !errors.Is(err, fencelock.ErrIO) {
		t.Errorf("%v does not match fs.ErrNotExist, ENOENT and ErrIO", err)
	}
	if errors.Is(err, fs.ErrPermission) {
		t.Errorf("%v matches fs.ErrPermission", err)
	}
	var lib *fencelock.Error
	if !errors.As(err, &lib) || lib.Errno != syscall.ENOENT {
		t.Errorf("no *fencelock.Error with Errno ENOENT in %v", err)
	}
	if n := strings.Count(err.Error(), "fencelock:"); n != 1 {
		t.Errorf("%q says fencelock: %d times", err.Error(), n)
	}
}

func TestADirectoryWithoutPermissionMatchesErrPermission(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		dir = "/sys" // root passes permission bits; sysfs refuses to create files even for root
	}
	path := filepath.Join(dir, "fencelock-test.db")
	store, err := fencelock.Open(path)
	if err == nil {
		store.Close()
		t.Fatalf("Open(%q) succeeded", path)
	}
	var pathErr *fs.PathError
	if !errors.Is(err, fs.ErrPermission) || !errors.As(err, &pathErr) || pathErr.Path != path {
		t.Errorf("%v is not a *fs.PathError for %q matching fs.ErrPermission", err, path)
	}
}

func TestOtherSystemErrorsCarryTheirErrno(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(file, "locks.db")
	store, err := fencelock.Open(path)
	if err == nil {
		store.Close()
		t.Fatalf("Open(%q) succeeded", path)
	}
	var pathErr *fs.PathError
	var lib *fencelock.Error
	if !errors.As(err, &pathErr) || pathErr.Path != path || !errors.As(err, &lib) || lib.Errno != syscall.ENOTDIR {
		t.Errorf("%v is not a *fs.PathError for %q with Errno ENOTDIR", err, path)
	}
	if !errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		t.Errorf("%v: want ENOTDIR only", err)
	}
}

func TestErrorsThatAreNotOfTheSystemAreNotPathErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-a-store")
	if err := os.WriteFile(path, []byte("some other program's file, long enough to be looked at"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := fencelock.Open(path)
	var pathErr *fs.PathError
	if err == nil || errors.As(err, &pathErr) || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a file that is not a store: %v", err)
	}
	var lib *fencelock.Error
	if !errors.As(err, &lib) || lib.Errno != 0 || errors.Unwrap(err) != nil {
		t.Errorf("Open of a file that is not a store: %#v carries an errno", err)
	}
}

func TestAWaitThatTimesOutSaysFencelockOnce(t *testing.T) {
	store := openStore(t)
	holder := acquire(t, store, "busy")
	defer holder.Release()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := store.Acquire(ctx, "busy", fencelock.Wait())
	if !errors.Is(err, fencelock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not match ErrTimeout and context.DeadlineExceeded", err)
	}
	var waitErr *fencelock.WaitError
	if !errors.As(err, &waitErr) || waitErr.Lock != "busy" {
		t.Errorf("%v is not a *WaitError for lock busy", err)
	}
	if n := strings.Count(err.Error(), "fencelock:"); n != 1 || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("%q: want one fencelock: and timed out", err.Error())
	}

	gone, stop := context.WithCancel(context.Background())
	stop()
	_, err = store.Acquire(gone, "busy", fencelock.Wait())
	if !errors.Is(err, context.Canceled) || errors.Is(err, fencelock.ErrTimeout) {
		t.Errorf("a canceled wait gives %v", err)
	}
	if n := strings.Count(err.Error(), "fencelock:"); n != 1 {
		t.Errorf("%q says fencelock: %d times", err.Error(), n)
	}
}

func TestFenceTokenReportsTheHighestAccepted(t *testing.T) {
	store := openStore(t)
	ctx := context.Background()
	if token, err := store.FenceToken(ctx, "bucket"); err != nil || token != 0 {
		t.Fatalf("FenceToken of an unseen resource = %d, %v", token, err)
	}
	first := acquire(t, store, "a")
	second := acquire(t, store, "b")
	if err := store.Fence(ctx, "bucket", second.Token()); err != nil {
		t.Fatal(err)
	}
	if err := store.Fence(ctx, "bucket", first.Token()); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("a stale fence gave %v", err)
	}
	if token, err := store.FenceToken(ctx, "bucket"); err != nil || token != second.Token() {
		t.Errorf("FenceToken = %d, %v; want %d", token, err, second.Token())
	}
	if _, err := store.FenceToken(ctx, "nul\x00name"); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("a NUL in the resource gave %v", err)
	}
	store.Close()
	if _, err := store.FenceToken(ctx, "bucket"); !errors.Is(err, fencelock.ErrClosed) {
		t.Errorf("FenceToken after Close gave %v", err)
	}
}
