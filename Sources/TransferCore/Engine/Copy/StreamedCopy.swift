import Foundation

/// Where a streamed copy reads: an http(s) URL, or an S3 object on another endpoint
/// (each GET signed as it goes).
package struct StreamSource: Sendable {
    package var url: URL
    package var headers: HTTPHeaders
    package var tls: TLSOptions
    package var connectTimeout: TimeInterval = 15
    package var idleTimeout: TimeInterval = 30
    package var maxRedirects = 10
    let sign: (@Sendable (String, URL, HTTPHeaders) -> HTTPHeaders)?
    /// An S3 source's tags (GetObjectTagging on its endpoint), asked for when it has any.
    let tagging: (@Sendable () async throws -> [S3Tag])?

    package init(url: URL, headers: HTTPHeaders = [:], tls: TLSOptions = TLSOptions()) {
        self.url = url
        self.headers = headers
        self.tls = tls
        sign = nil
        tagging = nil
    }

    /// `bucket/key` through `client` (its endpoint and credentials), with signed GETs.
    package init(s3 client: S3Client, bucket: String, key: String) throws {
        let source = try client.downloadSource(bucket: bucket, key: key)
        url = source.url
        headers = [:]
        tls = client.tls
        // S3 redirects only to tell of another region, which a signed request cannot follow.
        maxRedirects = 0
        sign = source.signer
        tagging = { try await client.objectTagging(bucket: bucket, key: key) }
    }

    func request(_ extra: HTTPHeaders) -> TransferRequest {
        var headers = self.headers
        for (name, value) in extra { headers.set(name, value) }
        if let sign { headers = sign("GET", url, headers) }
        return TransferRequest(method: "GET", url: url, headers: headers, connectTimeout: connectTimeout,
                               idleTimeout: idleTimeout, maxRedirects: maxRedirects, tls: tls)
    }
}

package struct StreamedCopyOptions: Sendable {
    package var source: StreamSource
    package var bucket: String
    package var key: String
    /// Requested part size; grown to fit 10,000 parts, at least 5 MiB.
    package var partSize: Int64
    /// Parts fetched and sent at once: memory is about `partSize` × this.
    package var partsInFlight: Int
    package var contentType: String?
    /// A transport of its own for a source that does not take ranges or say its length, read once
    /// from start to end (`SequentialPartSink` waits on its thread); nil: such a source is refused.
    package var sequentialTransport: (@Sendable () -> Transport)?

    package init(source: StreamSource, bucket: String, key: String, partSize: Int64 = 8 << 20, partsInFlight: Int = 4,
                contentType: String? = nil) {
        self.source = source
        self.bucket = bucket
        self.key = key
        self.partSize = partSize
        self.partsInFlight = max(1, partsInFlight)
        self.contentType = contentType
    }
}

/// What an interrupted streamed copy needs to continue in another process.
package struct StreamedCopyCheckpoint: Codable, Equatable, Sendable {
    package var version = 1
    /// SHA-256 of the source URL (the URL itself may carry a token).
    package var source: String
    package var size: Int64
    package var validators: ResponseValidators
    package var bucket: String
    package var key: String
    package var partSize: Int64
    /// Empty while the upload is being created.
    package var uploadID: String
    package var parts: [Int: S3CopyCheckpoint.Part]
}

/// A streamed copy's failures that are not the server's error statuses.
package enum StreamedCopyError: Error, CustomStringConvertible, Sendable {
    /// The source cannot be read in ranges of a known length (no ranges, no length).
    case notRangeable(url: String, reason: String)
    /// An answer that is not the part asked for.
    case badPart(url: String, number: Int, reason: String)
    /// The source answered an error status.
    case sourceStatus(url: String, status: Int)
    /// What this backend cannot do for this source (`TransportCapabilities`), with the fix.
    case backendLacks(url: String, reason: String)

    package var description: String {
        switch self {
        case .notRangeable(let url, let reason):
            return "\(url) \(reason), and a copy to S3 reads its source in ranges: download it with get, then upload it with put"
        case .badPart(let url, let number, let reason):
            return "\(url) did not answer part \(number) as asked: \(reason)"
        case .sourceStatus(let url, let status):
            return "\(url) answered HTTP \(status): check the URL and its access"
        case .backendLacks(let url, let reason):
            return "\(url) \(reason)"
        }
    }
}

/// A copy from an http(s) URL, or an S3 object on another endpoint, to an S3 object,
/// through memory only: each part is one ranged GET of the source and one UploadPart
/// of those bytes (Content-MD5 checked by S3), `partsInFlight` at once, so memory is
/// about part size × parts in flight, whatever the size; nothing touches the disk.
///
/// Every part's GET carries the version first seen (`If-Match`, or
/// `If-Unmodified-Since`) and its answer is checked (`StreamedCopyPlan.part`): a
/// source that changed is copied again from the start, never joined from two
/// versions. The upload id and sent parts are checkpointed: after `kill -9` the next
/// run sends only the missing parts, fetching only their ranges, when the source is
/// still the same version (a source without validators starts over).
// Checkpoints are saved under `lock`; progress counts live in `Locked` values.
package final class StreamedCopy: Sendable {
    let client: S3Client
    let transport: Transport
    let retry: RetryPolicy
    let options: StreamedCopyOptions
    let state: UploadStateStore
    let onEvent: @Sendable (UploadEvent) -> Void
    private let lock = NSLock()

    package init(client: S3Client, transport: Transport, retry: RetryPolicy, options: StreamedCopyOptions, state: UploadStateStore,
                onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.client = client
        self.transport = transport
        self.retry = retry
        self.options = options
        self.state = state
        self.onEvent = onEvent
    }

    private var shownURL: String { Redaction.url(options.source.url) }
    /// The most memory parts in flight may hold together.
    static let memoryBound: Int64 = 1 << 30
    private var sourceDigest: String { SHA256Hasher.hex(of: Data(options.source.url.absoluteString.utf8)) }

    package func run() async throws -> S3UploadResult {
        let started = Date()
        var restarts = 0
        while true {
            do {
                var result = try await attempt()
                result.elapsed = Date().timeIntervalSince(started)
                return result
            } catch let changed as S3ObjectCopy.SourceChanged {
                restarts += 1
                await abandon()
                guard restarts <= S3ObjectCopy.restartsForChangedSource else {
                    throw UploadError.sourceChanged(path: shownURL, detail: "\(changed.detail); copied again "
                                                    + "\(S3ObjectCopy.restartsForChangedSource) times, then given up")
                }
            }
        }
    }

    private func attempt() async throws -> S3UploadResult {
        let probe = try await fetch(["Range": "bytes=0-0"], limit: 1)
        if probe.overrun && probe.status == 206 {
            throw StreamedCopyError.notRangeable(url: shownURL, reason: "answered a range of one byte with more bytes")
        }
        let size: Int64
        let validators: ResponseValidators
        switch StreamedCopyPlan.source(status: probe.status, headers: probe.headers) {
        case .ranged(let total, let seen):
            guard total <= S3CopyPlan.largestObject else {
                throw StreamedCopyError.notRangeable(url: shownURL, reason: "says it is \(total) bytes long, more than S3's largest object (5 TiB)")
            }
            (size, validators) = (total, seen)
        case .empty(let seen):
            (size, validators) = (0, seen)
        case .whole(let length):
            guard let make = options.sequentialTransport else {
                throw StreamedCopyError.notRangeable(url: shownURL, reason: length.map { "answered a range with a whole answer of \($0) bytes and no Content-Range" }
                                                     ?? "answered a range with a whole answer, without its length")
            }
            return try await sequential(length: length, probe: probe.headers, transport: make())
        case .unknownLength:
            guard let make = options.sequentialTransport else {
                throw StreamedCopyError.notRangeable(url: shownURL, reason: "does not say its length")
            }
            return try await sequential(length: nil, probe: probe.headers, transport: make())
        case .failed(let status):
            throw StreamedCopyError.sourceStatus(url: shownURL, status: status)
        }
        // Without a strong ETag or a Last-Modified, nothing tells two versions' parts apart.
        guard validators.etag.map({ !$0.hasPrefix("W/") }) == true || validators.lastModified != nil else {
            throw StreamedCopyError.notRangeable(url: shownURL, reason: "gives neither a strong ETag nor a Last-Modified, so its parts could come from two versions")
        }
        let partSize = S3UploadOptions.effectivePartSize(requested: options.partSize, fileSize: size)
        // Memory is about part size x parts in flight: held to a GiB whatever size the source claims.
        let inFlight = max(1, min(options.partsInFlight, Int(StreamedCopy.memoryBound / partSize)))
        var headers = HTTPHeaders()
        if options.source.sign != nil {
            // An S3 object's headers and metadata go with it (not its encryption: the destination's own applies).
            for (name, value) in probe.headers {
                let lower = name.lowercased()
                guard S3ObjectHead.carriedNames.contains(lower) || lower.hasPrefix("x-amz-meta-"),
                      !lower.hasPrefix("x-amz-server-side-encryption") else { continue }
                headers.add(name, value)
            }
        }
        // Its tags go with it too (CreateMultipartUpload or PutObject starts with none).
        if let tagging = options.source.tagging, S3ObjectHead.tagCount(probe.headers) > 0 {
            let tags = try await tagging()
            if !tags.isEmpty { headers.set("x-amz-tagging", S3Tag.header(tags)) }
        }
        if let type = options.contentType { headers.set("Content-Type", type) }
        if !headers.contains("Content-Type") { headers.set("Content-Type", probe.headers["Content-Type"] ?? "application/octet-stream") }
        onEvent(.started(totalSize: size))
        if size <= partSize {
            // A copy in parts an earlier run began is not left open.
            await abandon()
            let data = size == 0 ? Data() : try await part(1, first: 0, last: size - 1, size: size, validators: validators)
            let md5 = Array(Self.md5(data))
            var putHeaders = headers
            putHeaders.set("Content-MD5", Data(md5).base64EncodedString())
            let response = try await client.send("PutObject", method: "PUT", bucket: options.bucket, key: options.key,
                                                 headers: putHeaders, body: .data(data))
            let etag = response.headers["ETag"] ?? ""
            guard S3MultipartUpload.unquote(etag) == md5.hexString else {
                throw S3Error.verification("the object's ETag \(etag) does not match the MD5 \(md5.hexString) of what was sent")
            }
            onEvent(.progress(sent: size, totalSize: size))
            return S3UploadResult(etag: etag, size: size, parts: 1, partsSent: 1, resumed: false, elapsed: 0)
        }
        var checkpoint = try await resumeOrCreate(size: size, validators: validators, partSize: partSize, headers: headers)
        let resumed = !checkpoint.parts.isEmpty
        let count = Int((size + partSize - 1) / partSize)
        let missing = (1...count).filter { checkpoint.parts[$0] == nil }
        let sent = Locked<Int64>(checkpoint.parts.values.reduce(0) { $0 + $1.size })
        onEvent(.progress(sent: sent.current, totalSize: size))
        let uploadID = checkpoint.uploadID
        do {
            try await withThrowingTaskGroup(of: (Int, S3CopyCheckpoint.Part).self) { group in
                var next = missing.makeIterator()
                func launch() {
                    guard let number = next.next() else { return }
                    group.addTask {
                        let first = Int64(number - 1) * partSize
                        let last = min(first + partSize, size) - 1
                        let data = try await self.part(number, first: first, last: last, size: size, validators: validators)
                        return (number, try await self.sendPart(number, data, uploadID: uploadID))
                    }
                }
                for _ in 0..<inFlight { launch() }
                while let (number, part) = try await group.next() {
                    checkpoint.parts[number] = part
                    try save(checkpoint)
                    let total = sent.withLock { $0 += part.size; return $0 }
                    onEvent(.progress(sent: total, totalSize: size))
                    launch()
                }
            }
            let ordered = checkpoint.parts.sorted { $0.key < $1.key }
            let etag = try await client.completeMultipartUpload(bucket: options.bucket, key: options.key, uploadID: uploadID,
                                                                parts: ordered.map { ($0.key, $0.value.etag, nil) })
            let expected = S3MultipartUpload.multipartETag(ordered.map(\.value.etag))
            guard S3MultipartUpload.unquote(etag) == expected else {
                throw S3Error.verification("the object's ETag \(etag) is not the expected \(expected) (MD5 of the part MD5s)")
            }
            try? state.remove()
            return S3UploadResult(etag: etag, size: size, parts: count, partsSent: missing.count, resumed: resumed, elapsed: 0)
        } catch {
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            if error is S3ObjectCopy.SourceChanged { throw error }
            // A permanent failure leaves no parts stored (forgotten first: see `S3MultipartUpload`).
            try state.remove()
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: uploadID)
            throw error
        }
    }

    /// The source read once, start to end, cut into parts as it arrives (`SequentialPartSink`): a
    /// source without ranges, or without a length (parts then grow to hold up to 5 TiB). It cannot
    /// resume: an earlier attempt's upload is aborted and the copy starts from zero.
    private func sequential(length: Int64?, probe: HTTPHeaders, transport source: Transport) async throws -> S3UploadResult {
        // Holding the reading back waits on the transport's thread: URLSession's is FoundationNetworking's
        // own, which every session shares, and the uploads would stall behind it.
        guard source.capabilities.contains(.backpressure) else {
            throw StreamedCopyError.backendLacks(url: shownURL, reason: "does not take ranges (or say its length), so it must be read "
                + "once while the parts go, and the \(source.name) backend cannot hold a download back without stalling its other "
                + "transfers: use --transport curl for it")
        }
        await abandon()
        if let length, length > S3CopyPlan.largestObject {
            throw StreamedCopyError.notRangeable(url: shownURL, reason: "says it is \(length) bytes long, more than S3's largest object (5 TiB)")
        }
        let partSize: @Sendable (Int) -> Int64
        if let length {
            let size = S3UploadOptions.effectivePartSize(requested: options.partSize, fileSize: length)
            partSize = { _ in size }
        } else {
            partSize = SequentialPartSink.growing(base: max(options.partSize, S3UploadOptions.minimumPart))
        }
        let inFlight = max(1, min(options.partsInFlight, Int(Self.memoryBound / partSize(1)) - 1))
        var headers = HTTPHeaders()
        headers.set("Content-Type", options.contentType ?? probe["Content-Type"] ?? "application/octet-stream")
        // Recorded before and after it is made: a kill leaves an upload the next attempt finds and aborts.
        var checkpoint = StreamedCopyCheckpoint(source: sourceDigest, size: length ?? -1, validators: ResponseValidators(),
                                                bucket: options.bucket, key: options.key, partSize: 0, uploadID: "", parts: [:])
        try save(checkpoint)
        let uploadID = try await client.createMultipartUpload(bucket: options.bucket, key: options.key, headers: headers)
        checkpoint.uploadID = uploadID
        try save(checkpoint)
        onEvent(.started(totalSize: length ?? 0))
        let (stream, continuation) = AsyncStream.makeStream(of: (number: Int, data: Data).self)
        let sink = SequentialPartSink(inFlight: inFlight, partSize: partSize, continuation: continuation)
        let parts = Locked<[Int: S3CopyCheckpoint.Part]>([:])
        let sent = Locked<Int64>(0)
        let request = options.source.request([:])
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        let outcome = try await source.execute(request, sink: sink)
                        guard (200..<300).contains(outcome.head.status) else {
                            throw StreamedCopyError.sourceStatus(url: self.shownURL, status: outcome.head.status)
                        }
                        if let length, sink.received != length {
                            throw StreamedCopyError.badPart(url: self.shownURL, number: 0, reason: "\(sink.received) bytes arrived of the \(length) it announced")
                        }
                        sink.finish()
                    } catch {
                        sink.fail()
                        if let head = sink.head, !(200..<300).contains(head.status) {
                            throw StreamedCopyError.sourceStatus(url: self.shownURL, status: head.status)
                        }
                        throw error
                    }
                }
                group.addTask {
                    try await withThrowingTaskGroup(of: Void.self) { uploads in
                        for await part in stream {
                            uploads.addTask {
                                do {
                                    let sentPart = try await self.sendPart(part.number, part.data, uploadID: uploadID)
                                    parts.withLock { $0[part.number] = sentPart }
                                    let total = sent.withLock { $0 += Int64(part.data.count); return $0 }
                                    self.onEvent(.progress(sent: total, totalSize: length ?? total))
                                    sink.release()
                                } catch {
                                    sink.fail()
                                    throw error
                                }
                            }
                        }
                        try await uploads.waitForAll()
                    }
                }
                try await group.waitForAll()
            }
            let ordered = parts.current.sorted { $0.key < $1.key }
            guard ordered.map(\.key) == Array(1...max(1, ordered.count)) else {
                throw S3Error.verification("the parts sent are not every part from 1 to \(ordered.count)")
            }
            let etag = try await client.completeMultipartUpload(bucket: options.bucket, key: options.key, uploadID: uploadID,
                                                                parts: ordered.map { ($0.key, $0.value.etag, nil) })
            let expected = S3MultipartUpload.multipartETag(ordered.map(\.value.etag))
            guard S3MultipartUpload.unquote(etag) == expected else {
                throw S3Error.verification("the object's ETag \(etag) is not the expected \(expected) (MD5 of the part MD5s)")
            }
            try? state.remove()
            return S3UploadResult(etag: etag, size: sink.received, parts: ordered.count, partsSent: ordered.count, resumed: false, elapsed: 0)
        } catch {
            sink.fail()
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            try state.remove()
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: uploadID)
            throw error
        }
    }

    /// One part's bytes as UploadPart `number`, with their Content-MD5; the ETag must be that MD5.
    private func sendPart(_ number: Int, _ data: Data, uploadID: String) async throws -> S3CopyCheckpoint.Part {
        let md5 = Array(Self.md5(data))
        let query = "partNumber=\(number)&uploadId=\(AWSEncoding.encode(uploadID))"
        let response = try await client.send("UploadPart", method: "PUT", bucket: options.bucket, key: options.key, query: query,
                                             headers: ["Content-MD5": Data(md5).base64EncodedString()], body: .data(data))
        let etag = response.headers["ETag"] ?? ""
        guard S3MultipartUpload.unquote(etag) == md5.hexString else {
            throw S3Error.verification("part \(number) came back with ETag \(etag), not the MD5 \(md5.hexString) of what was sent")
        }
        return S3CopyCheckpoint.Part(etag: etag, size: Int64(data.count))
    }

    /// Bytes `first...last` of the source, as the version `validators` names.
    private func part(_ number: Int, first: Int64, last: Int64, size: Int64, validators: ResponseValidators) async throws -> Data {
        var headers = StreamedCopyPlan.conditions(validators)
        headers.set("Range", "bytes=\(first)-\(last)")
        let answer = try await fetch(headers, limit: Int(last - first + 1))
        switch StreamedCopyPlan.part(status: answer.status, headers: answer.headers, first: first, last: last, size: size,
                                     validators: validators) {
        case .part:
            if answer.overrun {
                throw StreamedCopyError.badPart(url: shownURL, number: number, reason: "it sent more than the \(last - first + 1) bytes asked for")
            }
            guard Int64(answer.body.count) == last - first + 1 else {
                throw StreamedCopyError.badPart(url: shownURL, number: number,
                                                reason: "\(answer.body.count) bytes arrived of \(last - first + 1)")
            }
            return answer.body
        case .changed(let reason):
            throw S3ObjectCopy.SourceChanged(detail: reason)
        case .refused(let reason):
            throw StreamedCopyError.badPart(url: shownURL, number: number, reason: reason)
        }
    }

    /// One GET of the source with `headers`, its body read into memory up to `limit` bytes,
    /// sent again by the retry policy after a network failure, a 5xx or a 429.
    private func fetch(_ headers: HTTPHeaders, limit: Int) async throws -> (status: Int, headers: HTTPHeaders, body: Data, overrun: Bool) {
        var attempt = 0
        while true {
            attempt += 1
            let request = options.source.request(headers)
            let sink = RangeSink(limit: limit)
            let failure: RetryPolicy.Failure
            let lastError: Error
            do {
                let outcome = try await transport.execute(request, sink: sink)
                let status = outcome.head.status
                guard status == 429 || status >= 500 else { return (status, outcome.head.headers, sink.body, false) }
                lastError = StreamedCopyError.sourceStatus(url: shownURL, status: status)
                failure = .http(status: status, retryAfter: outcome.head.headers["Retry-After"].flatMap(RetryAfter.init(header:)))
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                // The sink stopped a body longer than the range (the transport reports why it ended).
                if let head = sink.stoppedHead { return (head.status, head.headers, sink.body, sink.overrun != nil) }
                lastError = error
                failure = .transport(error.kind)
            } catch is RangeSink.Stopped {
                guard let head = sink.stoppedHead else {
                    throw StreamedCopyError.notRangeable(url: shownURL, reason: "gave an answer that could not be read")
                }
                return (head.status, head.headers, sink.body, sink.overrun != nil)
            }
            switch retry.decide(failure, attempt: attempt) {
            case .retry(let delay):
                onEvent(.retrying(attempt: attempt, delay: delay, reason: "\(shownURL): \(lastError)"))
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            case .giveUp:
                throw lastError
            }
        }
    }

    /// The body of a ranged GET, at most `limit` bytes: a longer one (a server that ignored the
    /// range and sends the whole file) is stopped at its head, before its bytes arrive, or as soon
    /// as it passes the limit; the caller judges the head (`StreamedCopyPlan`). An error page is
    /// kept up to 4 KiB, and the exchange stopped there (an error body without end ends here).
    // Locked: a transport's threads write, the caller reads once the exchange is over.
    final class RangeSink: ResponseSink, Sendable {
        struct Stopped: Error {}
        let limit: Int
        static let errorPageLimit = 4096
        private let captured = Locked<(head: ResponseHead?, body: Data, overrun: Bool, stopped: Bool)>((nil, Data(), false, false))

        init(limit: Int) { self.limit = limit }

        var body: Data { captured.current.body }
        /// The head of an answer stopped for being longer than the range.
        var overrun: ResponseHead? { captured.withLock { $0.overrun ? $0.head : nil } }
        /// The head of any answer this sink stopped (longer than the range, or an error page past its 4 KiB).
        var stoppedHead: ResponseHead? { captured.withLock { $0.stopped ? $0.head : nil } }

        func receive(head: ResponseHead) throws {
            let longer = (200..<300).contains(head.status)
                && (head.headers["Content-Length"].flatMap(Int64.init).map { $0 > Int64(limit) } ?? false)
            captured.withLock { $0 = (head, Data(), longer, longer) }
            if longer { throw Stopped() }
        }

        func receive(body chunk: UnsafeRawBufferPointer) throws {
            try captured.withLock { captured in
                let success = captured.head.map { (200..<300).contains($0.status) } ?? false
                let room = success ? limit : Self.errorPageLimit
                guard captured.body.count + chunk.count <= room else {
                    if success {
                        captured.overrun = true
                    } else {
                        captured.body.append(contentsOf: chunk.prefix(max(0, room - captured.body.count)))
                    }
                    captured.stopped = true
                    throw Stopped()
                }
                captured.body.append(contentsOf: chunk)
            }
        }
    }

    static func md5(_ data: Data) -> [UInt8] {
        var digest = Digest(.md5)
        data.withUnsafeBytes { digest.update($0) }
        return digest.finalize()
    }

    /// Continues the recorded upload when it is of this source's version into this key with
    /// these parts, and the server still has it; otherwise starts a new one.
    private func resumeOrCreate(size: Int64, validators: ResponseValidators, partSize: Int64,
                                headers: HTTPHeaders) async throws -> StreamedCopyCheckpoint {
        var fresh = StreamedCopyCheckpoint(source: sourceDigest, size: size, validators: validators, bucket: options.bucket,
                                           key: options.key, partSize: partSize, uploadID: "", parts: [:])
        if let saved = state.decoded(StreamedCopyCheckpoint.self) {
            var same = fresh
            same.uploadID = saved.uploadID
            same.parts = saved.parts
            // A source without validators could be another version now: it is never resumed.
            if !saved.uploadID.isEmpty, !validators.isEmpty, saved == same {
                do {
                    var reconciled = saved
                    reconciled.parts = try await client.partsStillHeld(saved.parts, etag: \.etag, size: \.size, bucket: options.bucket,
                                                                       key: options.key, uploadID: saved.uploadID)
                    return reconciled
                } catch let error as S3Error where S3MultipartUpload.uploadIsGone(error) {
                    // Aborted or completed meanwhile: a new upload below.
                }
            }
            try save(fresh)
            await client.abortRecordedUpload(bucket: saved.bucket, key: saved.key, uploadID: saved.uploadID)
        } else {
            try save(fresh)
        }
        fresh.uploadID = try await client.createMultipartUpload(bucket: options.bucket, key: options.key, headers: headers)
        do {
            try save(fresh)
        } catch {
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: fresh.uploadID)
            throw error
        }
        return fresh
    }

    /// Aborts the recorded upload, if any, and forgets it (a cancelled job, a changed source).
    package func abandon() async { await client.abandonRecordedUpload(in: state) }

    private func save(_ checkpoint: StreamedCopyCheckpoint) throws {
        lock.lock()
        defer { lock.unlock() }
        try state.saveEncoded(checkpoint)
    }
}
