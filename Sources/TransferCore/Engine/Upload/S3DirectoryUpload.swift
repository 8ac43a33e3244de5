import Foundation

/// An S3 upload of a whole directory: one object per regular file under the
/// key prefix (`prefix/relative/path`), several files at a time. Each file is
/// its own `S3MultipartUpload`, resumable on its own; which files are done
/// and each unfinished file's parts live in one state record.
package final class S3DirectoryUpload: Sendable {
    let client: S3Client
    let directory: String
    let bucket: String
    let prefix: String
    let partSize: Int64
    let partsInFlight: Int
    let filesInFlight: Int
    /// Which files are done, and each unfinished file's parts.
    let state: BatchUploadState
    /// The whole folder's speed: each of the files in flight gets an equal share of the cap.
    let rate: SendRate
    /// Which files go (globs over the path below the folder).
    let filter: S3PrefixPlan.Filter
    /// Send no file the prefix already holds (one listing of the prefix, then
    /// `S3MultipartUpload.holds` per file of the same size).
    let skipUnchanged: Bool
    /// `--dry-run` and `--delete`.
    let sync: SyncOptions

    package init(client: S3Client, directory: String, bucket: String, prefix: String, partSize: Int64 = 8 << 20,
                partsInFlight: Int = 10, filesInFlight: Int = 4, rate: SendRate = SendRate(),
                filter: S3PrefixPlan.Filter = S3PrefixPlan.Filter(), skipUnchanged: Bool = false, sync: SyncOptions = SyncOptions(),
                store: UploadStateStore) {
        self.sync = sync
        self.rate = rate
        self.filter = filter
        self.skipUnchanged = skipUnchanged
        self.client = client
        self.directory = directory
        self.bucket = bucket
        self.prefix = prefix.isEmpty || prefix.hasSuffix("/") ? prefix : prefix + "/"
        self.partSize = partSize
        self.partsInFlight = partsInFlight
        self.filesInFlight = max(1, filesInFlight)
        state = BatchUploadState(store: store)
    }

    package struct Result: Sendable {
        package var files: Int
        package var bytes: Int64
        package var skippedAsDone: Int
        /// Files the prefix already held, not sent (`skipUnchanged`).
        package var unchanged: Int
        /// Files the globs took that are transferd's own (`OwnFiles`), never sent: path below the folder and why.
        package var leftOut: [LeftOut]
        /// Objects deleted from the prefix (`--delete`).
        package var deleted = 0
        /// What would be done (`--dry-run`): nothing was.
        package var preview: SyncPreview?

        /// What an upload that left files out says of it (nil when none was): a partial copy is
        /// no success, as a prefix download that refused keys is not (`S3PrefixResult.partialCopy`).
        /// The count, the first paths with why, and how to upload the rest without the failure.
        package var partialCopy: String? {
            guard !leftOut.isEmpty else { return nil }
            let shown = leftOut.prefix(3).map { "\($0.path): \($0.reason)" }
            let more = leftOut.count > shown.count ? "; and \(leftOut.count - shown.count) more" : ""
            return "the copy is partial: \(leftOut.count) file\(leftOut.count == 1 ? " is" : "s are") transferd's own "
                + "(queue state, job files, API token, partial downloads) and never uploaded (\(shown.joined(separator: "; "))\(more)); "
                + "\(files) file\(files == 1 ? "" : "s") uploaded. Leave them out with an exclude pattern "
                + "(--exclude, or the job's \"exclude\"), or upload a folder that does not hold them"
        }
    }

    package struct LeftOut: Sendable, Equatable {
        package var path: String
        package var reason: String
    }

    /// The regular files under the directory, as sorted relative paths, and the queue folders
    /// among its folders (`OwnFiles.isQueueFolder`; "" when it is one itself).
    /// Symbolic links are skipped, and so is whatever lies behind a linked folder:
    /// a folder upload sends what is in the folder, not what links point at.
    func files() throws -> (files: [String], queueFolders: Set<String>) {
        guard let enumerator = FileManager.default.enumerator(atPath: directory) else {
            throw UploadError.local(POSIXFailure(operation: "list", path: directory))
        }
        var found: [String] = []
        var queueFolders: Set<String> = OwnFiles.isQueueFolder(directory) ? [""] : []
        while let relative = enumerator.nextObject() as? String {
            var info = stat()
            let path = (directory as NSString).appendingPathComponent(relative)
            guard lstat(path, &info) == 0 else { continue }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                if OwnFiles.isQueueFolder(path) { queueFolders.insert(relative) }
            } else if (info.st_mode & S_IFMT) == S_IFREG,
                      (try? ConfinedPath.check(path, root: directory, create: false, finalMustNotBeLink: true)) != nil {
                found.append(relative)
            }
        }
        return (found.sorted(), queueFolders)
    }

    package func run() async throws -> Result {
        let (found, queueFolders) = try files()
        var all: [String] = []
        var leftOut: [LeftOut] = []
        let siblings = Set(found)
        for relative in found where filter.takes(relative) {
            if let reason = OwnFiles.reason(for: relative, queueFolders: queueFolders, siblings: siblings) {
                leftOut.append(LeftOut(path: relative, reason: reason))
            } else {
                all.append(relative)
            }
        }
        var pending = all.filter { !state.isDone($0) }
        let doneEarlier = all.count - pending.count
        var unchanged: [String] = []
        // One listing of the prefix (a page per 1,000 keys) when it is compared (skip-unchanged) or
        // pruned (delete), kept as key → object. Keys by their bytes: String equality would merge
        // keys that differ only in Unicode normalisation.
        var listed: [Data: S3ListedObject] = [:]
        var held: [String] = []
        if (skipUnchanged && !pending.isEmpty) || sync.delete {
            let wanted = Set(pending.map { Data((prefix + $0).utf8) })
            try await client.forEachListedPage(bucket: bucket, prefix: prefix) { objects in
                for object in objects where PathNormalization.hasBytePrefix(object.key, prefix) {
                    if wanted.contains(Data(object.key.utf8)) { listed[Data(object.key.utf8)] = object }
                    let relative = String(decoding: object.key.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
                    if sync.delete && !relative.isEmpty { held.append(relative) }
                }
            }
        }
        if skipUnchanged && !pending.isEmpty {
            var sending: [String] = []
            for relative in pending {
                guard let object = listed[Data((prefix + relative).utf8)],
                      try await S3MultipartUpload.holds((directory as NSString).appendingPathComponent(relative), size: object.size,
                                                        etag: object.etag, requestedPartSize: partSize, client: client,
                                                        bucket: bucket, key: prefix + relative) else {
                    sending.append(relative)
                    continue
                }
                unchanged.append(relative)
            }
            pending = sending
        }
        // Every name below the folder, read strictly (any kind, transferd's own among them): no object
        // of a name the folder holds is deleted, nor any when a folder could not be read.
        let deletions = sync.delete
            ? SyncPlan.extraneous(source: try StrictWalk.names(directory), destination: held, filter: filter) : []
        let refusal = SyncPlan.refusal(deleting: deletions.count, of: held.filter(filter.takes).count, options: sync)
        if let refusal, !sync.dryRun { throw SyncRefusal(reason: refusal) }
        if sync.dryRun {
            var preview = SyncPreview()
            preview.refusal = refusal
            preview.copy = pending.map { relative in
                var info = stat()
                return (relative, stat((directory as NSString).appendingPathComponent(relative), &info) == 0 ? Int64(info.st_size) : 0)
            }
            preview.unchanged = (unchanged + all.filter { state.isDone($0) }).sorted()
            preview.delete = deletions
            return Result(files: all.count, bytes: 0, skippedAsDone: doneEarlier, unchanged: unchanged.count, leftOut: leftOut,
                          preview: preview)
        }
        var bytes: Int64 = 0
        do {
            try await withThrowingTaskGroup(of: Int64.self) { group in
                var next = pending.makeIterator()
                func launch() {
                    guard let relative = next.next() else { return }
                    group.addTask { try await self.upload(relative) }
                }
                for _ in 0..<filesInFlight { launch() }
                while let size = try await group.next() {
                    bytes += size
                    launch()
                }
            }
        } catch {
            // What finished is kept for the next run, whatever stopped this one.
            try? state.flush()
            throw error
        }
        state.forget()
        // Only once every file went: a failed upload deletes nothing, nor a partial one (files left out).
        let deleting = leftOut.isEmpty ? deletions : []
        if !deleting.isEmpty { try await client.deleteObjects(bucket: bucket, keys: deleting.map { prefix + $0 }) }
        return Result(files: all.count, bytes: bytes, skippedAsDone: doneEarlier, unchanged: unchanged.count,
                      leftOut: leftOut, deleted: deleting.count)
    }

    private func upload(_ relative: String) async throws -> Int64 {
        var options = S3UploadOptions(source: (directory as NSString).appendingPathComponent(relative), bucket: bucket,
                                      key: prefix + relative, partSize: partSize, partsInFlight: partsInFlight)
        options.rate = SendRate(bytesPerSecond: rate.bytesPerSecond.map { max(1, $0 / Int64(filesInFlight)) }, shared: rate.shared)
        let upload = S3MultipartUpload(client: client, options: options, state: state.view(relative))
        let result = try await upload.run()
        try state.markDone(relative)
        return result.size
    }
}
