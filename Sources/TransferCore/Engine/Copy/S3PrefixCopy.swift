import Foundation

/// A server-side copy of every object under one prefix to another prefix on the same
/// endpoint (`destination + key below the source prefix`), several objects at a time,
/// each an `S3ObjectCopy` resumable on its own; which objects are done and each
/// unfinished object's parts live in one state record.
package final class S3PrefixCopy: Sendable {
    let client: S3Client
    /// The source's endpoint and credentials when they are not the destination's (nil: the same).
    let from: S3Client?
    var sourceClient: S3Client { from ?? client }
    let source: S3Location
    let bucket: String
    let prefix: String
    let partSize: Int64
    let partsInFlight: Int
    let objectsInFlight: Int
    let filter: S3PrefixPlan.Filter
    /// Copy no object the destination already holds (one listing of the destination prefix).
    let skipUnchanged: Bool
    let state: BatchUploadState
    let onEvent: @Sendable (UploadEvent) -> Void
    /// `--dry-run` and `--delete`.
    let sync: SyncOptions

    /// `source.key` and `prefix` name prefixes: "" for a whole bucket, else ending in `/` (added when missing).
    package init(client: S3Client, from: S3Client? = nil, source: S3Location, bucket: String, prefix: String, partSize: Int64 = 64 << 20,
                partsInFlight: Int = 10, objectsInFlight: Int = 8, filter: S3PrefixPlan.Filter = S3PrefixPlan.Filter(),
                skipUnchanged: Bool = false, sync: SyncOptions = SyncOptions(), store: UploadStateStore,
                onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.sync = sync
        self.client = client
        self.from = from
        self.source = S3Location(bucket: source.bucket, key: Self.asPrefix(source.key))
        self.bucket = bucket
        self.prefix = Self.asPrefix(prefix)
        self.partSize = partSize
        self.partsInFlight = partsInFlight
        self.objectsInFlight = max(1, objectsInFlight)
        self.filter = filter
        self.skipUnchanged = skipUnchanged
        self.state = BatchUploadState(store: store)
        self.onEvent = onEvent
    }

    static func asPrefix(_ key: String) -> String { key.isEmpty || key.hasSuffix("/") ? key : key + "/" }

    /// Why a copy from `source` (a prefix) to `bucket`/`prefix` cannot be made, or nil:
    /// prefixes of one bucket that overlap would list the copies as they are made.
    package static func overlapProblem(source: S3Location, bucket: String, prefix: String) -> String? {
        let from = asPrefix(source.key)
        let to = asPrefix(prefix)
        // By bytes: a `/` followed by a combining mark is one Character, and String.hasPrefix would miss it.
        guard source.bucket == bucket, PathNormalization.hasBytePrefix(to, from) || PathNormalization.hasBytePrefix(from, to) else {
            return nil
        }
        return "s3://\(bucket)/\(to) and s3://\(source.bucket)/\(from) overlap: a prefix copy never writes into what it reads"
    }

    package struct Result: Sendable {
        package var objects: Int
        package var bytes: Int64
        package var skippedAsDone: Int
        /// Objects the destination already held, not copied (`skipUnchanged`).
        package var unchanged: Int
        /// Objects whose copy could be checked by size only (the server's ETags say nothing more).
        package var checkedBySizeOnly: Int
        /// Objects deleted from the destination (`--delete`).
        package var deleted = 0
        /// What would be done (`--dry-run`): nothing was.
        package var preview: SyncPreview?
    }

    package func run() async throws -> Result {
        if from == nil, let problem = Self.overlapProblem(source: source, bucket: bucket, prefix: prefix) {
            throw S3Error.verification(problem)
        }
        // One listing of the source: key below the prefix → object.
        var objects: [(relative: String, object: S3ListedObject)] = []
        try await sourceClient.forEachListedPage(bucket: source.bucket, prefix: source.key) { page in
            for object in page where PathNormalization.hasBytePrefix(object.key, source.key) {
                guard object.size >= 0, object.size <= S3CopyPlan.largestObject else {
                    throw S3Error.verification("ListObjectsV2 lists s3://\(source.bucket)/\(object.key) with \(object.size) bytes, "
                                               + "a size no S3 object has; check that the endpoint is an S3 server")
                }
                let relative = String(decoding: object.key.utf8.dropFirst(source.key.utf8.count), as: UTF8.self)
                if !relative.isEmpty, filter.takes(relative) { objects.append((relative, object)) }
            }
        }
        var pending = objects.filter { !state.isDone($0.relative, version: S3CopyPlan.ETagShape($0.object.etag).normalized) }
        let doneEarlier = Set(objects.map(\.relative)).subtracting(pending.map(\.relative))
        var unchanged: [String] = []
        // One listing of the destination when it is compared (skip-unchanged) or pruned (delete).
        // Keys compared by their bytes (String equality merges Unicode normalisation forms).
        var held: [Data: S3ListedObject] = [:]
        var destination: [String] = []
        if (skipUnchanged && !pending.isEmpty) || sync.delete {
            try await client.forEachListedPage(bucket: bucket, prefix: prefix) { page in
                for object in page where PathNormalization.hasBytePrefix(object.key, prefix) {
                    held[Data(object.key.utf8)] = object
                    let relative = String(decoding: object.key.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
                    if !relative.isEmpty { destination.append(relative) }
                }
            }
        }
        if skipUnchanged {
            pending = pending.filter { item in
                guard let copy = held[Data((prefix + item.relative).utf8)],
                      S3CopyPlan.holds(size: copy.size, etag: copy.etag, sourceSize: item.object.size, sourceETag: item.object.etag) else {
                    return true
                }
                unchanged.append(item.relative)
                return false
            }
        }
        let deletions = sync.delete
            ? SyncPlan.extraneous(source: Set(objects.map { Data($0.relative.utf8) }), destination: destination, filter: filter) : []
        let refusal = SyncPlan.refusal(deleting: deletions.count, of: destination.filter(filter.takes).count, options: sync)
        if let refusal, !sync.dryRun { throw SyncRefusal(reason: refusal) }
        if sync.dryRun {
            var preview = SyncPreview()
            preview.refusal = refusal
            preview.copy = pending.map { ($0.relative, $0.object.size) }
            preview.unchanged = (unchanged + doneEarlier).sorted()
            preview.delete = deletions
            return Result(objects: objects.count, bytes: 0, skippedAsDone: doneEarlier.count, unchanged: unchanged.count,
                          checkedBySizeOnly: 0, preview: preview)
        }
        let total = pending.reduce(Int64(0)) { sum, item in
            let (added, overflow) = sum.addingReportingOverflow(item.object.size)
            return overflow ? .max : added
        }
        let copied = Locked<Int64>(0)
        onEvent(.started(totalSize: total))
        var bytes: Int64 = 0
        var sizeOnly = 0
        do {
            try await withThrowingTaskGroup(of: S3CopyResult.self) { group in
                var next = pending.makeIterator()
                func launch() {
                    guard let item = next.next() else { return }
                    group.addTask { try await self.copy(item.relative, listed: item.object, copied: copied, total: total) }
                }
                for _ in 0..<objectsInFlight { launch() }
                while let result = try await group.next() {
                    bytes += result.size
                    if case .sizeOnly = result.verdict { sizeOnly += 1 }
                    launch()
                }
            }
        } catch {
            // What finished is kept for the next run, whatever stopped this one.
            try? state.flush()
            throw error
        }
        // Copies in parts begun by an earlier run for objects not taken now (deleted, filtered out,
        // or copied whole) are aborted, not left stored.
        await abandonUnfinished()
        state.forget()
        // Only once every copy succeeded: a failed run deletes nothing.
        if !deletions.isEmpty { try await client.deleteObjects(bucket: bucket, keys: deletions.map { prefix + $0 }) }
        return Result(objects: objects.count, bytes: bytes, skippedAsDone: doneEarlier.count,
                      unchanged: unchanged.count, checkedBySizeOnly: sizeOnly, deleted: deletions.count)
    }

    private func copy(_ relative: String, listed: S3ListedObject, copied: Locked<Int64>, total: Int64) async throws -> S3CopyResult {
        let events = onEvent
        let before = Locked<Int64>(0)
        // Progress of the whole prefix: the finished objects plus each object's own count.
        let progress: @Sendable (UploadEvent) -> Void = { event in
            guard case .progress(let sent, _) = event else { return }
            let added = before.withLock { last -> Int64 in
                defer { last = sent }
                return sent - last
            }
            let now = copied.withLock { $0 += added; return $0 }
            events(.progress(sent: now, totalSize: total))
        }
        if let from {
            let streamed = StreamedCopy(client: client, transport: client.transport, retry: client.retry,
                                        options: StreamedCopyOptions(source: try StreamSource(s3: from, bucket: source.bucket,
                                                                                              key: source.key + relative),
                                                                     bucket: bucket, key: prefix + relative),
                                        state: state.view(relative), onEvent: progress)
            let result = try await streamed.run()
            try state.markDone(relative, version: S3CopyPlan.ETagShape(listed.etag).normalized)
            // Each part's MD5 checked by the server, the object's ETag by the parts': the bytes read are the bytes stored.
            return S3CopyResult(etag: result.etag, size: result.size, parts: result.parts, partsCopied: result.partsSent,
                                resumed: result.resumed, elapsed: result.elapsed, verdict: .sameETag, sourceETag: listed.etag)
        }
        var options = S3CopyOptions(source: S3Location(bucket: source.bucket, key: source.key + relative), bucket: bucket,
                                    key: prefix + relative, partSize: partSize, partsInFlight: partsInFlight)
        options.skipUnchanged = false
        let copy = S3ObjectCopy(client: client, options: options, state: state.view(relative),
                                listed: S3ObjectHead(size: listed.size, etag: listed.etag), onEvent: progress)
        let result = try await copy.run()
        try state.markDone(relative, version: S3CopyPlan.ETagShape(result.sourceETag).normalized)
        return result
    }

    /// Aborts every copy in parts the record holds unfinished (a cancelled job, objects no longer taken)
    /// and forgets it; a store that fenced this worker off refuses that, and nothing is aborted.
    package func abandonUnfinished() async {
        for (relative, json) in state.unfinished {
            let view = state.view(relative)
            // A record that names no upload is only forgotten.
            guard (try? JSONDecoder().decode(S3Client.RecordedUpload.self, from: Data(json.utf8))) != nil else {
                try? view.remove()
                continue
            }
            guard await client.abandonRecordedUpload(in: view) else { return }
        }
    }
}
