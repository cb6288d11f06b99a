package fencelock

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every status maps to its own sentinel, and to no other, through the one table.
func TestEveryStatusMatchesItsSentinelOnly(t *testing.T) {
	for status := StatusLocked; status <= StatusWouldDeadlock; status++ {
		sentinel, ok := sentinels[status]
		if !ok {
			t.Fatalf("status %d has no sentinel", status)
		}
		err := newError(status, nil)
		if !errors.Is(err, sentinel) {
			t.Errorf("status %d: %v does not match %v", status, err, sentinel)
		}
		for other, otherSentinel := range sentinels {
			if other != status && errors.Is(err, otherSentinel) {
				t.Errorf("status %d: %v also matches %v", status, err, otherSentinel)
			}
		}
		if errors.Is(err, ErrClosed) {
			t.Errorf("status %d matches ErrClosed", status)
		}
		if status.String() == "" || status.String() == "unknown status" {
			t.Errorf("status %d has no description: %q", status, status.String())
		}
	}
}

func TestTypedErrorsForDetailedStatuses(t *testing.T) {
	var locked *LockedError
	if !errors.As(newError(StatusLocked, nil), &locked) {
		t.Error("StatusLocked is not a *LockedError")
	}
	var stale *StaleTokenError
	if !errors.As(newError(StatusStaleToken, nil), &stale) {
		t.Error("StatusStaleToken is not a *StaleTokenError")
	}
	var lost *LockLostError
	if !errors.As(newError(StatusLockLost, nil), &lost) {
		t.Error("StatusLockLost is not a *LockLostError")
	}
	var mismatch *PermitsMismatchError
	if !errors.As(newError(StatusPermitsMismatch, nil), &mismatch) {
		t.Error("StatusPermitsMismatch is not a *PermitsMismatchError")
	}
	var plain *Error
	if !errors.As(newError(StatusIO, nil), &plain) || plain.Status != StatusIO {
		t.Errorf("StatusIO gives %#v", plain)
	}
}

func TestUnknownStatusMatchesNoSentinel(t *testing.T) {
	err := newError(Status(999), nil)
	for _, sentinel := range sentinels {
		if errors.Is(err, sentinel) {
			t.Errorf("unknown status matches %v", sentinel)
		}
	}
	if Status(999).String() != "unknown status" {
		t.Errorf("Status(999).String() = %q", Status(999).String())
	}
}

// Every status code the header defines has its Status constant's number and a sentinel.
func TestEveryHeaderStatusHasASentinel(t *testing.T) {
	header, err := os.ReadFile("../../include/fencelock.h")
	if err != nil {
		t.Fatal(err)
	}
	define := regexp.MustCompile(`(?m)^#define FENCELOCK_([A-Z_]+) (-?\d+)$`)
	found := 0
	for _, m := range define.FindAllStringSubmatch(string(header), -1) {
		name := m[1]
		if strings.HasPrefix(name, "MODE_") || strings.HasPrefix(name, "OPEN_") || strings.HasPrefix(name, "ACQUIRE_") ||
			strings.HasPrefix(name, "VERSION_") ||
			strings.HasPrefix(name, "KIND_") || strings.HasPrefix(name, "ENDING_") ||
			strings.HasPrefix(name, "SCOPE_") || strings.HasPrefix(name, "EVENT_") || name == "MAX_HOLDERS" ||
			name == "LOCK_HELD" || name == "LOCK_EXPIRED" || name == "LOCK_RELEASED" || name == "LOCK_HOLDER_DEAD" {
			continue
		}
		value, _ := strconv.Atoi(m[2])
		found++
		if value == 0 {
			continue
		}
		if _, ok := sentinels[Status(value)]; !ok {
			t.Errorf("FENCELOCK_%s (%d) has no sentinel", name, value)
		}
		if Status(value) > StatusWouldDeadlock {
			t.Errorf("FENCELOCK_%s (%d) is past the last Status constant", name, value)
		}
	}
	if found < 20 || len(sentinels) != found-1 {
		t.Errorf("the header has %d statuses, the binding %d sentinels besides OK", found, len(sentinels))
	}
}
