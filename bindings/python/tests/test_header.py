"""The ctypes declarations in fencelock/_ffi.py match include/fencelock.h exactly.

Parses the header's prototypes, its structs and the #define'd constants, maps
each C type to the ctypes type the binding must use, and compares. Fails when the header gains a
function the binding does not declare, loses one it does, or changes a signature or a number.
"""

from __future__ import annotations

import ctypes
import re
from ctypes import POINTER
from pathlib import Path

import pytest
from conftest import HEADER

import fencelock
from fencelock import _errors, _ffi

SCALARS = {
    "void": None,
    "bool": ctypes.c_bool,
    "char": ctypes.c_char,
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "uint8_t": ctypes.c_uint8,
    "size_t": ctypes.c_size_t,
    "fencelock_status": ctypes.c_int32,
}
OPAQUE = {
    name: getattr(_ffi, name)
    for name in (
        "fencelock_store",
        "fencelock_acquire_options",
        "fencelock_holder",
        "fencelock_cancel",
        "fencelock_error",
        "fencelock_lock_list",
        "fencelock_waiter_list",
        "fencelock_key_list",
        "fencelock_lock_info",
        "fencelock_waiter_info",
        "fencelock_history",
        "fencelock_history_entry",
        "fencelock_leadership",
        "fencelock_leader",
        "fencelock_leader_watch",
        "fencelock_metrics",
        "fencelock_event",
    )
}
CALLBACKS = {"fencelock_observer_fn": _ffi.ObserverFn}
# The structs the binding lays out itself, field by field.
STRUCTS = (
    "fencelock_acquire_options",
    "fencelock_lock_info",
    "fencelock_waiter_info",
    "fencelock_history_entry",
    "fencelock_metrics",
    "fencelock_event",
)


def _pointer(base, stars: int):
    for _ in range(stars):
        base = POINTER(base)
    return base


def ctypes_type(c_type: str):
    """The ctypes type the binding uses for a C type (the mapping documented in _ffi.py); a
    struct field's array type is written `uint64_t[8]`."""
    array = re.fullmatch(r"(.*?)\s*\[(\d+)\]", c_type, flags=re.S)
    if array:
        return ctypes_type(array.group(1)) * int(array.group(2))
    tokens = re.findall(r"[A-Za-z_]\w*|\*", c_type)
    const = "const" in tokens
    words = [t for t in tokens if t not in ("const", "struct", "enum")]
    stars = words.count("*")
    bases = [w for w in words if w != "*"]
    assert len(bases) == 1, f"cannot read C type {c_type!r}"
    base = bases[0]
    if base == "char" and stars == 1:
        assert const, f"mutable char * in the ABI: {c_type!r}"
        return ctypes.c_char_p
    if base == "char" and stars == 2 and tokens[:3] == ["const", "char", "*"]:
        return ctypes.POINTER(ctypes.c_char_p)  # an input array of names
    if base == "uint8_t" and stars == 1 and const:
        return ctypes.c_char_p  # an input buffer: bytes passed without a copy
    if base in OPAQUE:
        return _pointer(OPAQUE[base], stars)
    if base in CALLBACKS:
        return _pointer(CALLBACKS[base], stars)
    assert base in SCALARS, f"unknown C type {c_type!r}"
    return _pointer(SCALARS[base], stars)


def split_decl(decl: str) -> tuple[str, str]:
    """`const uint8_t *key` -> (`const uint8_t *`, `key`); `uint64_t b[8]` -> (`uint64_t[8]`, `b`)."""
    match = re.match(r"^(.*?[\s\*])([A-Za-z_]\w*)\s*(\[\d+\])?\s*$", decl.strip(), flags=re.S)
    assert match and match.group(1).strip() not in ("", "const", "struct"), f"cannot read {decl!r}"
    return match.group(1).strip() + (match.group(3) or ""), match.group(2)


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_header(text: str):
    text = _strip_comments(text)
    defines: dict[str, int] = {}
    for name, value in re.findall(r"^\s*#\s*define\s+(FENCELOCK_\w+)\s+(.+?)\s*$", text, flags=re.M):
        number = re.fullmatch(r"\(?\s*\(?\s*(?:\w+\s*\))?\s*(-?\d+)[uUlL]*\s*\)?", value)
        if number:
            defines[name] = int(number.group(1))
    for name, value in re.findall(r"\b(FENCELOCK_\w+)\s*=\s*(-?\d+)", text):
        defines[name] = int(value)
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    body = re.sub(r'extern\s+"C"\s*\{', " ", body)

    structs: dict[str, list[tuple[str, str]]] = {}
    for name, fields in re.findall(r"struct\s+(fencelock_\w+)\s*\{(.*?)\}", body, flags=re.S):
        structs[name] = [split_decl(field)[::-1] for field in fields.split(";") if field.strip()]
    body = re.sub(r"\{[^{}]*\}", " ", body)

    functions: dict[str, tuple[str, list[str]]] = {}
    for statement in body.split(";"):
        prototype = r"([A-Za-z_][\w\s\*]*?)\b(fencelock_\w+)\s*\(([^()]*)\)\s*$"
        match = re.search(prototype, statement.strip(), flags=re.S)
        if not match or statement.strip().startswith("typedef"):
            continue
        restype, name, params = match.groups()
        restype = re.sub(r"\b(extern|static|inline)\b", " ", restype)
        params = params.strip()
        args = [] if params in ("", "void") else [split_decl(p)[0] for p in params.split(",")]
        functions[name] = (restype, args)
    return functions, structs, defines


@pytest.fixture(scope="module")
def header():
    if not HEADER.is_file():
        pytest.fail(f"{HEADER} is missing: the binding is checked against it")
    return parse_header(HEADER.read_text())


def _type_name(t) -> str:
    return "void" if t is None else getattr(t, "__name__", repr(t))


def test_every_header_function_is_declared_with_its_signature(header):
    functions, _, _ = header
    assert len(functions) >= 35, f"parsed only {sorted(functions)}"
    missing = sorted(set(functions) - set(_ffi.SIGNATURES))
    assert not missing, f"functions of fencelock.h the binding does not declare: {missing}"
    extra = sorted(set(_ffi.SIGNATURES) - set(functions))
    assert not extra, f"functions the binding declares that fencelock.h lacks: {extra}"
    mismatches = []
    for name, (c_restype, c_args) in sorted(functions.items()):
        declared_restype, declared_args = _ffi.SIGNATURES[name]
        want_restype = ctypes_type(c_restype)
        if re.fullmatch(r"const uint8_t \*", c_restype):
            # A returned buffer the library owns, length apart: c_char_p would stop at a NUL.
            want_restype = POINTER(ctypes.c_uint8)
        want_args = [ctypes_type(arg) for arg in c_args]
        if (
            want_restype is not declared_restype
            or len(want_args) != len(declared_args)
            or any(a is not b for a, b in zip(want_args, declared_args))
        ):
            mismatches.append(
                f"{name}: header {_type_name(want_restype)}({', '.join(map(_type_name, want_args))})"
                f" != binding {_type_name(declared_restype)}({', '.join(map(_type_name, declared_args))})"
            )
    assert not mismatches, "\n".join(mismatches)


def test_the_loaded_library_has_the_same_functions():
    for name, (restype, argtypes) in _ffi.SIGNATURES.items():
        fn = getattr(_ffi.lib, name)
        assert fn.restype is restype and fn.argtypes == argtypes, name


@pytest.mark.parametrize("struct", STRUCTS)
def test_structs_match(header, struct):
    _, structs, _ = header
    assert struct in structs
    c_fields = structs[struct]
    py_fields = getattr(_ffi, struct)._fields_
    assert [name for name, _ in c_fields] == [name for name, _ in py_fields]
    for (name, c_type), (_, py_type) in zip(c_fields, py_fields):
        assert ctypes_type(c_type) is py_type, f"{struct}.{name}: {c_type}"


LOCK_STATES = ("HELD", "EXPIRED", "RELEASED", "HOLDER_DEAD")
# Each enum of the package, by the prefix of its header constants.
ENUMS = {
    "FENCELOCK_ENDING_": fencelock.Ending,
    "FENCELOCK_SCOPE_": fencelock.Scope,
    "FENCELOCK_EVENT_": fencelock.EventKind,
}


def _header_statuses(defines: dict[str, int]) -> dict[str, int]:
    """Every numeric FENCELOCK_* define that is not a mode, an open flag, a lock state, a
    version, a kind, a limit, an ending, a metrics scope or an event code."""
    return {
        name[len("FENCELOCK_") :]: value
        for name, value in defines.items()
        if not name.startswith(
            (
                "FENCELOCK_MODE_",
                "FENCELOCK_OPEN_",
                "FENCELOCK_ACQUIRE_",
                "FENCELOCK_VERSION",
                "FENCELOCK_KIND_",
                "FENCELOCK_MAX_",
                *ENUMS,
            )
        )
        and name[len("FENCELOCK_LOCK_") :] not in LOCK_STATES
        and name != "FENCELOCK_H"
    }


def test_constants_match(header):
    _, _, defines = header
    statuses = _header_statuses(defines)
    assert statuses.get("OK") == 0 and len(statuses) >= 16, statuses
    for name, value in statuses.items():
        assert getattr(_ffi, name, None) == value, f"FENCELOCK_{name}"
    for name in (
        "MODE_MULTI_PROCESS",
        "MODE_SINGLE_PROCESS",
        "OPEN_READ_ONLY",
        "OPEN_NO_HISTORY",
        "OPEN_WRITE_LOG",
        "ACQUIRE_WAIT",
        "ACQUIRE_PUT",
        "KIND_EXCLUSIVE",
        "KIND_SHARED",
        "KIND_SEMAPHORE",
        "MAX_HOLDERS",
        *(f"LOCK_{s}" for s in LOCK_STATES),
    ):
        assert defines[f"FENCELOCK_{name}"] == getattr(_ffi, name), name
    assert {m.name: m.value for m in fencelock.Mode} == {
        "MULTI_PROCESS": defines["FENCELOCK_MODE_MULTI_PROCESS"],
        "SINGLE_PROCESS": defines["FENCELOCK_MODE_SINGLE_PROCESS"],
    }
    assert {k.name: k.value for k in fencelock.LockKind} == {
        name: defines[f"FENCELOCK_KIND_{name}"] for name in ("EXCLUSIVE", "SHARED", "SEMAPHORE")
    }
    assert {s.name: s.value for s in fencelock.LockState} == {
        name: defines[f"FENCELOCK_LOCK_{name}"] for name in LOCK_STATES
    }
    for prefix, cls in ENUMS.items():
        in_header = {name[len(prefix) :]: value for name, value in defines.items() if name.startswith(prefix)}
        assert in_header, prefix
        assert {member.name: member.value for member in cls} == in_header, prefix
        for name, value in in_header.items():
            assert getattr(_ffi, f"{prefix[len('FENCELOCK_') :]}{name}") == value, f"{prefix}{name}"


def test_every_error_status_has_its_exception(header):
    _, _, defines = header
    for name, value in _header_statuses(defines).items():
        if value == 0:
            continue
        cls = _errors._BY_STATUS.get(value)
        assert cls is not None and cls is not fencelock.FencelockError, f"FENCELOCK_{name} has no exception"
    assert len(set(_errors._BY_STATUS.values())) == len(_errors._BY_STATUS), "two codes share a class"


def test_version_macros_match_the_package(header):
    _, _, defines = header
    parts = [defines.get(f"FENCELOCK_VERSION_{p}") for p in ("MAJOR", "MINOR", "PATCH")]
    if None in parts:
        pytest.skip("the header defines no numeric version macros")
    assert ".".join(map(str, parts)) == fencelock.__version__
    major, minor, patch = parts
    assert defines["FENCELOCK_VERSION_NUMBER"] == major * 1000000 + minor * 1000 + patch
    assert fencelock.library_version_number() == defines["FENCELOCK_VERSION_NUMBER"]


def test_parser_reads_a_known_prototype():
    text = """
    /* doc */ typedef int32_t fencelock_status;
    typedef struct fencelock_store fencelock_store;
    fencelock_status fencelock_store_get(const struct fencelock_store *store,
                                         const uint8_t *key, size_t key_len,
                                         uint8_t **value_out, size_t *value_len_out,
                                         uint64_t *token_out, struct fencelock_error **err_out);
    const char *fencelock_version(void);
    #define FENCELOCK_OK 0
    """
    functions, _, defines = parse_header(text)
    assert ctypes_type(functions["fencelock_version"][0]) is ctypes.c_char_p
    assert functions["fencelock_version"][1] == []
    restype, args = functions["fencelock_store_get"]
    assert ctypes_type(restype) is ctypes.c_int32
    assert [ctypes_type(a) for a in args] == list(_ffi.SIGNATURES["fencelock_store_get"][1])
    assert defines == {"FENCELOCK_OK": 0}


def test_every_acquire_makes_the_one_acquire_call():
    """The binding shapes its acquires into one C call, fencelock_store_acquire_opts, rather than
    branching over the older entry points (kept in C for one release only)."""
    package = Path(fencelock.__file__).parent
    source = "".join(path.read_text() for path in package.glob("*.py") if path.name != "_ffi.py")
    called = set(re.findall(r"\b(fencelock_store_acquire\w*)", source))
    assert called == {"fencelock_store_acquire_opts"}, sorted(called)
