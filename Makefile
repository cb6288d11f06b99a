# fencelock: the commands a newcomer needs.
#   make demo    the GC-pause walkthrough with real processes
#   make timeline   docs/timeline.svg drawn again from a run of the walkthrough
#   make test    every test: Rust, C, Python, Go, packaging, a short torture run and short fuzz runs,
#                and the etcd backend's on etcd nodes of their own (FEATURES= leaves etcd out);
#                first `make setup`, which installs the tools the tests need and this machine lacks
#   make bench-failover   leader failover beside etcd's own Election, on an etcd node of its own
#   make test-etcd-cluster   only the three-node etcd cluster with members killed and stopped
#   make crash   the long run of the power-loss crash images
#   make test-loom-long   the loom models of the ring's protocols with more preemptions
#   make test-mutants     the seeded mutants, each of which a model must catch
#   make check-publish   cargo publish --dry-run: the crate as crates.io would build it
#   make install PREFIX=/usr/local   library, header and pkg-config file (LIBDIR, INCLUDEDIR,
#                                    DESTDIR too); make uninstall with the same variables
#   make install CLI=1               the command too, with its man pages and completions
#                                    (BINDIR, MANDIR; scripts/install.sh lists the others)

CARGO ?= cargo
FUZZ_SECONDS ?= 30
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
# `make install CLI=1` installs the command-line tool, its man pages and completions as well.
CLI ?=
# Cargo features of the library the C, Python and Go tests use: the etcd backend by default
# (it needs protoc to build and etcd-server to test). FEATURES= tests the lean library, and
# make test then leaves etcd out altogether (test-etcd, the etcd lint), so needs neither.
FEATURES ?= etcd
# The C library is the `capi` feature's: `cargo rustc` makes the crate types a Rust user never
# builds (Cargo.toml's [lib] is the rlib alone).
CAPI := --lib --features "capi $(FEATURES)" --crate-type cdylib,staticlib
ETCD := $(findstring etcd,$(FEATURES))
WITH_ETCD := $(if $(ETCD),sh scripts/with-etcd.sh)

# The command-line tool the C, Python and Go tests start as a server (`fencelock serve`).
export FENCELOCK_CLI ?= $(CURDIR)/target/release/fencelock

.PHONY: timeline test-loom test-loom-long test-mutants bench-floor cli demo setup test test-setup test-rust test-etcd test-etcd-cluster test-c test-python test-go test-packaging check-publish test-torture test-fuzz lint release install uninstall go-lib bench compare bench-failover torture fuzz crash

demo:
	$(CARGO) run --quiet --example gc_pause
	$(CARGO) run --quiet --example leader

# docs/timeline.svg: the walkthrough's fenced run, in a store of its own, drawn by `fencelock
# history --svg` from the store's history, with the pauses and writes the walkthrough wrote down
# (the store keeps no record of a refused write).
TIMELINE_DIR := target/timeline
timeline:
	$(CARGO) build --quiet --features cli --bin fencelock --example gc_pause
	rm -rf $(TIMELINE_DIR) && mkdir -p $(TIMELINE_DIR)
	target/debug/examples/gc_pause --db $(TIMELINE_DIR)/locks.db --events $(TIMELINE_DIR)/events.jsonl
	target/debug/fencelock --db $(TIMELINE_DIR)/locks.db history payment-export --svg \
		--events $(TIMELINE_DIR)/events.jsonl > $(TIMELINE_DIR)/timeline.svg
	mv $(TIMELINE_DIR)/timeline.svg docs/timeline.svg

# In this order (make runs prerequisites left to right): the set-up step, its own test, the rest.
test: setup test-setup lint test-rust test-loom $(if $(ETCD),test-etcd) test-c test-python test-go test-packaging test-torture test-fuzz

# Installs what make test needs and this machine lacks (scripts/setup.sh lists it all).
setup:
	FENCELOCK_FEATURES=$(FEATURES) bash scripts/setup.sh

# The set-up step's own test, with fake installers: a few seconds, installs nothing.
test-setup:
	bash tests/setup/test.sh

# Clippy twice: without features (the library a crate depending on fencelock gets, and the code
# that only builds without etcd), and with every feature make test uses (one run for tokio and
# etcd, whose code no cfg combines: about 30 s less than a run each).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --all-targets --features "cli capi tokio $(FEATURES)" -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps $(if $(ETCD),--features etcd)

# The command-line tool is the `cli` feature and the C ABI the `capi` one (both off by default,
# so that a crate depending on fencelock gets only the library); their tests need them, and the
# async API's (tests/tokio.rs) the `tokio` feature.
test-rust:
	$(CARGO) test --features "cli capi tokio"
	$(CARGO) run --quiet --example gc_pause
	$(CARGO) run --quiet --example leader

# The loom models of the ring's protocols (src/ring/models/): the slots, the queue, the lease map
# and the token counter, every interleaving of a few threads up to 2 preemptions, on loom's
# atomics and futex (cfg fencelock_loom, its own target directory: every dependency is built
# again for it). test-loom-long allows 3 preemptions, for before a release, and runs the slow
# models (#[ignore] in make test-loom: the queue's overflow path, four threads, about 6 minutes
# at 2 preemptions; two writers racing for one key's claim, about 7 minutes) at 2.
LOOM_ENV := RUSTFLAGS="--cfg fencelock_loom" CARGO_TARGET_DIR=target/loom
test-loom:
	$(LOOM_ENV) LOOM_MAX_PREEMPTIONS=2 $(CARGO) test --release --lib ring::models

test-loom-long:
	$(LOOM_ENV) LOOM_MAX_PREEMPTIONS=3 $(CARGO) test --release --lib ring::models
	$(LOOM_ENV) LOOM_MAX_PREEMPTIONS=2 $(CARGO) test --release --lib ring::models -- --ignored

# Each seeded mutant (scripts/mutants.sh lists them) must make a model or property test fail.
test-mutants:
	CARGO=$(CARGO) sh scripts/mutants.sh

# The etcd backend (cargo feature etcd): its unit tests, the three-node cluster under kills and
# stops (about 30 s) and with its leader cut off or its member links slowed (tests/etcd/members.rs,
# about 40 s beside it), the command-line tool, the rules and bad input on one etcd node (the etcd
# part of tests/rules; test-rust ran its other backends), and the GC-pause example on a node of
# scripts/with-etcd.sh.
test-etcd:
	$(CARGO) test --features cli,etcd --lib --test etcd --test cli_etcd
	$(CARGO) test --features cli,etcd --test rules -- ::etcd::
	sh scripts/with-etcd.sh sh -c '$(CARGO) run --quiet --features etcd --example gc_pause -- --db "$$FENCELOCK_ETCD_URL"'

test-etcd-cluster:
	$(CARGO) test --features etcd --test etcd -- failures::

release:
	$(CARGO) rustc --release $(CAPI)

# With the library's features, so that the library and the tool build once.
cli:
	$(CARGO) build --release --features "cli $(FEATURES)" --bin fencelock

test-c: release cli
	$(MAKE) -C tests/c test FENCELOCK_FEATURES=$(FEATURES)
	$(if $(WITH_ETCD),$(MAKE) -C tests/c test-etcd FENCELOCK_FEATURES=$(FEATURES))

test-python: release cli
	FENCELOCK_FEATURES=$(FEATURES) $(WITH_ETCD) bash bindings/python/run_tests.sh

test-go: cli
	FENCELOCK_FEATURES=$(FEATURES) $(WITH_ETCD) bash bindings/go/run_tests.sh

# What a user of each ecosystem does, in a temporary directory outside the repository
# (each script in tests/packaging/ says what it checks).
test-packaging:
	bash tests/packaging/c.sh
	bash tests/packaging/cli.sh
	bash tests/packaging/python.sh
	bash tests/packaging/go.sh
	CARGO=$(CARGO) bash tests/packaging/rust.sh

# The crate as crates.io would take it: `cargo publish --dry-run` packages it, resolves its
# dependencies from the crates.io index and builds the package apart from the repository
# (on 2 shared cores: 1 min 25 s with the dependencies built already, 3 min 27 s from cold).
# Not part of make test: it needs the network, and test-packaging checks the package's file
# list (cargo package --list, under a second).
check-publish:
	$(CARGO) publish --dry-run --allow-dirty

# The mixed workload, the same through a server, and the storm (grants of two names of one
# bucket of the lease map, back to back, under the same stops and kills; examples/torture),
# the mixed workload with fenced writes through the redo log (Options::write_log, small
# segments, stops inside a fenced write and the shared sync);
# then leader election under stops and kills, with its witness (examples/election_fire.rs).
test-torture:
	$(CARGO) run --release --example torture -- --processes 4 --duration 60s
	$(CARGO) run --release --example torture -- --processes 4 --duration 30s --server
	$(CARGO) run --release --example torture -- --processes 4 --duration 30s --storm
	$(CARGO) run --release --example torture -- --processes 4 --duration 30s --write-log
	$(CARGO) run --release --example election_fire -- --duration 10s

torture:
	$(CARGO) run --release --example torture -- --processes 8 --duration 600s
	$(CARGO) run --release --example torture -- --processes 8 --duration 600s --server
	$(CARGO) run --release --example torture -- --processes 8 --duration 600s --storm
	$(CARGO) run --release --example torture -- --processes 8 --duration 600s --write-log
	$(CARGO) run --release --example election_fire -- --duration 300s

# The floor of a durable write on this disk and cross-process group commit over it, the
# prototype of docs/design/writes.md: 1, 4, 8 and 16 processes, 3 s each; then 8 processes each
# syncing for itself on files of their own and on one file (quote quiet runs only).
bench-floor:
	mkdir -p target
	$(CC) -O2 -Wall -Wextra -Werror -o target/group_commit benches/floor/group_commit.c
	$(CC) -O2 -Wall -Wextra -Werror -o target/parallel_syncs benches/floor/parallel_syncs.c
	for n in 1 4 8 16; do target/group_commit target $$n 3; done
	for mode in own shared dsync; do target/parallel_syncs target 8 3 $$mode; done

# Every fuzz target, coverage-guided, built with the stable toolchain; see fuzz/README.md.
test-fuzz:
	CARGO=$(CARGO) bash scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz:
	CARGO=$(CARGO) bash scripts/fuzz.sh 600

# The long run of the power-loss crash images (docs/torture.md).
crash:
	FENCELOCK_CRASH_IMAGES=200000 FENCELOCK_CRASH_OPS=200 $(CARGO) test --release --test crash

bench:
	$(CARGO) bench --bench ops

compare:
	$(CARGO) bench --bench compare

# Leader failover (docs/election.md): fencelock's election and etcd's own concurrency.Election
# (benches/failover-etcd, built with go) on one etcd node of scripts/with-etcd.sh, with the
# ratios of the medians; a few minutes (a SIGKILL round of etcd's Election waits out its 60 s
# session TTL). FAILOVER_ROUNDS fencelock's rounds, FAILOVER_PEER_ROUNDS the Election's.
FAILOVER_ROUNDS ?= 3
FAILOVER_PEER_ROUNDS ?= 3
bench-failover:
	$(CARGO) bench --features etcd --bench failover --no-run
	sh scripts/with-etcd.sh sh -c '$(CARGO) bench --features etcd --bench failover -- \
		"$$FENCELOCK_ETCD_URL" --rounds $(FAILOVER_ROUNDS) --peer-rounds $(FAILOVER_PEER_ROUNDS)'

# Builds the C library (cargo rustc --profile dist --lib --features capi --crate-type
# cdylib,staticlib; with CLI=1 the command too), then
# installs it as scripts/install.sh describes.
install:
	CARGO=$(CARGO) LIBDIR=$(LIBDIR) INCLUDEDIR=$(INCLUDEDIR) BINDIR=$(BINDIR) MANDIR=$(MANDIR) \
		sh scripts/install.sh $(if $(filter 1,$(CLI)),--cli) $(PREFIX)

# The static library the Go module links, put into bindings/go for this machine's architecture.
go-lib:
	CARGO=$(CARGO) sh scripts/go-lib.sh

uninstall:
	LIBDIR=$(LIBDIR) INCLUDEDIR=$(INCLUDEDIR) BINDIR=$(BINDIR) MANDIR=$(MANDIR) \
		sh scripts/install.sh --uninstall $(PREFIX)
