import CSystem
import Foundation

/// `NAME.transferd-part` (`PartialNames`), open and locked (`flock`, exclusive) by the one process that
/// writes it.
///
/// Two processes downloading to the same destination (the same `get` started
/// twice, a `get` and a queue run) would each truncate, write and resume the
/// one partial file, and the file renamed into place would mix their bytes.
/// The lock is taken before anything is decided about the file or its
/// checkpoint and held until the file is in place: the engine closes it after
/// its rename, or hands it to the caller that renames (`DownloadResult.partFile`).
///
/// `flock`, not `fcntl` locks: those belong to the process and vanish when any
/// descriptor of the file is closed (the checksum pass opens and closes one).
// One owner at a time closes it (the engine, or the holder of the result it was handed to);
// `state` is locked because a checkpoint writer's thread tags the file.
final class PartFile: Sendable {
    let fd: Int32
    /// Whether the file was there before this process opened it.
    let existed: Bool
    /// Whether `fd` is still this file's (after `close` the number may name another file), and
    /// whether the file is known to carry a tag (`tag()`, or `carries` found one).
    private let state = Locked((open: true, tagged: false))

    private init(fd: Int32, existed: Bool) {
        self.fd = fd
        self.existed = existed
    }

    deinit { close() }

    /// Opens and locks a partial file that is already there; nil when there is
    /// none, or when it cannot be opened (`create` then reports why).
    /// - Parameter takingOver: a lock another process holds is ignored (see `DownloadOptions.takesOverBusyPart`).
    /// - Throws: `DownloadError.partInUse` when another process holds it.
    static func lockExisting(_ path: String, takingOver: Bool) throws -> PartFile? {
        for _ in 0..<attempts {
            // O_NOFOLLOW: a link planted at the partial file's name must not make the download write through it.
            let fd = Foundation.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { return nil }
            if let file = try locked(fd, path: path, existed: true, takingOver: takingOver) { return file }
        }
        throw DownloadError.partInUse(path: path)
    }

    /// Opens the partial file, creating it when it is not there (never truncating: the caller
    /// decides that once it holds the lock), and locks it.
    /// - Parameter takingOver: as for `lockExisting`.
    /// - Throws: `DownloadError.partInUse` when another process holds it; `DownloadError.local` when it cannot be opened.
    static func create(_ path: String, takingOver: Bool) throws -> PartFile {
        for _ in 0..<attempts {
            var existed = false
            var fd = FileCreation.open(path, flags: O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW)
            if fd < 0 && errno == EEXIST {
                existed = true
                fd = Foundation.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
                // Renamed into place or removed by its writer between the two opens: created anew.
                if fd < 0 && errno == ENOENT { continue }
            }
            guard fd >= 0 else { throw DownloadError.local(POSIXFailure(operation: "open", path: path)) }
            if let file = try locked(fd, path: path, existed: existed, takingOver: takingOver) { return file }
        }
        throw DownloadError.partInUse(path: path)
    }

    /// How often a path that keeps naming another file by the time it is locked is opened again.
    private static let attempts = 8

    /// Locks `fd`, opened at `path`; nil (closed) when `path` no longer names it.
    private static func locked(_ fd: Int32, path: String, existed: Bool, takingOver: Bool) throws -> PartFile? {
        var result: Int32
        repeat { result = flock(fd, LOCK_EX | LOCK_NB) } while result != 0 && errno == EINTR
        let code = result == 0 ? 0 : errno
        // A filesystem without locks (some network mounts): written unguarded, as curl and aria2c write every file.
        let unguarded = code == ENOLCK || code == EOPNOTSUPP || code == ENOSYS
        if code == 0 || unguarded || (code == EWOULDBLOCK && takingOver) {
            // The writer that held it may have renamed it into place (or removed it) and let go
            // in the meantime: this lock would then be on the finished file, not on the partial file.
            guard names(fd, path) else {
                Foundation.close(fd)
                return nil
            }
            return PartFile(fd: fd, existed: existed)
        }
        Foundation.close(fd)
        if code == EWOULDBLOCK { throw DownloadError.partInUse(path: path) }
        throw DownloadError.local(POSIXFailure(operation: "lock", path: path, code: code))
    }

    /// Whether `path` (not followed) names the file open at `fd`.
    static func names(_ fd: Int32, _ path: String) -> Bool {
        var opened = stat(), named = stat()
        return fstat(fd, &opened) == 0 && lstat(path, &named) == 0 && opened.st_dev == named.st_dev
            && opened.st_ino == named.st_ino
    }

    /// The attribute naming the file's tag (`DownloadCheckpoint.fileTag`).
    static let tagAttribute = "user.transferd.file"

    /// What `tag()` did.
    enum Tagging: Equatable {
        case tagged(String)
        /// The file system keeps no user attributes: its checkpoints are judged by size alone.
        case unsupported
        /// Not now (no space for the attribute, the file closed): tried again at the next checkpoint.
        case failed

        var tag: String? {
            if case .tagged(let tag) = self { return tag }
            return nil
        }
    }

    /// Marks the file as this download's with a new random tag, kept in its checkpoints: a file
    /// put at the partial file's name since (another program's, a copy, one of the same size) lacks it, and
    /// its checkpoint is not trusted for it.
    func tag() -> Tagging {
        let tag = WrittenOffsets.newID()
        let bytes = Array(tag.utf8)
        return state.withLock { state in
            guard state.open else { return .failed }
            guard fsetxattr(fd, Self.tagAttribute, bytes, bytes.count, 0) == 0 else {
                return errno == ENOTSUP || errno == EOPNOTSUPP ? .unsupported : .failed
            }
            state.tagged = true
            return .tagged(tag)
        }
    }

    /// Takes the tag off the complete file, once it is in place: it has served, and a copy of the
    /// file would carry it.
    /// - Parameter always: also when this process neither set nor saw it (a dead run's file).
    func untag(always: Bool = false) {
        state.withLock { state in
            guard state.open, state.tagged || always else { return }
            state.tagged = false
            _ = fremovexattr(fd, Self.tagAttribute)
        }
    }

    /// Whether the file carries `tag` (see `tag()`).
    func carries(_ tag: String) -> Bool {
        state.withLock { state in
            var buffer = [UInt8](repeating: 0, count: 64)
            let count = state.open ? fgetxattr(fd, Self.tagAttribute, &buffer, buffer.count) : -1
            guard count > 0 && String(decoding: buffer[0..<count], as: UTF8.self) == tag else { return false }
            state.tagged = true
            return true
        }
    }

    /// The tag the file carries, or nil when it carries none (or its file system keeps none).
    func currentTag() -> String? {
        state.withLock { state in
            var buffer = [UInt8](repeating: 0, count: 64)
            let count = state.open ? fgetxattr(fd, Self.tagAttribute, &buffer, buffer.count) : -1
            return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : nil
        }
    }

    /// Whether the file carries a tag of transferd's (any value: a dead run's counts), or nil
    /// when its file system keeps no user attributes (nothing can be proved either way).
    func carriesAnyTag() -> Bool? {
        state.withLock { state in
            var buffer = [UInt8](repeating: 0, count: 64)
            guard state.open else { return false }
            if fgetxattr(fd, Self.tagAttribute, &buffer, buffer.count) > 0 { return true }
            return errno == ENOTSUP || errno == EOPNOTSUPP ? nil : false
        }
    }

    /// Whether transferd may start an existing partial file over (truncate it, later rename it):
    /// only one it can prove is its own. A pure rule over what is known of the file:
    /// empty (nothing to lose), carrying transferd's tag (every partial file is tagged when
    /// made), or named by a record of transferd's (a checkpoint, trusted or not). On a file
    /// system without user attributes nothing can be proved, and the file is taken as before.
    static func mayStartOver(size: Int64, tagged: Bool?, recordFound: Bool) -> Bool {
        size == 0 || recordFound || tagged != false
    }

    /// A new file put in this one's place at `path`, holding a copy of its first `length` bytes
    /// (none: an empty file) and its tag and written-offsets record, locked; this one is closed.
    ///
    /// A takeover in a shared store makes one before it writes a byte: the worker the job was
    /// taken from may be frozen rather than dead (SIGSTOP, a paused VM), its descriptor still open
    /// on the old file, and what it writes when it wakes lands in that old file, which no one
    /// reads any more. (Before, a frozen worker wrote the rest of its old bytes into the file its
    /// successor had verified and put in place.) The attributes are read before the bytes are
    /// copied, so the written-offsets record claims nothing the copy lacks.
    /// - Returns: the new file, and how its bytes were copied (`FileCopy.Method`, nil for none).
    func replaced(at path: String, keeping length: Int64) throws -> (file: PartFile, copied: FileCopy.Method?) {
        let attributes = [Self.tagAttribute, WrittenOffsets.attribute].compactMap { name -> (String, [UInt8])? in
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = fgetxattr(fd, name, &buffer, buffer.count)
            return count > 0 ? (name, Array(buffer[0..<count])) : nil
        }
        let temporary = path + ".takeover.\(getpid()).\(UInt32.random(in: 0...UInt32.max))"
        let fresh = FileCreation.open(temporary, flags: O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW)
        guard fresh >= 0 else { throw DownloadError.local(POSIXFailure(operation: "create", path: temporary)) }
        do {
            let method = length > 0 ? try FileCopy.copy(from: fd, to: fresh, length: length, path: temporary) : nil
            for (name, value) in attributes { _ = fsetxattr(fresh, name, value, value.count, 0) }
            _ = flock(fresh, LOCK_EX | LOCK_NB)
            guard rename(temporary, path) == 0 else { throw DownloadError.local(POSIXFailure(operation: "rename", path: path)) }
            let file = PartFile(fd: fresh, existed: true)
            file.state.withLock { $0.tagged = !attributes.isEmpty && attributes[0].0 == Self.tagAttribute }
            close()
            return (file, method)
        } catch {
            Foundation.close(fresh)
            unlink(temporary)
            throw error
        }
    }

    /// The file's size now.
    func size() -> Int64? {
        var info = stat()
        return fstat(fd, &info) == 0 ? Int64(info.st_size) : nil
    }

    /// Closes the file, which releases the lock; later calls do nothing.
    func close() {
        state.withLock { state in
            guard state.open else { return }
            state.open = false
            Foundation.close(fd)
        }
    }
}
