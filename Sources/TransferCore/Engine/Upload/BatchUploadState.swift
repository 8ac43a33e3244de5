import Foundation

/// The one state record of a batch of resumable S3 transfers (a folder's files, a prefix's
/// objects): which items are done, and each unfinished item's own checkpoint (JSON), kept in
/// one `UploadStateStore` so a later run skips the done items and resumes the others.
///
/// A checkpoint change (an upload id, a part) is saved at once. An item marked done is saved
/// with the first change that comes a second or more after the last save, or by `flush()`
/// (when the batch stops early): a batch of many small items does not write the whole record
/// once per item (1,000 objects copied made 1,000 saves of a record growing to 1,000 names).
/// What a kill loses is done marks not yet saved, whose items are transferred again, to the
/// same result (their versions are checked again).
// The record is a `Locked` value; saves are ordered by `saving` and a sequence number, so a
// slower save of an older record never lands after a newer one.
final class BatchUploadState: Sendable {
    struct Record: Codable {
        var done: Set<String> = []
        /// Unfinished items' checkpoints (JSON), by name.
        var files: [String: String] = [:]
        /// The version (an ETag) each done item was made from, where it has one: an item whose
        /// source is another version now is not done.
        var versions: [String: String]?
    }

    let store: UploadStateStore
    private struct State {
        var value: Record
        /// Changes made, and the change the store holds.
        var sequence = 0
        var written = 0
        var lastSave = -Double.infinity
    }
    private let record: Locked<State>
    private let saving = PlainLock()
    /// The most a done mark waits to be saved, in seconds.
    static let doneSaveInterval: TimeInterval = 1

    init(store: UploadStateStore) {
        self.store = store
        let saved = (try? store.load()).flatMap { try? JSONDecoder().decode(Record.self, from: Data($0.utf8)) }
        record = Locked(State(value: saved ?? Record()))
    }

    /// Whether `name` is done, from `version` when one is given.
    func isDone(_ name: String, version: String? = nil) -> Bool {
        let current = record.current.value
        guard current.done.contains(name) else { return false }
        guard let version else { return true }
        return current.versions?[name] == version
    }

    /// Records `name` as done (from `version`), dropping its checkpoint.
    func markDone(_ name: String, version: String? = nil) throws {
        try update(urgent: false) {
            $0.files[name] = nil
            $0.done.insert(name)
            if let version { $0.versions = ($0.versions ?? [:]).merging([name: version]) { $1 } }
        }
    }

    /// The unfinished items' checkpoints (JSON), by name.
    var unfinished: [String: String] { record.current.value.files }

    /// Saves the done marks not yet saved (before a batch that stopped early returns).
    func flush() throws {
        let snapshot = record.withLock { state -> (json: String, sequence: Int)? in
            guard state.sequence > state.written else { return nil }
            return (Self.encode(state.value), state.sequence)
        }
        if let snapshot { try write(snapshot) }
    }

    /// The record has done its work: kept, it would make the next batch skip every item, changed or not.
    func forget() { try? store.remove() }

    /// One item's slice of the record, as the store its single transfer checkpoints into.
    func view(_ name: String) -> UploadStateStore { ItemView(parent: self, name: name) }

    fileprivate func update(urgent: Bool = true, _ change: (inout Record) -> Void) throws {
        let now = ProcessInfo.processInfo.systemUptime
        let snapshot = record.withLock { state -> (json: String, sequence: Int)? in
            change(&state.value)
            state.sequence += 1
            guard urgent || now - state.lastSave >= Self.doneSaveInterval else { return nil }
            state.lastSave = now
            return (Self.encode(state.value), state.sequence)
        }
        if let snapshot { try write(snapshot) }
    }

    /// Saves `snapshot` unless a newer record was saved already.
    private func write(_ snapshot: (json: String, sequence: Int)) throws {
        saving.lock()
        defer { saving.unlock() }
        guard snapshot.sequence > record.current.written else { return }
        try store.save(snapshot.json)
        record.withLock { $0.written = max($0.written, snapshot.sequence) }
    }

    private static func encode(_ value: Record) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: (try? encoder.encode(value)) ?? Data(), as: UTF8.self)
    }

    private struct ItemView: UploadStateStore {
        let parent: BatchUploadState
        let name: String
        func load() throws -> String? { parent.record.current.value.files[name] }
        func save(_ json: String) throws { try parent.update { $0.files[name] = json } }
        func remove() throws { try parent.update { $0.files[name] = nil } }
    }
}
