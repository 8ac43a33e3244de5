import Foundation

/// The transport of a download with several mirrors (`DownloadOptions.mirrors`): each request
/// the download makes for its URL goes to one mirror, chosen by `MirrorSet`, and the answer is
/// judged before any of its body reaches the download. A mirror that answers with another
/// size, another version, a whole file for a range or an error is dropped (or rested) and the
/// request goes to the next one; the download never sees it. An accepted answer carries the
/// set's canonical validators in place of the mirror's own, so the download, its checkpoints and
/// its resume see one version whichever mirror served which bytes.
///
/// Requests for any other URL (a checksum list) pass through unchanged. Credentials the job's
/// headers carry (`RedirectPolicy.isOriginOnly`) go only to mirrors of the download URL's origin.
final class MirrorTransport: Transport, Sendable {
    let base: Transport
    /// The download's own URL: the requests for it are spread.
    let primary: URL
    let expectedSize: Int64?
    private let pool: Locked<MirrorSet>
    private let settling = Locked<Task<Void, Error>?>(nil)
    private let onDrop: @Sendable (_ url: URL, _ reason: String) -> Void

    init(base: Transport, primary: URL, mirrors: [URL], perMirror: Int, expectedSize: Int64?,
         onDrop: @escaping @Sendable (URL, String) -> Void) {
        self.base = base
        self.primary = primary
        self.expectedSize = expectedSize
        self.onDrop = onDrop
        pool = Locked(MirrorSet(urls: [primary] + mirrors, perMirror: perMirror))
    }

    var name: String { base.name }
    var capabilities: TransportCapabilities { base.capabilities }

    /// A snapshot, for checkpoints and the result.
    var current: MirrorSet { pool.current }

    /// Takes the checkpoint's pins (nil: a fresh file). Mirrors are asked again before the next
    /// request: a HEAD sent before the checkpoint was read (`--skip-unchanged`) settled them
    /// without it.
    func restore(_ pins: MirrorPins?) {
        pool.withLock { if let pins { $0.restore(pins) } else { $0.forgetPins() } }
        settling.withLock { $0 = nil }
    }

    /// Whether the finished file is checked (`MirrorSet.verified`).
    func setVerified(_ verified: Bool) {
        pool.withLock { $0.verified = verified }
    }

    /// Records that `mirror`'s bytes were written at `range` (`DownloadSink.onWritten`).
    func wrote(_ range: Range<Int64>, by mirror: Int) {
        pool.withLock { $0.wrote(range, by: mirror) }
    }

    /// The URL of mirror `index`.
    func url(of index: Int) -> URL { pool.current.mirrors[index].url }

    /// Narrows the download to one mirror after a checksum mismatch (`MirrorSet.narrowToOne`).
    func narrowToOne() -> (mirror: URL, refetch: [Range<Int64>], suspects: [URL], proven: Bool)? {
        let narrowed = pool.withLock { set -> (URL, [Range<Int64>], [URL], (URL, String)?)? in
            let before = set
            guard let (chosen, refetch, proven) = set.narrowToOne() else { return nil }
            // The mirrors whose bytes are about to be replaced.
            let suspects = before.mirrors.indices.filter { $0 != chosen && before.holds($0) > 0 && set.mirrors[$0].dropped == nil }
            return (set.mirrors[chosen].url, refetch, suspects.map { set.mirrors[$0].url },
                    proven.map { (set.mirrors[$0.mirror].url, $0.reason) })
        }
        guard let narrowed else { return nil }
        if let (url, reason) = narrowed.3 { onDrop(url, reason) }
        return (narrowed.0, narrowed.1, narrowed.2, narrowed.3 != nil)
    }

    /// The mirrors that delivered any of `bytes` in this run.
    func suspects(in bytes: Range<Int64>) -> [URL] {
        let set = pool.current
        return set.suspects(in: bytes).map { set.mirrors[$0].url }
    }

    /// The one mirror that delivered every byte of `bytes` in this run, if one did.
    func sole(_ bytes: Range<Int64>) -> URL? {
        let set = pool.current
        let suspects = set.suspects(in: bytes)
        guard suspects.count == 1, set.servedEntirely(bytes, by: suspects[0]) else { return nil }
        return set.mirrors[suspects[0]].url
    }

    /// Drops `mirror` (bytes it served failed a piece's hash).
    func drop(_ url: URL, reason: String) {
        let dropped = pool.withLock { set -> Bool in
            guard let index = set.mirrors.firstIndex(where: { $0.url == url }) else { return false }
            return set.drop(index, reason: reason)
        }
        if dropped { onDrop(url, reason) }
    }

    func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome {
        guard request.url == primary else { return try await base.execute(request, sink: sink) }
        try await settleOnce(like: request)
        let offset = Self.rangeStart(request.headers["Range"])
        while true {
            try Task.checkCancellation()
            guard let mirror = try await acquire() else { throw exhausted() }
            let (url, pin, canonical) = pool.withLock { ($0.mirrors[mirror].url, $0.mirrors[mirror].pin, $0.canonical) }
            var sent = request
            sent.url = url
            if !RedirectPolicy.sameOrigin(url, primary) {
                for field in request.headers where RedirectPolicy.isOriginOnly(field) { sent.headers.remove(field.name) }
            }
            // A slow or untried mirror is asked for a short range (`MirrorSet.requestCap`); the download
            // takes a shorter answer, delivered whole, and asks for the rest next.
            if let offset, let cap = pool.current.requestCap(mirror), let asked = Self.rangeEnd(request.headers["Range"]),
               asked - offset + 1 > cap {
                sent.headers.set("Range", "bytes=\(offset)-\(offset + cap - 1)")
            } else if let offset, request.headers["Range"] == "bytes=\(offset)-", let cap = pool.current.requestCap(mirror) {
                sent.headers.set("Range", "bytes=\(offset)-\(offset + cap - 1)")
            }
            // The download names its version by the canonical validators; each mirror by its own.
            if sent.headers["If-Range"] != nil {
                if let value = pin?.ifRangeValue { sent.headers.set("If-Range", value) } else { sent.headers.remove("If-Range") }
            }
            let relay = Relay(sink: sink, judge: { [pool] head in
                let validators = ResponseValidators(headers: head.headers)
                return pool.withLock { set in
                    let judgement = set.judge(mirror, status: head.status,
                                              contentRange: head.headers["Content-Range"].flatMap(ContentRange.init(header:)),
                                              validators: validators, offset: offset ?? 0, ranged: offset != nil)
                    // A mirror that was unavailable when the others were asked is pinned by its first answer.
                    if judgement == .accept, head.status / 100 == 2 { set.pinIfNeeded(mirror, validators) }
                    return judgement
                }
            }, canonical: canonical)
            // The download's sink records which mirror's bytes it writes where.
            (sink as? DownloadSink)?.servingMirror = mirror
            do {
                var outcome = try await base.execute(sent, sink: relay)
                outcome.head = relay.shownHead ?? outcome.head
                let (bytes, seconds) = relay.measured
                pool.withLock { $0.finish(mirror, bytes: bytes, seconds: seconds, offset: nil, failure: nil, now: Self.now()) }
                return outcome
            } catch let rejected as Rejected {
                let dropped = pool.withLock { set -> Bool in
                    set.release(mirror)
                    switch rejected.judgement {
                    case .drop(let reason): return set.drop(mirror, reason: reason)
                    case .rest(let reason):
                        set.rest(mirror, reason: reason, now: Self.now())
                        return set.mirrors[mirror].dropped != nil
                    case .accept: return false
                    }
                }
                if dropped, let reason = pool.current.mirrors[mirror].dropped { onDrop(url, reason) }
                continue
            } catch {
                let (bytes, seconds) = relay.measured
                // The download's own signals (a segment satisfied, a write that failed) are not the mirror's fault.
                let mirrorsFault = !relay.sinkThrew || error is TooSlow
                let described = String(describing: error)
                let dropped = pool.withLock { set -> Bool in
                    set.finish(mirror, bytes: bytes, seconds: seconds, offset: nil,
                               failure: mirrorsFault && !(error is CancellationError) ? described : nil, now: Self.now())
                    return set.mirrors[mirror].dropped != nil
                }
                if dropped, let reason = pool.current.mirrors[mirror].dropped { onDrop(url, reason) }
                // Nothing delivered and another mirror to ask: the download need not hear of it.
                if mirrorsFault, bytes == 0, !(error is CancellationError), relay.shownHead == nil,
                   pool.current.inUse.contains(where: { $0 != mirror }) {
                    continue
                }
                throw error
            }
        }
    }

    /// A free slot on some mirror, waiting while every slot is taken or every mirror rests; nil
    /// when no mirror is left.
    private func acquire() async throws -> Int? {
        while true {
            let now = Self.now()
            let (chosen, wait) = pool.withLock { set in (set.choose(now: now), set.wait(now: now)) }
            if let chosen { return chosen }
            guard let wait else { return nil }
            try await Task.sleep(nanoseconds: UInt64(max(0.005, wait) * 1e9))
        }
    }

    private func exhausted() -> MirrorsExhausted {
        let set = pool.current
        return MirrorsExhausted(mirrors: set.mirrors.map { (Redaction.url($0.url), $0.dropped ?? "in use") },
                                transient: set.onlyFailuresLeft)
    }

    // MARK: Settling

    /// Asks every mirror for its first byte, once, before the first request is sent.
    private func settleOnce(like request: TransferRequest) async throws {
        let task = settling.withLock { task -> Task<Void, Error> in
            if let task { return task }
            let made = Task { try await self.settle(like: request) }
            task = made
            return made
        }
        do {
            // A cancelled download stops asking (every connection of it is cancelled together).
            try await withTaskCancellationHandler { try await task.value } onCancel: { task.cancel() }
        } catch {
            // Not kept: the next request asks the mirrors again.
            settling.withLock { if $0 == task { $0 = nil } }
            throw error
        }
    }

    private func settle(like template: TransferRequest) async throws {
        let urls = pool.current.mirrors.map(\.url)
        let probes = await withTaskGroup(of: (Int, MirrorSet.Probe).self) { group in
            for (index, url) in urls.enumerated() where pool.current.mirrors[index].dropped == nil {
                group.addTask { (index, await self.probe(url, like: template)) }
            }
            var probes: [Int: MirrorSet.Probe] = [:]
            for await (index, probe) in group { probes[index] = probe }
            return probes
        }
        try Task.checkCancellation()
        let drops = pool.withLock { $0.settle(probes, expectedSize: expectedSize, now: Self.now()) }
        for (index, reason) in drops { onDrop(urls[index], reason) }
        if pool.current.inUse.isEmpty { throw exhausted() }
        // None answered (all resting after errors that may pass): nothing is known of the file yet.
        if pool.current.size == nil {
            let set = pool.current
            throw MirrorsExhausted(mirrors: set.mirrors.map { (Redaction.url($0.url), $0.dropped ?? "did not answer") },
                                   transient: true)
        }
    }

    private func probe(_ url: URL, like template: TransferRequest) async -> MirrorSet.Probe {
        var request = template
        request.method = "GET"
        request.url = url
        for conditional in ["If-Range", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since"] {
            request.headers.remove(conditional)
        }
        request.headers.set("Range", "bytes=0-0")
        if !RedirectPolicy.sameOrigin(url, primary) {
            for field in template.headers where RedirectPolicy.isOriginOnly(field) { request.headers.remove(field.name) }
        }
        final class Head: ResponseSink {
            var head: ResponseHead?
            func receive(head: ResponseHead) throws { self.head = head }
            func receive(body: UnsafeRawBufferPointer) throws {
                // One byte was asked for; a mirror that sends the whole file is stopped here.
                if body.count > 1 { throw CancellationError() }
            }
        }
        let sink = Head()
        do {
            _ = try await base.execute(request, sink: sink)
        } catch {
            guard sink.head != nil else { return .unavailable(reason: String(describing: error)) }
        }
        guard let head = sink.head else { return .failed(reason: "it sent no answer") }
        switch head.status {
        case 206:
            guard let range = head.headers["Content-Range"].flatMap(ContentRange.init(header:)), range.first == 0,
                  let size = range.completeLength else {
                return .failed(reason: "its answer to a range request names no size (Content-Range)")
            }
            return .answered(size: size, validators: ResponseValidators(headers: head.headers))
        case 200:
            return .failed(reason: "it does not serve ranges (it answered a range request with 200)")
        case 408, 429, 500...599:
            return .unavailable(reason: "HTTP \(head.status)")
        default:
            return .failed(reason: "HTTP \(head.status)")
        }
    }

    // MARK: Pieces

    /// Where a request's range starts (`bytes=N-…`), or nil without a range.
    static func rangeStart(_ header: String?) -> Int64? {
        guard let header, header.hasPrefix("bytes=") else { return nil }
        return Int64(header.dropFirst(6).prefix { $0 != "-" })
    }

    /// Where a request's range ends (`bytes=N-M`: M), or nil for none or an open end.
    static func rangeEnd(_ header: String?) -> Int64? {
        guard let header, header.hasPrefix("bytes="), let dash = header.firstIndex(of: "-") else { return nil }
        return Int64(header[header.index(after: dash)...])
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// An answer judged unusable before its body: not passed on.
    struct Rejected: Error {
        let judgement: MirrorSet.Judgement
    }

    /// Passes an accepted answer on with the canonical validators; throws `Rejected` otherwise.
    /// Measures the body's bytes and time for the mirror's rate.
    private final class Relay: ResponseSink {
        let sink: ResponseSink
        let judge: (ResponseHead) -> MirrorSet.Judgement
        let canonical: ResponseValidators
        private let lock = PlainLock()
        private var bytes: Int64 = 0
        private var headAt: Double?
        private var lastAt: Double?
        private var head: ResponseHead?
        private var threw = false

        init(sink: ResponseSink, judge: @escaping (ResponseHead) -> MirrorSet.Judgement, canonical: ResponseValidators) {
            self.sink = sink
            self.judge = judge
            self.canonical = canonical
        }

        var measured: (Int64, Double) {
            lock.lock()
            defer { lock.unlock() }
            return (bytes, max(0, (lastAt ?? 0) - (headAt ?? 0)))
        }
        var shownHead: ResponseHead? { lock.lock(); defer { lock.unlock() }; return head }
        var sinkThrew: Bool { lock.lock(); defer { lock.unlock() }; return threw }

        func receive(head: ResponseHead) throws {
            let judgement = judge(head)
            guard judgement == .accept else { throw Rejected(judgement: judgement) }
            var shown = head
            shown.headers.remove("ETag")
            shown.headers.remove("Last-Modified")
            if let etag = canonical.etag { shown.headers.set("ETag", etag) }
            if let date = canonical.lastModified { shown.headers.set("Last-Modified", date) }
            lock.lock()
            self.head = shown
            headAt = MirrorTransport.now()
            lock.unlock()
            do { try sink.receive(head: shown) } catch {
                lock.lock(); threw = true; lock.unlock()
                throw error
            }
        }

        func receive(body: UnsafeRawBufferPointer) throws {
            // Counted as delivered before the download takes it: a download that stops partway
            // (its segment satisfied) wrote no more than this.
            lock.lock()
            bytes += Int64(body.count)
            lastAt = MirrorTransport.now()
            lock.unlock()
            do { try sink.receive(body: body) } catch {
                lock.lock(); threw = true; lock.unlock()
                throw error
            }
        }

        func willWait(seconds: TimeInterval) { sink.willWait(seconds: seconds) }
    }
}

/// Every mirror of a download was dropped: the reasons, by mirror.
struct MirrorsExhausted: Error, CustomStringConvertible {
    let mirrors: [(url: String, reason: String)]
    /// Every mirror went after failures that may pass (errors, timeouts, 5xx): worth another try later.
    let transient: Bool
    var description: String {
        "no mirror is left: " + mirrors.map { "\($0.url): \($0.reason)" }.joined(separator: "; ")
    }
}
