/* leader.c -- a leader election whose deposed leader's late write is refused, in C.
 *
 * Leader A (a child process) wins the election "scheduler" and writes the schedule with its
 * term. It is then paused (SIGSTOP, as by a long GC pause) past its lease; B campaigns, is
 * granted the next term and writes. A resumes and writes late, with its term as the fencing
 * token, and the store refuses the write: B's term is higher.
 *
 * Build and run from the repository root:
 *
 *     make -C examples/c run
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* mkdtemp */
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fencelock.h"

static void die(const char *what, fencelock_status status, fencelock_error *err) {
    fprintf(stderr, "%s failed: %s (%s)\n", what, fencelock_status_str(status),
            err ? fencelock_error_message(err) : "no details");
    fencelock_error_free(err);
    exit(1);
}

static const char *ELECTION = "scheduler";
static const uint8_t KEY[] = "schedule";
#define KEY_LEN (sizeof KEY - 1)

/* Leader A: leads, writes, reports its term on `report`, waits on `go` (paused meanwhile by
   the parent), then writes late. Its exit status says whether that write was refused. */
static int leader_a(const char *path, int report, int go) {
    fencelock_error *err = NULL;
    fencelock_store *store = NULL;
    fencelock_status status = fencelock_store_open(path, &store, &err);
    if (status != FENCELOCK_OK) die("A: open", status, err);
    fencelock_leadership *a = NULL;
    status = fencelock_store_campaign(store, ELECTION, (const uint8_t *)"node-a", 6, 600, 0,
                                      UINT64_MAX, NULL, &a, &err);
    if (status != FENCELOCK_OK) die("A: campaign", status, err);
    uint64_t term = fencelock_leadership_term(a);
    status = fencelock_leadership_put(a, KEY, KEY_LEN, (const uint8_t *)"A's schedule", 12, &err);
    if (status != FENCELOCK_OK) die("A: put", status, err);
    printf("A leads with term %llu and writes the schedule\n", (unsigned long long)term);
    fflush(stdout);
    if (write(report, &term, sizeof term) != sizeof term) return 1;
    char byte;
    if (read(go, &byte, 1) != 1) return 1;

    /* Late: written with the term as the fencing token, as a write to a system of your own
       would be (fencelock_leadership_put would refuse before trying). */
    status = fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"A's stale schedule", 18,
                                 term, &err);
    printf("A wakes and writes late: %s (%s)\n", fencelock_status_str(status),
           status == FENCELOCK_OK ? "accepted" : fencelock_error_message(err));
    printf("A's leadership ended: %s\n", fencelock_leadership_is_lost(a) ? "yes" : "no");
    fflush(stdout); /* the child leaves through _exit, which flushes nothing */
    fencelock_error_free(err);
    fencelock_leadership_free(a);
    fencelock_store_close(store);
    return status == FENCELOCK_STALE_TOKEN ? 0 : 1;
}

int main(void) {
    char dir[] = "/tmp/fencelock-leader-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "%s/locks.db", dir);
    int report[2], go[2];
    if (pipe(report) != 0 || pipe(go) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(stdout);
    pid_t child = fork(); /* before any store is open: a store does not cross a fork */
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) _exit(leader_a(path, report[1], go[0]));

    uint64_t term_a = 0;
    if (read(report[0], &term_a, sizeof term_a) != sizeof term_a) return 1;
    kill(child, SIGSTOP);
    printf("A is paused past its lease\n");

    fencelock_error *err = NULL;
    fencelock_store *store = NULL;
    fencelock_status status = fencelock_store_open(path, &store, &err);
    if (status != FENCELOCK_OK) die("B: open", status, err);
    /* Waits until A's lease runs out: A is stopped, so nothing renews it. */
    fencelock_leadership *b = NULL;
    status = fencelock_store_campaign(store, ELECTION, (const uint8_t *)"node-b", 6, 15000, 0,
                                      60000, NULL, &b, &err);
    if (status != FENCELOCK_OK) die("B: campaign", status, err);
    uint64_t term_b = fencelock_leadership_term(b);
    status = fencelock_leadership_put(b, KEY, KEY_LEN, (const uint8_t *)"B's schedule", 12, &err);
    if (status != FENCELOCK_OK) die("B: put", status, err);
    printf("B leads with term %llu (> %llu) and writes the schedule\n",
           (unsigned long long)term_b, (unsigned long long)term_a);
    fflush(stdout);

    kill(child, SIGCONT);
    if (write(go[1], "g", 1) != 1) return 1;
    int child_status = 0;
    waitpid(child, &child_status, 0);
    int refused = WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0;

    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t token = 0;
    status = fencelock_store_get(store, KEY, KEY_LEN, &value, &len, &token, &err);
    if (status != FENCELOCK_OK) die("get", status, err);
    printf("the schedule stays B's: \"%.*s\", token %llu\n", (int)len, (const char *)value,
           (unsigned long long)token);
    int kept = token == term_b && len == 12 && memcmp(value, "B's schedule", 12) == 0;
    fencelock_buffer_free(value, len);
    fencelock_leadership_free(b); /* resigns */
    fencelock_store_close(store);
    return refused && kept ? 0 : 1;
}
