/*
 * scripts/sqlite-bench.h: what the plain-SQLite measuring programs share (scripts/sqlite-floor.c,
 * scripts/storage-format.c): failing loudly, running SQL, the ids' random bits and the clocks.
 */
#ifndef LARDER_SQLITE_BENCH_H
#define LARDER_SQLITE_BENCH_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Exits with SQLite's message unless `rc` is a success. */
static void check(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "Error: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void exec(sqlite3 *db, const char *sql) { check(sqlite3_exec(db, sql, NULL, NULL, NULL), db, sql); }

/* SplitMix64: the random bits of random and server-made ids. */
static unsigned long long splitmix(unsigned long long *state) {
    unsigned long long z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The process's CPU time (user and system), in seconds. */
static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/*
 * larder-bench's document number n, {"n":N,"group":N%100,"name":"doc N","pad":"<letters>"}, padded with `filler`
 * (at least doc_bytes + 64 letters) to doc_bytes, into `doc`; its folded search text (its strings joined by U+001F)
 * into `folded`. Both buffers hold doc_bytes + 64 bytes. Returns the document's length; *folded_len the text's.
 */
static int bench_document(long n, long doc_bytes, const char *filler, char *doc, char *folded, int *folded_len) {
    int len = snprintf(doc, doc_bytes, "{\"n\":%ld,\"group\":%ld,\"name\":\"doc %ld\",\"pad\":\"", n, n % 100, n);
    long pad = doc_bytes - len - 2;
    if (pad < 0) pad = 0;
    memcpy(doc + len, filler + n % 64, pad);
    memcpy(doc + len + pad, "\"}", 2);
    *folded_len = snprintf(folded, 32, "doc %ld\x1f", n);
    memcpy(folded + *folded_len, filler + n % 64, pad);
    *folded_len += pad;
    return len + pad + 2;
}

#endif
