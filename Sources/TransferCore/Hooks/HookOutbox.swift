import Foundation

/// The hooks owed and not yet run, one file each in `.transferd/hooks/`
/// (mode 0600: an entry holds the job's error and URL, redacted, and the
/// command). Written durably before the job's end is recorded in the store.
struct HookOutbox: Sendable {
    let directory: String

    init(directory: String) {
        self.directory = directory
    }

    /// A job id may hold any of `._:-`; the file is named by its hash.
    private func path(_ jobID: String) -> String {
        directory + "/" + SHA256Hasher.hex(of: Data(jobID.utf8)).prefix(32) + ".json"
    }

    /// Writes the entries and syncs them (one directory sync for all).
    func record(_ hooks: [DueHook]) throws {
        guard !hooks.isEmpty else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        for hook in hooks {
            let final = path(hook.jobID)
            let temporary = final + ".tmp"
            let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard fd >= 0 else { throw POSIXFailure(operation: "create", path: temporary) }
            let bytes = Array(hook.stored.utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let synced = fsync(fd) == 0
            close(fd)
            guard written == bytes.count, synced else { throw POSIXFailure(operation: "write", path: temporary) }
            guard rename(temporary, final) == 0 else { throw POSIXFailure(operation: "rename", path: temporary) }
        }
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            fsync(directoryFD)
            close(directoryFD)
        }
    }

    func remove(_ jobID: String) {
        unlink(path(jobID))
    }

    /// Every readable entry (a torn or foreign file is removed: it was never a complete entry).
    func entries() -> [DueHook] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var hooks: [DueHook] = []
        for name in names.sorted() where name.hasSuffix(".json") {
            let file = directory + "/" + name
            guard let data = FileManager.default.contents(atPath: file), let hook = DueHook(stored: String(decoding: data, as: UTF8.self)) else {
                unlink(file)
                continue
            }
            hooks.append(hook)
        }
        return hooks
    }
}
