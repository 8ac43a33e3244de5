import Foundation

/// A server-side copy of every object under one prefix to another prefix on the same
/// endpoint (`destination + key below the source prefix`), several objects at a time,
/// each an `S3ObjectCopy` resumable on its own; which objects are done and each
/// unfinished object's parts live in one state record.
package final class S3PrefixCopy: Sendable {
    let client: S3Client
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

    /// `source.key` and `prefix` name prefixes: "" for a whole bucket, else ending in `/` (added when missing).
    package init(client: S3Client, source: S3Location, bucket: String, prefix: String, partSize: Int64 = 64 << 20,
                partsInFlight: Int = 10, objectsInFlight: Int = 8, filter: S3PrefixPlan.Filter = S3PrefixPlan.Filter(),
                skipUnchanged: Bool = false, store: UploadStateStore, onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.client = client
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
        guard source.bucket == bucket, to.hasPrefix(from) || from.hasPrefix(to) else { return nil }
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
    }

    package func run() async throws -> Result {
        if let problem = Self.overlapProblem(source: source, bucket: bucket, prefix: prefix) {
            throw S3Error.verification(problem)
        }
        // One listing of the source: key below the prefix → object.
        var objects: [(relative: String, object: S3ListedObject)] = []
        try await client.forEachListedPage(bucket: source.bucket, prefix: source.key) { page in
            for object in page where PathNormalization.hasBytePrefix(object.key, source.key) {
                let relative = String(decoding: object.key.utf8.dropFirst(source.key.utf8.count), as: UTF8.self)
                if !relative.isEmpty, filter.takes(relative) { objects.append((relative, object)) }
            }
        }
        var pending = objects.filter { !state.isDone($0.relative) }
        var unchanged = 0
        if skipUnchanged && !pending.isEmpty {
            // Keys compared by their bytes (String equality merges Unicode normalisation forms).
            var held: [Data: S3ListedObject] = [:]
            let wanted = Set(pending.map { Data((prefix + $0.relative).utf8) })
            try await client.forEachListedPage(bucket: bucket, prefix: prefix) { page in
                for object in page where wanted.contains(Data(object.key.utf8)) { held[Data(object.key.utf8)] = object }
            }
            pending = pending.filter { item in
                guard let copy = held[Data((prefix + item.relative).utf8)],
                      S3CopyPlan.holds(size: copy.size, etag: copy.etag, sourceSize: item.object.size, sourceETag: item.object.etag) else {
                    return true
                }
                unchanged += 1
                return false
            }
        }
        let total = pending.reduce(Int64(0)) { $0 + $1.object.size }
        let copied = Locked<Int64>(0)
        onEvent(.started(totalSize: total))
        var bytes: Int64 = 0
        var sizeOnly = 0
        try await withThrowingTaskGroup(of: S3CopyResult.self) { group in
            var next = pending.makeIterator()
            func launch() {
                guard let item = next.next() else { return }
                group.addTask { try await self.copy(item.relative, copied: copied, total: total) }
            }
            for _ in 0..<objectsInFlight { launch() }
            while let result = try await group.next() {
                bytes += result.size
                if case .sizeOnly = result.verdict { sizeOnly += 1 }
                launch()
            }
        }
        state.forget()
        return Result(objects: objects.count, bytes: bytes, skippedAsDone: objects.count - pending.count - unchanged,
                      unchanged: unchanged, checkedBySizeOnly: sizeOnly)
    }

    private func copy(_ relative: String, copied: Locked<Int64>, total: Int64) async throws -> S3CopyResult {
        var options = S3CopyOptions(source: S3Location(bucket: source.bucket, key: source.key + relative), bucket: bucket,
                                    key: prefix + relative, partSize: partSize, partsInFlight: partsInFlight)
        options.skipUnchanged = false
        // Progress of the whole prefix: the finished objects plus each object's own count.
        let events = onEvent
        let before = Locked<Int64>(0)
        let copy = S3ObjectCopy(client: client, options: options, state: state.view(relative)) { event in
            guard case .progress(let sent, _) = event else { return }
            let added = before.withLock { last -> Int64 in
                defer { last = sent }
                return sent - last
            }
            let now = copied.withLock { $0 += added; return $0 }
            events(.progress(sent: now, totalSize: total))
        }
        let result = try await copy.run()
        try state.markDone(relative)
        return result
    }
}
