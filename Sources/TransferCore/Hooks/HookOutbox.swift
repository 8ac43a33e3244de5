import Foundation

/// The hooks owed and not yet run, one file each in `.transferd/hooks/`
/// (mode 0600: an entry holds the job's error and URL, redacted, and the
/// command). Written durably before the job's end is recorded in the store.
struct HookOutbox: Sendable {
    let directory: String

    init(directory: String) {
        self.directory = directory
    }

    /// One file per job end: the job id's hash (an id may hold any of `._:-`), the state and a
    /// random part, so a job that ends again (retried) never shares a file with its earlier end.
    private static func entryName(_ hook: DueHook) -> String {
        SHA256Hasher.hex(of: Data(hook.jobID.utf8)).prefix(32) + "-\(hook.state.rawValue)-"
            + String(UInt64.random(in: 0...UInt64.max), radix: 36) + ".json"
    }

    /// Writes the entries and syncs them (one directory sync for all).
    /// - Returns: the hooks with the names of their entries.
    func record(_ hooks: [DueHook]) throws -> [DueHook] {
        guard !hooks.isEmpty else { return [] }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        var recorded: [DueHook] = []
        for var hook in hooks {
            let name = Self.entryName(hook)
            hook.entry = name
            recorded.append(hook)
            let final = directory + "/" + name
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
        return recorded
    }

    /// Removes exactly this hook's entry.
    func remove(_ hook: DueHook) {
        guard let entry = hook.entry, !entry.contains("/") else { return }
        unlink(directory + "/" + entry)
    }

    /// The jobs whose hooks are owed, read without touching anything (for `purge`, which must
    /// not forget a job a hook is still owed for).
    func owedJobIDs() -> Set<String> {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return Set(names.filter { $0.hasSuffix(".json") }.compactMap { name in
            FileManager.default.contents(atPath: directory + "/" + name)
                .flatMap { DueHook(stored: String(decoding: $0, as: UTF8.self))?.jobID }
        })
    }

    /// Every readable entry (a torn or foreign file is removed: it was never a complete entry).
    func entries() -> [DueHook] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var hooks: [DueHook] = []
        for name in names.sorted() where name.hasSuffix(".json") {
            let file = directory + "/" + name
            guard let data = FileManager.default.contents(atPath: file), var hook = DueHook(stored: String(decoding: data, as: UTF8.self)) else {
                unlink(file)
                continue
            }
            hook.entry = name
            hooks.append(hook)
        }
        return hooks
    }
}
