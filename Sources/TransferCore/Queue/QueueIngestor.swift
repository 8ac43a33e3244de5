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

    /// Files recorded in one store transaction (bounded in number and bytes).
    static let batchFiles = 64
    static let batchBytes = 4 << 20

    /// Ingests every ready file, in name order. Valid files are recorded in
    /// batches, one transaction each, and moved to `accepted/` only once their
    /// batch is committed; a crash in between leaves them in place, and the
    /// next ingest finds their content already recorded and moves them on.
    public func ingestAll() throws -> Report {
        var report = Report()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: layout.directory)) ?? []
        var batch: [(content: JobFileContent, identity: FileIdentity)] = []
        var batchBytes = 0
        func recordBatch() throws {
            guard !batch.isEmpty else { return }
            for ((file, identity), result) in zip(batch, try store.ingest(batch.map(\.content))) {
                // Replaced since it was read (write, then rename over it): the newcomer
                // stays for the next ingest; what was read is recorded.
                guard FileIdentity(path: layout.path(file.fileName)) == identity else { continue }
                switch result {
                case .success(let outcome):
                    try move(file.fileName, to: layout.accepted)
                    report.jobsAdded += outcome.added
                case .failure(let rejection):
                    try reject(file.fileName, rejection)
                    report.rejected.append((file.fileName, rejection.description))
                }
            }
            batch = []
            batchBytes = 0
        }
        for name in names.sorted() where JobFileParser.isJobFile(name) && !name.hasSuffix(".tmp") {
            guard let identity = FileIdentity(path: layout.path(name)), !identity.isDirectory else { continue }
            report.files += 1
            switch try read(name: name, size: identity.size) {
            case .success(let content):
                batch.append((content, identity))
                batchBytes += Int(identity.size)
                if batch.count >= Self.batchFiles || batchBytes >= Self.batchBytes { try recordBatch() }
            case .failure(let rejection):
                try reject(name, rejection)
                report.rejected.append((name, rejection.description))
            }
        }
        try recordBatch()
        return report
    }

    /// Reads and validates one file of `size` bytes.
    func read(name: String, size: Int64) throws -> Result<JobFileContent, JobFileRejection> {
        let path = layout.path(name)
        if size > JobFileParser.maxFileSize {
            // Too big to read: the parser's rule, without loading it.
            return .failure(JobFileRejection(errors: [JobFileError(
                file: name, message: "the file is \(size) bytes; the limit is \(JobFileParser.maxFileSize) bytes",
                fix: "split it into several job files")]))
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw POSIXFailure(operation: "read", path: path)
        }
        return JobFileParser(root: layout.root).parse(name: name, data: data).map {
            JobFileContent(fileName: name, contentHash: SHA256Hasher.hex(of: data), jobs: $0)
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

/// Which file a name pointed to, to notice one renamed over it.
struct FileIdentity: Equatable {
    let device: UInt64
    let inode: UInt64
    let size: Int64
    let modified: Int64
    let isDirectory: Bool

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        #if os(Linux)
        modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        #else
        modified = Int64(info.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(info.st_mtimespec.tv_nsec)
        #endif
        isDirectory = (info.st_mode & S_IFMT) == S_IFDIR
    }
}
