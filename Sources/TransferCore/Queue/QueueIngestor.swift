import Foundation

/// Moves job files from the queue folder into the store.
///
/// Only complete files are read: dotfiles and `*.tmp` are skipped (write,
/// then rename), as is anything but `*.json` and `*.urls` (the queue's own
/// README, say). A valid file's jobs are recorded in one transaction and then
/// the file moves to `accepted/`; an invalid one moves to `rejected/` with
/// `NAME.error` beside it. Nothing dropped is deleted.
package struct QueueIngestor {
    package let layout: QueueLayout
    package let store: QueueStore
    /// Whether job files may carry hook commands (`--allow-job-hooks`).
    package let allowsCommands: Bool

    package init(layout: QueueLayout, store: QueueStore, allowsCommands: Bool = false) {
        self.layout = layout
        self.store = store
        self.allowsCommands = allowsCommands
    }

    package struct Report: Sendable {
        package var files = 0
        package var jobsAdded = 0
        package var rejected: [(file: String, errors: String)] = []
    }

    /// Files recorded in one store transaction (bounded in number and bytes).
    static let batchFiles = 64
    static let batchBytes = 4 << 20

    /// Ingests every ready file, in name order. Valid files are recorded in
    /// batches, one transaction each, and moved to `accepted/` only once their
    /// batch is committed; a crash in between leaves them in place, and the
    /// next ingest finds their content already recorded and moves them on.
    package func ingestAll() throws -> Report {
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
                case .recorded(let outcome):
                    try move(file.fileName, to: layout.accepted)
                    report.jobsAdded += outcome.added
                case .idTaken(let conflict):
                    let rejection = conflict.rejection(file: file.fileName)
                    try reject(file.fileName, rejection)
                    report.rejected.append((file.fileName, rejection.description))
                case .invalid(let rejection):
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
            if let kind = identity.notRegular {
                // Never opened: a FIFO would block the run, a link could lead to a file of someone else's.
                let rejection = JobFileRejection(errors: [JobFileError(
                    file: name, message: "is \(kind), not a regular file; it was not read",
                    fix: "write the job file itself into the queue folder (write it under another name, then rename it)")])
                try reject(name, rejection)
                report.rejected.append((name, rejection.description))
                continue
            }
            switch read(name: name, size: identity.size) {
            case .success(let content):
                // A large list is recorded in a transaction of its own.
                if content.isLarge { try recordBatch() }
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

    /// What the queue folder holds that no run has read yet: the job files waiting, and the
    /// files a run will never read, each with why (what `status` shows). Its own folders,
    /// this README, `examples/` and names under a dot or ending `.tmp` (written, then renamed)
    /// are neither.
    package static func waiting(in layout: QueueLayout) -> (jobFiles: [String], neverRead: [(name: String, reason: String)]) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: layout.directory)) ?? []).sorted()
        let own = Set(layout.ownFolders.map { ($0 as NSString).lastPathComponent } + ["README.md", "examples"])
        var jobFiles: [String] = []
        var neverRead: [(String, String)] = []
        for name in names where !own.contains(name) && !name.hasPrefix(".") && !name.hasSuffix(".tmp") {
            var info = stat()
            guard lstat(layout.path(name), &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                neverRead.append((name + "/", "a folder: only files directly in the queue folder are read"))
            case S_IFREG where JobFileParser.isJobFile(name):
                jobFiles.append(name)
            case S_IFREG:
                neverRead.append((name, "not a job file: only *.json and *.urls files are read"))
            default:
                neverRead.append((name, JobFileParser.isJobFile(name) ? "not a regular file: a run rejects it unread"
                                     : "not a job file: only *.json and *.urls files are read"))
            }
        }
        return (jobFiles, neverRead)
    }

    /// Reads and validates one file of `size` bytes. A file that cannot be read
    /// (no permission, swapped for a link or a FIFO since it was listed) is
    /// rejected with the reason, like an invalid one.
    func read(name: String, size: Int64) -> Result<JobFileContent, JobFileRejection> {
        let path = layout.path(name)
        let parser = JobFileParser(root: layout.root, queueDirectory: layout.directory, allowsCommands: allowsCommands)
        if size > JobFileParser.largeListSize && name.hasSuffix(".urls") && size <= JobFileParser.maxListSize {
            return Result { () throws(JobFileRejection) in JobFileContent(try parser.openLargeList(path, name: name)) }
        }
        if size > JobFileParser.maxFileSize {
            // Too big to read: the parser's rule, without loading it.
            return .failure(JobFileRejection(errors: [JobFileError(
                file: name, message: "the file is \(size) bytes; the limit is \(JobFileParser.maxFileSize) bytes",
                fix: name.hasSuffix(".urls") ? "split it into lists of at most \(JobFileParser.maxListSize) bytes"
                    : "split it into several job files")]))
        }
        let data: Data
        do {
            data = try Self.readRegularFile(path, limit: JobFileParser.maxFileSize)
        } catch {
            return .failure(JobFileRejection(errors: [JobFileError(
                file: name, message: "could not be read: \(error)", fix: "make it a readable regular file")]))
        }
        return parser.parse(name: name, data: data).map {
            JobFileContent(fileName: name, contentHash: SHA256Hasher.hex(of: data), jobs: $0)
        }
    }

    /// The content of a regular file, opened without following a link and
    /// without blocking on a FIFO; more than `limit` bytes is an error.
    package static func readRegularFile(_ path: String, limit: Int) throws -> Data {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure(operation: "open", path: path) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw POSIXFailure(operation: "stat", path: path) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw POSIXFailure(operation: "read (not a regular file)", path: path, code: EINVAL) }
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw POSIXFailure(operation: "read", path: path) }
            if n == 0 { return data }
            data.append(contentsOf: chunk[0..<n])
            guard data.count <= limit else { throw POSIXFailure(operation: "read (larger than \(limit) bytes)", path: path, code: EFBIG) }
        }
    }

    private func reject(_ name: String, _ rejection: JobFileRejection) throws {
        let target = try move(name, to: layout.rejected)
        // Owner only: the reasons may quote the job file, which may not be world-readable.
        let errorFile = target + ".error"
        let fd = open(errorFile, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXFailure(operation: "create", path: errorFile) }
        defer { close(fd) }
        fchmod(fd, 0o600)
        let text = Array((rejection.description + "\n").utf8)
        guard text.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == text.count else {
            throw POSIXFailure(operation: "write", path: errorFile)
        }
    }

    /// Renames into `folder`, adding a numeric suffix rather than replacing an earlier file.
    @discardableResult
    private func move(_ name: String, to folder: String) throws -> String {
        try layout.checkOwnFolder(folder)
        var target = (folder as NSString).appendingPathComponent(name)
        var counter = 1
        while FileManager.default.fileExists(atPath: target) {
            counter += 1
            target = (folder as NSString).appendingPathComponent("\(name).\(counter)")
        }
        guard rename(layout.path(name), target) == 0 else {
            // Workers of a shared store may share the folder: another one moved it first.
            if errno == ENOENT { return target }
            throw POSIXFailure(operation: "move", path: layout.path(name))
        }
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
    /// What the entry is when it is neither a regular file nor a folder ("a symbolic link", "a named pipe (FIFO)").
    let notRegular: String?

    /// The entry itself, not what a link points to.
    init?(path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        switch info.st_mode & S_IFMT {
        case S_IFREG, S_IFDIR: notRegular = nil
        case S_IFLNK: notRegular = "a symbolic link"
        case S_IFIFO: notRegular = "a named pipe (FIFO)"
        case S_IFSOCK: notRegular = "a socket"
        default: notRegular = "a device"
        }
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

extension IDConflict {
    /// How a refused file's `.error` and the CLI say it.
    package func rejection(file: String) -> JobFileRejection {
        JobFileRejection(errors: [JobFileError(
            file: file, id: jobID, field: "id",
            message: "a different job with this id came from \(storedFile ?? "another file")",
            fix: "give the new job its own id")])
    }
}

extension QueueStore {
    /// Records one file's jobs, unless this content was seen before; a refused file throws
    /// its worded rejection.
    package func ingest(fileName: String, contentHash: String, jobs: [JobSpec]) throws -> IngestOutcome {
        switch try ingest([JobFileContent(fileName: fileName, contentHash: contentHash, jobs: jobs)])[0] {
        case .recorded(let outcome): return outcome
        case .idTaken(let conflict): throw conflict.rejection(file: fileName)
        case .invalid(let rejection): throw rejection
        }
    }
}
