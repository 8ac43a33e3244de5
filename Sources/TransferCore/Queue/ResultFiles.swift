import Foundation

/// Outcomes visible without the CLI: for each job file, `done/NAME.json`
/// lists its finished jobs and `failed/NAME.json` its failed and cancelled
/// ones (id, URL, destination, bytes, SHA-256, duration, attempts, last
/// error). They are rewritten from the store — the truth — for the job files
/// whose jobs changed, every couple of seconds and when a run ends, so they
/// always agree with `transferd status`. One file per job file, not per job,
/// keeps a 10,000-URL list from costing 10,000 file creations.
package struct ResultFiles {
    package let layout: QueueLayout
    package let store: QueueStore

    package init(layout: QueueLayout, store: QueueStore) {
        self.layout = layout
        self.store = store
    }

    /// Rewrites the result files of these job files.
    package func update(sourceFiles: Set<String>) throws {
        for source in sourceFiles.sorted() {
            let finished = try store.results(fromFile: source)
            try write(finished.filter { $0.state == .done }, to: layout.done, source: source)
            try write(finished.filter { $0.state != .done }, to: layout.failed, source: source)
        }
    }

    /// A pretty-printed JSON array, keys sorted, one object per job. Entries of jobs the store
    /// no longer holds (`transferd purge` forgot them) stay as the file had them: the store
    /// forgets, the record of what happened does not.
    private func write(_ jobs: [JobResult], to folder: String, source: String) throws {
        try layout.checkOwnFolder(folder)
        let path = (folder as NSString).appendingPathComponent(Self.fileName(for: source))
        let listed = Set(jobs.map(\.id))
        let kept = try Self.entries(at: path).filter { entry in
            guard case .string(let id)? = entry["id"], !listed.contains(id) else { return false }
            return try store.job(id) == nil
        }.map { JSONObject.Value(parsed: .object($0)) }
        guard !jobs.isEmpty || !kept.isEmpty else {
            unlink(path)
            return
        }
        let entries = kept + jobs.map { job -> JSONObject.Value in
            var entry = JSONObject()
            entry.add("attempts", job.attempts)
            if job.state == .done, let bytes = job.bytes { entry.add("bytes", bytes) }
            if let destination = job.destination { entry.add("destination", destination) }
            if let started = job.startedAt, let finished = job.finishedAt {
                entry.add("duration_seconds", .number((finished.timeIntervalSince(started) * 1000).rounded() / 1000))
            }
            if let finished = job.finishedAt { entry.add("finished_at", JSONObject.timestampSeconds(finished)) }
            entry.add("id", job.id)
            if job.state != .done, let error = job.lastError { entry.add("last_error", error) }
            if let sha256 = job.sha256 { entry.add("sha256", sha256) }
            entry.add("state", job.state.rawValue)
            entry.add("url", Redaction.url(string: job.url))
            return .object(entry)
        }
        try Data((JSONObject.serialized(entries, pretty: true) + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// The entries a result file holds now (none when it is missing or unreadable).
    static func entries(at path: String) -> [[String: JSONValue]] {
        guard let data = FileManager.default.contents(atPath: path), case .array(let items)? = try? JSONValue.parse(data) else {
            return []
        }
        return items.compactMap { if case .object(let members) = $0 { return members } else { return nil } }
    }

    static func fileName(for source: String) -> String {
        let base = (source as NSString).lastPathComponent
        return (base.hasSuffix(".json") ? String(base.dropLast(5)) : base) + ".json"
    }
}
