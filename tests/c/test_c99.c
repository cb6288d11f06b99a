/* The header compiles as C99 with -pedantic (the oldest C it promises), and a C99 program
   links and calls the library. */
#include <stdio.h>
#include <string.h>

#include "fencelock.h"

int main(void) {
    const char *version = fencelock_version();
    int ok = version != NULL && strcmp(fencelock_status_str(FENCELOCK_OK), "ok") == 0;
    printf("test_c99: %s, fencelock %s\n", ok ? "ok" : "FAILED", version ? version : "?");
    return ok ? 0 : 1;
}
