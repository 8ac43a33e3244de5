import Foundation

/// Receives one exchange of one segment and writes its bytes into the partial
/// file at the right offset, in writes of `DownloadOptions.writeBufferSize`.
///
/// What it may write is `ResponseDecision`'s verdict on the response head: a
/// range where the segment continues, the whole file (in place, for a single
/// stream), nothing (a 416 at the file's end), or a signal that stops the
/// exchange before any byte is written. Two versions are never spliced. Error
/// statuses keep up to 4 KiB of the body for the message.
final class DownloadSink: ResponseSink {
    private enum Mode {
        case awaitingHead
        case writing
        case errorBody(status: Int, retryAfter: RetryAfter?, text: Data)
        case nothingLeft
    }

    private let state: DownloadState
    private let index: Int
    private let requestedOffset: Int64
    /// Where the requested range ends (exclusive), if the request had an end.
    private var requestedEnd: Int64?
    private let sentRange: Bool
    private var mode = Mode.awaitingHead
    /// Allocated when the body starts, no bigger than the response needs.
    private var buffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    private var buffered = 0
    /// File offset of the first byte in `buffer`.
    private var bufferOffset: Int64 = 0
    /// Where the bytes written but not yet handed to the disk start (see `Writeback`).
    private var writebackFrom: Int64 = 0

    init(state: DownloadState, segment index: Int, requestedOffset: Int64, requestedEnd: Int64?, sentRange: Bool) {
        self.requestedEnd = requestedEnd
        self.state = state
        self.index = index
        self.requestedOffset = requestedOffset
        self.sentRange = sentRange
    }

    deinit { WriteBuffers.shared.give(buffer) }

    private func allocateBuffer(expected: Int64?) {
        guard buffer.baseAddress == nil else { return }
        let limit = Int64(state.writeBufferSize)
        let size = Int(min(limit, max(64 * 1024, expected ?? limit)))
        buffer = WriteBuffers.shared.take(byteCount: size)
    }

    /// Orders the transport thread's callbacks before the engine's `finish` /
    /// `flush` after `execute` returns. The transport never calls concurrently,
    /// and its completion already orders them; the lock states it where
    /// ThreadSanitizer can see it (it reported the Swift continuation handoff
    /// as a race once) and costs an uncontended lock per callback.
    private let handoff = PlainLock()

    /// When the response head arrived (`DispatchTime` nanoseconds), for `SegmentPlan.requestWindow`.
    private var headArrival: UInt64?
    var headArrivedAt: UInt64? {
        handoff.lock()
        defer { handoff.unlock() }
        return headArrival
    }

    func receive(head: ResponseHead) throws {
        handoff.lock()
        defer { handoff.unlock() }
        headArrival = DispatchTime.now().uptimeNanoseconds
        let answer = ResponseDecision.Answer(head: head)
        allocateBuffer(expected: answer.contentLength)
        let asked = ResponseDecision.Asked(offset: requestedOffset, end: requestedEnd, sentRange: sentRange)
        let known = ResponseDecision.Known(totalSize: state.plan.totalSize, validators: state.validators,
                                           segmented: state.plan.isSegmented)
        let verdict = ResponseDecision.decide(asked: asked, known: known, answer: answer)
        switch verdict {
        case .range(let end, let completeLength):
            requestedEnd = end
            answered = end
            if state.validators.isEmpty {
                // The first response of this download: it names the version every later range must match.
                state.setValidators(answer.validators, rangesSupported: true)
            }
            if let completeLength, state.plan.totalSize == nil { state.learnTotalSize(completeLength) }
            try startWriting(at: requestedOffset)
        case .wholeUnlessItEndsAt(let span, let changed, let rangesSupported):
            ambiguousAt = span
            try takeWhole(size: nil, changed: changed, rangesSupported: rangesSupported, answer: answer, known: known)
        case .whole(let size, let changed, let rangesSupported):
            try takeWhole(size: size, changed: changed, rangesSupported: rangesSupported, answer: answer, known: known)
        case .nothingLeft(let size):
            if state.plan.totalSize == nil { state.learnTotalSize(size) }
            if state.validators.isEmpty { state.setValidators(answer.validators, rangesSupported: state.rangesSupported) }
            mode = .nothingLeft
        case .withoutRange(let reason):
            throw DownloadSignal.withoutRange(reason: reason)
        case .restart(let reason):
            throw DownloadSignal.restart(reason: reason)
        case .refuse(let reason):
            throw TransportError(.protocolError, url: head.url, message: reason)
        case .error(let status):
            let retryAfter = head.headers["Retry-After"].flatMap(RetryAfter.init(header:))
            mode = .errorBody(status: status, retryAfter: retryAfter, text: Data())
        }
        if case .errorBody = mode { return }
        state.notePublished(PublishedChecksum.from(status: head.status, headers: head.headers))
        onAccepted?()
        onAccepted = nil
    }

    /// Takes the body as the whole file from byte 0 (in place for a single stream that had bytes).
    private func takeWhole(size: Int64?, changed: Bool, rangesSupported: Bool,
                           answer: ResponseDecision.Answer, known: ResponseDecision.Known) throws {
        if sentRange {
            if changed { state.noteRemoteChanged() }
            // A single stream takes the full body in place: start the file over.
            requestedEnd = nil
            let discarded = state.plan.bytesWritten
            try state.reset(plan: .single(totalSize: size), validators: answer.validators, rangesSupported: rangesSupported)
            // Said when bytes are thrown away, and when the version is another than expected.
            if changed {
                onRestartInPlace?(ResponseDecision.versionChange(known.validators, answer.validators))
            } else if discarded > 0 {
                onRestartInPlace?("the server sent the whole file (200), not bytes from \(requestedOffset)")
            }
        } else {
            state.adoptFullResponse(validators: answer.validators, size: size, rangesSupported: rangesSupported)
        }
        try startWriting(at: 0)
    }

    /// Where the answer's range ends (exclusive), when it was a range: a server may answer with
    /// less than was asked (a mirror asked for a short range, `MirrorTransport`), and a body that
    /// reaches it is complete.
    private var answered: Int64?
    var answeredEnd: Int64? {
        handoff.lock()
        defer { handoff.unlock() }
        return answered
    }

    /// For `.wholeUnlessItEndsAt`: a body that ends exactly here may have been only the range.
    private var ambiguousAt: Int64?

    /// Called once a head is accepted (the single stream's `started` event waits for it: a
    /// resume the server answered with the whole file does not say "resuming").
    var onAccepted: (() -> Void)?
    /// Called when a single stream discards the bytes it had to take a whole file in place.
    var onRestartInPlace: ((String) -> Void)?

    private func startWriting(at offset: Int64) throws {
        try state.reserveSpaceIfKnown()
        mode = .writing
        bufferOffset = offset
        writebackFrom = offset
        buffered = 0
    }

    /// The mirror this exchange's answer came from (`MirrorTransport`), and where the engine
    /// hears of each range written from it (`MirrorSet.wrote`): only bytes written count, not
    /// bytes received past a segment's moved end.
    var servingMirror: Int?
    var onWritten: ((Int, Range<Int64>) -> Void)?

    /// Set by the engine: the floor under this exchange's speed.
    var lowSpeed: LowSpeedWatch?

    /// Time the transport said it would hold this exchange back for a rate limit, not yet
    /// counted by the speed floor.
    private var purposefulWait: Double = 0

    func willWait(seconds: TimeInterval) {
        handoff.lock()
        purposefulWait += seconds
        handoff.unlock()
    }

    func receive(body: UnsafeRawBufferPointer) throws {
        handoff.lock()
        defer { handoff.unlock() }
        state.recordReceived(body.count)
        // The run's bucket may hold this piece back (a transport that cannot pause one exchange
        // leaves it to the sink), and the transport may have paused before it: neither wait is
        // slowness.
        var waited = state.limiter.map { limiter in
            let before = Self.seconds()
            limiter.consume(body.count)
            return Self.seconds() - before
        } ?? 0
        waited += purposefulWait
        purposefulWait = 0
        if let limit = lowSpeed?.limit, lowSpeed?.observe(body.count, at: Self.seconds(), waited: waited) == true {
            throw TooSlow(url: state.url, limit: limit)
        }
        switch mode {
        case .writing:
            try write(body)
        case .errorBody(let status, let retryAfter, var text):
            if text.count < 4096 { text.append(contentsOf: body.prefix(4096 - text.count)) }
            mode = .errorBody(status: status, retryAfter: retryAfter, text: text)
        case .awaitingHead, .nothingLeft:
            break
        }
    }

    private func write(_ body: UnsafeRawBufferPointer) throws {
        var remaining = body
        // Never write past the segment's end, which may move while we run.
        let end = min(state.segment(index).end ?? .max, requestedEnd ?? .max)
        let limit = end == .max ? Int64.max : end - (bufferOffset + Int64(buffered))
        // More than the range allows (a moved end, or a server sending too much): stop there.
        var satisfied = false
        if Int64(remaining.count) > limit {
            remaining = UnsafeRawBufferPointer(rebasing: remaining.prefix(Int(max(0, limit))))
            satisfied = true
        }
        // A large piece goes straight to the file, after what is buffered: no copy. (Copied in
        // behind a small first piece, every 256 KiB file of a queue was moved in memory once.)
        if remaining.count >= Self.directWriteMinimum {
            try flushLocked()
            try writeOut(remaining)
            remaining = UnsafeRawBufferPointer(start: nil, count: 0)
        }
        while !remaining.isEmpty {
            let space = buffer.count - buffered
            let take = min(space, remaining.count)
            UnsafeMutableRawBufferPointer(rebasing: buffer[buffered..<(buffered + take)])
                .copyMemory(from: UnsafeRawBufferPointer(rebasing: remaining.prefix(take)))
            buffered += take
            remaining = UnsafeRawBufferPointer(rebasing: remaining.dropFirst(take))
            if buffered == buffer.count { try flushLocked() }
        }
        if satisfied {
            try flushLocked()
            throw DownloadSignal.segmentSatisfied
        }
    }

    /// A monotonic clock in seconds.
    static func seconds() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// Pieces at least this big skip the buffer.
    static let directWriteMinimum = 64 * 1024

    /// Writes the buffered bytes to the file and records them in the plan.
    func flush() throws {
        handoff.lock()
        defer { handoff.unlock() }
        try flushLocked()
    }

    private func flushLocked() throws {
        guard case .writing = mode, buffered > 0 else { return }
        let pending = UnsafeRawBufferPointer(rebasing: buffer[0..<buffered])
        buffered = 0
        try writeOut(pending)
    }

    /// Writes `bytes` at the current offset and records them; on failure,
    /// what did reach the file is still recorded.
    private func writeOut(_ bytes: UnsafeRawBufferPointer) throws {
        if let failure = state.syncFailure { throw failure }
        var done = 0
        while done < bytes.count {
            let n = pwrite(state.fd, bytes.baseAddress! + done, bytes.count - done, off_t(bufferOffset + Int64(done)))
            if n < 0 {
                if errno == EINTR { continue }
                let failure = POSIXFailure(operation: "write", path: state.partPath)
                if let mirror = servingMirror, done > 0 { onWritten?(mirror, bufferOffset..<(bufferOffset + Int64(done))) }
                state.recordWritten(Int64(done), segment: index)
                bufferOffset += Int64(done)
                throw failure
            }
            done += n
        }
        #if TRANSFERD_SLOW_DISK
        SlowDisk.throttle(bytes: bytes.count)
        #endif
        if let mirror = servingMirror { onWritten?(mirror, bufferOffset..<(bufferOffset + Int64(bytes.count))) }
        bufferOffset += Int64(bytes.count)
        if bufferOffset - writebackFrom >= Writeback.chunk {
            Writeback.start(state.fd, offset: writebackFrom, count: bufferOffset - writebackFrom)
            writebackFrom = bufferOffset
        }
        state.recordWritten(Int64(bytes.count), segment: index)
    }

    /// After the exchange: flushes, and turns an error status into a failure.
    func finish() throws {
        handoff.lock()
        defer { handoff.unlock() }
        try flushLocked()
        if let span = ambiguousAt, case .writing = mode, bufferOffset == span {
            throw DownloadSignal.withoutRange(reason: "the server answered a request for bytes 0-\(span - 1) with 200, "
                + "no length and exactly \(span) bytes, which may be that range or the whole file; asking for the whole file")
        }
        if case .errorBody(let status, let retryAfter, let text) = mode {
            throw HTTPStatusFailure(status: status, retryAfter: retryAfter, message: ServerMessage.summary(text))
        }
    }

    /// The status if the server answered with an error, for classifying a failed exchange.
    var errorStatus: HTTPStatusFailure? {
        if case .errorBody(let status, let retryAfter, let text) = mode {
            return HTTPStatusFailure(status: status, retryAfter: retryAfter,
                                     message: ServerMessage.summary(text))
        }
        return nil
    }
}

/// Write buffers kept for the next exchange: a queue of small downloads
/// otherwise allocates and frees one per file, which fragments the heap
/// (peak RSS) and faults fresh pages in each time. Sizes are rounded up to a
/// power of two (at least 64 KiB), so a few classes serve every response, and
/// at most 16 MiB is kept idle.
// The idle buffers are a `Locked` pool; a buffer taken out belongs to one sink until given back.
final class WriteBuffers: Sendable {
    static let shared = WriteBuffers()
    static let idleLimit = 16 << 20
    private let idle = Locked<(buffers: [Int: [UnsafeMutableRawBufferPointer]], bytes: Int)>(([:], 0))

    /// Bytes held idle now.
    var idleBytes: Int { idle.withLock { $0.bytes } }

    /// A buffer of at least `byteCount` bytes.
    func take(byteCount: Int) -> UnsafeMutableRawBufferPointer {
        let size = Self.sizeClass(byteCount)
        let reused = idle.withLock { pool -> UnsafeMutableRawBufferPointer? in
            guard let buffer = pool.buffers[size]?.popLast() else { return nil }
            pool.bytes -= buffer.count
            return buffer
        }
        return reused ?? .allocate(byteCount: size, alignment: 64)
    }

    func give(_ buffer: UnsafeMutableRawBufferPointer) {
        guard buffer.baseAddress != nil else { return }
        let kept = idle.withLock { pool -> Bool in
            guard buffer.count == Self.sizeClass(buffer.count), pool.bytes + buffer.count <= Self.idleLimit else { return false }
            pool.buffers[buffer.count, default: []].append(buffer)
            pool.bytes += buffer.count
            return true
        }
        if !kept { buffer.deallocate() }
    }

    static func sizeClass(_ byteCount: Int) -> Int {
        var size = 64 << 10
        while size < byteCount { size <<= 1 }
        return size
    }
}
