import Foundation

/// Fetching: the connections, each taking the next segment (or a mirror's share), and what a
/// failed exchange means.
extension DownloadEngine {
    // MARK: Fetch

    /// Fetches every incomplete segment, checkpointing as it goes.
    ///
    /// A fresh segmented download first asks for one segment's worth of bytes
    /// from 0: its 206 tells the size, the version and that ranges work, then
    /// the rest is split over the connections. No separate probe request.
    func fetchAll(_ state: DownloadState, fresh: Bool) async throws {
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

    func fetchSegments(_ state: DownloadState, fresh: Bool) async throws {
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
    func work(forIdleConnectionOf state: DownloadState) async throws -> Int? {
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

    func fetchSegment(_ index: Int, state: DownloadState, firstExchangeOnly: Bool = false,
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

    func classify(_ error: Error, sink: DownloadSink) -> (RetryPolicy.Failure, String) {
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

    func finalError(_ error: Error, reason: String) -> Error {
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
}
