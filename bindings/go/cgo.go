package fencelock

// The only file with #cgo flags. The binding links the Rust static library built by
// `cargo build --release --lib` in the repository root, so a Go binary that uses it needs no
// shared library at run time (no LD_LIBRARY_PATH). The system libraries are the ones the Rust
// standard library needs (`cargo rustc --release --lib -- --print native-static-libs`).

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: ${SRCDIR}/../../target/release/libfencelock.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
#include "fencelock.h"
*/
import "C"
