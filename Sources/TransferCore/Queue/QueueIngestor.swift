import Foundation

/// Moves job files from the queue folder into the store.
///
/// Only complete files are read: dotfiles and `*.tmp` are skipped (write,
/// then rename), as is anything but `*.json` and `*.urls` (the queue's own
/// README, say). A valid file's jobs are recorded in one transaction and then
/// the file moves to `accepted/`; an invalid one moves to `rejected/` with
/// `NAME.error` beside it. Nothing dropped is deleted.
public struct QueueIngestor {
    public let layout: QueueLayout
    public let store: QueueStore

    public init(layout: QueueLayout, store: QueueStore) {
        self.layout = layout
        self.store = store
    }

    public struct Report: Sendable {
        public var files = 0
        public var jobsAdded = 0
        public var rejected: [(file: String, errors: String)] = []
    }

    /// Ingests every ready file, in name order.
    public func ingestAll() throws -> Report {
        var report = Report()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: layout.directory)) ?? []
        for name in names.sorted() where JobFileParser.isJobFile(name) && !name.hasSuffix(".tmp") {
            let path = layout.path(name)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            report.files += 1
            switch try ingest(name: name) {
            case .success(let added): report.jobsAdded += added
            case .failure(let rejection): report.rejected.append((name, rejection.description))
            }
        }
        return report
    }

    func ingest(name: String) throws -> Result<Int, JobFileRejection> {
        let path = layout.path(name)
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        let parser = JobFileParser(root: layout.root)
        let result: Result<[JobSpec], JobFileRejection>
        var hash = ""
        if size > JobFileParser.maxFileSize {
            // Too big to read: the parser's rule, without loading it.
            result = .failure(JobFileRejection(errors: [JobFileError(
                file: name, message: "the file is \(size) bytes; the limit is \(JobFileParser.maxFileSize) bytes",
                fix: "split it into several job files")]))
        } else {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw POSIXFailure(operation: "read", path: path)
            }
            hash = SHA256Hasher.hex(of: data)
            result = parser.parse(name: name, data: data)
        }
        switch result {
        case .success(let jobs):
            do {
                let outcome = try store.ingest(fileName: name, contentHash: hash, jobs: jobs)
                try move(name, to: layout.accepted)
                return .success(outcome.added)
            } catch let rejection as JobFileRejection {
                try reject(name, rejection)
                return .failure(rejection)
            }
        case .failure(let rejection):
            try reject(name, rejection)
            return .failure(rejection)
        }
    }

    private func reject(_ name: String, _ rejection: JobFileRejection) throws {
        let target = try move(name, to: layout.rejected)
        try Data((rejection.description + "\n").utf8).write(to: URL(fileURLWithPath: target + ".error"), options: .atomic)
    }

    /// Renames into `folder`, adding a numeric suffix rather than replacing an earlier file.
    @discardableResult
    private func move(_ name: String, to folder: String) throws -> String {
        var target = (folder as NSString).appendingPathComponent(name)
        var counter = 1
        while FileManager.default.fileExists(atPath: target) {
            counter += 1
            target = (folder as NSString).appendingPathComponent("\(name).\(counter)")
        }
        guard rename(layout.path(name), target) == 0 else { throw POSIXFailure(operation: "move", path: layout.path(name)) }
        return target
    }
}
