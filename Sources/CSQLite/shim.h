#ifndef LARDER_CSQLITE_SHIM_H
#define LARDER_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro Swift cannot import; binding text or bytes must copy.
static inline sqlite3_destructor_type larder_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// Turns off SQLite's memory statistics, which take a global mutex on every allocation; call before the first
/// connection opens (sqlite3_config is variadic, which Swift cannot call). Returns SQLITE_MISUSE once initialized.
static inline int larder_sqlite_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
