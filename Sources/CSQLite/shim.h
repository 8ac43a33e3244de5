#ifndef TRANSFERD_CSQLITE_SHIM_H
#define TRANSFERD_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a macro cast Swift cannot import: bind copies of text and blobs. */
static inline int tdc_sqlite3_bind_text_copy(sqlite3_stmt *s, int i, const char *text, int n) {
    return sqlite3_bind_text(s, i, text, n, SQLITE_TRANSIENT);
}
static inline int tdc_sqlite3_bind_blob_copy(sqlite3_stmt *s, int i, const void *data, int n) {
    return sqlite3_bind_blob(s, i, data, n, SQLITE_TRANSIENT);
}
#endif
