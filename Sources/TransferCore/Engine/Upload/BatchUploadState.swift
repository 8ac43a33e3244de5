import Foundation

/// The one state record of a batch of resumable S3 transfers (a folder's files, a prefix's
/// objects): which items are done, and each unfinished item's own checkpoint (JSON), kept in
/// one `UploadStateStore` so a later run skips the done items and resumes the others.
// The record is a `Locked` value; every change is saved whole while the lock is not held.
final class BatchUploadState: Sendable {
    struct Record: Codable {
        var done: Set<String> = []
        /// Unfinished items' checkpoints (JSON), by name.
        var files: [String: String] = [:]
    }

    let store: UploadStateStore
    private let record: Locked<Record>

    init(store: UploadStateStore) {
        self.store = store
        let saved = (try? store.load()).flatMap { try? JSONDecoder().decode(Record.self, from: Data($0.utf8)) }
        record = Locked(saved ?? Record())
    }

    func isDone(_ name: String) -> Bool { record.current.done.contains(name) }

    /// Records `name` as done, dropping its checkpoint.
    func markDone(_ name: String) throws { try update { $0.files[name] = nil; $0.done.insert(name) } }

    /// The record has done its work: kept, it would make the next batch skip every item, changed or not.
    func forget() { try? store.remove() }

    /// One item's slice of the record, as the store its single transfer checkpoints into.
    func view(_ name: String) -> UploadStateStore { ItemView(parent: self, name: name) }

    fileprivate func update(_ change: (inout Record) -> Void) throws {
        let json = record.withLock { current -> String in
            change(&current)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return String(decoding: (try? encoder.encode(current)) ?? Data(), as: UTF8.self)
        }
        try store.save(json)
    }

    private struct ItemView: UploadStateStore {
        let parent: BatchUploadState
        let name: String
        func load() throws -> String? { parent.record.current.files[name] }
        func save(_ json: String) throws { try parent.update { $0.files[name] = json } }
        func remove() throws { try parent.update { $0.files[name] = nil } }
    }
}
