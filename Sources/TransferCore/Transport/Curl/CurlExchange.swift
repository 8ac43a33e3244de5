import CCurl
import Foundation

/// One exchange's easy handle and the state its callbacks share.
///
/// Created on the caller's thread, then owned by a `CurlLoop` thread until
/// `complete(code:)` resumes the continuation.
// @unchecked: the caller sets `continuation` before `CurlLoop.add` hands the exchange over (under the
// loop's lock); after that only the loop thread touches the mutable fields; `cancelled` and `foundRedirect` are Locked.
final class CurlExchange: @unchecked Sendable {
    let request: TransferRequest
    let sink: ResponseSink
    let easy: UnsafeMutableRawPointer
    var continuation: CheckedContinuation<TransferOutcome, Error>?

    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    private let cancelled = Locked(false)
    private var body: CurlRequestBody
    /// Header lines of the response being received (reset at every status line).
    private var headerLines: [String] = []
    /// The status of the answer whose header lines are being received.
    private var headerStatus: Int?
    private var head: ResponseHead?
    private var sinkError: Error?
    private var bytesReceived: Int64 = 0
    /// When a byte last moved in either direction (for the idle timeout).
    private var lastActivity = DispatchTime.now()
    private var lastCounts: (Int64, Int64) = (-1, -1)
    private var idleTimedOut = false
    /// Set when the answer is a redirect: the transport follows it by `RedirectPolicy`, not libcurl.
    /// Written on the loop thread, read by the caller once the exchange is over: handed over under a
    /// lock, not on the continuation's resumption alone (ThreadSanitizer reported the caller's read
    /// against the loop's write once, in a full run of the suite).
    var redirect: (status: Int, location: String)? { foundRedirect.current }
    private let foundRedirect = Locked<(status: Int, location: String)?>(nil)
    private var redirectBodyBytes = 0
    static let redirectBodyLimit = 64 << 10

    init(request: TransferRequest, sink: ResponseSink) throws {
        guard let easy = curl_easy_init() else {
            throw TransportError(.other, url: request.url, message: "curl_easy_init failed")
        }
        self.request = request
        self.sink = sink
        self.easy = easy
        self.body = try CurlRequestBody(request.body, url: request.url)
        errorBuffer.initialize(to: 0)
        configure()
    }

    deinit {
        curl_easy_cleanup(easy)
        body.release()
        curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    var isCancelled: Bool { cancelled.current }

    func markCancelled() { cancelled.withLock { $0 = true } }

    // MARK: Options

    private func configure() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        setString(CURLOPT_URL, request.url.absoluteString)
        setLong(CURLOPT_NOSIGNAL, 1)
        setLong(CURLOPT_TCP_KEEPALIVE, 1)
        // Redirects are followed by CurlTransport under RedirectPolicy (which headers go
        // to another host): libcurl would forward every custom header to any host.
        setLong(CURLOPT_FOLLOWLOCATION, 0)
        // Nothing but HTTP(S), even if a URL or a future option says otherwise.
        setString(CURLOPT_PROTOCOLS_STR, "http,https")
        setString(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        // The path as given: an S3 key may hold `..` or `.` segments (signed as they are), which
        // libcurl would otherwise squash into another key.
        setLong(CURLOPT_PATH_AS_IS, 1)
        setLong(CURLOPT_CONNECTTIMEOUT_MS, Int(request.connectTimeout * 1000))
        // 256 KiB reads; under a rate limit smaller ones (a sixteenth of a second's worth, at
        // least 16 KiB), so the pauses that keep the rate stay short and the rate even.
        let slowest = [request.receiveLimiter, request.runReceiveLimiter].compactMap { $0?.bytesPerSecond }.min()
        let buffer = slowest.map { max(16 << 10, min(256 << 10, Int(min($0, Double(Int32.max))) / 16)) } ?? 256 << 10
        setLong(CURLOPT_BUFFERSIZE, buffer)
        tdc_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer)
        if let rate = request.maxReceiveRate, rate > 0 {
            tdc_easy_setopt_off(easy, CURLOPT_MAX_RECV_SPEED_LARGE, curl_off_t(rate))
        }
        if let rate = request.maxSendRate, rate > 0 {
            tdc_easy_setopt_off(easy, CURLOPT_MAX_SEND_SPEED_LARGE, curl_off_t(rate))
        }
        configureTLS()
        configureMethodAndBody()

        for field in request.headers {
            let line = field.value.isEmpty ? "\(field.name);" : "\(field.name): \(field.value)"
            headerList = curl_slist_append(headerList, line)
        }
        if request.body != .none && !request.headers.contains("Expect") {
            // No 100-continue round trip: the body follows the headers at once.
            headerList = curl_slist_append(headerList, "Expect:")
        }
        tdc_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList)

        tdc_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, curlHeaderCallback)
        tdc_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, me)
        tdc_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, curlWriteCallback)
        tdc_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, me)
        setLong(CURLOPT_NOPROGRESS, 0)
        tdc_easy_setopt_xferinfo_callback(easy, curlProgressCallback)
        tdc_easy_setopt_pointer(easy, CURLOPT_XFERINFODATA, me)
    }

    private func configureTLS() {
        let tls = request.tls
        if let ca = tls.caBundlePath { setString(CURLOPT_CAINFO, ca) }
        if let pin = tls.pinnedPublicKey { setString(CURLOPT_PINNEDPUBLICKEY, pin) }
        if tls.insecure {
            setLong(CURLOPT_SSL_VERIFYPEER, 0)
            setLong(CURLOPT_SSL_VERIFYHOST, 0)
        }
    }

    private func configureMethodAndBody() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let method = request.method.uppercased()
        let length = curl_off_t(request.body.length)
        let hasBody = request.body != .none
        if hasBody {
            // Larger reads per callback than the 64 KiB default: fewer calls for big bodies.
            setLong(CURLOPT_UPLOAD_BUFFERSIZE, 512 * 1024)
            tdc_easy_setopt_data_callback(easy, CURLOPT_READFUNCTION, curlReadCallback)
            tdc_easy_setopt_pointer(easy, CURLOPT_READDATA, me)
            tdc_easy_setopt_seek_callback(easy, curlSeekCallback)
            tdc_easy_setopt_pointer(easy, CURLOPT_SEEKDATA, me)
        }
        switch (method, hasBody) {
        case ("GET", false):
            setLong(CURLOPT_HTTPGET, 1)
        case ("HEAD", _):
            setLong(CURLOPT_NOBODY, 1)
        case ("POST", _):
            setLong(CURLOPT_POST, 1)
            tdc_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, length)
        case (_, true):
            setLong(CURLOPT_UPLOAD, 1)
            tdc_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, length)
            if method != "PUT" { setString(CURLOPT_CUSTOMREQUEST, method) }
        default:
            setString(CURLOPT_CUSTOMREQUEST, method)
        }
    }

    private func setLong(_ option: CURLoption, _ value: Int) {
        tdc_easy_setopt_long(easy, option, value)
    }

    private func setString(_ option: CURLoption, _ value: String) {
        // libcurl copies string options (since 7.17), so a temporary C string is fine.
        tdc_easy_setopt_string(easy, option, value)
    }

    // MARK: Callbacks (loop thread)

    func handleHeader(_ bytes: UnsafeRawBufferPointer) -> Int {
        let line = HTTPHeaders.trimmed(bytes)
        if line.hasPrefix("HTTP/") {
            headerLines = []
            headerStatus = Self.status(ofStatusLine: line)
        } else if !line.isEmpty {
            headerLines.append(line)
        } else if let status = headerStatus, (102..<200).contains(status), let onInterim = request.onInterim {
            // The blank line that ends an interim answer's block (libcurl passes 1xx headers
            // here, then the final answer's): handed over whole, then forgotten.
            let interim = ResponseHead(status: status, headers: HTTPHeaders(headerLines.compactMap(HTTPHeaders.parseLine)),
                                       url: request.url)
            headerLines = []
            headerStatus = nil
            if !onInterim(interim) { return 0 }
        }
        return bytes.count
    }

    /// The status code of a status line (`HTTP/1.1 104 Upload Resumption Supported`, `HTTP/2 200`).
    static func status(ofStatusLine line: String) -> Int? {
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        guard parts.count >= 2, parts[1].utf8.count == 3 else { return nil }
        return Int(parts[1])
    }

    func handleBody(_ bytes: UnsafeRawBufferPointer) -> Int {
        do {
            try deliverHeadIfNeeded()
            // A redirect's body is not the answer: read and dropped, up to 64 KiB; past that the
            // exchange stops (an endless 3xx body must not keep the connection busy forever).
            if redirect != nil {
                redirectBodyBytes += bytes.count
                return redirectBodyBytes <= Self.redirectBodyLimit ? bytes.count : 0
            }
            try sink.receive(body: bytes)
            bytesReceived += Int64(bytes.count)
            if request.receiveLimiter != nil || request.runReceiveLimiter != nil {
                // Ahead of the transfer's rate or the run's: this exchange stops reading (the
                // socket's window then holds the server back) until the loop lets it go on
                // (`resumeIfDue`). Never a sleep: this thread runs every transfer of the loop.
                let wait = max(request.receiveLimiter?.take(bytes.count) ?? 0, request.runReceiveLimiter?.take(bytes.count) ?? 0)
                if wait > 0.001 {
                    // The whole wait: a shorter one would take more than the rate allows.
                    resumeAt = DispatchTime.now().uptimeNanoseconds + UInt64(min(wait, Self.longestWait) * 1e9)
                    receiveGenerations = limiterGenerations(request.receiveLimiter, request.runReceiveLimiter)
                    sink.willWait(seconds: min(wait, Self.longestWait))
                    curl_easy_pause(easy, pauseMask(receiving: true))
                }
            }
            return bytes.count
        } catch {
            sinkError = error
            return 0
        }
    }

    /// Called by libcurl often while data moves and about once a second when idle.
    /// The idle timeout is checked here: libcurl's own low-speed check averages
    /// over several seconds and fires late.
    func handleProgress(sent: Int64, received: Int64) -> Int32 {
        if isCancelled { return 1 }
        let now = DispatchTime.now()
        // Paused by a rate limit: waiting on purpose is not silence.
        if resumeAt != nil || sendResumeAt != nil { lastActivity = now }
        if (sent, received) != lastCounts {
            lastCounts = (sent, received)
            lastActivity = now
            request.onProgress?(sent, received)
        } else if Double(now.uptimeNanoseconds - lastActivity.uptimeNanoseconds) / 1e9 > request.idleTimeout {
            idleTimedOut = true
            return 1
        }
        return 0
    }

    /// When a receive paused by a rate limit may go on (uptime nanoseconds); only touched on
    /// the loop's thread.
    private(set) var resumeAt: UInt64?
    /// When reading the body may go on after the run's bucket held a send back; while set, the
    /// read callback pauses the send (only touched on the loop's thread).
    private var sendResumeAt: UInt64?
    /// Whether the read callback paused the send.
    private var sendPaused = false
    /// The buckets' generations when a receive or a send was paused: when one changes (a
    /// limit lifted or changed), the pause ends at once and the next piece asks again.
    private var receiveGenerations: [Int] = []
    private var sendGenerations: [Int] = []
    /// A bound on one pause (a bucket's debt is at most a burst past a change of rate).
    static let longestWait: TimeInterval = 3600

    private func limiterGenerations(_ limiters: BandwidthLimiter?...) -> [Int] {
        limiters.map { $0?.generation ?? 0 }
    }

    /// The pause state to set: receiving and sending each stay paused while their time has
    /// not come (`curl_easy_pause` sets both at once).
    private func pauseMask(receiving: Bool) -> Int32 {
        (receiving ? CURLPAUSE_RECV : 0) | (sendPaused ? CURLPAUSE_SEND : 0)
    }

    /// Called by the loop on its thread: lets a paused receive or send go on once its time has
    /// come. Returns when the next is due, if one still waits.
    func resumeIfDue(now: UInt64) -> UInt64? {
        var changed = false
        if let due = sendResumeAt, now >= due || limiterGenerations(request.sendLimiter) != sendGenerations {
            sendResumeAt = nil
            if sendPaused {
                sendPaused = false
                changed = true
            }
        }
        var receiving = false
        if let due = resumeAt {
            if now >= due || limiterGenerations(request.receiveLimiter, request.runReceiveLimiter) != receiveGenerations {
                resumeAt = nil
                changed = true
            } else {
                receiving = true
            }
        }
        if changed {
            lastActivity = DispatchTime.now()
            // Unpausing may deliver held data at once, pausing the exchange again (resumeAt set anew).
            curl_easy_pause(easy, pauseMask(receiving: receiving))
        }
        return [resumeAt, sendResumeAt].compactMap { $0 }.min()
    }

    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        // The run's bucket held the last piece back: the send pauses until the loop lets it go
        // on (`resumeIfDue`). Never a sleep: this thread runs every transfer of the loop.
        if let due = sendResumeAt, DispatchTime.now().uptimeNanoseconds < due {
            sendPaused = true
            return Int(tdc_readfunc_pause)
        }
        sendResumeAt = nil
        // Under a rate, a sixteenth of a second's bytes at a time (at least 16 KiB): the bytes of
        // one read go before their wait, so a smaller read keeps the rate closer.
        var window = buffer
        if let rate = request.sendLimiter?.bytesPerSecond {
            window = UnsafeMutableRawBufferPointer(rebasing: buffer.prefix(max(16 << 10, Int(min(rate, 1e12)) / 16)))
        }
        let count = body.read(into: window)
        if count > 0 && count <= window.count, let limiter = request.sendLimiter {
            let wait = limiter.take(count)
            if wait > 0.001 {
                sendResumeAt = DispatchTime.now().uptimeNanoseconds + UInt64(min(wait, Self.longestWait) * 1e9)
                sendGenerations = limiterGenerations(limiter)
            }
        }
        return count
    }

    func seekBody(to offset: Int64) -> Bool {
        body.seek(to: offset)
    }

    private func deliverHeadIfNeeded() throws {
        guard head == nil else { return }
        var status = 0
        tdc_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        var effective: UnsafeMutablePointer<CChar>?
        tdc_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective)
        // Parsed only after a redirect: most answers come from the URL asked.
        let url = effective.map { String(cString: $0) }
            .flatMap { $0 == request.url.absoluteString ? request.url : URL(string: $0) } ?? request.url
        let headers = HTTPHeaders(headerLines.compactMap(HTTPHeaders.parseLine))
        let received = ResponseHead(status: status, headers: headers, url: url)
        head = received
        if RedirectPolicy.statuses.contains(status), let location = headers["Location"], !location.isEmpty {
            foundRedirect.withLock { $0 = (status, location) }
            return
        }
        try sink.receive(head: received)
    }

    // MARK: Completion (loop thread)

    func complete(code: CURLcode) {
        guard let continuation else { return }
        self.continuation = nil
        // A redirect whose body was cut short (`redirectBodyLimit`) is still a redirect to follow.
        let redirectCut = redirect != nil && code == CURLE_WRITE_ERROR && sinkError == nil && !isCancelled
        if code == CURLE_OK || redirectCut {
            do {
                try deliverHeadIfNeeded()
                var uploaded: curl_off_t = 0
                tdc_easy_getinfo_off(easy, CURLINFO_SIZE_UPLOAD_T, &uploaded)
                continuation.resume(returning: TransferOutcome(head: head!, bytesReceived: bytesReceived,
                                                               bytesSent: Int64(uploaded)))
            } catch {
                continuation.resume(throwing: error)
            }
            return
        }
        if let sinkError {
            continuation.resume(throwing: sinkError)
        } else if idleTimedOut {
            continuation.resume(throwing: TransportError(.timeout, url: request.url,
                message: "no data moved for \(Int(request.idleTimeout)) s (idle timeout)"))
        } else if isCancelled {
            continuation.resume(throwing: TransportError(.cancelled, url: request.url, message: "cancelled"))
        } else if let bodyError = body.failure {
            continuation.resume(throwing: bodyError)
        } else if code == CURLE_OUT_OF_MEMORY && head == nil {
            // libcurl's word for a header block past its limit (CURL_MAX_HTTP_HEADER, 100 KiB):
            // no memory ran out, the server sent more header than any answer needs.
            continuation.resume(throwing: TransportError(.protocolError, url: request.url,
                message: "the server's response headers are larger than the 100 KiB libcurl accepts"))
        } else {
            let detail = String(cString: errorBuffer)
            let message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            continuation.resume(throwing: TransportError(CurlErrorMapping.kind(of: code), url: request.url,
                                                         message: message))
        }
    }
}

// C callbacks: non-capturing, with the exchange passed through the userdata pointer.

let curlHeaderCallback: tdc_data_callback = { pointer, size, count, userdata in
    let exchange = Unmanaged<CurlExchange>.fromOpaque(userdata!).takeUnretainedValue()
    return exchange.handleHeader(UnsafeRawBufferPointer(start: pointer, count: size * count))
}

let curlWriteCallback: tdc_data_callback = { pointer, size, count, userdata in
    let exchange = Unmanaged<CurlExchange>.fromOpaque(userdata!).takeUnretainedValue()
    return exchange.handleBody(UnsafeRawBufferPointer(start: pointer, count: size * count))
}

let curlReadCallback: tdc_data_callback = { pointer, size, count, userdata in
    let exchange = Unmanaged<CurlExchange>.fromOpaque(userdata!).takeUnretainedValue()
    return exchange.readBody(into: UnsafeMutableRawBufferPointer(start: pointer, count: size * count))
}

let curlSeekCallback: tdc_seek_callback = { userdata, offset, origin in
    let exchange = Unmanaged<CurlExchange>.fromOpaque(userdata!).takeUnretainedValue()
    guard origin == SEEK_SET else { return tdc_seekfunc_cantseek }
    return exchange.seekBody(to: Int64(offset)) ? tdc_seekfunc_ok : tdc_seekfunc_fail
}

let curlProgressCallback: tdc_xferinfo_callback = { userdata, _, received, _, sent in
    let exchange = Unmanaged<CurlExchange>.fromOpaque(userdata!).takeUnretainedValue()
    return exchange.handleProgress(sent: Int64(sent), received: Int64(received))
}
