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
    let currentState = Locked<DownloadState?>(nil)
    /// `options.maxRate` as one bucket shared by every request of this download.
    let rateLimiter: BandwidthLimiter?
    /// With `options.mirrors`: the transport that spreads the requests over them (also `transport`).
    let mirrors: MirrorTransport?

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
    var currentRate: Int64? {
        rateLimiter.map { $0.bytesPerSecond.map { Int64($0) } } ?? options.maxRate
    }

    /// Changes the download's own rate limit from now on, for all its connections (nil: none).
    /// Only a download made with `rateAdjustable` (or a `maxRate`) has a bucket to change.
    package func setRate(_ bytesPerSecond: Int64?) {
        rateLimiter?.setRate(bytesPerSecond)
    }

    /// The SHA-256 the file must have: the options' own, else the one the checksum list gives
    /// (read at the start of `run`), else none.
    var expectedSHA256: String? { options.sha256 ?? listedSHA256.withLock { $0 } }
    let listedSHA256 = Locked<String?>(nil)
    /// Mirrors whose bytes failed the file's checksum, being fetched again from another.
    let suspects = Locked<[URL]>([])
    /// Times failing pieces were fetched again (`checkPieces`).
    let pieceRounds = Locked(0)
    static let maxPieceRounds = 3

    /// What each mirror served in this run (empty without mirrors).
    var mirrorShares: [MirrorShare] {
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
    func openPartialFile(_ saved: DownloadCheckpoint?, recordFound: Bool, held: PartFile?) throws -> (DownloadState, PartFile) {
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
    func finishedEarlier(_ saved: DownloadCheckpoint?) throws -> Int64? {
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
    func existingMatches() async throws -> Int64? {
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
    func sha256(from list: URL) async throws -> String {
        let name = options.checksumsName ?? (options.url.path as NSString).lastPathComponent
        var attempt = options.priorFailures
        while true {
            attempt += 1
            let request = TransferRequest(method: "GET", url: list, headers: [:], connectTimeout: options.connectTimeout,
                                          idleTimeout: options.idleTimeout, maxRedirects: options.maxRedirects, tls: options.tls)
            let failure: RetryPolicy.Failure
            let thrown: Error
            do {
                let (status, body, headers) = try await BoundedRead.read(
                    request, limit: ChecksumList.maxBytes,
                    advice: "a SHA256SUMS list is a line per file; check the job's checksums URL", transport: transport)
                if (200..<300).contains(status) {
                    let parsed = ChecksumList(String(decoding: body, as: UTF8.self))
                    guard let value = parsed.sha256(for: name) else {
                        throw DownloadError.notInChecksumList(list: Redaction.url(list), name: name,
                                                              ambiguous: parsed.ambiguous.contains(name))
                    }
                    return value
                }
                failure = .http(status: status, retryAfter: headers["Retry-After"].flatMap(RetryAfter.init(header:)))
                thrown = DownloadError.httpStatus(status: status, url: Redaction.url(list),
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
}
