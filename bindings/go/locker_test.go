package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock-go"
)

// fencedStore is what the application below needs of a store; *fencelock.Store has it.
type fencedStore interface {
	PutWithFence(ctx context.Context, key string, data []byte, fence uint64) error
}

// exportPayments is application code written against the interfaces only: the seed's snippet.
func exportPayments(ctx context.Context, locks fencelock.Locker, s3 fencedStore, data []byte) error {
	holder, err := locks.Acquire(ctx, "payment-export", fencelock.Wait())
	if err != nil {
		return err
	}
	defer holder.Release()
	fence := holder.Token()
	if err := s3.PutWithFence(ctx, "payments/today.csv", data, fence); err != nil {
		return err
	}
	return nil
}

// fakeLocker grants every lock at once with increasing tokens and records what was asked.
type fakeLocker struct {
	next     uint64
	settings []fencelock.AcquireSettings
	holders  []*fakeHolder
}

func (f *fakeLocker) Acquire(_ context.Context, name string, opts ...fencelock.AcquireOption) (fencelock.Holder, error) {
	f.next++
	f.settings = append(f.settings, fencelock.SettingsOf(opts...))
	h := &fakeHolder{name: name, token: f.next, lost: make(chan struct{})}
	f.holders = append(f.holders, h)
	return h, nil
}

type fakeHolder struct {
	name     string
	token    uint64
	released bool
	lost     chan struct{}
}

func (h *fakeHolder) Name() string  { return h.name }
func (h *fakeHolder) Token() uint64 { return h.token }
func (h *fakeHolder) Release() error {
	if !h.released {
		h.released = true
		close(h.lost)
	}
	return nil
}
func (h *fakeHolder) Extend(context.Context, time.Duration) error { return nil }
func (h *fakeHolder) Held(context.Context) (bool, error)          { return !h.released, nil }
func (h *fakeHolder) Put(context.Context, string, []byte) error   { return nil }
func (h *fakeHolder) Delete(context.Context, string) (bool, error) {
	return false, nil
}
func (h *fakeHolder) Lost() <-chan struct{} { return h.lost }

type fakeS3 struct {
	fences map[string]uint64
	err    error
}

func (s *fakeS3) PutWithFence(_ context.Context, key string, _ []byte, fence uint64) error {
	if s.err != nil {
		return s.err
	}
	s.fences[key] = fence
	return nil
}

func TestApplicationCodeRunsAgainstAFakeLocker(t *testing.T) {
	locks := &fakeLocker{next: 41}
	s3 := &fakeS3{fences: map[string]uint64{}}
	if err := exportPayments(bg, locks, s3, []byte("csv")); err != nil {
		t.Fatal(err)
	}
	if s3.fences["payments/today.csv"] != 42 {
		t.Fatalf("written with fence %d, want the holder's token 42", s3.fences["payments/today.csv"])
	}
	if !locks.holders[0].released || !locks.settings[0].Wait || locks.settings[0].TTL != fencelock.DefaultTTL {
		t.Fatalf("holder released %v, settings %+v", locks.holders[0].released, locks.settings[0])
	}

	s3.err = &fencelock.StaleTokenError{Token: 43, Highest: 50, Message: "stale token 43"}
	if err := exportPayments(bg, locks, s3, nil); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("fake stale error: %v", err)
	}
}

// The same application code against the real store.
func TestApplicationCodeRunsAgainstTheStore(t *testing.T) {
	store := openStore(t)
	if err := exportPayments(bg, store, store, []byte("csv")); err != nil {
		t.Fatal(err)
	}
	value, _, err := store.Get(bg, "payments/today.csv")
	if err != nil || string(value) != "csv" {
		t.Fatalf("Get = %q, %v", value, err)
	}
	wrapped := fmt.Errorf("export: %w", store.PutWithFence(bg, "payments/today.csv", nil, 0))
	if !errors.Is(wrapped, fencelock.ErrInvalidArgument) {
		t.Fatalf("wrapped error: %v", wrapped)
	}
}
