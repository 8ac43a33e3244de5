import Foundation

/// Downloads one URL to a file: probe, segmented or single stream into
/// `NAME.transferd-part` (`PartialNames`), resume from checkpoints, retry by policy, verify, then an
/// atomic rename. The destination appears only complete and verified.
// The running state is in `currentState` (Locked); checkpoints are written under the state's `persistLock`.
public final class DownloadEngine: Sendable {
    let transport: Transport
    let options: DownloadOptions
    let store: CheckpointStore
    let onEvent: @Sendable (DownloadEvent) -> Void
    private let currentState = Locked<DownloadState?>(nil)
    /// `options.maxRate` as one bucket shared by every request of this download.
    private let rateLimiter: BandwidthLimiter?
    /// With `options.mirrors`: the transport that spreads the requests over them (also `transport`).
    private let mirrors: MirrorTransport?

    /// Bytes on disk and the total size, for callers that poll instead of
    /// taking `.progress` events (`DownloadOptions.ownTicker` off).
    public func progress() -> (written: Int64, total: Int64?) {
        guard let plan = currentState.current?.plan else { return (0, nil) }
        return (plan.bytesWritten, plan.totalSize)
    }

    /// Bytes received from the server in this run of the engine (none yet: no response is flowing).
    package var bytesReceived: Int64 { currentState.current?.bytesReceived ?? 0 }

    /// Checkpoints go to the file beside the partial file (`DownloadOptions.statePath`).
    public convenience init(transport: Transport, options: DownloadOptions,
                            onEvent: @escaping @Sendable (DownloadEvent) -> Void = { _ in }) {
        self.init(transport: transport, options: options, store: nil, onEvent: onEvent)
    }

    /// - Parameter store: where checkpoints go (the queue's: its database); nil: the file beside the partial file.
    package init(transport: Transport, options: DownloadOptions, store: CheckpointStore?,
                 onEvent: @escaping @Sendable (DownloadEvent) -> Void = { _ in }) {
        var options = options
        if options.mirrors.isEmpty {
            mirrors = nil
            self.transport = transport
        } else {
            let spread = MirrorTransport(base: transport, primary: options.url, mirrors: options.mirrors,
                                         perMirror: options.connectionsPerMirror, expectedSize: options.expectedSize) { url, reason in
                onEvent(.mirrorDropped(url: Redaction.url(url), reason: reason))
            }
            mirrors = spread
            self.transport = spread
            // Enough connections for every mirror to take its share (at most 16); requests of
            // 4 MiB, so that a fast mirror's connections come back for more often; segments split
            // down to 1 MiB, so that a slow mirror holds little of the file's end.
            let slots = (options.mirrors.count + 1) * max(1, options.connectionsPerMirror)
            options.connections = max(options.connections, min(16, slots))
            options.requestFloor = min(options.requestFloor, 4 << 20)
            options.minSegmentSize = min(options.minSegmentSize, 1 << 20)
        }
        self.options = options
        self.store = store ?? FileCheckpointStore(path: options.statePath)
        self.onEvent = onEvent
        // A queue's download may have its rate changed while it runs (`setRate`): it always has a bucket.
        // (Only on a backend that keeps a receive limit: urlsession keeps none, and a bucket would make
        // every one of its downloads ask for what it cannot do.)
        rateLimiter = options.maxRate.map { BandwidthLimiter(bytesPerSecond: $0) }
            ?? (options.rateAdjustable && transport.capabilities.contains(.receiveRateLimit) ? BandwidthLimiter() : nil)
    }

    /// The download's own rate limit now (`setRate` may have changed it since it started).
    private var currentRate: Int64? {
        rateLimiter.map { $0.bytesPerSecond.map { Int64($0) } } ?? options.maxRate
    }

    /// Changes the download's own rate limit from now on, for all its connections (nil: none).
    /// Only a download made with `rateAdjustable` (or a `maxRate`) has a bucket to change.
    package func setRate(_ bytesPerSecond: Int64?) {
        rateLimiter?.setRate(bytesPerSecond)
    }

    /// The SHA-256 the file must have: the options' own, else the one the checksum list gives
    /// (read at the start of `run`), else none.
    private var expectedSHA256: String? { options.sha256 ?? listedSHA256.withLock { $0 } }
    private let listedSHA256 = Locked<String?>(nil)
    /// Mirrors whose bytes failed the file's checksum, being fetched again from another.
    private let suspects = Locked<[URL]>([])
    /// Times failing pieces were fetched again (`checkPieces`).
    private let pieceRounds = Locked(0)
    static let maxPieceRounds = 3

    /// What each mirror served in this run (empty without mirrors).
    private var mirrorShares: [MirrorShare] {
        guard let mirrors else { return [] }
        let set = mirrors.current
        return set.mirrors.indices.map {
            MirrorShare(url: Redaction.url(set.mirrors[$0].url), bytes: set.mirrors[$0].bytesServed, kept: set.holds($0),
                        dropped: set.mirrors[$0].dropped)
        }
    }

    public func run() async throws -> DownloadResult {
        let started = Date()
        // Unsigned: the check is of the job's own headers and the capabilities asked for (each
        // transport checks every signed request it sends as well); a signature here was wasted.
        try transport.checkSupports(makeRequest(headers: options.headers, signed: false))
        if options.sha256 == nil, let list = options.checksumsURL {
            let listed = try await sha256(from: list)
            listedSHA256.withLock { $0 = listed }
        }
        // A checked file lets a resumed download take bytes from a mirror it had not asked before.
        mirrors?.setVerified(expectedSHA256 != nil || options.pieces != nil)
        // A partial file already there is locked before its checkpoint is read: another process
        // writing it (the same destination downloaded twice at once) stops this one here, with
        // nothing changed. One that is not there yet is locked as it is created.
        if let reason = PartialNames.refusal(of: options.destination) {
            throw DownloadError.reservedDestination(path: options.destination, reason: reason)
        }
        // A partial file an earlier version left under its names (`NAME.part`) is resumed under today's.
        PartialNames.adoptEarlierPartial(of: options.destination, store: store)
        let held = try PartFile.lockExisting(options.partPath, takingOver: options.takesOverBusyPart)
        // Read once: nothing below changes it before the partial file is opened. One whose plan
        // cannot describe a file (edited, damaged) is not trusted: the download starts over.
        let record = try? store.load()
        // A file at the record's name that is not a record of transferd's is a user's: left alone.
        // (One that decodes as a checkpoint is transferd's; only the others are read again.)
        if record == nil, let files = store as? FileCheckpointStore, files.holdsForeignFile {
            throw DownloadError.foreignPartial(path: files.path)
        }
        let saved = record.flatMap { $0.isCoherent ? $0 : nil }
        if let finished = try finishedEarlier(saved) {
            return DownloadResult(path: options.destination, size: finished, sha256: nil, bytesFetched: 0,
                                  resumedFrom: finished, skipped: false, completedPartPath: nil, restarts: 0, segments: 0,
                                  elapsed: Date().timeIntervalSince(started))
        }
        if Self.exists(options.destination) {
            switch options.overwrite {
            case .refuse:
                throw DownloadError.destinationExists(path: options.destination)
            case .skipIfIdentical:
                if let size = try await existingMatches() {
                    return DownloadResult(path: options.destination, size: size, sha256: expectedSHA256,
                                          bytesFetched: 0, resumedFrom: size, skipped: true, completedPartPath: nil,
                                          restarts: 0, segments: 0,
                                          elapsed: Date().timeIntervalSince(started))
                }
            case .overwrite:
                break
            }
        }

        let (state, file) = try openPartialFile(saved, recordFound: record != nil, held: held)
        var handedOver = false
        defer {
            state.drainWriters()
            if !handedOver { file.close() }
        }
        let resumedFrom = state.plan.bytesWritten
        var restarts = 0
        var finished: (size: Int64, digest: String?)?
        while finished == nil {
        while true {
            do {
                try await fetchAll(state, fresh: state.plan.bytesWritten == 0)
                break
            } catch DownloadSignal.withoutRange(let reason) {
                // Once: without ranges no answer can ask for this again.
                guard state.rangesSupported else {
                    try? saveCheckpoint(state)
                    throw DownloadError.transport(TransportError(.protocolError, url: options.url, message: reason),
                                                  reason: "the server's answers cannot be saved")
                }
                restarts += 1
                onEvent(.restarted(reason: reason))
                try state.reset(plan: .single(totalSize: nil), validators: ResponseValidators(), rangesSupported: false)
            } catch DownloadSignal.restart(let reason) {
                restarts += 1
                onEvent(.restarted(reason: reason))
                // Counted over every run (kept in the checkpoint): a job deferred and claimed again
                // does not get three more.
                let total = state.noteRemoteChanged()
                guard total <= Self.maxRestarts else {
                    try? saveCheckpoint(state)
                    throw DownloadError.unstableSource(url: Redaction.url(options.url), restarts: total, lastChange: reason)
                }
                try state.reset(plan: .single(totalSize: nil), validators: ResponseValidators(), rangesSupported: true)
            } catch {
                state.drainWriters()
                state.releaseReservation()
                if !file.existed && state.plan.bytesWritten == 0 && file.size() == 0 {
                    // Nothing was saved (a 404, a refused connection): a partial file this run made
                    // and its record would only be litter.
                    unlink(options.partPath)
                    try? store.remove()
                } else {
                    // Keep what is on disk for the next run.
                    try? saveCheckpoint(state)
                }
                throw error
            }
        }
        // No checkpoint due by bytes may land after the final one.
        state.drainWriters()
        do {
            finished = try finalize(state, file)
        } catch DownloadSignal.refetch(let ranges, let reason) {
            // Bytes that failed a checksum, fetched again (`MirrorSet.narrowToOne`).
            onEvent(.refetching(bytes: ranges.reduce(0) { $0 + Int64($1.count) }, reason: reason))
            try state.refetch(ranges)
            try? saveCheckpoint(state)
        }
        }
        let (size, digest) = finished!
        handedOver = options.deferRename
        return DownloadResult(path: options.destination, size: size, sha256: digest,
                              bytesFetched: state.bytesReceived, resumedFrom: resumedFrom, skipped: false,
                              completedPartPath: options.deferRename ? options.partPath : nil,
                              restarts: restarts, segments: state.plan.segments.count,
                              elapsed: Date().timeIntervalSince(started), partFile: options.deferRename ? file : nil,
                              validators: state.validators, mirrors: mirrorShares)
    }

    // MARK: Start

    /// Opens and locks the partial file (or takes the one `run` locked), resuming from the checkpoint
    /// when it describes this URL and this file.
    private func openPartialFile(_ saved: DownloadCheckpoint?, recordFound: Bool, held: PartFile?) throws -> (DownloadState, PartFile) {
        let part = options.partPath
        var file = try held ?? PartFile.create(part, takingOver: options.takesOverBusyPart)
        // A file at the partial file's name that transferd cannot prove it wrote (put there by
        // hand or by another program) is never truncated or renamed into place.
        if file.existed, !PartFile.mayStartOver(size: file.size() ?? 0, tagged: file.carriesAnyTag(), recordFound: recordFound) {
            file.close()
            throw DownloadError.foreignPartial(path: part)
        }
        var checkpoint = saved?.trusted(inBoot: BootID.current)
        // A partial file without the checkpoint's tag, or shorter than the bytes the checkpoint
        // claims, is not the file it describes (replaced, or truncated by another program): the
        // claimed bytes would be another file's, or zeros.
        if let existing = checkpoint,
           !(options.expectedValidators.map(existing.validators.matches) ?? true)
            || existing.url != options.url.absoluteString || !file.existed || !(existing.fileTag.map(file.carries) ?? true)
            || (file.size() ?? -1) < existing.plan.writtenExtent {
            checkpoint = nil
        }
        if checkpoint == nil {
            // A partial file without a record cannot be trusted: start it over. Forgotten before the
            // file is truncated, and a store that refuses (a shared store gave the job to another
            // worker meanwhile) stops it here: the other worker's partial file is not truncated.
            if file.existed {
                try store.removeBeforeStartingOver()
                // A takeover starts over in a new, empty file, not in the one the worker it
                // replaces may still hold open (`PartFile.replaced`).
                if options.takesOverBusyPart { file = try file.replaced(at: part, keeping: 0).file }
                // Whatever the file recorded of how far it was written is void once it is truncated.
                WrittenOffsets.remove(fd: file.fd)
                guard ftruncate(file.fd, 0) == 0 else { throw DownloadError.local(POSIXFailure(operation: "truncate", path: part)) }
            } else {
                try store.remove()
            }
        } else if options.takesOverBusyPart && file.existed {
            // A takeover resumes in a copy: the worker it replaces may be frozen, not dead, and
            // write the rest of its bytes into the file it has open when it wakes (`PartFile.replaced`).
            file = try file.replaced(at: part, keeping: file.size() ?? 0).file
        }
        let fd = file.fd
        var noteRecord = false
        if let trusted = checkpoint {
            let resumed = trusted.resumed(onFile: fd, bootID: BootID.current)
            checkpoint = resumed.checkpoint
            // Removed once the file is complete (one of an older incarnation too).
            if resumed.hadRecord { noteRecord = true }
        }
        // The mirrors' versions are the checkpoint's (a fresh file: none yet).
        mirrors?.restore(checkpoint?.mirrors)
        let start = checkpoint ?? DownloadCheckpoint(url: options.url.absoluteString,
                                                     validators: options.expectedValidators ?? ResponseValidators(),
                                                     plan: .single(totalSize: nil), rangesSupported: true)
        // The run's bucket: kept by the transport when it can pause one exchange (curl), else
        // by the sink, which waits for its bytes (urlsession).
        var pins: (@Sendable () -> MirrorPins)?
        if let mirrors { pins = { mirrors.current.pins } }
        let state = DownloadState(fd: fd, partPath: part, url: options.url, checkpoint: start,
                                  limiter: transport.capabilities.contains(.receiveRateLimit) ? nil : options.sharedLimiter,
                                  store: store, mirrorPins: pins)
        if checkpoint == nil {
            // Tagged at once, a new file too: the tag is how a later run knows the file is
            // transferd's (`PartFile.mayStartOver`) when it was killed before any checkpoint.
            // A file that was there is tagged anew: whatever checkpoint named its old tag is void.
            // (Where locks do not work, ENOLCK, a first writer's late tag can replace a second's:
            // two writers of one partial file are not kept apart there anyway.)
            state.tagWhenSaved { file.tag() }
            state.tagNow()
        }
        if noteRecord { state.noteWrittenRecordFound() }
        state.writeBufferSize = options.writeBufferSize
        let checkpoints = options.checkpointBytes != nil || options.syncBytes != nil
        state.setThresholds(checkpointEvery: checkpoints ? options.checkpointBytes : nil, syncEvery: checkpoints ? options.syncBytes : nil,
                            writtenRecordEvery: options.writtenRecordBytes)
        if options.writtenRecordBytes != nil {
            state.writers.withLock { $0.written = CheckpointWriter { [unowned state] _ in state.recordWrittenOffsets() } }
        }
        if checkpoints {
            // Saved off the transport's thread (see `CheckpointWriter`); `run` drains it before the end.
            let writer = CheckpointWriter { [weak self, unowned state] sync in try? self?.saveCheckpoint(state, sync: sync) }
            state.writers.withLock {
                $0.checkpoint = writer
                $0.persist = { sync in writer.request(sync: sync) }
            }
        }
        return (state, file)
    }

    /// Whether `path` names something, following links (as FileManager's `fileExists` does, without its bridging).
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// A previous run finished this download but stopped between renaming the
    /// file into place and forgetting its checkpoint: the checkpoint says
    /// complete, the partial file is gone and the destination has the size.
    private func finishedEarlier(_ saved: DownloadCheckpoint?) throws -> Int64? {
        guard let checkpoint = saved, checkpoint.url == options.url.absoluteString,
              checkpoint.plan.isComplete, let total = checkpoint.plan.totalSize,
              !Self.exists(options.partPath) else { return nil }
        var info = stat()
        guard stat(options.destination, &info) == 0, Int64(info.st_size) == total else { return nil }
        // The file that run renamed into place has the remote Last-Modified as its time; another
        // of the same size put there since has not (then the destination is judged as any other).
        if let modified = checkpoint.validators.lastModified.flatMap(HTTPDate.parse),
           Int(modified.timeIntervalSince1970) != Int(info.st_mtim.tv_sec) {
            return nil
        }
        // A checksum asked for now is checked now: that run may have had none, or another.
        if let expected = expectedSHA256, (try? SHA256Hasher.hex(ofFileAt: options.destination)) != expected {
            return nil
        }
        try? store.remove()
        return total
    }

    /// For `.skipIfIdentical`: the existing file's size when it matches the remote.
    private func existingMatches() async throws -> Int64? {
        let attributes = try? FileManager.default.attributesOfItem(atPath: options.destination)
        guard let size = (attributes?[.size] as? NSNumber)?.int64Value else { return nil }
        if let expected = expectedSHA256 {
            return try SHA256Hasher.hex(ofFileAt: options.destination) == expected ? size : nil
        }
        if let recorded = RecordedValidators.read(options.destination, url: options.url) {
            // The validators recorded when this file was saved: the server says
            // whether it changed since (304), the same way a browser cache asks.
            var headers = options.headers
            for field in recorded.conditionalHeaders.fields { headers.set(field.name, field.value) }
            let head = try await request(method: "HEAD", headers: headers)
            return recorded.answerSaysUnchanged(status: head.status, headers: head.headers, localSize: size) ? size : nil
        }
        let head = try await request(method: "HEAD", headers: options.headers)
        guard (200..<300).contains(head.status),
              let remoteSize = head.headers["Content-Length"].flatMap(Int64.init), remoteSize == size else {
            return nil
        }
        if let modified = head.headers["Last-Modified"].flatMap(HTTPDate.parse),
           let local = attributes?[.modificationDate] as? Date {
            return abs(local.timeIntervalSince(modified)) < 1 ? size : nil
        }
        return size
    }

    /// This file's line in the SHA256SUMS list at `list` (`ChecksumList`), read whole (at most
    /// `ChecksumList.maxBytes`) with the download's TLS settings, retried as the download is.
    private func sha256(from list: URL) async throws -> String {
        let name = options.checksumsName ?? (options.url.path as NSString).lastPathComponent
        var attempt = options.priorFailures
        while true {
            attempt += 1
            let sink = CapturingSink(limit: ChecksumList.maxBytes, url: list,
                                     advice: "a SHA256SUMS list is a line per file; check the job's checksums URL")
            let request = TransferRequest(method: "GET", url: list, headers: [:], connectTimeout: options.connectTimeout,
                                          idleTimeout: options.idleTimeout, maxRedirects: options.maxRedirects, tls: options.tls)
            let failure: RetryPolicy.Failure
            let thrown: Error
            do {
                let head = try await transport.execute(request, sink: sink).head
                if (200..<300).contains(head.status) {
                    let parsed = ChecksumList(String(decoding: sink.body, as: UTF8.self))
                    guard let value = parsed.sha256(for: name) else {
                        throw DownloadError.notInChecksumList(list: Redaction.url(list), name: name,
                                                              ambiguous: parsed.ambiguous.contains(name))
                    }
                    return value
                }
                failure = .http(status: head.status, retryAfter: head.headers["Retry-After"].flatMap(RetryAfter.init(header:)))
                thrown = DownloadError.httpStatus(status: head.status, url: Redaction.url(list),
                                                  message: "the checksum list the job names", reason: nil)
            } catch let error as TransportError {
                failure = .transport(error.kind)
                thrown = DownloadError.transport(error, reason: "could not read the checksum list \(Redaction.url(list))")
            } catch let tooLarge as ResponseTooLarge {
                throw DownloadError.transport(TransportError(.protocolError, url: list, message: tooLarge.description),
                                              reason: "the checksum list is too large")
            }
            switch options.retry.decide(failure, attempt: attempt) {
            // As a segment's answer: in a queue the job waits its turn again rather than hold its slot.
            case .retry(let delay) where delay > 0 && !options.retryInPlace:
                var throttled = false
                if case .http(let status, _) = failure { throttled = status == 429 || status == 503 }
                throw DownloadDeferred(delay: delay, reason: "the checksum list: \(thrown)", failures: attempt, throttled: throttled)
            case .retry(let delay):
                try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
            case .giveUp:
                throw thrown
            }
        }
    }

    func request(method: String, headers: HTTPHeaders) async throws -> ResponseHead {
        final class Discard: ResponseSink {
            func receive(head: ResponseHead) throws {}
            func receive(body: UnsafeRawBufferPointer) throws {}
        }
        return try await transport.execute(makeRequest(method: method, headers: headers), sink: Discard()).head
    }

    func makeRequest(method: String = "GET", headers: HTTPHeaders, signed: Bool = true) -> TransferRequest {
        // Signed per request (S3): a signature is only good for minutes, and Range/If-Range change.
        let sent = signed ? options.signer.map { $0(method, options.url, headers) } ?? headers : headers
        var request = TransferRequest(method: method, url: options.url, headers: sent,
                                      connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout,
                                      maxRedirects: options.maxRedirects, tls: options.tls)
        // The limit is the download's total: one bucket for all its connections and requests.
        request.receiveLimiter = rateLimiter
        if transport.capabilities.contains(.receiveRateLimit) { request.runReceiveLimiter = options.sharedLimiter }
        return request
    }

    // MARK: Fetch

    /// Fetches every incomplete segment, checkpointing as it goes.
    ///
    /// A fresh segmented download first asks for one segment's worth of bytes
    /// from 0: its 206 tells the size, the version and that ranges work, then
    /// the rest is split over the connections. No separate probe request.
    private func fetchAll(_ state: DownloadState, fresh: Bool) async throws {
        currentState.withLock { $0 = state }
        guard options.ownTicker else {
            // The caller polls `progress()`; checkpoints come from written bytes.
            try await fetchSegments(state, fresh: fresh)
            return
        }
        let ticker = Task { [self] in await tick(state) }
        do {
            try await fetchSegments(state, fresh: fresh)
        } catch {
            ticker.cancel()
            await ticker.value
            throw error
        }
        // The ticker must be gone before finalising: its checkpoint would race the final one.
        ticker.cancel()
        await ticker.value
    }

    private func fetchSegments(_ state: DownloadState, fresh: Bool) async throws {
        // What an earlier run left, before this run's opening request adds to it.
        let resumedFrom = state.plan.bytesWritten
        if fresh && options.connections > 1 {
            try await fetchSegment(0, state: state, firstExchangeOnly: true)
            if !state.plan.isComplete && state.rangesSupported {
                state.update { $0.splitRemainder(connections: options.connections, minSegmentSize: options.minSegmentSize) }
            }
        }
        let pending = state.plan.segments.indices.filter { !state.segment($0).isComplete }
        // The download starts (and says "resuming") once the server has agreed to a range: one
        // that sends the whole file instead starts from zero, and says so.
        let announced = Locked(false)
        let announce: @Sendable (Int64) -> Void = { [onEvent] from in
            guard announced.withLock({ done in defer { done = true }; return !done }) else { return }
            onEvent(.started(totalSize: state.plan.totalSize, resumedFrom: from,
                             segments: max(1, state.plan.segments.filter { !$0.isComplete }.count)))
        }
        // Nothing to ask for (every segment was complete) is agreed as it is.
        if resumedFrom == 0 || pending.isEmpty { announce(resumedFrom) }
        // From what is on disk once a server agreed (after an in-place start-over, nothing).
        let accepted: @Sendable () -> Void = { announce(state.plan.bytesWritten) }
        if pending.count == 1 && !state.plan.isSegmented {
            // One stream: no child task needed.
            try await fetchSegment(pending[0], state: state, onAccepted: accepted)
            return
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in pending {
                group.addTask {
                    // A connection that finishes early takes half of another's remainder.
                    var current: Int? = index
                    while let segment = current {
                        try await self.fetchSegment(segment, state: state, onAccepted: accepted)
                        current = try await self.work(forIdleConnectionOf: state)
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// Work for a connection whose segment is done: part of another's remainder
    /// (`SegmentPlan.splitLargestRemainder`), or nil when none is worth taking.
    /// While a remainder could still be split once its connection shows itself
    /// slow, the connection looks again every 20 ms (a few polls at the end of
    /// a fast download; a stalled connection is relieved within a second).
    private func work(forIdleConnectionOf state: DownloadState) async throws -> Int? {
        guard state.plan.isSegmented else { return nil }
        while true {
            if let index = state.stealWork(minSegmentSize: options.minSegmentSize) { return index }
            guard state.plan.hasSplittableRemainder(minSegmentSize: options.minSegmentSize) else { return nil }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }

    /// The most one exchange may ask for, for a transport without backpressure
    /// (its unconsumed backlog is then bounded by this window).
    /// The connections share `windowBudgetWithoutBackpressure` (4 MiB: all of
    /// it for one connection, 512 KiB each for eight), never under 512 KiB.
    var requestWindow: Int64? {
        guard !transport.capabilities.contains(.backpressure) else { return nil }
        let share = options.windowBudgetWithoutBackpressure / Int64(options.connections)
        return max(512 << 10, min(8 << 20, share))
    }

    /// One segment's attempts, retried by policy; bytes written survive each failure.
    /// - Parameter firstExchangeOnly: ask for at most `minSegmentSize` bytes and
    ///   return after the first successful exchange (the start of a segmented download).
    /// Starts over after a remote change, at most this many times for one download.
    static let maxRestarts = 3

    private func fetchSegment(_ index: Int, state: DownloadState, firstExchangeOnly: Bool = false,
                              onAccepted: (@Sendable () -> Void)? = nil) async throws {
        var failures = options.priorFailures
        // What this connection's exchanges showed, for the size of its next request
        // (`SegmentPlan.requestWindow`): the last one's rate, the shortest wait for a head.
        var rate: Double?
        var shortestWait = Double.infinity
        var exchanges = 0
        while !state.segment(index).isComplete {
            // A single stream that took a changed file in place counted the change in the sink.
            guard state.restarts <= Self.maxRestarts else {
                throw DownloadError.unstableSource(url: Redaction.url(options.url), restarts: state.restarts,
                                                   lastChange: "the server sent another version in place of the one being fetched")
            }
            defer { state.endExchange(index) }
            let furthestBefore = state.furthest
            var headers = options.headers
            let window = SegmentPlan.requestWindow(rate: rate, roundTrip: exchanges >= 2 ? shortestWait : nil,
                                                   floor: options.requestFloor)
            let ((segment, sendRange, requestEnd), sent) = state.beginExchange(index) { segment, segmented, rangesSupported in
                // A request is bounded for a transport without backpressure (its backlog), for the
                // opening request of a segmented download, and in a segmented download (a split for
                // an idle connection then falls between two requests, never inside one).
                let span = [requestWindow, firstExchangeOnly ? options.minSegmentSize : nil, segmented ? window : nil]
                    .compactMap { $0 }.min()
                let sendRange = rangesSupported && (segment.offset > 0 || segmented || span != nil)
                var requestEnd = segment.end
                if let span, sendRange {
                    requestEnd = min(segment.end ?? Int64.max, segment.offset + span)
                }
                return ((segment, sendRange, requestEnd), sendRange ? requestEnd : nil)
            }
            if segment.offset > 0 && !state.rangesSupported {
                // The server cannot resume: start the single stream over.
                try state.reset(plan: .single(totalSize: nil), validators: ResponseValidators(), rangesSupported: false)
                continue
            }
            if sendRange {
                let last = requestEnd.map { String($0 - 1) } ?? ""
                headers.set("Range", "bytes=\(segment.offset)-\(last)")
                if let ifRange = state.validators.ifRangeValue { headers.set("If-Range", ifRange) }
            }
            let sink = DownloadSink(state: state, segment: index, requestedOffset: segment.offset,
                                    requestedEnd: sendRange ? requestEnd : nil, sentRange: sendRange)
            sink.onAccepted = onAccepted
            // The job's own cap pauses the transfer below the floor's reach (`LowSpeedLimit.under`).
            sink.lowSpeed = options.lowSpeed.map {
                LowSpeedWatch(limit: $0.under(maxRate: currentRate, connections: options.connections), now: DownloadSink.seconds())
            }
            sink.onRestartInPlace = { [onEvent] reason in onEvent(.restarted(reason: reason)) }
            if let mirrors { sink.onWritten = { mirror, range in mirrors.wrote(range, by: mirror) } }
            do {
                do {
                    _ = try await transport.execute(makeRequest(headers: headers), sink: sink)
                } catch DownloadSignal.segmentSatisfied {
                }
                try sink.finish()
                let now = state.segment(index)
                if let head = sink.headArrivedAt, head >= sent {
                    let ended = DispatchTime.now().uptimeNanoseconds
                    let wait = Double(head - sent) / 1e9
                    shortestWait = min(shortestWait, wait)
                    exchanges += 1
                    if ended > head { rate = Double(now.offset - segment.offset) / (Double(ended - head) / 1e9) }
                }
                if now.end == nil {
                    state.finishOpenSegment(index)
                } else if !now.isComplete, now.offset < min(now.end!, requestEnd ?? Int64.max),
                          mirrors == nil || now.offset < (sink.answeredEnd ?? Int64.max) {
                    // Short of the range asked: cut off. (From a mirror, asked for a short range on
                    // purpose, an answer of that range delivered whole is not: the next request asks
                    // for the rest.)
                    throw TransportError(.truncated, url: options.url,
                                         message: "the response ended at byte \(now.offset) of \(now.end!)")
                }
                checkPieces(of: segment.offset..<now.offset, from: sink.servingMirror, state: state)
                if firstExchangeOnly { return }
            } catch {
                try? sink.flush()
                // One mirror too slow: it rests (`MirrorTransport`), and the next request goes to another.
                if error is TooSlow, let mirrors, mirrors.current.inUse.count > 1 { continue }
                if case DownloadSignal.restart = error { throw error }
                if case DownloadSignal.withoutRange = error { throw error }
                // Progress is new ground: bytes fetched again after a restart from 0 do not count,
                // nor do other segments' bytes (a segment only moves forward).
                let madeProgress = error is TooSlow ? false
                    : state.plan.isSegmented ? state.segment(index).offset > segment.offset
                    : state.furthest > furthestBefore
                failures = madeProgress ? 1 : failures + 1
                let (failure, described) = classify(error, sink: sink)
                switch options.retry.decide(failure, attempt: failures, madeProgress: madeProgress) {
                // After progress the pause is short: the job keeps its slot and resumes in place.
                case .retry(let delay) where delay > 0 && !madeProgress && !options.retryInPlace:
                    var throttled = false
                    if case .http(let status, _) = failure { throttled = status == 429 || status == 503 }
                    throw DownloadDeferred(delay: delay, reason: described, failures: failures, throttled: throttled)
                case .retry(let delay):
                    onEvent(.retrying(attempt: failures, delay: delay, reason: described,
                                      resumeAt: madeProgress ? state.segment(index).offset : nil))
                    if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
                case .giveUp(let reason):
                    throw finalError(error, reason: reason)
                }
            }
        }
    }

    private func classify(_ error: Error, sink: DownloadSink) -> (RetryPolicy.Failure, String) {
        switch error {
        case let exhausted as MirrorsExhausted:
            // Each mirror was tried and dropped already: another try later only when every one went
            // after failures that may pass (errors, timeouts, 5xx), not when they refused the file.
            return (exhausted.transient ? .transport(.other) : .local, exhausted.description)
        case let failure as HTTPStatusFailure:
            return (.http(status: failure.status, retryAfter: failure.retryAfter), "HTTP \(failure.status)")
        case let slow as TooSlow:
            return (.transport(.timeout), slow.description)
        case let transportError as TransportError:
            if let status = sink.errorStatus {
                return (.http(status: status.status, retryAfter: status.retryAfter), "HTTP \(status.status)")
            }
            return (.transport(transportError.kind), "\(transportError.kind.phrase): \(transportError.message)")
        case is POSIXFailure:
            return (.local, String(describing: error))
        case is CancellationError:
            return (.transport(.cancelled), "cancelled")
        default:
            return (.transport(.other), String(describing: error))
        }
    }

    private func finalError(_ error: Error, reason: String) -> Error {
        switch error {
        case let failure as HTTPStatusFailure:
            let retryable = RetryPolicy.Failure.http(status: failure.status, retryAfter: failure.retryAfter).isRetryable
            return DownloadError.httpStatus(status: failure.status, url: Redaction.url(options.url),
                                            message: failure.message, reason: retryable ? reason : nil)
        case let transportError as TransportError:
            if transportError.kind == .cancelled { return CancellationError() }
            return DownloadError.transport(transportError, reason: reason)
        case let slow as TooSlow:
            return DownloadError.transport(slow.transportError, reason: reason)
        case let failure as POSIXFailure:
            return DownloadError.local(failure)
        default:
            return error
        }
    }

    // MARK: Checkpoints and progress

    /// Reports progress four times a second and checkpoints every `checkpointInterval`.
    private func tick(_ state: DownloadState) async {
        var lastCheckpoint = Date()
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: UInt64(min(0.25, options.checkpointInterval) * 1e9))
            let plan = state.plan
            onEvent(.progress(written: plan.bytesWritten, totalSize: plan.totalSize, received: state.bytesReceived))
            if Date().timeIntervalSince(lastCheckpoint) >= options.checkpointInterval {
                try? saveCheckpoint(state)
                lastCheckpoint = Date()
            }
        }
    }

    /// Records the written bytes. With `sync` the file is synced first (data
    /// before the claim) and the checkpoint claims only durable bytes; without,
    /// it also claims bytes still in the page cache, trusted only in this boot
    /// (see `DownloadCheckpoint.trusted(inBoot:)`). `sync` defaults to
    /// `syncEachFile`; with it off the caller makes finished files durable in
    /// batches (the queue calls `syncfs` before committing finished jobs).
    func saveCheckpoint(_ state: DownloadState, sync: Bool? = nil) throws {
        // One at a time (the ticker, the transport threads and the error paths may meet), and
        // never across a reset: a snapshot taken before the file was started over must not be
        // saved, or marked synced, after it.
        state.persistLock.lock()
        defer { state.persistLock.unlock() }
        if let failure = state.syncFailure { throw failure }
        var checkpoint = state.checkpoint()
        state.checkpointTaken()
        if sync ?? options.syncEachFile {
            guard fdatasync(state.fd) == 0 else { throw syncFailed(state, checkpoint) }
            state.markDurable(checkpoint.plan)
            checkpoint.durable = nil
            checkpoint.bootID = nil
        }
        try store.save(checkpoint)
    }

    /// After a failed sync: the failure sticks to the download (see `DownloadState.syncFailure`)
    /// and the checkpoint keeps only the bytes synced before, so the retry fetches the rest again
    /// instead of trusting pages the kernel may have dropped. Returns the failure to throw.
    private func syncFailed(_ state: DownloadState, _ checkpoint: DownloadCheckpoint) -> POSIXFailure {
        let failure = POSIXFailure(operation: "sync", path: state.partPath)
        state.noteSyncFailed(failure)
        try? store.save(checkpoint.durableOnly)
        return failure
    }

    // MARK: Finish

    /// Checks length and checksum, syncs, and renames the partial file into place.
    /// Checks the pieces a finished exchange wrote whole, as soon as they are on disk: a mirror
    /// that alone served a failing one is dropped at once, before it serves more (the bytes are
    /// fetched again when the file is complete, `checkPieces(_:state:size:)`).
    private func checkPieces(of written: Range<Int64>, from mirror: Int?, state: DownloadState) {
        guard let pieces = options.pieces, let mirrors, let mirror, let size = state.plan.totalSize, !written.isEmpty else { return }
        let touched = pieces.pieces(overlapping: written)
        let whole = touched.filter { pieces.range(of: $0, size: size).clamped(to: written) == pieces.range(of: $0, size: size) }
        guard let first = whole.first, let last = whole.last,
              let failing = try? PieceCheck.failing(fd: state.fd, size: size, pieces: pieces, path: state.partPath,
                                                     only: first..<(last + 1)),
              let bad = failing.first, mirrors.sole(pieces.range(of: bad, size: size)) == mirrors.url(of: mirror) else { return }
        mirrors.drop(mirrors.url(of: mirror), reason: "piece \(bad) as it served it fails its \(pieces.algorithm.rawValue) hash")
    }

    /// Checks the complete file against the piece hashes: failing pieces are fetched again
    /// (`DownloadSignal.refetch`), and a mirror that alone served a failing piece is dropped first.
    private func checkPieces(_ pieces: PieceHashes, state: DownloadState, size: Int64) throws {
        onEvent(.verifying)
        let failing = try PieceCheck.failing(fd: state.fd, size: size, pieces: pieces, path: state.partPath)
        guard let first = failing.first else { return }
        let ranges = failing.map { pieces.range(of: $0, size: size) }
        var culprits: [URL] = []
        var suspects: [URL] = []
        if let mirrors {
            for (index, range) in zip(failing, ranges) {
                suspects += mirrors.suspects(in: range).filter { !suspects.contains($0) }
                if let sole = mirrors.sole(range), !culprits.contains(sole) {
                    culprits.append(sole)
                    mirrors.drop(sole, reason: "piece \(index) as it served it fails its \(pieces.algorithm.rawValue) hash")
                }
            }
        }
        let named = suspects.map { Redaction.url($0) }
        let rounds = pieceRounds.withLock { rounds -> Int in
            rounds += 1
            return rounds
        }
        guard rounds <= Self.maxPieceRounds else {
            unlink(state.partPath)
            try? store.remove()
            throw DownloadError.piecesMismatch(path: options.destination, failing: failing.count, of: pieces.hashes.count,
                                               first: first, suspects: named)
        }
        throw DownloadSignal.refetch(ranges, reason: "\(failing.count) of \(pieces.hashes.count) pieces fail their "
            + "\(pieces.algorithm.rawValue) hashes (first: piece \(first))" + (named.isEmpty ? "" : "; served by \(named.joined(separator: ", "))"))
    }

    private func finalize(_ state: DownloadState, _ file: PartFile) throws -> (Int64, String?) {
        let plan = state.plan
        var info = stat()
        guard fstat(state.fd, &info) == 0 else {
            throw DownloadError.local(POSIXFailure(operation: "stat", path: state.partPath))
        }
        // Checked, removed and renamed by its name below: a name that no longer names this file (a
        // worker that took the job over made a new one there, `PartFile.replaced`) is not ours to touch.
        guard PartFile.names(state.fd, state.partPath) else { throw DownloadError.partInUse(path: state.partPath) }
        let size = plan.totalSize ?? plan.bytesWritten
        if let expected = options.expectedSize, expected != size {
            unlink(state.partPath)
            try? store.remove()
            throw DownloadError.sizeMismatch(path: options.destination, expected: expected, actual: size)
        }
        if Int64(info.st_size) > size {
            ftruncate(state.fd, off_t(size))
        } else if Int64(info.st_size) < size {
            throw DownloadError.sizeMismatch(path: options.destination, expected: size, actual: Int64(info.st_size))
        }
        if let failure = state.syncFailure { throw DownloadError.local(failure) }
        if options.syncEachFile {
            guard fsync(state.fd) == 0 else {
                state.persistLock.lock()
                defer { state.persistLock.unlock() }
                throw DownloadError.local(syncFailed(state, state.checkpoint()))
            }
        } else {
            // The caller syncs in batches; start this file's writeback now so
            // the disk works while other transfers run, and the batch's sync
            // finds little left to wait for (from a thread of its own: see
            // `Writeback.startDetached`).
            Writeback.startDetached(state.fd)
        }
        if let pieces = options.pieces { try checkPieces(pieces, state: state, size: size) }
        var digest: String?
        if let expected = expectedSHA256 {
            onEvent(.verifying)
            let actual = try SHA256Hasher.hex(ofFileAt: state.partPath)
            if actual != expected, let mirrors, let narrowed = mirrors.narrowToOne() {
                // Several mirrors served it: one of them lied, or more. The bytes the others served
                // are fetched again from the one that served the most; the ones that then differ name it.
                // A later round proved one mirror wrong (dropped as it was narrowed): the suspects of
                // the round before are not named on its account.
                suspects.withLock { $0 = narrowed.proven ? [] : narrowed.suspects }
                let named = narrowed.suspects.map { Redaction.url($0) }.joined(separator: ", ")
                throw DownloadSignal.refetch(narrowed.refetch, reason: "the file's SHA-256 is \(actual), not \(expected); "
                    + "fetching from \(Redaction.url(narrowed.mirror)) what other mirrors served (suspects: \(named.isEmpty ? "none" : named))")
            }
            guard actual == expected else {
                unlink(state.partPath)
                try? store.remove()
                throw DownloadError.checksumMismatch(path: options.destination, expected: expected, actual: actual)
            }
            digest = actual
            // It matches now: the mirrors whose bytes were replaced served wrong ones.
            for suspect in suspects.withLock({ $0 }) {
                mirrors?.drop(suspect, reason: "suspect, not proven: the file failed its SHA-256 with bytes it served among "
                              + "others', and passed with them fetched from another mirror")
            }
        } else if let published = state.published {
            // No checksum from the job: the one the server published, if it did.
            onEvent(.verifying)
            let actual = try published.digest(ofFileAt: state.partPath)
            guard actual == published.value else {
                unlink(state.partPath)
                try? store.remove()
                throw DownloadError.publishedChecksumMismatch(
                    path: options.destination, algorithm: published.algorithm.rawValue, header: published.header,
                    expected: PublishedChecksum.shown(published.value, published.algorithm),
                    actual: PublishedChecksum.shown(actual, published.algorithm))
            }
            if published.algorithm == .sha256 { digest = PublishedChecksum.shown(actual, .sha256) }
        }
        if let modified = state.validators.lastModified.flatMap(HTTPDate.parse) {
            var times = [timespec(tv_sec: Int(modified.timeIntervalSince1970), tv_nsec: 0),
                         timespec(tv_sec: Int(modified.timeIntervalSince1970), tv_nsec: 0)]
            futimens(state.fd, &times)
        }
        // Complete: how far it was written says nothing more.
        state.removeWrittenRecord()
        // What this file is, for a later --skip-unchanged to ask the server about.
        RecordedValidators.write(state.validators, url: options.url, fd: state.fd)
        // The queue renames it later, and takes the tag off then (`PartFile.untag`).
        if options.deferRename { return (size, digest) }
        // Record completion first: a crash right after the rename is then recognised as done.
        try saveCheckpoint(state)
        guard rename(state.partPath, options.destination) == 0 else {
            throw DownloadError.local(POSIXFailure(operation: "rename", path: options.destination))
        }
        file.untag()
        if options.syncEachFile { AtomicFile.syncDirectory(of: options.destination) }
        try? store.remove()
        return (size, digest)
    }
}
