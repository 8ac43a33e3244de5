import Foundation

/// What an interrupted tus upload needs to continue in another process: the upload's
/// URL (the creation's `Location`), the file it holds, and the offset the server confirmed.
package struct TusCheckpoint: Codable, Equatable, Sendable {
    package var version = 1
    /// The creation URL the upload was created at (a checkpoint for another one is not used).
    package var endpoint: String
    /// The upload's own URL, resolved against the creation URL.
    package var uploadURL: String
    package var fileSize: Int64
    package var fileModified: Double
    package var fileInode: UInt64
    /// The highest `Upload-Offset` the server answered: it must never report less.
    package var confirmed: Int64
    /// `sha1` when PATCHes carry `Upload-Checksum`.
    package var checksum: String?
}

package struct TusOptions: Sendable {
    /// The tus creation URL (POST creates an upload there).
    package var endpoint: URL
    package var source: String
    /// Bytes per PATCH.
    package var chunkSize: Int64
    package var headers: HTTPHeaders
    package var contentType: String?
    package var retry: RetryPolicy
    package var tls: TLSOptions
    package var connectTimeout: TimeInterval
    package var idleTimeout: TimeInterval
    package var rate = SendRate()

    package static let defaultChunkSize: Int64 = 8 << 20
    package static let chunkSizes: ClosedRange<Int64> = (64 << 10)...(1 << 30)

    package init(endpoint: URL, source: String, chunkSize: Int64 = defaultChunkSize, headers: HTTPHeaders = [:],
                 contentType: String? = nil, retry: RetryPolicy = .default, tls: TLSOptions = TLSOptions(),
                 connectTimeout: TimeInterval = 15, idleTimeout: TimeInterval = 30) {
        self.endpoint = endpoint
        self.source = source
        self.chunkSize = min(max(chunkSize, Self.chunkSizes.lowerBound), Self.chunkSizes.upperBound)
        self.headers = headers
        self.contentType = contentType
        self.retry = retry
        self.tls = tls
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
    }
}

package struct TusUploadResult: Sendable {
    package var size: Int64
    /// PATCH body bytes sent by this run (resent chunks included).
    package var bytesSent: Int64
    /// The offset this run continued from (nil: a new upload).
    package var resumedAt: Int64?
    /// Why an upload was started over (the server lost it, the file changed), as told.
    package var restarts: [String]
    /// The checksum the PATCHes carried (`sha1`), or nil.
    package var checksum: String?
    /// Chunks sent again after the server answered 460 Checksum Mismatch.
    package var checksumResends: Int
    package var patches: Int
    package var elapsed: TimeInterval
}

/// A tus 1.0.0 upload (core protocol, creation, termination and checksum extensions):
/// OPTIONS learns what the server offers; POST creates the upload, whose URL is recorded
/// before the first byte is sent; PATCHes of `chunkSize` bytes, streamed from the file,
/// each with `Upload-Checksum: sha1` when the server accepts it; the confirmed offset is
/// recorded after each. A later run (after `kill -9`) HEADs the recorded URL and sends
/// from the server's offset only. Success is the server's offset equal to the file's length.
package final class TusUpload: Sendable {
    let transport: Transport
    let options: TusOptions
    let state: UploadStateStore
    let onEvent: @Sendable (UploadEvent) -> Void

    /// The most read of any answer (tus answers have empty bodies; an error page is short).
    static let answerLimit = 64 << 10
    /// 460 answers for one chunk before the upload fails.
    static let checksumAttempts = 3
    /// New uploads one run creates because the server lost the previous one.
    static let maximumRestarts = 2
    /// Failed PATCHes in a row (whatever the retry policy allows) before the upload fails.
    static let maximumFailures = 20

    package init(transport: Transport, options: TusOptions, state: UploadStateStore,
                 onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.transport = transport
        self.options = options
        self.state = state
        self.onEvent = onEvent
    }

    private var source: String { options.source }

    package func run() async throws -> TusUploadResult {
        let started = Date()
        let fingerprint = try SourceFingerprint(path: source)
        var info = stat()
        guard stat(source, &info) == 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: source)) }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw UploadError.local(POSIXFailure(operation: "upload (not a regular file)", path: source, code: EISDIR))
        }
        let size = Int64(info.st_size)
        let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
        let fresh = TusCheckpoint(endpoint: options.endpoint.absoluteString, uploadURL: "", fileSize: size,
                                  fileModified: modified, fileInode: UInt64(info.st_ino), confirmed: 0, checksum: nil)
        onEvent(.started(totalSize: size))

        let server = try await discover()
        if let problem = server.problem(fileSize: size) {
            throw TusFailure(reason: "\(problem) (\(Redaction.url(options.endpoint)))")
        }
        let checksum = server.checksum
        var restarts: [String] = []
        var resumedAt: Int64?
        var checkpoint: TusCheckpoint?
        var offset: Int64 = 0

        if let saved = load(), !saved.uploadURL.isEmpty, let url = URL(string: saved.uploadURL) {
            let sameFile = saved.fileSize == size && saved.fileModified == modified && saved.fileInode == UInt64(info.st_ino)
            if saved.endpoint == options.endpoint.absoluteString, sameFile {
                switch try await ask(url, confirmed: saved.confirmed, size: size) {
                case .resume(let at):
                    checkpoint = saved
                    checkpoint?.checksum = checksum
                    offset = at
                    resumedAt = at
                case .startOver(let reason):
                    restarts.append(reason)
                    onEvent(.retrying(attempt: 1, delay: 0, reason: reason))
                case .fail(let reason):
                    try? state.remove()
                    throw TusFailure(reason: reason)
                case .retry(let status):
                    // `ask` retries these itself and throws when it gives up: not reached.
                    throw TusFailure(reason: "the server answered HEAD with HTTP \(status)")
                }
            } else if saved.endpoint == options.endpoint.absoluteString {
                let reason = "\(source) changed since its upload began (size, time or inode), so a new upload is started"
                restarts.append(reason)
                onEvent(.retrying(attempt: 1, delay: 0, reason: reason))
                // The old upload is of no use: removed where the server offers termination.
                if server.extensions.contains("termination") { await terminate(url) }
            }
        }
        if checkpoint == nil {
            checkpoint = try await create(fresh, checksum: checksum)
        }
        guard var current = checkpoint, var url = URL(string: current.uploadURL) else {
            throw TusFailure(reason: "the upload's URL could not be read back")
        }

        onEvent(.progress(sent: offset, totalSize: size))
        var sentNow: Int64 = 0
        var patches = 0
        var failures = 0
        var mismatches = 0
        var checksumResends = 0
        /// The server said, in its last answer, that it holds the whole file.
        var complete = offset == size && resumedAt != nil
        while offset < size || !complete {
            if offset == size {
                // Nothing left to send but no answer said so yet (an empty file): asked.
                switch try await ask(url, confirmed: current.confirmed, size: size) {
                case .resume(let at) where at == size:
                    complete = true
                    continue
                case .resume(let at):
                    offset = at
                    continue
                case .startOver(let reason), .fail(let reason):
                    try? state.remove()
                    throw TusFailure(reason: reason)
                case .retry:
                    continue
                }
            }
            try fingerprint.check(source)
            let length = min(options.chunkSize, size - offset)
            var headers: [(String, String)] = [("Content-Type", TusHeaders.patchContentType), ("Upload-Offset", String(offset))]
            if checksum != nil {
                let digest = try Self.sha1(path: source, offset: offset, length: length)
                headers.append(("Upload-Checksum", "sha1 \(Data(digest).base64EncodedString())"))
            }
            let base = offset
            let events = onEvent
            var retryFailure: RetryPolicy.Failure?
            var described = ""
            do {
                patches += 1
                let (head, body) = try await exchange("PATCH", url, headers: headers, body: .file(path: source, offset: offset, length: length)) { sent in
                    events(.progress(sent: base + sent, totalSize: size))
                }
                sentNow += length
                switch head.status {
                case 200..<300:
                    switch TusResumeDecision.afterPatch(offset: offset, length: length, answered: head.headers["Upload-Offset"],
                                                        where: Redaction.url(url)) {
                    case .failure(let failure):
                        try? state.remove()
                        throw failure
                    case .success(let new):
                        // A file changed while it was read is never recorded as sent.
                        try fingerprint.check(source)
                        if new == offset {
                            retryFailure = .http(status: 503, retryAfter: nil)
                            described = "the server took none of bytes \(offset)-\(offset + length - 1)"
                        } else {
                            offset = new
                            current.confirmed = new
                            try save(current)
                            failures = 0
                            mismatches = 0
                            complete = new == size
                            onEvent(.progress(sent: offset, totalSize: size))
                        }
                    }
                case 460:
                    mismatches += 1
                    checksumResends += 1
                    guard mismatches < Self.checksumAttempts else {
                        throw UploadError.verification("the tus server at \(Redaction.url(url)) answered 460 Checksum Mismatch"
                            + " to bytes \(offset)-\(offset + length - 1) \(mismatches) times; something between here and the server"
                            + " changes the bytes (a proxy, bad memory): upload from another network or machine")
                    }
                    onEvent(.retrying(attempt: mismatches, delay: 0, reason: "the server found the SHA-1 of bytes"
                        + " \(offset)-\(offset + length - 1) wrong (460 Checksum Mismatch); sending them again"))
                case 404, 410:
                    guard restarts.count < Self.maximumRestarts else {
                        throw TusFailure(reason: "the server lost the upload at \(Redaction.url(url)) again (HTTP \(head.status)"
                            + " to PATCH) after \(restarts.count) new uploads in this run")
                    }
                    let reason = "the server no longer has the upload at \(Redaction.url(url)) (HTTP \(head.status) to PATCH);"
                        + " a new upload is started"
                    restarts.append(reason)
                    onEvent(.retrying(attempt: restarts.count, delay: 0, reason: reason))
                    current = try await create(fresh, checksum: checksum)
                    url = URL(string: current.uploadURL) ?? url
                    offset = 0
                    resumedAt = nil
                    complete = false
                case 409:
                    // The offsets disagree (another client, or an answer lost on the way): asked.
                    described = "the server's offset is not \(offset) (HTTP 409)"
                    retryFailure = .restart
                default:
                    let retryAfter = head.headers["Retry-After"].flatMap(RetryAfter.init(header:))
                    retryFailure = .http(status: head.status, retryAfter: retryAfter)
                    described = "HTTP \(head.status)"
                    if case .giveUp(let reason) = options.retry.decide(retryFailure!, attempt: failures + 1) {
                        throw UploadError.httpStatus(status: head.status, url: Redaction.url(url),
                                                     message: ServerMessage.summary(body),
                                                     reason: retryFailure!.isRetryable ? reason : nil)
                    }
                }
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                retryFailure = .transport(error.kind)
                described = "\(error.kind.phrase): \(Redaction.message(error.message))"
                if case .giveUp(let reason) = options.retry.decide(retryFailure!, attempt: failures + 1) {
                    throw UploadError.transport(error, reason: reason)
                }
            }
            guard let retryFailure else { continue }
            failures += 1
            // `.restart` (a 409) is retried at once by the policy: bounded here.
            guard failures <= Self.maximumFailures else {
                throw TusFailure(reason: "\(described) at \(Redaction.url(url)), \(failures) times in a row", forgotten: false)
            }
            if case .giveUp(let reason) = options.retry.decide(retryFailure, attempt: failures) {
                throw TusFailure(reason: "\(described) at \(Redaction.url(url)) — \(reason)", forgotten: false)
            }
            if case .retry(let delay) = options.retry.decide(retryFailure, attempt: failures) {
                onEvent(.retrying(attempt: failures, delay: delay, reason: described))
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            }
            // Where to go on is the server's offset: it may have kept part of what was cut.
            let refused = offset
            switch try await ask(url, confirmed: current.confirmed, size: size) {
            case .resume(let at) where retryFailure == .restart && at == refused:
                // 409 to a PATCH at the very offset HEAD reports: the server contradicts itself.
                try? state.remove()
                throw TusFailure(reason: "the server refused a PATCH at offset \(at) to \(Redaction.url(url)) as not its offset"
                    + " (HTTP 409), yet reports \(at) to HEAD")
            case .resume(let at):
                if at > current.confirmed {
                    current.confirmed = at
                    try save(current)
                }
                offset = at
                complete = at == size
            case .startOver(let reason):
                guard restarts.count < Self.maximumRestarts else { throw TusFailure(reason: reason) }
                restarts.append(reason)
                onEvent(.retrying(attempt: restarts.count, delay: 0, reason: reason))
                current = try await create(fresh, checksum: checksum)
                url = URL(string: current.uploadURL) ?? url
                offset = 0
                resumedAt = nil
                complete = false
            case .fail(let reason):
                try? state.remove()
                throw TusFailure(reason: reason)
            case .retry:
                continue
            }
        }
        try fingerprint.check(source)
        try? state.remove()
        return TusUploadResult(size: size, bytesSent: sentNow, resumedAt: resumedAt, restarts: restarts,
                               checksum: checksum, checksumResends: checksumResends, patches: patches,
                               elapsed: Date().timeIntervalSince(started))
    }

    /// DELETEs the recorded upload (the termination extension) and forgets it: a cancelled job.
    package func abandon() async {
        if let saved = load(), let url = URL(string: saved.uploadURL), !saved.uploadURL.isEmpty {
            await terminate(url)
        }
        try? state.remove()
    }

    // MARK: Steps

    /// OPTIONS on the creation URL, retried like any request.
    private func discover() async throws -> TusServerInfo {
        let (head, _) = try await retrying("OPTIONS", options.endpoint) { status in
            // Any answer but a transient one says what the server offers (or that it says nothing).
            !(status == 408 || status == 425 || status == 429 || (500...599).contains(status))
        }
        return TusServerInfo(status: head.status, headers: head.headers)
    }

    /// POST to the creation URL; the new upload's URL is recorded before any byte is sent.
    private func create(_ fresh: TusCheckpoint, checksum: String?) async throws -> TusCheckpoint {
        var metadata: [(key: String, value: String)] = [("filename", (source as NSString).lastPathComponent)]
        // Some servers (tuspyserver) refuse HEAD on an upload created without a filetype.
        metadata.append(("filetype", options.contentType ?? MIMEType.guess(forPath: source)))
        let (head, body) = try await retrying("POST", options.endpoint,
                                              headers: [("Upload-Length", String(fresh.fileSize)),
                                                        ("Upload-Metadata", TusHeaders.metadata(metadata))]) { _ in true }
        guard head.status == 201 || (200..<300).contains(head.status) else {
            throw UploadError.httpStatus(status: head.status, url: Redaction.url(options.endpoint),
                                         message: ServerMessage.summary(body),
                                         reason: "creating the tus upload; is this a tus creation URL?")
        }
        guard let location = head.headers["Location"], !location.isEmpty,
              let url = URL(string: location.trimmingCharacters(in: .whitespaces), relativeTo: head.url)?.absoluteURL,
              ["http", "https"].contains(url.scheme?.lowercased() ?? "") else {
            throw TusFailure(reason: "the server answered the creation POST to \(Redaction.url(options.endpoint))"
                + " with HTTP \(head.status) but no usable Location header")
        }
        var checkpoint = fresh
        checkpoint.uploadURL = url.absoluteString
        checkpoint.checksum = checksum
        do {
            try save(checkpoint)
        } catch {
            // Not recorded (a shared store gave the job to another worker, say): not left on the server either.
            await terminate(url)
            throw error
        }
        return checkpoint
    }

    /// HEAD on the upload URL, decided against what was confirmed; transient answers are retried here.
    private func ask(_ url: URL, confirmed: Int64, size: Int64) async throws -> TusResumeDecision {
        var attempt = 0
        while true {
            attempt += 1
            let head: ResponseHead
            do {
                head = try await exchange("HEAD", url).head
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                guard case .retry(let delay) = options.retry.decide(.transport(error.kind), attempt: attempt) else {
                    throw UploadError.transport(error, reason: "asking the server for the upload's offset")
                }
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
                continue
            }
            let decision = TusResumeDecision.decide(status: head.status, offset: head.headers["Upload-Offset"],
                                                    length: head.headers["Upload-Length"], confirmed: confirmed,
                                                    fileSize: size, where: Redaction.url(url))
            guard case .retry(let status) = decision else { return decision }
            let retryAfter = head.headers["Retry-After"].flatMap(RetryAfter.init(header:))
            guard case .retry(let delay) = options.retry.decide(.http(status: status, retryAfter: retryAfter), attempt: attempt) else {
                throw UploadError.httpStatus(status: status, url: Redaction.url(url), message: "",
                                             reason: "asking the server for the upload's offset")
            }
            if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
        }
    }

    private func terminate(_ url: URL) async {
        _ = try? await exchange("DELETE", url)
    }

    /// One exchange retried on network failures and on statuses `accept` refuses (with backoff).
    private func retrying(_ method: String, _ url: URL, headers: [(String, String)] = [],
                          accept: (Int) -> Bool) async throws -> (head: ResponseHead, body: Data) {
        var attempt = 0
        while true {
            attempt += 1
            var failure = RetryPolicy.Failure.transport(.other)
            do {
                let answer = try await exchange(method, url, headers: headers)
                if accept(answer.head.status) { return answer }
                failure = .http(status: answer.head.status,
                                retryAfter: answer.head.headers["Retry-After"].flatMap(RetryAfter.init(header:)))
                if case .giveUp(let reason) = options.retry.decide(failure, attempt: attempt) {
                    throw UploadError.httpStatus(status: answer.head.status, url: Redaction.url(url),
                                                 message: ServerMessage.summary(answer.body), reason: reason)
                }
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                failure = .transport(error.kind)
                if case .giveUp(let reason) = options.retry.decide(failure, attempt: attempt) {
                    throw UploadError.transport(error, reason: reason)
                }
            }
            if case .retry(let delay) = options.retry.decide(failure, attempt: attempt), delay > 0 {
                try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
            }
        }
    }

    /// One request with the job's headers and `Tus-Resumable`; the answer's head and (short) body.
    private func exchange(_ method: String, _ url: URL, headers extra: [(String, String)] = [], body: RequestBody = .none,
                          progress: (@Sendable (Int64) -> Void)? = nil) async throws -> (head: ResponseHead, body: Data) {
        var headers = options.headers
        headers.set("Tus-Resumable", TusHeaders.version)
        for (name, value) in extra { headers.set(name, value) }
        let sink = CapturingSink(limit: Self.answerLimit, url: url,
                                 advice: "a tus server's answers are short; check that this is a tus server")
        var request = TransferRequest(method: method, url: url, headers: headers, body: body,
                                      connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout,
                                      maxRedirects: method == "PATCH" ? 0 : 10, tls: options.tls)
        if let progress {
            request.onProgress = { sent, _ in progress(sent) }
        }
        if body != .none { options.rate.apply(to: &request) }
        let outcome = try await transport.execute(request, sink: sink)
        return (outcome.head, sink.body)
    }

    private func load() -> TusCheckpoint? {
        guard let json = try? state.load() else { return nil }
        return try? JSONDecoder().decode(TusCheckpoint.self, from: Data(json.utf8))
    }

    private func save(_ checkpoint: TusCheckpoint) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try state.save(String(decoding: try encoder.encode(checkpoint), as: UTF8.self))
    }

    /// SHA-1 of a file region (the checksum extension's `Upload-Checksum: sha1`).
    static func sha1(path: String, offset: Int64, length: Int64) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: path)) }
        defer { close(fd) }
        var digest = Digest(.sha1)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < length {
            let n = pread(fd, buffer.baseAddress, Int(min(Int64(buffer.count), length - done)), off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: path, code: n < 0 ? errno : EIO)) }
            digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            done += Int64(n)
        }
        return digest.finalize()
    }
}
