import Foundation

extension QueueLayout {
    /// Opens the queue's own store (`.transferd/state.db`), refusing one that has lost
    /// its jobs rather than starting an empty queue over them.
    ///
    /// A store that is missing or empty (0 bytes) is new — a queue never run, or a run
    /// killed while it first made the file — unless `accepted/`, `done/` or `failed/`
    /// hold files: then jobs were recorded in it and are gone, and it is refused. So is
    /// a file that is not a SQLite database or that SQLite finds damaged. A refused
    /// file is never written, moved or deleted; the error names it and says how to
    /// recover.
    public func openStateStore() throws -> SQLiteQueueStore {
        var info = stat()
        let exists = lstat(database, &info) == 0
        if !exists || info.st_size == 0, let evidence = recordedJobsEvidence() {
            throw QueueError.stateLost(lostStateAdvice(exists ? "is empty (0 bytes)" : "is missing", evidence: evidence, exists: exists))
        }
        do {
            return try SQLiteQueueStore(path: database)
        } catch StoreError.damaged(_, let reason) {
            throw QueueError.stateLost(lostStateAdvice(reason, evidence: nil, exists: true))
        }
    }

    /// The queue's own store for a look only (`status`): nothing is made. A queue folder that
    /// no run has worked (no store file, or an empty one, and no results) reads as an empty
    /// store in memory; a missing folder is `QueueError.noQueue`; a store that lost its jobs
    /// or is damaged is refused as `openStateStore` refuses it.
    package func openStateStoreForReading() throws -> SQLiteQueueStore {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw QueueError.noQueue(directory)
        }
        var info = stat()
        if lstat(database, &info) != 0 || info.st_size == 0, recordedJobsEvidence() == nil {
            return try SQLiteQueueStore.empty()
        }
        return try openStateStore()
    }

    /// What shows that jobs were recorded: the first of `accepted/`, `done/` and
    /// `failed/` that holds a file, and how many it holds ("accepted/ holds 3 files").
    func recordedJobsEvidence() -> String? {
        for folder in [accepted, done, failed] {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { !$0.hasPrefix(".") }
            if !names.isEmpty {
                let name = (folder as NSString).lastPathComponent
                return "\(name)/ holds \(names.count) file\(names.count == 1 ? "" : "s")"
            }
        }
        return nil
    }

    private func lostStateAdvice(_ what: String, evidence: String?, exists: Bool) -> String {
        let queue = directory
        var text = "the queue's state store \(database) \(what)"
        if let evidence { text += ", but \(evidence): the jobs recorded in it would be forgotten" }
        text += ". transferd will not start on it and leaves it as it is. Restore it from a backup, or start the queue"
            + " again from its job files (finished jobs run again):\n"
        if exists {
            text += "  mv \(database) \(database).broken   (and its -wal and -shm files, if there)\n"
        }
        text += "  mkdir \(queue).old-results && mv \(queue)/done \(queue)/failed \(queue).old-results/\n"
            + "  mv \(queue)/accepted/* \(queue)/\n"
            + "  transferd run --queue \(queue)"
        return text
    }
}
