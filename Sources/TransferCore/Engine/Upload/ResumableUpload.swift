import Foundation

/// What an interrupted resumable upload needs to continue in another process: the upload
/// resource's URL, the file it holds, and the offset the server confirmed.
package struct ResumableCheckpoint: Codable, Equatable, Sendable {
    package var version = 1
    /// The target URL the upload was created at (a checkpoint for another one is not used).
    package var endpoint: String
    /// The upload resource's URL (from a 104 interim answer or the creation's final answer).
    package var uploadURL: String
    package var fileSize: Int64
    package var fileModified: Double
    package var fileInode: UInt64
    /// The file's status-change time and device: a file rewritten in place with its size and
    /// modification time set back (`cp -p`, `touch -r`) still changes them. Absent in older records.
    package var fileChanged: Double?
    package var fileDevice: UInt64?
    /// The highest offset the server confirmed: it must never report less.
    package var confirmed: Int64
    /// A request carrying `Upload-Complete: ?1` went out and its answer was not seen: the server
    /// may have completed (and then removed) the upload, so a 404 is no reason to send it again.
    package var completing: Bool?
}

package struct ResumableOptions: Sendable {
    /// The resource the upload is created at (POST there creates the upload resource).
    package var endpoint: URL
    package var source: String
    package var headers: HTTPHeaders
    package var contentType: String?
    package var retry: RetryPolicy
    package var tls: TLSOptions
    package var connectTimeout: TimeInterval
    package var idleTimeout: TimeInterval
    package var rate = SendRate()

    /// The most one request carries on a backend that sends a file's byte range from a temporary
    /// copy (no `.fileRegionBody`): that copy is on disk while the request runs.
    package static let copiedAppendLimit: Int64 = 64 << 20

    package init(endpoint: URL, source: String, headers: HTTPHeaders = [:], contentType: String? = nil,
                 retry: RetryPolicy = .default, tls: TLSOptions = TLSOptions(), connectTimeout: TimeInterval = 15,
                 idleTimeout: TimeInterval = 30) {
        self.endpoint = endpoint
        self.source = source
        self.headers = headers
        self.contentType = contentType
        self.retry = retry
        self.tls = tls
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
    }
}

package struct ResumableUploadResult: Sendable {
    package var size: Int64
    /// Body bytes sent by this run (resent ones included).
    package var bytesSent: Int64
    /// The offset this run continued from (nil: a new upload).
    package var resumedAt: Int64?
    /// Why an upload was started over (the server lost it, the file changed), as told.
    package var restarts: [String]
    /// Creation and append requests (an empty creation included).
    package var requests: Int
    /// How the upload resource's address was learned: from a 104 interim answer while the
    /// creation sent the file, or from the final answer of a creation with an empty body.
    package var announcedByInterim: Bool
    /// The server offered no resumption (no 104, no Location): the whole file went in one request.
    package var plainUpload: Bool
    /// The limits the server announced (`Upload-Limit`).
    package var limits: UploadLimits
    /// The final answer's status (the target's answer to the whole file).
    package var status: Int
    package var elapsed: TimeInterval
}

/// A resumable upload by the IETF draft (`ResumableHeaders.draft`, interop version 8).
///
/// Creation: a POST to the target with `Upload-Complete`, `Upload-Length` and the file. A
/// backend that sees 1xx interim answers (`.interimResponses`, curl) sends the file in the
/// creation itself and takes the upload resource's URL from the `104 (Upload Resumption
/// Supported)` answer, recorded before the rest of the body goes out; one that cannot
/// (urlsession) creates the upload with an empty body and `Upload-Complete: ?0` (the final
/// answer carries `Location`), then appends. Appends: PATCH with
/// `Content-Type: application/partial-upload`, `Upload-Offset` and `Upload-Complete`, at most
/// `max-append-size` each. After an interruption, HEAD gives the server's offset, and only
/// bytes past it are sent. Success is the server's final answer to the request that completed it.
package final class ResumableUpload: Sendable {
    let transport: Transport
    let options: ResumableOptions
    let state: UploadStateStore
    let onEvent: @Sendable (UploadEvent) -> Void

    /// The most read of any answer (the target's answer to the whole upload included).
    static let answerLimit = 256 << 10
    /// New uploads one run creates because the server lost the previous one.
    static let maximumRestarts = 2
    /// Failed requests in a row (whatever the retry policy allows) before the upload fails.
    static let maximumFailures = 20

    package init(transport: Transport, options: ResumableOptions, state: UploadStateStore,
                 onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.transport = transport
        self.options = options
        self.state = state
        self.onEvent = onEvent
    }

    private var source: String { options.source }

    /// What the backend can send in one request without an oversized temporary copy.
    private var requestCap: Int64 {
        transport.capabilities.contains(.fileRegionBody) ? .max : ResumableOptions.copiedAppendLimit
    }

    /// What one creation did.
    private struct Creation {
        var checkpoint: ResumableCheckpoint?
        var offset: Int64
        var complete: Bool
        /// The request ended without a final answer that says where the server is: ask (HEAD).
        var mustAsk: Bool
        var status: Int
        var bytesSent: Int64
        var requests: Int
    }

    /// What the interim answers of one creation said, shared with the transport's thread.
    private struct Interim {
        var location: URL?
        var limits: UploadLimits?
        var saveError: Error?
        var stop: String?
        var refused = false
        /// The record written once the 104 named the upload resource.
        var checkpoint: ResumableCheckpoint
    }

    package func run() async throws -> ResumableUploadResult {
        let started = Date()
        let fingerprint = try SourceFingerprint(path: source)
        var info = stat()
        guard stat(source, &info) == 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: source)) }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw UploadError.local(POSIXFailure(operation: "upload (not a regular file)", path: source, code: EISDIR))
        }
        let size = Int64(info.st_size)
        let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
        let changed = Double(info.st_ctim.tv_sec) + Double(info.st_ctim.tv_nsec) / 1e9
        let fresh = ResumableCheckpoint(endpoint: options.endpoint.absoluteString, uploadURL: "", fileSize: size,
                                        fileModified: modified, fileInode: UInt64(info.st_ino), fileChanged: changed,
                                        fileDevice: UInt64(info.st_dev), confirmed: 0)
        onEvent(.started(totalSize: size))

        var limits = try await discover()
        if let problem = limits.problem(fileSize: size) {
            throw ResumableFailure(reason: "\(problem) at \(Redaction.url(options.endpoint))", next: .nothingSent)
        }
        var restarts: [String] = []
        var resumedAt: Int64?
        var current: ResumableCheckpoint?
        var offset: Int64 = 0
        var complete = false
        var mustAsk = false
        var status = 0
        var sentNow: Int64 = 0
        var requests = 0
        var announcedByInterim = false
        var plainUpload = false

        if let saved = load(), !saved.uploadURL.isEmpty, let url = URL(string: saved.uploadURL) {
            let sameFile = saved.fileSize == size && saved.fileModified == modified && saved.fileInode == UInt64(info.st_ino)
                && (saved.fileChanged.map { $0 == changed } ?? true) && (saved.fileDevice.map { $0 == UInt64(info.st_dev) } ?? true)
            if saved.endpoint == options.endpoint.absoluteString, sameFile {
                switch try await ask(url, confirmed: saved.confirmed, size: size, limits: &limits) {
                case .resume(let at):
                    current = saved
                    offset = at
                    resumedAt = at
                case .complete:
                    current = saved
                    offset = size
                    resumedAt = size
                    complete = true
                case .lost(let reason):
                    if saved.completing == true {
                        try? state.remove()
                        throw ResumableFailure(reason: "\(reason), after a request that completed the upload went out without its"
                            + " answer being seen: the server may have the whole file already, so it is not sent again")
                    }
                    let told = "\(reason); a new upload is started"
                    restarts.append(told)
                    onEvent(.retrying(attempt: 1, delay: 0, reason: told))
                case .fail(let reason):
                    try? state.remove()
                    throw ResumableFailure(reason: reason)
                case .retry(let status):
                    // `ask` retries these itself and throws when it gives up: not reached.
                    throw ResumableFailure(reason: "the server answered HEAD with HTTP \(status)", next: .kept)
                }
            } else if saved.endpoint == options.endpoint.absoluteString {
                let reason = "\(source) changed since its upload began (size, times, inode or device), so a new upload is started"
                restarts.append(reason)
                onEvent(.retrying(attempt: 1, delay: 0, reason: reason))
                // The old upload is of no use: cancelled (DELETE).
                await cancel(url)
                try? state.remove()
            }
        }
        if current == nil {
            let creation = try await create(fresh, size: size, limits: &limits, fingerprint: fingerprint)
            current = creation.checkpoint
            offset = creation.offset
            complete = creation.complete
            mustAsk = creation.mustAsk
            status = creation.status
            sentNow += creation.bytesSent
            requests += creation.requests
            announcedByInterim = transport.capabilities.contains(.interimResponses) && creation.checkpoint != nil
            plainUpload = creation.complete && creation.checkpoint == nil
        }

        var failures = 0
        /// The offset of an append the server refused with 409, until HEAD is asked.
        var refusedAt: Int64?
        /// A request that would complete the upload ended without a final answer.
        var completionInDoubt = current?.completing == true
        while !complete {
            guard var checkpoint = current, let url = URL(string: checkpoint.uploadURL) else {
                throw ResumableFailure(reason: "the upload's URL could not be read back")
            }
            if mustAsk {
                mustAsk = false
                switch try await ask(url, confirmed: checkpoint.confirmed, size: size, limits: &limits) {
                case .resume(let at):
                    if let refused = refusedAt, refused == at {
                        try? state.remove()
                        throw ResumableFailure(reason: "the server refused an append at offset \(at) to \(Redaction.url(url))"
                            + " as not its offset (HTTP 409), yet reports \(at) to HEAD")
                    }
                    refusedAt = nil
                    completionInDoubt = false
                    if at > checkpoint.confirmed || checkpoint.completing == true {
                        checkpoint.confirmed = max(checkpoint.confirmed, at)
                        checkpoint.completing = nil
                        try save(checkpoint)
                        current = checkpoint
                    }
                    offset = at
                    onEvent(.progress(sent: offset, totalSize: size))
                case .complete:
                    complete = true
                    continue
                case .lost(let reason):
                    guard !completionInDoubt else {
                        try? state.remove()
                        throw ResumableFailure(reason: "\(reason), after a request that completed the upload went out without"
                            + " its answer being seen: the server may have the whole file already, so it is not sent again")
                    }
                    guard restarts.count < Self.maximumRestarts else {
                        try? state.remove()
                        throw ResumableFailure(reason: "\(reason), again after \(restarts.count) new uploads in this run")
                    }
                    let told = "\(reason); a new upload is started"
                    restarts.append(told)
                    onEvent(.retrying(attempt: restarts.count, delay: 0, reason: told))
                    try? state.remove()
                    let creation = try await create(fresh, size: size, limits: &limits, fingerprint: fingerprint)
                    current = creation.checkpoint
                    offset = creation.offset
                    complete = creation.complete
                    mustAsk = creation.mustAsk
                    status = creation.status
                    sentNow += creation.bytesSent
                    requests += creation.requests
                    resumedAt = nil
                    continue
                case .fail(let reason):
                    try? state.remove()
                    throw ResumableFailure(reason: reason)
                case .retry(let status):
                    throw ResumableFailure(reason: "the server answered HEAD with HTTP \(status)", next: .kept)
                }
            }
            try fingerprint.check(source)
            // Limits may arrive with any answer (HEAD, a 413, the creation's): each set is checked again.
            if let problem = limits.problem(fileSize: size) {
                throw ResumableFailure(reason: "\(problem) at \(Redaction.url(url))", next: .kept)
            }
            let length = limits.appendLength(offset: offset, size: size, cap: requestCap)
            let completes = offset + length == size
            guard length > 0 || completes else {
                throw ResumableFailure(reason: "the server's limits at \(Redaction.url(url)) let no request carry a byte", next: .kept)
            }
            if completes && checkpoint.completing != true {
                checkpoint.completing = true
                try save(checkpoint)
                current = checkpoint
            }
            let headers: [(String, String)] = [("Content-Type", ResumableHeaders.partialUploadType),
                                               ("Upload-Offset", String(offset)),
                                               ("Upload-Complete", ResumableHeaders.boolean(completes)),
                                               ("Upload-Length", String(size))]
            let base = offset
            let events = onEvent
            let moved = Locked<Int64>(0)
            defer { sentNow += moved.current }
            var retryFailure: RetryPolicy.Failure?
            var described = ""
            do {
                requests += 1
                let (head, body) = try await exchange("PATCH", url, headers: headers,
                                                      body: length > 0 ? .file(path: source, offset: offset, length: length) : .none,
                                                      progress: { sent in
                                                          moved.withLock { $0 = max($0, sent) }
                                                          events(.progress(sent: base + sent, totalSize: size))
                                                      })
                moved.withLock { $0 = length }
                limits = limits.merged(with: UploadLimits.parse(head.headers["Upload-Limit"]))
                switch ResumableAnswer.decide(status: head.status, headers: head.headers, offset: offset, length: length,
                                              completes: completes, creation: false, where: Redaction.url(url)) {
                case .complete:
                    try fingerprint.check(source)
                    complete = true
                    status = head.status
                    offset = size
                case .appended(let new):
                    // A file changed while it was read is never recorded as sent.
                    try fingerprint.check(source)
                    offset = new
                    checkpoint.confirmed = new
                    try save(checkpoint)
                    current = checkpoint
                    failures = 0
                    onEvent(.progress(sent: offset, totalSize: size))
                case .conflict:
                    // The offsets disagree (an answer lost on the way, another client): asked.
                    described = "the server's offset is not \(offset) (HTTP 409)"
                    retryFailure = .restart
                    refusedAt = offset
                case .lost:
                    // Asked at once: HEAD says whether it is lost (a new upload follows) or where it is.
                    described = "HTTP \(head.status) to an append"
                    retryFailure = .restart
                case .tooLarge(let announced):
                    limits = limits.merged(with: announced)
                    guard limits.appendLength(offset: offset, size: size, cap: requestCap) < length else {
                        throw ResumableFailure(reason: "\(Redaction.url(url)) refused \(length) bytes as too large (HTTP 413)"
                            + " without an Upload-Limit that allows fewer", next: .kept)
                    }
                    onEvent(.retrying(attempt: 1, delay: 0, reason: "the server took at most"
                        + " \(limits.maxAppendSize.map(String.init) ?? "?") bytes a request (HTTP 413, Upload-Limit); smaller appends follow"))
                    mustAsk = true
                    continue
                case .retry(let code):
                    let retryAfter = head.headers["Retry-After"].flatMap(RetryAfter.init(header:))
                    retryFailure = .http(status: code, retryAfter: retryAfter)
                    described = "HTTP \(code)"
                    if completes { completionInDoubt = true }
                case .fail(let reason):
                    let contradiction = (200..<300).contains(head.status)
                    if contradiction { try? state.remove() }
                    let message = ServerMessage.summary(body)
                    throw ResumableFailure(reason: reason + (message.isEmpty ? "" : ": \(message)"),
                                           next: contradiction ? .forgotten : .kept)
                }
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                if completes { completionInDoubt = true }
                retryFailure = .transport(error.kind)
                described = "\(error.kind.phrase): \(Redaction.message(error.message))"
                if case .giveUp(let reason) = options.retry.decide(retryFailure!, attempt: failures + 1) {
                    throw UploadError.transport(error, reason: reason)
                }
            }
            guard let retryFailure else { continue }
            failures += 1
            guard failures <= Self.maximumFailures else {
                throw ResumableFailure(reason: "\(described) at \(Redaction.url(url)), \(failures) times in a row", next: .kept)
            }
            switch options.retry.decide(retryFailure, attempt: failures) {
            case .giveUp(let reason):
                throw ResumableFailure(reason: "\(described) at \(Redaction.url(url)) — \(reason)", next: .kept)
            case .retry(after: let delay):
                onEvent(.retrying(attempt: failures, delay: delay, reason: described))
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            }
            // Where to go on is the server's offset: it may have kept part of what was cut.
            mustAsk = true
        }
        try fingerprint.check(source)
        try? state.remove()
        return ResumableUploadResult(size: size, bytesSent: sentNow, resumedAt: resumedAt, restarts: restarts, requests: requests,
                                     announcedByInterim: announcedByInterim, plainUpload: plainUpload, limits: limits,
                                     status: status, elapsed: Date().timeIntervalSince(started))
    }

    /// Cancels the recorded upload (DELETE on the upload resource) and forgets it: a cancelled job.
    package func abandon() async {
        if let saved = load(), let url = URL(string: saved.uploadURL), !saved.uploadURL.isEmpty {
            await cancel(url)
        }
        try? state.remove()
    }

    // MARK: Steps

    /// OPTIONS on the target: the limits it announces before anything is created. A target that
    /// does not answer OPTIONS with a 2xx is tried all the same (its answers carry the limits).
    private func discover() async throws -> UploadLimits {
        var attempt = 0
        while true {
            attempt += 1
            do {
                let (head, _) = try await exchange("OPTIONS", options.endpoint)
                if [408, 425, 429].contains(head.status) || (500...599).contains(head.status),
                   case .retry(let delay) = options.retry.decide(.http(status: head.status, retryAfter: nil), attempt: attempt) {
                    if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
                    continue
                }
                guard (200..<300).contains(head.status) else { return UploadLimits() }
                return UploadLimits.parse(head.headers["Upload-Limit"]) ?? UploadLimits()
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                guard case .retry(let delay) = options.retry.decide(.transport(error.kind), attempt: attempt) else {
                    throw UploadError.transport(error, reason: "asking \(Redaction.url(options.endpoint)) for its limits (OPTIONS)")
                }
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            }
        }
    }

    /// The creation: POST to the target. With interim answers, the file (or its first
    /// `max-append-size` bytes) goes with it and the 104's Location is recorded as soon as it
    /// arrives; without, an empty body with `Upload-Complete: ?0` (the final answer's Location).
    private func create(_ fresh: ResumableCheckpoint, size: Int64, limits: inout UploadLimits,
                        fingerprint: SourceFingerprint) async throws -> Creation {
        let interimCapable = transport.capabilities.contains(.interimResponses)
        var attempt = 0
        var sent: Int64 = 0
        var requests = 0
        while true {
            attempt += 1
            try fingerprint.check(source)
            let length = interimCapable ? limits.appendLength(offset: 0, size: size, cap: requestCap) : 0
            let completes = length == size
            let headers: [(String, String)] = [("Upload-Complete", ResumableHeaders.boolean(completes)),
                                               ("Upload-Length", String(size)),
                                               ("Content-Type", options.contentType ?? MIMEType.guess(forPath: source)),
                                               ("Content-Disposition", Self.contentDisposition(for: source))]
            var recorded = fresh
            recorded.completing = completes ? true : nil
            let endpoint = options.endpoint
            let interim = Locked(Interim(checkpoint: recorded))
            let saving = DispatchGroup()
            let onInterim: @Sendable (ResponseHead) -> Bool = { [self] head in
                guard let note = InterimAnnouncement.read(head, base: endpoint) else { return true }
                return interim.withLock { found in
                    if let announced = note.limits {
                        found.limits = (found.limits ?? UploadLimits()).merged(with: announced)
                        if let problem = announced.problem(fileSize: size) {
                            found.stop = problem
                            found.refused = true
                        } else if let most = announced.maxAppendSize, length > most {
                            found.stop = "the server takes at most \(most) bytes a request (Upload-Limit max-append-size);"
                                + " the creation is stopped and smaller appends follow"
                        }
                    }
                    if let location = note.location {
                        if let known = found.location, known != location {
                            found.stop = "the server named two upload resources for one creation"
                            found.refused = true
                        } else if found.location == nil {
                            found.location = location
                            found.checkpoint.uploadURL = location.absoluteString
                            // Saved on a queue of its own, not on the transport's thread, which other
                            // transfers share (a store may wait seconds); awaited before the next step.
                            let checkpoint = found.checkpoint
                            saving.enter()
                            DispatchQueue.global().async {
                                defer { saving.leave() }
                                do { try self.save(checkpoint) } catch { interim.withLock { $0.saveError = error } }
                            }
                        }
                    }
                    return found.stop == nil && found.saveError == nil
                }
            }
            let events = onEvent
            let moved = Locked<Int64>(0)
            var failure: RetryPolicy.Failure
            var described: String
            do {
                requests += 1
                let (head, body) = try await exchange("POST", options.endpoint, headers: headers,
                                                      body: length > 0 ? .file(path: source, offset: 0, length: length) : .none,
                                                      onInterim: interimCapable ? onInterim : nil,
                                                      progress: { done in
                                                          moved.withLock { $0 = max($0, done) }
                                                          events(.progress(sent: done, totalSize: size))
                                                      })
                moved.withLock { $0 = length }
                await Self.settled(saving)
                let found = interim.current
                if let error = found.saveError { throw error }
                limits = limits.merged(with: found.limits).merged(with: UploadLimits.parse(head.headers["Upload-Limit"]))
                let place = Redaction.url(options.endpoint)
                let finalLocation = ResumableHeaders.location(head.headers["Location"], relativeTo: head.url)
                switch ResumableAnswer.decide(status: head.status, headers: head.headers, offset: 0, length: length,
                                              completes: completes, creation: true, where: place) {
                case .complete:
                    try fingerprint.check(source)
                    return Creation(checkpoint: found.location.map { _ in found.checkpoint }, offset: size, complete: true, mustAsk: false,
                                    status: head.status, bytesSent: sent + moved.current, requests: requests)
                case .appended(let offset):
                    guard let location = found.location ?? finalLocation else {
                        throw ResumableFailure(reason: "\(place) answered the creation with HTTP \(head.status) but no usable Location"
                            + " header: it does not take resumable uploads (\(ResumableHeaders.draft))", next: .nothingSent)
                    }
                    if let announced = found.location, let finalLocation, finalLocation != announced {
                        await cancel(announced)
                        try? state.remove()
                        throw ResumableFailure(reason: "\(place) announced the upload at \(Redaction.url(announced)) (104) but answered"
                            + " \(Redaction.url(finalLocation)) (HTTP \(head.status)); the upload is cancelled")
                    }
                    try fingerprint.check(source)
                    var checkpoint = recorded
                    checkpoint.uploadURL = location.absoluteString
                    checkpoint.confirmed = offset
                    checkpoint.completing = nil
                    do {
                        try save(checkpoint)
                    } catch {
                        // Not recorded (a shared store gave the job to another worker): not left on the server either.
                        await cancel(location)
                        throw error
                    }
                    onEvent(.progress(sent: offset, totalSize: size))
                    return Creation(checkpoint: checkpoint, offset: offset, complete: false, mustAsk: false, status: head.status,
                                    bytesSent: sent + moved.current, requests: requests)
                case .tooLarge(let announced):
                    limits = limits.merged(with: announced)
                    if found.location != nil {
                        return Creation(checkpoint: found.checkpoint,
                                        offset: 0, complete: false, mustAsk: true, status: head.status, bytesSent: sent + moved.current,
                                        requests: requests)
                    }
                    guard limits.appendLength(offset: 0, size: size, cap: requestCap) < length else {
                        throw UploadError.httpStatus(status: 413, url: place, message: ServerMessage.summary(body),
                                                     reason: "the file is too large for this server, which announced no Upload-Limit")
                    }
                    sent += moved.current
                    continue
                case .retry(let status):
                    failure = .http(status: status, retryAfter: head.headers["Retry-After"].flatMap(RetryAfter.init(header:)))
                    described = "HTTP \(status) to the creation"
                case .fail(let reason):
                    if let location = found.location { await cancel(location) }
                    try? state.remove()
                    if (200..<300).contains(head.status) { throw ResumableFailure(reason: reason) }
                    throw UploadError.httpStatus(status: head.status, url: place, message: ServerMessage.summary(body),
                                                 reason: "creating the resumable upload; does this URL take uploads?")
                case .conflict, .lost:
                    throw UploadError.httpStatus(status: head.status, url: place, message: ServerMessage.summary(body),
                                                 reason: "creating the resumable upload")
                }
            } catch let error as TransportError {
                await Self.settled(saving)
                let found = interim.current
                if let saveError = found.saveError {
                    if let location = found.location { await cancel(location) }
                    throw saveError
                }
                if error.kind == .cancelled { throw CancellationError() }
                limits = limits.merged(with: found.limits)
                if let stop = found.stop {
                    if found.refused {
                        if let location = found.location { await cancel(location) }
                        try? state.remove()
                        throw ResumableFailure(reason: "\(stop) (\(Redaction.url(options.endpoint)))", next: .nothingSent)
                    }
                    onEvent(.retrying(attempt: 1, delay: 0, reason: stop))
                }
                if let location = found.location {
                    // The upload resource exists: the server's offset says what it kept (HEAD).
                    if found.stop == nil {
                        onEvent(.retrying(attempt: 1, delay: 0, reason: "\(error.kind.phrase): \(Redaction.message(error.message))"
                            + " after the server named the upload resource; the rest goes from the server's offset"))
                    }
                    var checkpoint = recorded
                    checkpoint.uploadURL = location.absoluteString
                    return Creation(checkpoint: checkpoint, offset: 0, complete: false, mustAsk: true, status: 0,
                                    bytesSent: sent + moved.current, requests: requests)
                }
                failure = .transport(error.kind)
                described = "\(error.kind.phrase): \(Redaction.message(error.message)), before the server named the upload"
                    + " resource (no 104 interim answer), so the creation starts again from the first byte"
                if case .giveUp(let reason) = options.retry.decide(failure, attempt: attempt) {
                    throw UploadError.transport(error, reason: reason)
                }
            }
            sent += moved.current
            if let location = interim.current.location {
                var checkpoint = recorded
                checkpoint.uploadURL = location.absoluteString
                return Creation(checkpoint: checkpoint, offset: 0, complete: false, mustAsk: true, status: 0, bytesSent: sent,
                                requests: requests)
            }
            switch options.retry.decide(failure, attempt: attempt) {
            case .giveUp(let reason):
                throw ResumableFailure(reason: "\(described) at \(Redaction.url(options.endpoint)) — \(reason)", next: .nothingSent)
            case .retry(after: let delay):
                onEvent(.retrying(attempt: attempt, delay: delay, reason: described))
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            }
        }
    }

    /// Waits, off the cooperative threads, for the saves `group` started.
    private static func settled(_ group: DispatchGroup) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in group.notify(queue: .global()) { done.resume() } }
    }

    /// HEAD on the upload resource, decided against what was confirmed; transient answers are
    /// retried here. Limits it announces are laid over the known ones.
    private func ask(_ url: URL, confirmed: Int64, size: Int64, limits: inout UploadLimits) async throws -> ResumableResumeDecision {
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
            limits = limits.merged(with: UploadLimits.parse(head.headers["Upload-Limit"]))
            let decision = ResumableResumeDecision.decide(status: head.status, headers: head.headers, confirmed: confirmed,
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

    /// Upload cancellation: DELETE on the upload resource.
    private func cancel(_ url: URL) async {
        _ = try? await exchange("DELETE", url)
    }

    /// One request with the job's headers and `Upload-Draft-Interop-Version`; the answer's head and (short) body.
    private func exchange(_ method: String, _ url: URL, headers extra: [(String, String)] = [], body: RequestBody = .none,
                          onInterim: (@Sendable (ResponseHead) -> Bool)? = nil,
                          progress: (@Sendable (Int64) -> Void)? = nil) async throws -> (head: ResponseHead, body: Data) {
        // The upload resource may be on another host than the target: the job's credentials stay
        // with the target's origin (as on a redirect), and an https target's upload is never sent
        // over plain http.
        if options.endpoint.scheme?.lowercased() == "https" && url.scheme?.lowercased() != "https" {
            throw ResumableFailure(reason: "\(Redaction.url(options.endpoint)) named \(Redaction.url(url)) as the upload resource:"
                + " plain http for an https target is refused")
        }
        var headers = options.headers
        if !RedirectPolicy.sameOrigin(url, options.endpoint) {
            for field in options.headers where RedirectPolicy.isOriginOnly(field) { headers.remove(field.name) }
        }
        headers.set("Upload-Draft-Interop-Version", String(ResumableHeaders.interopVersion))
        for (name, value) in extra { headers.set(name, value) }
        let sink = CapturingSink(limit: Self.answerLimit, url: url,
                                 advice: "a resumable upload's answers are short; check that this URL takes uploads")
        var request = TransferRequest(method: method, url: url, headers: headers, body: body,
                                      connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout,
                                      // Never followed: a redirect of the creation would turn the POST into a
                                      // GET whose 200 looks like a finished upload (curl and browsers do that).
                                      maxRedirects: 0, tls: options.tls)
        request.onInterim = onInterim
        if let progress {
            request.onProgress = { sent, _ in progress(sent) }
        }
        if body != .none { options.rate.apply(to: &request) }
        do {
            let outcome = try await transport.execute(request, sink: sink)
            return (outcome.head, sink.body)
        } catch let error as TransportError where error.kind == .tooManyRedirects {
            throw ResumableFailure(reason: "\(Redaction.url(url)) redirects its \(method); a resumable upload's requests are never"
                + " redirected (a redirected POST turns into a GET, whose 200 would look like a finished upload): give the URL it"
                + " leads to", next: .nothingSent)
        }
    }

    private func load() -> ResumableCheckpoint? {
        guard let json = try? state.load() else { return nil }
        return try? JSONDecoder().decode(ResumableCheckpoint.self, from: Data(json.utf8))
    }

    private func save(_ checkpoint: ResumableCheckpoint) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try state.save(String(decoding: try encoder.encode(checkpoint), as: UTF8.self))
    }

    /// `inline; filename="…"; filename*=UTF-8''…` (RFC 6266), the draft's way to name the file:
    /// an ASCII fallback (other characters, quotes and backslashes as `_`) and the name in UTF-8.
    static func contentDisposition(for path: String) -> String {
        let name = (path as NSString).lastPathComponent
        let fallback = String(String.UnicodeScalarView(name.unicodeScalars.map { scalar in
            scalar.value >= 0x20 && scalar.value < 0x7F && scalar != "\"" && scalar != "\\" ? scalar : "_"
        }))
        let attrChars = Set("!#$&+-.^_`|~".utf8)
        var encoded = ""
        for byte in name.utf8 {
            let isAlnum = (byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A)
            if isAlnum || attrChars.contains(byte) {
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                encoded += String(format: "%%%02X", byte)
            }
        }
        return "inline; filename=\"\(fallback)\"; filename*=UTF-8''\(encoded)"
    }
}
