package fencelock

import (
	"bytes"
	"os"
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
