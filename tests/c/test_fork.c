/* The seed scenario across processes. Process A acquires "payment-export" (token N) with a
   300 ms lease and is SIGSTOPped by the parent. After the lease runs out, process B acquires
   (token N+1) and writes with it. A is SIGCONTed: its fenced write with N is refused with
   STALE_TOKEN, its holder write with LOCK_LOST, and B's value stays.
   Also: a store opened before fork() reports FORKED in the child. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "check.h"

static const char LOCK[] = "payment-export";
static const uint8_t KEY[] = "payments/today.csv";
#define KEY_LEN (sizeof KEY - 1)

static void write_all(int fd, const void *buf, size_t len) {
    if (write(fd, buf, len) != (ssize_t)len) {
        perror("write");
        _exit(3);
    }
}

static void read_all(int fd, void *buf, size_t len) {
    if (read(fd, buf, len) != (ssize_t)len) {
        perror("read");
        _exit(3);
    }
}

/* Waits for a child and gives its exit status (or 100 + signal). */
static int wait_child(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Process A: acquire, report the token, wait for "go" (it is stopped meanwhile), then try
   to write with the stale token. Exits 0 when every refusal came as expected. */
static int process_a(const char *path, int token_fd, int go_fd) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(path, &store, ERR));
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, LOCK, 300, &holder, ERR));
    uint64_t n = fencelock_holder_token(holder);
    write_all(token_fd, &n, sizeof n);
    char go;
    read_all(go_fd, &go, 1); /* the parent stops us here and resumes us after B wrote */

    fencelock_error *err = NULL;
    CHECK(fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"A's export", 10, n, &err) == FENCELOCK_STALE_TOKEN);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == n + 1);
    fencelock_error_free(err);
    err = NULL;
    CHECK(fencelock_holder_put(holder, KEY, KEY_LEN, (const uint8_t *)"A's export", 10, &err) == FENCELOCK_LOCK_LOST);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == n + 1);
    fencelock_error_free(err);
    bool held = true;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_is_held(holder, &held, ERR));
    CHECK(!held);
    fencelock_holder_free(holder);
    fencelock_store_close(store);
    return check_report("test_fork (process A)");
}

/* Process B: acquire once A's lease ran out, check the token is N+1, write with it. */
static int process_b(const char *path, uint64_t n) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(path, &store, ERR));
    fencelock_holder *holder = NULL;
    /* A generous timeout: the test checks the outcome, never the speed. */
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_wait(store, LOCK, 600000, 600000, &holder, ERR));
    CHECK(fencelock_holder_token(holder) == n + 1);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"B's export", 10, n + 1, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(holder, KEY, KEY_LEN, (const uint8_t *)"B's export", 10, ERR));
    fencelock_holder_free(holder);
    fencelock_store_close(store);
    return check_report("test_fork (process B)");
}

static void seed_scenario(const char *path) {
    int token_pipe[2], go_pipe[2];
    CHECK(pipe(token_pipe) == 0 && pipe(go_pipe) == 0);
    fflush(NULL);
    pid_t a = fork();
    if (a == 0) {
        check_reset();
        close(token_pipe[0]);
        close(go_pipe[1]);
        _exit(process_a(path, token_pipe[1], go_pipe[0]));
    }
    close(token_pipe[1]);
    close(go_pipe[0]);
    uint64_t n = 0;
    read_all(token_pipe[0], &n, sizeof n);
    CHECK(n > 0);

    /* A pauses, holding its lease (and its liveness lock) while stopped. */
    CHECK(kill(a, SIGSTOP) == 0);
    int status = 0;
    CHECK(waitpid(a, &status, WUNTRACED) == a && WIFSTOPPED(status));

    fflush(NULL);
    pid_t b = fork();
    if (b == 0) {
        check_reset();
        _exit(process_b(path, n));
    }
    CHECK(wait_child(b) == 0);

    CHECK(kill(a, SIGCONT) == 0);
    write_all(go_pipe[1], "g", 1);
    CHECK(wait_child(a) == 0);
    close(token_pipe[0]);
    close(go_pipe[1]);

    /* B's value stays, with B's token. */
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(path, &store, ERR));
    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t token = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, KEY, KEY_LEN, &value, &len, &token, ERR));
    CHECK(len == 10 && value != NULL && memcmp(value, "B's export", 10) == 0);
    CHECK(token == n + 1);
    fencelock_buffer_free(value, len);
    fencelock_store_close(store);
}

/* A child must open its own store: the parent's reports FORKED. */
static void forked_child(const char *path) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(path, &store, ERR));
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        check_reset();
        fencelock_holder *holder = (fencelock_holder *)0x1;
        CHECK_STATUS(FENCELOCK_FORKED, fencelock_store_acquire(store, "in-child", 1000, &holder, ERR));
        CHECK(holder == (fencelock_holder *)0x1);
        CHECK_STATUS(FENCELOCK_FORKED, fencelock_store_put(store, KEY, KEY_LEN, NULL, 0, 1, ERR));
        /* The child's own store works. */
        fencelock_store *own = NULL;
        CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(path, &own, ERR));
        CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(own, "in-child", 1000, &holder, ERR));
        fencelock_holder_free(holder);
        fencelock_store_close(own);
        /* The inherited handle is left alone in the child: closing it here could touch the
           parent's open database. */
        _exit(check_report("test_fork (forked child)"));
    }
    CHECK(wait_child(child) == 0);
    fencelock_store_close(store);
}

int main(void) {
    scratch sc;
    scratch_make(&sc);
    seed_scenario(sc.path);
    forked_child(sc.path);
    scratch_remove(&sc);
    return check_report("test_fork");
}
