#ifndef LARDER_CSQLITE_SHIM_H
#define LARDER_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro Swift cannot import; binding text or bytes must copy.
static inline sqlite3_destructor_type larder_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}
#endif
