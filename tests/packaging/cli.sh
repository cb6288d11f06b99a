#!/usr/bin/env bash
# What a user of the command does, outside the repository: `make install CLI=1` into a prefix,
# then runs the installed command, reads `man fencelock-run` through MANPATH as man(1) finds
# it (its roff, without man-db), and loads the bash, zsh and fish completions (zsh and fish
# when they are installed).
# Checks that a library-only `make install` installs none of the command's files, a staged
# install (DESTDIR, MANDIR), and that `make uninstall` removes every file.
# Usage: tests/packaging/cli.sh      (`make test-packaging` runs it)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "packaging/cli: FAILED: $*" >&2
    exit 1
}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
commands="run hold elect leader put get delete fence status top keys info history metrics serve"

# The library alone: nothing of the command.
lib_only=$work/lib-only
make -s -C "$root" install PREFIX="$lib_only" >"$work/lib-only.log"
[ -f "$lib_only/include/fencelock.h" ] || fail "the library-only install has no header"
[ ! -e "$lib_only/bin" ] || fail "the library-only install wrote $lib_only/bin: $(find "$lib_only/bin")"
# Of share/, only the C library's valgrind suppressions: no man page, no completion.
shared=$(cd "$lib_only" && find share -type f 2>/dev/null | sort)
[ -z "$shared" ] || [ "$shared" = "share/fencelock/fencelock.supp" ] ||
    fail "the library-only install wrote more than its suppression file into share: $shared"
make -s -C "$root" uninstall PREFIX="$lib_only" >/dev/null

prefix=$work/prefix
make -s -C "$root" install CLI=1 PREFIX="$prefix" >"$work/install.log"
grep -q "installed the fencelock command" "$work/install.log" || fail "no word of the command: $(cat "$work/install.log")"
[ -f "$prefix/include/fencelock.h" ] || fail "CLI=1 did not install the library as well"
"$prefix/bin/fencelock" --version | grep -qF "$version" || fail "the installed command does not say $version"
if readelf -S -W "$prefix/bin/fencelock" | grep -Eq '\.symtab|\.debug_'; then
    fail "the installed command is not stripped"
fi
db=$work/store.db
FENCELOCK_DB=$db "$prefix/bin/fencelock" run --lock job -- sh -c 'echo "$FENCELOCK_TOKEN"' >"$work/token" ||
    fail "the installed command's run failed"
[ "$(cat "$work/token")" -ge 1 ] || fail "no token from run: $(cat "$work/token")"

man1=$prefix/share/man/man1
for page in fencelock $(printf 'fencelock-%s ' $commands); do
    [ -f "$man1/$page.1" ] || fail "no man page $man1/$page.1"
done
# man(1) finds the page by name under the prefix, and it reads like flock(1)'s. Without man-db
# (a minimal machine), the page's roff is checked instead.
sections=(NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" EXAMPLES "SEE ALSO")
if command -v man >/dev/null; then
    found=$(MANPATH=$prefix/share/man man -w fencelock-run) || fail "man -w fencelock-run found nothing"
    [ "$found" = "$man1/fencelock-run.1" ] || fail "man -w fencelock-run found $found"
    MANWIDTH=200 MANPATH=$prefix/share/man man fencelock-run >"$work/run.txt" 2>"$work/man.err" ||
        fail "man fencelock-run: $(cat "$work/man.err")"
    for section in "${sections[@]}"; do
        grep -qx "$section" "$work/run.txt" || fail "man fencelock-run has no $section section"
    done
    grep -q -- "--kill-after" "$work/run.txt" || fail "man fencelock-run does not document --kill-after"
    [ ! -s "$work/man.err" ] || fail "man fencelock-run warned: $(cat "$work/man.err")"
    read_by="man finds fencelock-run and its sections"
else
    for section in "${sections[@]}"; do
        grep -qxE "\.SH \"?$section\"?" "$man1/fencelock-run.1" || fail "fencelock-run.1 has no $section section"
    done
    read_by="fencelock-run.1 has its sections (man(1) is not installed)"
fi

bash_completion=$prefix/share/bash-completion/completions/fencelock
bash -n "$bash_completion" || fail "the bash completion does not parse"
got=$(bash -c 'source "$1"; COMP_WORDS=(fencelock ru); COMP_CWORD=1; _fencelock fencelock ru fencelock
    echo "${COMPREPLY[*]}"' bash "$bash_completion")
[ "$got" = run ] || fail "bash completes 'fencelock ru' as '$got'"
zsh_completion=$prefix/share/zsh/site-functions/_fencelock
fish_completion=$prefix/share/fish/vendor_completions.d/fencelock.fish
[ -f "$zsh_completion" ] && [ -f "$fish_completion" ] || fail "no zsh or fish completion"
shells=bash
if command -v zsh >/dev/null; then
    zsh -n "$zsh_completion" || fail "the zsh completion does not parse"
    shells="$shells zsh"
fi
if command -v fish >/dev/null; then
    fish --no-execute "$fish_completion" || fail "the fish completion does not parse"
    got=$(fish -c "source '$fish_completion'; complete -C 'fencelock ru'" | cut -f1)
    [ "$got" = run ] || fail "fish completes 'fencelock ru' as '$got'"
    shells="$shells fish"
fi

make -s -C "$root" uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"

# A distribution's staged install, with its own man directory.
stage=$work/stage
make -s -C "$root" install CLI=1 PREFIX=/usr MANDIR=/usr/share/man DESTDIR="$stage" >/dev/null
for file in usr/bin/fencelock usr/share/man/man1/fencelock-run.1 \
    usr/share/bash-completion/completions/fencelock usr/share/zsh/site-functions/_fencelock \
    usr/share/fish/vendor_completions.d/fencelock.fish; do
    [ -f "$stage/$file" ] || fail "DESTDIR: no $stage/$file"
done
make -s -C "$root" uninstall PREFIX=/usr MANDIR=/usr/share/man DESTDIR="$stage" >/dev/null
left=$(find "$stage" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall with DESTDIR left: $left"

echo "packaging/cli: ok (make install CLI=1: the command runs, $read_by, completions load in" \
    "$shells; a library-only install has none of it; DESTDIR and uninstall)"
