import Foundation

/// Reserves disk space for a file whose final size is known, so a full disk
/// is reported before the download starts rather than in the middle, and
/// segments written out of order do not fragment the file.
enum Preallocation {
    static let minimumLength: Int64 = 1 << 20

    /// Reserves `length` bytes for `fd`. Filesystems that cannot reserve
    /// (EOPNOTSUPP) are left alone; a full disk throws.
    static func reserve(fd: Int32, length: Int64, path: String) throws {
        // Small files are not worth a system call each.
        guard length >= minimumLength else { return }
        #if os(Linux)
        // FALLOC_FL_KEEP_SIZE = 1: reserve blocks without changing the file's length.
        if linuxFallocate(fd, 1, off_t(0), off_t(length)) == 0 { return }
        let code = errno
        if code == ENOSPC || code == EDQUOT || code == EFBIG {
            throw POSIXFailure(operation: "reserve \(length) bytes for", path: path, code: code)
        }
        #endif
    }
}

#if os(Linux)
/// Linux's fallocate(2); its declaration needs _GNU_SOURCE, which Swift's Glibc module lacks.
@_silgen_name("fallocate64")
private func linuxFallocate(_ fd: Int32, _ mode: Int32, _ offset: off_t, _ length: off_t) -> Int32
#endif
