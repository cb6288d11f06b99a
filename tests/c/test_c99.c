/* The header compiles as C99 with -pedantic (the oldest C it promises), its version macros
   work in #if, and a C99 program links and calls the library. */
#include <stdio.h>
#include <string.h>

#include "fencelock.h"

/* The at-least macro works in #if, as a program that needs a later header uses it. */
#if !FENCELOCK_AT_LEAST_VERSION(0, 1, 0)
#error "FENCELOCK_AT_LEAST_VERSION(0, 1, 0) is false in #if"
#endif
#if FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR + 1, 0, 0)
#error "FENCELOCK_AT_LEAST_VERSION of the next major version is true in #if"
#endif

int main(void) {
    const char *version = fencelock_version();
    /* The library loaded at run time is the one of the header the program was built with. */
    int ok = version != NULL && strcmp(fencelock_status_str(FENCELOCK_OK), "ok") == 0 &&
             fencelock_version_number() == FENCELOCK_VERSION_NUMBER;
    printf("test_c99: %s, fencelock %s\n", ok ? "ok" : "FAILED", version ? version : "?");
    return ok ? 0 : 1;
}
