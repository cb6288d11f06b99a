package fencelock

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The exported constants are Go literals, so that go doc shows their values rather than cgo
// names; each must equal its #define in the module's fencelock.h.
func TestConstantsEqualTheHeaderDefines(t *testing.T) {
	header, err := os.ReadFile("fencelock.h")
	if err != nil {
		t.Fatal(err)
	}
	defines := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^#define (FENCELOCK_[A-Z0-9_]+) (-?[0-9]+)$`).FindAllSubmatch(header, -1) {
		value, err := strconv.ParseInt(string(m[2]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		defines[string(m[1])] = value
	}
	constants := map[string]int64{
		"FENCELOCK_VERSION_NUMBER":     HeaderVersionNumber,
		"FENCELOCK_MAX_HOLDERS":        MaxHolders,
		"FENCELOCK_KIND_EXCLUSIVE":     int64(KindExclusive),
		"FENCELOCK_KIND_SHARED":        int64(KindShared),
		"FENCELOCK_KIND_SEMAPHORE":     int64(KindSemaphore),
		"FENCELOCK_SCOPE_STORE":        int64(ScopeStore),
		"FENCELOCK_SCOPE_PROCESS":      int64(ScopeProcess),
		"FENCELOCK_ENDING_HELD":        int64(EndingHeld),
		"FENCELOCK_ENDING_RELEASED":    int64(EndingReleased),
		"FENCELOCK_ENDING_EXPIRED":     int64(EndingExpired),
		"FENCELOCK_ENDING_TAKEN_OVER":  int64(EndingTakenOver),
		"FENCELOCK_ENDING_HOLDER_DIED": int64(EndingHolderDied),
	}
	for name, value := range constants {
		define, ok := defines[name]
		if !ok {
			t.Errorf("fencelock.h has no #define %s", name)
		} else if define != value {
			t.Errorf("%s is %d in fencelock.h, %d in Go", name, define, value)
		}
	}
}
