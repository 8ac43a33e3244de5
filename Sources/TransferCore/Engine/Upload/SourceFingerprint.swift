import Foundation

/// What identifies one version of a local file: device, inode, size, and the
/// modification and change times to the nanosecond. Taken before an upload
/// reads the file and again after (and between S3 parts): a file overwritten
/// in place, appended to, truncated or replaced while it was sent fails the
/// upload instead of leaving the server a mix of two versions.
struct SourceFingerprint: Equatable {
    let device: UInt64
    let inode: UInt64
    let size: Int64
    let modified: timespec
    let changed: timespec

    init(path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: path)) }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = info.st_mtim
        changed = info.st_ctim
    }

    static func == (a: SourceFingerprint, b: SourceFingerprint) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }

    /// Throws `UploadError.sourceChanged` unless the file at `path` is still this version.
    func check(_ path: String) throws {
        let now = try SourceFingerprint(path: path)
        guard now == self else {
            var what: [String] = []
            if now.inode != inode || now.device != device { what.append("it was replaced by another file") }
            if now.size != size { what.append("its size went from \(size) to \(now.size) bytes") }
            if what.isEmpty { what.append("it was written to") }
            throw UploadError.sourceChanged(path: path, detail: what.joined(separator: " and "))
        }
    }
}
