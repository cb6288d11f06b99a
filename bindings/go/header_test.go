package fencelock

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The module carries its own copy of the C header, so that it builds once fetched; in the
// repository that copy must be the generated include/fencelock.h, byte for byte.
func TestHeaderCopyIsTheGeneratedHeader(t *testing.T) {
	generated, err := os.ReadFile("../../include/fencelock.h")
	if os.IsNotExist(err) {
		t.Skip("not in the fencelock repository: no include/fencelock.h to compare with")
	}
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile("fencelock.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copied, generated) {
		t.Fatal("bindings/go/fencelock.h differs from include/fencelock.h: " +
			"regenerate both with FENCELOCK_UPDATE_HEADER=1 cargo test --features capi --test header")
	}
}

// Every acquire of the package is the one C call fencelock_store_acquire_opts, shaped by the
// options, rather than a branch over the older entry points (kept in C for one release only).
func TestEveryAcquireMakesTheOneAcquireCall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{}
	entry := regexp.MustCompile(`C\.(fencelock_store_acquire\w*)`)
	for _, file := range files {
		source, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range entry.FindAllSubmatch(source, -1) {
			called[string(m[1])] = true
		}
	}
	if len(called) != 1 || !called["fencelock_store_acquire_opts"] {
		t.Fatalf("the package calls %v, not fencelock_store_acquire_opts alone", called)
	}
}
