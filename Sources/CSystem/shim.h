// C library calls that Swift's Glibc module does not export.
#include <sys/xattr.h>

#include <stddef.h>
#if defined(__linux__)
// memmem is a GNU extension there: declared without _GNU_SOURCE (glibc has had it since 2.1).
void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen);
#else
#include <string.h>
#endif

#if defined(__linux__)
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>
// copy_file_range(2) is declared by glibc only under _GNU_SOURCE, and FICLONE is a macro
// Swift cannot import: both reached through these two wrappers.
static inline long transferd_copy_file_range(int in, long long *in_offset, int out, long long *out_offset, size_t length) {
    return syscall(SYS_copy_file_range, in, in_offset, out, out_offset, length, 0u);
}
static inline int transferd_clone_file(int destination, int source) {
    return ioctl(destination, FICLONE, source);
}
#endif
