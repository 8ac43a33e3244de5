import Foundation

/// Reserves disk space for a file whose final size is known, so a full disk
/// is reported before the download starts rather than in the middle, and
/// segments written out of order do not fragment the file.
enum Preallocation {
    static let minimumLength: Int64 = 1 << 20

    /// Reserves `length` bytes for `fd`. Filesystems that cannot reserve
    /// (EOPNOTSUPP) are left alone; a full disk throws. The length usually comes
    /// from a server's word (`Content-Length`, `Content-Range`), so nothing is
    /// reserved beyond the space free now: more than that throws before any block
    /// is taken (fallocate may keep part of a reservation it could not finish).
    /// Returns whether blocks were reserved (see `release`).
    @discardableResult
    static func reserve(fd: Int32, length: Int64, path: String) throws -> Bool {
        // Small files are not worth a system call each.
        guard length >= minimumLength else { return false }
        #if os(Linux)
        var info = stat()
        var disk = statvfs()
        if fstat(fd, &info) == 0, fstatvfs(fd, &disk) == 0 {
            let held = Int64(info.st_blocks) * 512
            let free = Int64(disk.f_bavail) * Int64(disk.f_frsize)
            if length - held > free {
                throw POSIXFailure(operation: "reserve \(length) bytes for", path: path, code: ENOSPC)
            }
        }
        // FALLOC_FL_KEEP_SIZE = 1: reserve blocks without changing the file's length.
        if linuxFallocate(fd, 1, off_t(0), off_t(length)) == 0 { return true }
        let code = errno
        if code == ENOSPC || code == EDQUOT || code == EFBIG {
            // Whatever it took before it failed is given back.
            release(fd: fd)
            throw POSIXFailure(operation: "reserve \(length) bytes for", path: path, code: code)
        }
        #endif
        return false
    }

    /// Gives back the blocks reserved and not written (a download that failed short of the
    /// size it was promised): those past the file's end, and `unwritten` ranges inside it (the
    /// gaps a segmented download leaves between its connections' bytes). A later job must not
    /// run out of disk for them.
    static func release(fd: Int32, unwritten: [Range<Int64>] = []) {
        #if os(Linux)
        var info = stat()
        guard fstat(fd, &info) == 0 else { return }
        let size = Int64(info.st_size)
        // FALLOC_FL_PUNCH_HOLE (2) | FALLOC_FL_KEEP_SIZE (1): the blocks go, the length stays.
        for gap in unwritten where gap.lowerBound < size && !gap.isEmpty {
            _ = linuxFallocate(fd, 3, off_t(gap.lowerBound), off_t(min(gap.upperBound, size) - gap.lowerBound))
        }
        let allocated = Int64(info.st_blocks) * 512
        guard allocated > size else { return }
        _ = linuxFallocate(fd, 3, off_t(size), off_t(allocated))
        #endif
    }
}

#if os(Linux)
/// Linux's fallocate(2); its declaration needs _GNU_SOURCE, which Swift's Glibc module lacks.
@_silgen_name("fallocate64")
private func linuxFallocate(_ fd: Int32, _ mode: Int32, _ offset: off_t, _ length: off_t) -> Int32
#endif
