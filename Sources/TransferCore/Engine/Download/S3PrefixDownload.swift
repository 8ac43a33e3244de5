import CSystem
import Foundation

package struct S3PrefixDownloadOptions: Sendable {
    package var bucket: String
    /// The key prefix; every key below it is saved at its path below the prefix.
    package var prefix: String
    /// The folder the objects go into (made if missing).
    package var destination: String
    /// The folder nothing may be written outside of (the destination, or the queue's root).
    package var confinedTo: String
    package var filter = S3PrefixPlan.Filter()
    /// Range connections per object.
    package var connections = 1
    /// Objects downloading at once.
    package var filesInFlight = 4
    /// An existing file: refused, replaced, or kept when it already holds the
    /// listed object (`skipIfIdentical`: size and recorded ETag, or MD5).
    package var overwrite: OverwritePolicy = .refuse
    package var retry: RetryPolicy = .default
    package var tls = TLSOptions()
    package var connectTimeout: TimeInterval = 15
    package var idleTimeout: TimeInterval = 30
    /// The speed under which an object's attempt is abandoned (nil: none).
    package var lowSpeed: LowSpeedLimit? = .default
    /// The whole prefix's receive cap (each object in flight gets an equal share).
    package var maxRate: Int64?
    package var sharedLimiter: BandwidthLimiter?
    /// Keys listed per page (S3's most is 1,000).
    package var pageSize = 1000
    /// Folders no key may land in, whatever the destination (the queue folder,
    /// with its state, for a prefix job: a key must not become a job file).
    package var forbidden: [String] = []

    package init(bucket: String, prefix: String, destination: String, confinedTo: String? = nil) {
        self.bucket = bucket
        self.prefix = prefix
        self.destination = destination
        self.confinedTo = confinedTo ?? destination
    }
}

package enum S3PrefixEvent: Sendable {
    /// Bytes saved so far in this run (finished objects and those in flight).
    case progress(bytes: Int64, files: Int)
    case saved(key: String, path: String, size: Int64)
    case unchanged(key: String)
    case refused(key: String, reason: String)
    case failed(key: String, reason: String)
}

/// What one run did (a run that continues an earlier one counts only its own work).
package struct S3PrefixResult: Sendable {
    /// What a copy that left keys out says of it (nil when none was refused): the count and the
    /// first keys with their reasons, shown as the listing named them (controls escaped).
    package var partialCopy: String? {
        guard refused > 0 else { return nil }
        let more = refused > refusedExamples.count ? "; and \(refused - refusedExamples.count) more" : ""
        return "the copy is partial: \(refused) key\(refused == 1 ? " was" : "s were") not saved "
            + "(\(refusedExamples.joined(separator: "; "))\(more)); \(files) file\(files == 1 ? "" : "s") saved. "
            + "Rename those keys in the bucket, or leave them out with an exclude pattern"
    }

    /// Objects downloaded in this run.
    package var files: Int
    package var bytes: Int64
    /// Objects already present and unchanged (nothing fetched).
    package var unchanged: Int
    /// Keys that could not be placed in the folder (with `refusedExamples`).
    package var refused: Int
    package var refusedExamples: [String]
    package var elapsed: TimeInterval
}

/// Some objects of a prefix failed; the rest are saved. Running the job (or
/// command) again retries those first, without listing from the start.
package struct S3PrefixError: Error, CustomStringConvertible {
    package var failed: [(key: String, reason: String)]
    package var saved: Int

    package var description: String {
        let shown = failed.prefix(3).map { "\($0.key): \($0.reason)" }.joined(separator: "; ")
        let more = failed.count > 3 ? "; and \(failed.count - 3) more" : ""
        return "\(failed.count) object\(failed.count == 1 ? "" : "s") failed (\(saved) saved): \(shown)\(more)"
    }
}

/// Downloads every object under an S3 prefix into a folder, keeping the key
/// paths below the prefix. The listing is read a page (1,000 keys) at a time,
/// as it is needed: downloads start after the first page, and a million keys
/// never sit in memory. Progress is checkpointed as the page's cursor, the
/// keys of the page already done, and the objects that failed; after a kill,
/// the run re-lists only the page it was in and retries only what failed.
package final class S3PrefixDownload: Sendable {
    struct Checkpoint: Codable, Equatable {
        /// Where the current page was listed from (nil: the first page).
        var cursor: S3ListCursor?
        /// Keys (their UTF-8 bytes: Swift's String equality would merge keys that
        /// differ only in Unicode normalisation) of the current page already
        /// saved, unchanged, refused or failed.
        var done: Set<Data> = []
        /// Objects that failed, by key bytes, retried first on the next run.
        var failed: [Data: S3ListedObject] = [:]
        var finished = false
        var files = 0
        var bytes: Int64 = 0
        var unchanged = 0
        var refused = 0
    }

    /// Failures beyond this stop the listing: something is wrong with all of them.
    static let failureLimit = 1000
    /// The extended attribute recording what a saved file holds: `ETAG SIZE MTIME`.
    static let etagAttribute = "user.transferd.etag"

    package let client: S3Client
    let transport: Transport
    package let options: S3PrefixDownloadOptions
    let store: UploadStateStore?
    let onEvent: @Sendable (S3PrefixEvent) -> Void
    private let checkpoint: Locked<Checkpoint>
    private let inFlight = Locked<[String: Int64]>([:])
    private let refusedExamples = Locked<[String]>([])
    private let failures = Locked<[(key: String, reason: String)]>([])

    /// A downloaded object whose complete, verified file waits at its partial
    /// path for the next flush (one syncfs for many files, as the queue does).
    private struct Finished {
        let object: S3ListedObject
        let part: String
        let path: String
        let size: Int64
        /// The ETag the GET answered with (unquoted, as listings write it): what the file holds.
        let etag: String?
        let inPage: Bool
        /// The partial file, open and locked against other writers until it is renamed into place.
        let lock: PartFile?
    }
    private let finished = Locked<[Finished]>([])
    private let flushLock = NSLock()
    /// Files made durable together.
    static let flushBatch = 64

    package init(client: S3Client, transport: Transport, options: S3PrefixDownloadOptions, store: UploadStateStore? = nil,
                onEvent: @escaping @Sendable (S3PrefixEvent) -> Void = { _ in }) {
        self.client = client
        self.transport = transport
        self.options = options
        self.store = store
        self.onEvent = onEvent
        let saved = (try? store?.load()).flatMap { $0 }.flatMap { try? JSONDecoder().decode(Checkpoint.self, from: Data($0.utf8)) }
        checkpoint = Locked(saved ?? Checkpoint())
    }

    package func run() async throws -> S3PrefixResult {
        let started = Date()
        let before = checkpoint.current
        if options.confinedTo == options.destination {
            // The folder the user named is the root itself: made as named (links and all, their choice).
            var path = options.destination.hasPrefix("/") ? "" : "."
            for component in PathNormalization.components(options.destination) {
                path += "/" + component
                if mkdir(path, 0o755) != 0 && errno != EEXIST {
                    throw POSIXFailure(operation: "create the folder", path: path)
                }
            }
        } else {
            // A folder inside the root: made, and checked, one component at a time.
            try ConfinedPath.check((options.destination as NSString).appendingPathComponent("x"), root: options.confinedTo,
                                   create: true)
        }
        // What failed last time goes first; the listing then continues where it stopped.
        // Each stays recorded as failed until its retry ends otherwise (a save in
        // between must not forget the ones still in flight).
        let retried = checkpoint.withLock { state in
            Array(state.failed.values).sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
        }
        var seenCursors: Set<S3ListCursor> = []
        do {
            if !retried.isEmpty {
                try await fetch(retried, inPage: false)
                try flush()
            }
            while !checkpoint.withLock({ $0.finished }) {
                try Task.checkCancellation()
                let cursor = checkpoint.withLock { $0.cursor }
                let page = try await client.listObjects(bucket: options.bucket, prefix: options.prefix, cursor: cursor,
                                                        maxKeys: options.pageSize)
                // A server that hands back a cursor it gave before would list the same pages forever.
                if let cursor { seenCursors.insert(cursor) }
                if let next = page.next, seenCursors.contains(next) {
                    throw S3Error.verification("ListObjectsV2 answered with a continuation it had given before; "
                                               + "the listing would never end")
                }
                let done = checkpoint.withLock { $0.done }
                var inThisPage: Set<Data> = []
                // A key listed twice in a page is fetched once (two writers would share one partial file).
                let objects = page.objects.filter { done.contains(Data($0.key.utf8)) == false && inThisPage.insert(Data($0.key.utf8)).inserted }
                try await fetch(objects, inPage: true)
                try flush()
                try update { state in
                    state.done = []
                    if let next = page.next { state.cursor = next } else { state.finished = true }
                }
                if checkpoint.withLock({ $0.failed.count }) > Self.failureLimit { break }
            }
        } catch {
            // What finished before the stop is complete and verified: kept, not fetched again.
            try? flush()
            throw error
        }
        let state = checkpoint.current
        let failed = failures.current
        if !failed.isEmpty {
            throw S3PrefixError(failed: failed, saved: state.files)
        }
        try? store?.remove()
        return S3PrefixResult(files: state.files - before.files, bytes: state.bytes - before.bytes,
                              unchanged: state.unchanged - before.unchanged, refused: state.refused - before.refused,
                              refusedExamples: refusedExamples.current, elapsed: Date().timeIntervalSince(started))
    }

    /// Downloads `objects`, `filesInFlight` at a time; records each outcome.
    private func fetch(_ objects: [S3ListedObject], inPage: Bool) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = objects.makeIterator()
            func launch() {
                guard let object = next.next() else { return }
                group.addTask { try await self.handle(object, inPage: inPage) }
            }
            for _ in 0..<max(1, options.filesInFlight) { launch() }
            while try await group.next() != nil { launch() }
        }
    }

    private func handle(_ object: S3ListedObject, inPage: Bool) async throws {
        let relative: String
        switch S3PrefixPlan.placement(key: object.key, prefix: options.prefix) {
        case .folderMarker:
            record(object, inPage: inPage) { _ in }
            return
        case .refused(let reason):
            let shown = HTTPHeaders.visible(object.key)
            refusedExamples.withLock { if $0.count < 10 { $0.append("\(shown): \(reason)") } }
            onEvent(.refused(key: shown, reason: reason))
            record(object, inPage: inPage) { $0.refused += 1 }
            return
        case .file(let path):
            relative = path
        }
        guard options.filter.takes(relative) else {
            record(object, inPage: inPage) { _ in }
            return
        }
        let path = (options.destination as NSString).appendingPathComponent(relative)
        if let reason = refusal(relative: relative, path: path) {
            let shown = HTTPHeaders.visible(object.key)
            refusedExamples.withLock { if $0.count < 10 { $0.append("\(shown): \(reason)") } }
            onEvent(.refused(key: shown, reason: reason))
            record(object, inPage: inPage) { $0.refused += 1 }
            return
        }
        do {
            try ConfinedPath.check(path, root: options.confinedTo, create: true, finalMustNotBeLink: true)
            // Kept when asked to, and also without being asked when the file already holds
            // the object: a run killed between a file's rename and its record saved it.
            if options.overwrite != .overwrite && Self.holds(path, object) {
                onEvent(.unchanged(key: HTTPHeaders.visible(object.key)))
                record(object, inPage: inPage) { $0.unchanged += 1 }
                return
            }
            let result = try await download(object, to: path)
            let count = finished.withLock { pending -> Int in
                pending.append(Finished(object: object, part: result.completedPartPath ?? path, path: path, size: result.size,
                                        etag: result.validators.etag.map(Self.unquoted), inPage: inPage, lock: result.partFile))
                return pending.count
            }
            if count >= Self.flushBatch { try flush() }
        } catch {
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            let reason = String(describing: error)
            let shown = HTTPHeaders.visible(object.key)
            failures.withLock { $0.append((shown, reason)) }
            onEvent(.failed(key: shown, reason: reason))
            record(object, inPage: inPage) { $0.failed[Data(object.key.utf8)] = object }
        }
    }

    /// Why a placed key still cannot be saved here: it would land in a
    /// forbidden folder, or its name is one transferd gives partial files.
    private func refusal(relative: String, path: String) -> String? {
        let full = PathNormalization.normalize(path)
        for folder in options.forbidden {
            let inside = PathNormalization.normalize(folder)
            if full == inside || PathNormalization.hasBytePrefix(full, inside + "/") {
                return "it would land in \(inside), the queue's own folder"
            }
        }
        return PartialNames.refusal(of: relative)
    }

    /// Downloads one object to its partial path (`completedPartPath`), complete and verified.
    private func download(_ object: S3ListedObject, to path: String) async throws -> DownloadResult {
        let source = try client.downloadSource(bucket: options.bucket, key: object.key)
        let share = options.maxRate.map { max(1, $0 / Int64(max(1, options.filesInFlight))) }
        var download = DownloadOptions(url: source.url, destination: path, connections: options.connections,
                                       overwrite: options.overwrite == .refuse ? .refuse : .overwrite,
                                       retry: options.retry, tls: options.tls, connectTimeout: options.connectTimeout,
                                       idleTimeout: options.idleTimeout, maxRate: share)
        source.configure(&download)
        download.sharedLimiter = options.sharedLimiter
        download.lowSpeed = options.lowSpeed
        // The object the listing described, or a 412: a newer version is not saved under the old record.
        if !object.etag.isEmpty && HTTPHeaders.problem(name: "If-Match", value: object.etag) == nil {
            download.headers.set("If-Match", "\"\(object.etag)\"")
        }
        // A body of another size than the listing said is never saved as the object, and one of
        // another version (a server that ignores If-Match) is a change: started over, and recorded
        // as what arrived.
        download.expectedSize = object.size
        if !object.etag.isEmpty { download.expectedValidators = ResponseValidators(etag: "\"\(object.etag)\"") }
        // Synced and renamed in batches by `flush`.
        download.syncEachFile = false
        download.deferRename = true
        let key = object.key
        let engine = DownloadEngine(transport: transport, options: download) { [weak self] event in
            guard let self, case .progress(let written, _, _) = event else { return }
            self.inFlight.withLock { $0[key] = written }
            self.reportProgress()
        }
        defer {
            inFlight.withLock { _ = $0.removeValue(forKey: key) }
        }
        return try await engine.run()
    }

    /// Makes the finished files durable: one syncfs for all their data, the
    /// renames into place, one more syncfs for the renames, then one saved
    /// checkpoint naming them done. A rename that fails fails that object.
    private func flush() throws {
        flushLock.lock()
        defer { flushLock.unlock() }
        let batch = finished.withLock { pending -> [Finished] in
            defer { pending = [] }
            return pending
        }
        guard !batch.isEmpty else { return }
        let folder = open(options.destination, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else {
            finished.withLock { $0.insert(contentsOf: batch, at: 0) }
            throw POSIXFailure(operation: "open", path: options.destination)
        }
        defer { close(folder) }
        // Nothing is recorded done unless its data reached the disk.
        guard linuxSyncfs(folder) == 0 else {
            finished.withLock { $0.insert(contentsOf: batch, at: 0) }
            throw POSIXFailure(operation: "sync", path: options.destination)
        }
        var saved: [Finished] = []
        var failed: [(Finished, String)] = []
        for item in batch {
            if item.part != item.path {
                if let reason = QueueRunner.moveIntoPlace(part: item.part, destination: item.path) {
                    failed.append((item, reason))
                    continue
                }
                unlink(PartialNames.state(of: item.path))
                item.lock?.untag()
            }
            Self.recordETag(item.path, etag: item.etag)
            saved.append(item)
        }
        if !saved.isEmpty && linuxSyncfs(folder) != 0 {
            throw POSIXFailure(operation: "sync (after renaming into place)", path: options.destination)
        }
        for (item, reason) in failed {
            let shown = HTTPHeaders.visible(item.object.key)
            failures.withLock { $0.append((shown, reason)) }
            onEvent(.failed(key: shown, reason: reason))
        }
        try update { state in
            for item in saved {
                state.files += 1
                state.bytes += item.size
                state.failed[Data(item.object.key.utf8)] = nil
                if item.inPage { state.done.insert(Data(item.object.key.utf8)) }
            }
            for (item, _) in failed {
                state.failed[Data(item.object.key.utf8)] = item.object
                if item.inPage { state.done.insert(Data(item.object.key.utf8)) }
            }
        }
        for item in saved {
            onEvent(.saved(key: HTTPHeaders.visible(item.object.key), path: item.path, size: item.size))
        }
        reportProgress()
    }

    private func reportProgress() {
        let flying = inFlight.withLock { $0.values.reduce(0, +) }
        let state = checkpoint.current
        onEvent(.progress(bytes: state.bytes + flying, files: state.files))
    }

    /// Applies an outcome and saves the checkpoint.
    /// Applies an outcome that moved no bytes (unchanged, refused, filtered,
    /// failed) in memory; it is saved with the next flush or page end, since
    /// redoing it after a crash costs no transfer.
    private func record(_ object: S3ListedObject, inPage: Bool, _ change: (inout Checkpoint) -> Void) {
        checkpoint.withLock { state in
            // Whatever happened to it now replaces an earlier failure (a new failure records itself again).
            state.failed[Data(object.key.utf8)] = nil
            change(&state)
            if inPage { state.done.insert(Data(object.key.utf8)) }
        }
        reportProgress()
    }

    /// Changes the checkpoint and saves it, under one lock: saves of objects
    /// finishing at once never land out of order (an older one last).
    private func update(_ change: (inout Checkpoint) -> Void) throws {
        try checkpoint.withLock { state in
            change(&state)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let json = (try? encoder.encode(state)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            try store?.save(json)
        }
    }

    // MARK: What a local file holds

    /// True when the file at `path` already holds the listed object.
    static func holds(_ path: String, _ object: S3ListedObject) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return false }
        return S3PrefixPlan.unchanged(listed: object, localSize: Int64(info.st_size), recordedETag: recordedETag(path, info),
                                      localMD5: {
            (try? FileDigests.compute(path: path, offset: 0, length: Int64(info.st_size), sha256: false))?.md5.hexString
        })
    }

    /// The ETag recorded on the file when it was saved, if the file has not
    /// changed since (same size and modification time).
    static func recordedETag(_ path: String, _ info: stat) -> String? {
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = getxattr(path, etagAttribute, &buffer, buffer.count)
        guard count > 0 else { return nil }
        let fields = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ").map(String.init)
        guard fields.count == 3, fields[1] == String(info.st_size), fields[2] == RecordedValidators.stamp(info) else { return nil }
        return fields[0]
    }

    /// Records what the file now holds (best effort: a file system without
    /// user extended attributes falls back to comparing MD5s).
    /// An ETag without its quotes (and weakness mark), as S3 listings write it.
    static func unquoted(_ tag: String) -> String {
        var text = Substring(tag)
        if text.hasPrefix("W/") { text = text.dropFirst(2) }
        if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") { text = text.dropFirst().dropLast() }
        return String(text)
    }

    static func recordETag(_ path: String, etag: String?) {
        var info = stat()
        guard let etag, !etag.isEmpty, !etag.contains(" "), stat(path, &info) == 0 else { return }
        let value = Array("\(etag) \(info.st_size) \(RecordedValidators.stamp(info))".utf8)
        _ = setxattr(path, etagAttribute, value, value.count, 0)
    }
}
