/*
 * scripts/sqlite-floor.c: the floor under Larder's writer: the creates of `larder-bench --mix create` done
 * by a plain SQLite program, with no Larder code. scripts/bench-vs-redis builds it with the system's sqlite3 headers
 * and library and sets Larder's writer CPU per create beside this program's.
 *
 * Usage: sqlite-floor SCHEMA_DB OUT_DB COUNT GROUP SYNCHRONOUS DOC_BYTES [IDS]
 *   SCHEMA_DB    a Larder database (larder.sqlite) whose tables and indexes OUT_DB gets, so the schema is Larder's own
 *   OUT_DB       a new database file (WAL mode, as Larder's)
 *   COUNT        creates to run
 *   GROUP        creates per transaction (Larder's mean group-commit size in the same run)
 *   SYNCHRONOUS  off, normal or full (Larder's default is normal)
 *   DOC_BYTES    the document's size (larder-bench --doc-size)
 *   IDS          streams (default), random or server: the ids of larder-bench --ids (50 streams of sequential ids,
 *                random version 4 UUIDs, or time-ordered version 7 UUIDs as the server makes them)
 *
 * Per create it writes what the schema asks of a create and nothing else, each a prepared statement bound afresh: the
 * document row (its search text only when the schema requires one in every row: since schema 20 a collection the
 * substring index does not cover, as larder-bench's, keeps none), and a change-log row with a copy of the document when the schema keeps create events in `changes`;
 * when they live in the document's row (a `createSeq` column, schema 9) it numbers the row from a counter kept in
 * memory and raises the log's durable number (`sqlite_sequence`) once per transaction, as Larder's writer does.
 * The SQLite defaults stand otherwise (WAL auto-checkpoint at 1000 pages, on the committing thread).
 * Prints one JSON object: {"creates", "group", "cpuMicrosPerCreate", "wallSeconds"}.
 */
#include "sqlite-bench.h"
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *s = NULL;
    check(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL), db, sql);
    return s;
}

/* Whether the column must hold a value in every row (NOT NULL). */
static int not_null(sqlite3 *db, const char *table, const char *column) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT \"notnull\" FROM pragma_table_info('%s') WHERE name = '%s'", table, column);
    sqlite3_stmt *s = prepare(db, sql);
    int required = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) != 0;
    sqlite3_finalize(s);
    return required;
}

static int has_column(sqlite3 *db, const char *table, const char *column) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT 1 FROM pragma_table_info('%s') WHERE name = '%s'", table, column);
    sqlite3_stmt *s = prepare(db, sql);
    int found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return found;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "Usage: sqlite-floor SCHEMA_DB OUT_DB COUNT GROUP SYNCHRONOUS DOC_BYTES [IDS]\n");
        return 64;
    }
    const char *ids = argc == 8 ? argv[7] : "streams";
    int random_ids = strcmp(ids, "random") == 0, server_ids = strcmp(ids, "server") == 0;
    if (!random_ids && !server_ids && strcmp(ids, "streams") != 0) {
        fprintf(stderr, "Error: IDS must be streams, random or server, not '%s'\n", ids);
        return 64;
    }
    const char *schema = argv[1], *out = argv[2], *synchronous = argv[5];
    long count = atol(argv[3]), group = atol(argv[4]), doc_bytes = atol(argv[6]);
    if (count < 1 || group < 1 || doc_bytes < 64 || doc_bytes > 1 << 20) {
        fprintf(stderr, "Error: COUNT and GROUP must be at least 1, DOC_BYTES from 64 to 1048576\n");
        return 64;
    }
    sqlite3 *db;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
    check(sqlite3_open_v2(out, &db, flags, NULL), db, "open");
    exec(db, "PRAGMA journal_mode=WAL");
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA synchronous=%s", synchronous);
    exec(db, pragma);

    /* Larder's schema: its tables first, then their indexes, exactly as SQLite stores their SQL. */
    char attach[4200];
    snprintf(attach, sizeof attach, "ATTACH 'file:%s?mode=ro' AS s", schema);
    exec(db, attach);
    sqlite3_stmt *ddl = prepare(db,
        "SELECT sql FROM s.sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
        "AND type IN ('table', 'index') ORDER BY type = 'index', rowid");
    int tables = 0;
    char *statements[256];
    while (sqlite3_step(ddl) == SQLITE_ROW && tables < 256)
        statements[tables++] = strdup((const char *)sqlite3_column_text(ddl, 0));
    sqlite3_finalize(ddl);
    exec(db, "DETACH s");
    exec(db, "BEGIN");
    for (int i = 0; i < tables; i++) exec(db, statements[i]);
    exec(db, "INSERT OR IGNORE INTO collections(name, createdAt) VALUES ('bench', 0)");
    exec(db, "COMMIT");

    int log_in_row = has_column(db, "documents", "createSeq");
    int search_in_row = not_null(db, "documents", "search");
    int log_table = !log_in_row && has_column(db, "changes", "seq");
    sqlite3_stmt *insert = log_in_row
        ? prepare(db, "INSERT INTO documents(collection, id, rev, createdAt, updatedAt, data, search, createSeq) "
                      "VALUES (?1, ?2, 1, ?3, ?3, ?4, ?5, ?6)")
        : prepare(db, "INSERT INTO documents(collection, id, rev, createdAt, updatedAt, data, search) "
                      "VALUES (?1, ?2, 1, ?3, ?3, ?4, ?5)");
    sqlite3_stmt *change = log_table
        ? prepare(db, "INSERT INTO changes(collection, kind, time, id, rev, createdAt, updatedAt, data) "
                      "VALUES (?1, 'create', ?2, ?3, 1, ?2, ?2, ?4)")
        : NULL;
    if (log_in_row) exec(db, "INSERT INTO sqlite_sequence(name, seq) VALUES ('changes', 0)");
    sqlite3_stmt *counter =
        log_in_row ? prepare(db, "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'changes'") : NULL;

    /* larder-bench's document: {"n":K,"group":K%100,"name":"doc K","pad":"<letters>"} of DOC_BYTES bytes. */
    char *filler = malloc(doc_bytes + 64), *doc = malloc(doc_bytes + 64), *search = malloc(doc_bytes + 64);
    srand(42);
    for (long i = 0; i < doc_bytes + 64; i++) filler[i] = 'a' + rand() % 26;
    unsigned nonce = (unsigned)rand();
    unsigned long long id_state = nonce, last_ms = 0, in_ms = 0;
    long long seq = 0;

    double cpu0 = cpu_seconds(), wall0 = wall_seconds();
    for (long n = 0; n < count; n++) {
        if (n % group == 0) exec(db, "BEGIN IMMEDIATE");
        int slen;
        int len = bench_document(n, doc_bytes, filler, doc, search, &slen);
        char id[48];
        if (random_ids) {
            unsigned long long a = splitmix(&id_state), b = splitmix(&id_state);
            snprintf(id, sizeof id, "%08llx-%04llx-4%03llx-%04llx-%012llx", a >> 32, (a >> 16) & 0xFFFF, a & 0xFFF,
                     0x8000 | ((b >> 48) & 0x3FFF), b & 0xFFFFFFFFFFFFULL);
        } else if (server_ids) {
            /* Version 7: 48 bits of milliseconds, then a counter within the millisecond, then random bits. */
            unsigned long long ms = (unsigned long long)(wall_seconds() * 1000), b = splitmix(&id_state);
            in_ms = ms == last_ms ? in_ms + 1 : 0;
            last_ms = ms;
            snprintf(id, sizeof id, "%08llx-%04llx-7%03llx-%04llx-%012llx", ms >> 16, ms & 0xFFFF, in_ms & 0xFFF,
                     0x8000 | ((b >> 48) & 0x3FFF), b & 0xFFFFFFFFFFFFULL);
        } else {
            snprintf(id, sizeof id, "%08x-%04lx-4000-a000-%012lx", nonce, n % 50, n / 50);
        }
        long long now = (long long)(wall_seconds() * 1000);
        sqlite3_bind_text(insert, 1, "bench", 5, SQLITE_STATIC);
        sqlite3_bind_text(insert, 2, id, 36, SQLITE_TRANSIENT);
        sqlite3_bind_int64(insert, 3, now);
        sqlite3_bind_text(insert, 4, doc, len, SQLITE_TRANSIENT);
        if (search_in_row) sqlite3_bind_text(insert, 5, search, slen, SQLITE_TRANSIENT);
        else sqlite3_bind_null(insert, 5);
        if (log_in_row) sqlite3_bind_int64(insert, 6, ++seq);
        check(sqlite3_step(insert), db, "insert a document");
        sqlite3_reset(insert);
        sqlite3_clear_bindings(insert);
        if (change) {
            sqlite3_bind_text(change, 1, "bench", 5, SQLITE_STATIC);
            sqlite3_bind_int64(change, 2, now);
            sqlite3_bind_text(change, 3, id, 36, SQLITE_TRANSIENT);
            sqlite3_bind_text(change, 4, doc, len, SQLITE_TRANSIENT);
            check(sqlite3_step(change), db, "insert a change");
            sqlite3_reset(change);
            sqlite3_clear_bindings(change);
        }
        if (n % group == group - 1 || n == count - 1) {
            if (counter) {
                sqlite3_bind_int64(counter, 1, seq);
                check(sqlite3_step(counter), db, "number the changes");
                sqlite3_reset(counter);
            }
            exec(db, "COMMIT");
        }
    }
    double cpu = cpu_seconds() - cpu0, wall = wall_seconds() - wall0;
    printf("{\"creates\": %ld, \"group\": %ld, \"cpuMicrosPerCreate\": %.3f, \"wallSeconds\": %.3f}\n", count, group,
           cpu / count * 1e6, wall);
    sqlite3_finalize(insert);
    if (change) sqlite3_finalize(change);
    if (counter) sqlite3_finalize(counter);
    sqlite3_close(db);
    return 0;
}
