import Foundation

/// Keeps a job's files inside the folder the user chose, by what the path
/// resolves to rather than by its text.
///
/// Job paths are checked lexically at ingest (no `..` out of the root); a
/// symbolic link inside the root would still lead out of it. Before a job
/// touches a path, every folder from the root down is opened with
/// `openat(…, O_NOFOLLOW | O_DIRECTORY)` (missing ones made with `mkdirat`),
/// so a link anywhere below the root stops the job with a reason. The root
/// itself may be a link: it is the user's own choice.
enum ConfinedPath {
    struct Escape: Error, CustomStringConvertible {
        let path: String
        let link: String
        let root: String
        var description: String {
            "\(path) leads through \(link), a symbolic link (or not a folder); job paths must stay inside \(root) without links — "
                + "use the real folder in the job, or run with --root set to a folder that holds it"
        }
    }

    /// Checks (and, with `create`, makes) the folders from `root` down to `path`'s
    /// parent; with `finalMustNotBeLink`, also refuses a link at `path` itself.
    static func check(_ path: String, root: String, create: Bool, finalMustNotBeLink: Bool = false) throws {
        let rootPath = PathNormalization.normalize(root)
        let full = PathNormalization.normalize(path)
        let prefix = rootPath == "/" ? "/" : rootPath + "/"
        // The root itself (a job's "source": "." uploads the whole folder) is inside it.
        if full == rootPath { return }
        guard PathNormalization.hasBytePrefix(full, prefix) else {
            throw Escape(path: path, link: path, root: rootPath)
        }
        let components = PathNormalization.components(String(decoding: full.utf8.dropFirst(prefix.utf8.count), as: UTF8.self))
        guard !components.isEmpty else { return }
        var fd = open(rootPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure(operation: "open", path: rootPath) }
        defer { close(fd) }
        var walked = rootPath
        for component in components.dropLast() {
            walked += (walked.hasSuffix("/") ? "" : "/") + component
            var next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 && errno == ENOENT && create {
                if mkdirat(fd, component, 0o755) != 0 && errno != EEXIST {
                    throw POSIXFailure(operation: "create folder", path: walked)
                }
                next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            guard next >= 0 else {
                if errno == ELOOP || errno == ENOTDIR { throw Escape(path: path, link: walked, root: rootPath) }
                throw POSIXFailure(operation: "open", path: walked)
            }
            close(fd)
            fd = next
        }
        if finalMustNotBeLink {
            var info = stat()
            if fstatat(fd, components.last!, &info, AT_SYMLINK_NOFOLLOW) == 0 && (info.st_mode & S_IFMT) == S_IFLNK {
                throw Escape(path: path, link: full, root: rootPath)
            }
        }
    }
}

/// What tells one file from another, as a delete checks it (`QueueIngestor`'s `FileIdentity`
/// watches job files): a file replaced under the same name (a download's rename) is another
/// file, and two names of one file (a case-insensitive folder) are the same.
package struct FileStamp: Hashable, Sendable {
    package var device: UInt64
    package var inode: UInt64
    package var size: Int64
    package var modified: Int64

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
    }

    /// The file at `path` (not following a final link), or nil.
    package static func of(_ path: String) -> FileStamp? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileStamp(info)
    }

    /// The file itself, whatever its size and time.
    package var file: [UInt64] { [device, inode] }
}

extension ConfinedPath {
    /// Removes the regular file at `path` below `root`, reached through no symbolic link (each
    /// folder opened with `O_NOFOLLOW`, the file removed with `unlinkat` from its folder), only
    /// while it is still `expected`. False when it is gone or is not that file any more.
    static func removeFile(_ path: String, root: String, expected: FileStamp) throws -> Bool {
        let rootPath = PathNormalization.normalize(root)
        let full = PathNormalization.normalize(path)
        let prefix = rootPath == "/" ? "/" : rootPath + "/"
        guard full != rootPath, PathNormalization.hasBytePrefix(full, prefix) else { throw Escape(path: path, link: path, root: rootPath) }
        let components = PathNormalization.components(String(decoding: full.utf8.dropFirst(prefix.utf8.count), as: UTF8.self))
        guard let name = components.last else { return false }
        var fd = open(rootPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure(operation: "open", path: rootPath) }
        defer { close(fd) }
        var walked = rootPath
        for component in components.dropLast() {
            walked += (walked.hasSuffix("/") ? "" : "/") + component
            let next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard next >= 0 else {
                if errno == ENOENT { return false }
                if errno == ELOOP || errno == ENOTDIR { throw Escape(path: path, link: walked, root: rootPath) }
                throw POSIXFailure(operation: "open", path: walked)
            }
            close(fd)
            fd = next
        }
        var info = stat()
        guard fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return false }
            throw POSIXFailure(operation: "look at", path: full)
        }
        guard (info.st_mode & S_IFMT) == S_IFREG, FileStamp(info) == expected else { return false }
        guard unlinkat(fd, name, 0) == 0 else {
            if errno == ENOENT { return false }
            throw POSIXFailure(operation: "delete (--delete)", path: full)
        }
        return true
    }
}

/// A file name taken from a URL, safe to use inside a folder.
package enum URLFileName {
    /// The URL's last path segment, decoded, with `/`, NUL and control
    /// characters replaced by `_`; `index.html` when that leaves nothing usable
    /// (`/`, `.`, `..`). A URL never names a folder to write into: `..%2F..%2Fx`
    /// becomes `.._.._x`, inside the chosen folder.
    package static func of(_ url: URL) -> String {
        let raw = url.lastPathComponent
        let replaced = { (scalar: Unicode.Scalar) in scalar == "/" || scalar.value < 0x20 || scalar.value == 0x7F }
        // Most names need no replacing: kept as they are, without rebuilding them scalar by scalar.
        let cleaned = !raw.unicodeScalars.contains(where: replaced) ? raw
            : String(raw.unicodeScalars.map { scalar -> Character in replaced(scalar) ? "_" : Character(scalar) })
        if cleaned.isEmpty || cleaned == "." || cleaned == ".." || cleaned == "_" && raw == "/" { return "index.html" }
        return cleaned
    }
}
