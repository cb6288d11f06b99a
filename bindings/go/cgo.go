package fencelock

// The only file with #cgo flags; every path is inside the module (${SRCDIR}), so the module
// builds once fetched from a proxy and inside a user's vendor/ directory.
//
// The binding links the Rust static library shipped in the module for the platform,
// libfencelock_linux_amd64.a or libfencelock_linux_arm64.a, so a Go binary needs no shared
// library at run time and builds fully static (-ldflags '-linkmode external -extldflags
// "-static"'). A release of the module carries them, as wasmtime-go's do; in the repository
// `make go-lib` makes the one for this machine. With the build tag fencelock_system the
// binding links the system's libfencelock instead (`make install` of the C library; the
// linker's search path or CGO_LDFLAGS=-L... finds it).
//
// The system libraries are the ones the Rust standard library needs (`cargo rustc --release
// --lib -- --print native-static-libs`) less -lgcc_s: the C compiler driver adds the unwinder
// itself, libgcc_s or, in a static link, libgcc_eh.

/*
#cgo CFLAGS: -I${SRCDIR}
#cgo linux,amd64,!fencelock_system LDFLAGS: ${SRCDIR}/libfencelock_linux_amd64.a
#cgo linux,arm64,!fencelock_system LDFLAGS: ${SRCDIR}/libfencelock_linux_arm64.a
#cgo fencelock_system CFLAGS: -DFENCELOCK_GO_SYSTEM_LIBRARY
#cgo fencelock_system LDFLAGS: -lfencelock
#cgo LDFLAGS: -lutil -lrt -lpthread -lm -ldl -lc

// A missing library is a compile error that says what to do, not a linker error.
#if !defined(FENCELOCK_GO_SYSTEM_LIBRARY)
#if defined(__x86_64__)
#if !__has_include("libfencelock_linux_amd64.a")
#error "fencelock: libfencelock_linux_amd64.a is missing from the module directory: run `make go-lib` in the fencelock repository, or install the C library (make install) and build with -tags fencelock_system"
#endif
#elif defined(__aarch64__)
#if !__has_include("libfencelock_linux_arm64.a")
#error "fencelock: libfencelock_linux_arm64.a is missing from the module directory: run `make go-lib` in the fencelock repository, or install the C library (make install) and build with -tags fencelock_system"
#endif
#else
#error "fencelock: no library is shipped for this platform; install the C library (make install) and build with -tags fencelock_system"
#endif
#endif

#include "fencelock.h"
*/
import "C"
