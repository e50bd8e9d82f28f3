/*
 * scripts/storage-format.c: plain SQLite's CPU per durable create for variants of Larder's `documents` table, one
 * change at a time, so that each change to the storage format is measured alone (BENCHMARKS.md "The write path").
 * No Larder code runs: each create is one prepared INSERT of a 250-byte JSON document (larder-bench's), and each
 * group of GROUP creates one transaction, committed with `synchronous=NORMAL` in WAL mode.
 *
 * Build: cc -O2 scripts/storage-format.c -lsqlite3 -o storage-format
 * Usage: storage-format DB COUNT GROUP IDS BLOB_ID INT_COLLECTION SEARCH AUTOINCREMENT CLUSTERED
 *   DB              a new database file (deleted first)
 *   COUNT, GROUP    creates to run, creates per transaction
 *   IDS             server (time-ordered version 7, as the server makes them) or random (version 4, an app's UUID())
 *   BLOB_ID         1: ids as 16-byte blobs; 0: as their 36-character text (Larder's)
 *   INT_COLLECTION  1: the collection as a small integer; 0: as its name (Larder's)
 *   SEARCH          1: a second column with the document's folded text (Larder's before schema 20); 0: none
 *   AUTOINCREMENT   1: `seq INTEGER PRIMARY KEY AUTOINCREMENT` (before schema 20); 0: numbered by the program, the
 *                   highest number recorded once per transaction (Larder's since)
 *   CLUSTERED       1: a WITHOUT ROWID table keyed by (collection, id), with a unique index on seq; 0: a rowid table
 *                   with a unique index on (collection, id) (Larder's)
 * Every variant keeps Larder's other two indexes on `documents` (the create event's number, the owner; both partial)
 * and raises the change log's durable number once per transaction, as Larder's writer does.
 * Prints one line: the variant and the CPU time (user + system) per create.
 */
#include "sqlite-bench.h"
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "Usage: storage-format DB COUNT GROUP IDS(server|random) BLOB_ID INT_COLLECTION SEARCH "
                        "AUTOINCREMENT CLUSTERED (each of the last five 0 or 1)\n");
        return 64;
    }
    const char *path = argv[1];
    long count = atol(argv[2]), group = atol(argv[3]);
    int random_ids = strcmp(argv[4], "random") == 0;
    if (!random_ids && strcmp(argv[4], "server") != 0) {
        fprintf(stderr, "Error: IDS must be server or random, not '%s'\n", argv[4]);
        return 64;
    }
    int blob_id = atoi(argv[5]), int_collection = atoi(argv[6]), search = atoi(argv[7]), autoincrement = atoi(argv[8]),
        clustered = atoi(argv[9]);
    if (count < 1 || group < 1 || (clustered && autoincrement)) {
        fprintf(stderr, "Error: COUNT and GROUP must be at least 1; a clustered table has no AUTOINCREMENT\n");
        return 64;
    }
    char name[4200];
    unlink(path);
    snprintf(name, sizeof name, "%s-wal", path);
    unlink(name);
    snprintf(name, sizeof name, "%s-shm", path);
    unlink(name);
    sqlite3 *db;
    check(sqlite3_open(path, &db), db, "open");
    exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL");

    const char *collection_type = int_collection ? "INTEGER" : "TEXT", *id_type = blob_id ? "BLOB" : "TEXT";
    const char *search_column = search ? ", search TEXT" : "";
    char ddl[2000];
    if (clustered)
        snprintf(ddl, sizeof ddl,
                 "CREATE TABLE documents(collection %s NOT NULL, id %s NOT NULL, seq INTEGER NOT NULL, rev INTEGER NOT "
                 "NULL, createdAt INTEGER NOT NULL, updatedAt INTEGER NOT NULL, data TEXT NOT NULL%s, createSeq INTEGER, "
                 "owner TEXT, PRIMARY KEY(collection, id)) WITHOUT ROWID;"
                 "CREATE UNIQUE INDEX documents_seq ON documents(seq);",
                 collection_type, id_type, search_column);
    else
        snprintf(ddl, sizeof ddl,
                 "CREATE TABLE documents(seq INTEGER PRIMARY KEY%s, collection %s NOT NULL, id %s NOT NULL, rev INTEGER "
                 "NOT NULL, createdAt INTEGER NOT NULL, updatedAt INTEGER NOT NULL, data TEXT NOT NULL%s, createSeq "
                 "INTEGER, owner TEXT); CREATE UNIQUE INDEX documents_id ON documents(collection, id);",
                 autoincrement ? " AUTOINCREMENT" : "", collection_type, id_type, search_column);
    exec(db, ddl);
    exec(db,
         "CREATE INDEX documents_create_seq ON documents(createSeq, collection) WHERE createSeq IS NOT NULL;"
         "CREATE INDEX documents_owner ON documents(collection, owner, id) WHERE owner IS NOT NULL;"
         "CREATE TABLE changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, data TEXT);"
         "INSERT INTO sqlite_sequence(name, seq) VALUES ('changes', 0);"
         "CREATE TABLE larder_meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
         "INSERT INTO larder_meta(key, value) VALUES ('documentsSeq', 0);");
    char insert_sql[600];
    snprintf(insert_sql, sizeof insert_sql,
             "INSERT INTO documents(%scollection, id, rev, createdAt, updatedAt, data%s, createSeq) "
             "VALUES (%s?1, ?2, 1, ?3, ?3, ?4%s, ?6)",
             autoincrement ? "" : "seq, ", search ? ", search" : "", autoincrement ? "" : "?6, ", search ? ", ?5" : "");
    sqlite3_stmt *insert, *raise_changes, *raise_documents;
    check(sqlite3_prepare_v3(db, insert_sql, -1, SQLITE_PREPARE_PERSISTENT, &insert, NULL), db, insert_sql);
    check(sqlite3_prepare_v3(db, "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'changes'", -1,
                             SQLITE_PREPARE_PERSISTENT, &raise_changes, NULL), db, "prepare");
    check(sqlite3_prepare_v3(db, "UPDATE larder_meta SET value = max(value, ?1) WHERE key = 'documentsSeq'", -1,
                             SQLITE_PREPARE_PERSISTENT, &raise_documents, NULL), db, "prepare");

    /* larder-bench's document: {"n":K,"group":K%100,"name":"doc K","pad":"<letters>"} of 250 bytes. */
    char filler[400], doc[400], folded[400];
    srand(42);
    for (int i = 0; i < (int)sizeof filler; i++) filler[i] = 'a' + rand() % 26;
    unsigned long long id_state = 7, last_ms = 0, in_ms = 0;
    long long seq = 0;
    double cpu0 = cpu_seconds();
    for (long n = 0; n < count; n++) {
        if (n % group == 0) exec(db, "BEGIN IMMEDIATE");
        int folded_len;
        int len = bench_document(n, 250, filler, doc, folded, &folded_len);
        unsigned long long high = splitmix(&id_state), low = splitmix(&id_state);
        if (!random_ids) {
            /* Version 7: 48 bits of milliseconds, then a counter within the millisecond. */
            unsigned long long ms = (unsigned long long)(wall_seconds() * 1000);
            in_ms = ms == last_ms ? in_ms + 1 : 0;
            last_ms = ms;
            high = (ms << 16) | 0x7000 | (in_ms & 0xFFF);
        }
        unsigned char bytes[16];
        for (int k = 0; k < 8; k++) {
            bytes[k] = (unsigned char)(high >> (56 - 8 * k));
            bytes[8 + k] = (unsigned char)(low >> (56 - 8 * k));
        }
        char text[40];
        snprintf(text, sizeof text, "%08llx-%04llx-%04llx-%04llx-%012llx", high >> 32, (high >> 16) & 0xFFFF,
                 high & 0xFFFF, low >> 48, low & 0xFFFFFFFFFFFFULL);
        long long now = (long long)(wall_seconds() * 1000);
        if (int_collection) sqlite3_bind_int(insert, 1, 3);
        else sqlite3_bind_text(insert, 1, "bench", 5, SQLITE_STATIC);
        if (blob_id) sqlite3_bind_blob(insert, 2, bytes, 16, SQLITE_TRANSIENT);
        else sqlite3_bind_text(insert, 2, text, 36, SQLITE_TRANSIENT);
        sqlite3_bind_int64(insert, 3, now);
        sqlite3_bind_text(insert, 4, doc, len, SQLITE_TRANSIENT);
        if (search) sqlite3_bind_text(insert, 5, folded, folded_len, SQLITE_TRANSIENT);
        sqlite3_bind_int64(insert, 6, ++seq);
        check(sqlite3_step(insert), db, "insert a document");
        sqlite3_reset(insert);
        if (n % group == group - 1 || n == count - 1) {
            sqlite3_bind_int64(raise_changes, 1, seq);
            check(sqlite3_step(raise_changes), db, "number the changes");
            sqlite3_reset(raise_changes);
            if (!autoincrement) {
                sqlite3_bind_int64(raise_documents, 1, seq);
                check(sqlite3_step(raise_documents), db, "number the documents");
                sqlite3_reset(raise_documents);
            }
            exec(db, "COMMIT");
        }
    }
    double cpu = cpu_seconds() - cpu0;
    printf("ids %s, blob id %d, integer collection %d, search column %d, autoincrement %d, clustered %d, group %ld: "
           "%.2f us per create\n",
           argv[4], blob_id, int_collection, search, autoincrement, clustered, group, cpu / count * 1e6);
    sqlite3_finalize(insert);
    sqlite3_finalize(raise_changes);
    sqlite3_finalize(raise_documents);
    sqlite3_close(db);
    return 0;
}
