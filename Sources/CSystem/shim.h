// C library calls that Swift's Glibc module does not export.
#include <sys/xattr.h>

#include <stddef.h>
#if defined(__linux__)
// memmem is a GNU extension there: declared without _GNU_SOURCE (glibc has had it since 2.1).
void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen);
#else
#include <string.h>
#endif
