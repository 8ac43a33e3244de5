#ifndef TRANSFERD_CPOSTGRES_SHIM_H
#define TRANSFERD_CPOSTGRES_SHIM_H
/* libpq, PostgreSQL's client library (Debian libpq-dev; pkg-config libpq adds -I/usr/include/postgresql). */
#include <libpq-fe.h>
#endif
