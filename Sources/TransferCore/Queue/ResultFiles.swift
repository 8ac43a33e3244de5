import Foundation

/// Outcomes visible without the CLI: for each job file, `done/NAME.json`
/// lists its finished jobs and `failed/NAME.json` its failed and cancelled
/// ones (id, URL, destination, bytes, SHA-256, duration, attempts, last
/// error). They are rewritten from the store — the truth — for the job files
/// whose jobs changed, every couple of seconds and when a run ends, so they
/// always agree with `transferd status`. One file per job file, not per job,
/// keeps a 10,000-URL list from costing 10,000 file creations.
public struct ResultFiles {
    public let layout: QueueLayout
    public let store: QueueStore

    public init(layout: QueueLayout, store: QueueStore) {
        self.layout = layout
        self.store = store
    }

    struct Entry: Encodable {
        var id: String
        var state: String
        var url: String
        var destination: String?
        var bytes: Int64?
        var sha256: String?
        var duration_seconds: Double?
        var attempts: Int
        var last_error: String?
        var finished_at: String?
    }

    /// Rewrites the result files of these job files.
    public func update(sourceFiles: Set<String>) throws {
        for source in sourceFiles.sorted() {
            let jobs = try store.jobs(fromFile: source)
            let finished = jobs.filter(\.state.isFinal)
            try write(finished.filter { $0.state == .done }, to: layout.done, source: source)
            try write(finished.filter { $0.state != .done }, to: layout.failed, source: source)
        }
    }

    private func write(_ jobs: [JobRecord], to folder: String, source: String) throws {
        let path = (folder as NSString).appendingPathComponent(Self.fileName(for: source))
        guard !jobs.isEmpty else {
            unlink(path)
            return
        }
        let formatter = ISO8601DateFormatter()
        let entries = jobs.map { job in
            Entry(id: job.id, state: job.state.rawValue, url: URL(string: job.spec.url).map(Redaction.url) ?? job.spec.url,
                  destination: job.spec.destination, bytes: job.state == .done ? job.bytesTotal : nil, sha256: job.sha256,
                  duration_seconds: zip(job.startedAt, job.finishedAt).map { (($1.timeIntervalSince($0)) * 1000).rounded() / 1000 },
                  attempts: job.attempts, last_error: job.state == .done ? nil : job.lastError,
                  finished_at: job.finishedAt.map(formatter.string(from:)))
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(entries).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    static func fileName(for source: String) -> String {
        let base = (source as NSString).lastPathComponent
        return (base.hasSuffix(".json") ? String(base.dropLast(5)) : base) + ".json"
    }
}

private func zip<A, B>(_ a: A?, _ b: B?) -> (A, B)? {
    guard let a, let b else { return nil }
    return (a, b)
}
