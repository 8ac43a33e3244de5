import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's sink, continuation and flags. Callbacks arrive on the session's
/// serial delegate queue.
///
/// A stop answers the caller at once instead of waiting for FoundationNetworking
/// to confirm it: while a fast server keeps the socket full, its work queue can
/// go on reading for many seconds before the cancellation gets its turn (17 s
/// measured against an endless body on loopback). The sink is written only
/// under `control`'s lock and never after a stop, so once `cancel` returns the
/// caller owns the sink again.
// @unchecked: `head`, `bytesReceived`, `redirects`, `current` and the redirect flags are touched only on the
// session's serial delegate queue; the stop reason, the continuation and every use of the sink are guarded
// by `control`'s lock.
final class URLSessionExchange: @unchecked Sendable {
    /// Why this side stopped the task, to report instead of "cancelled".
    enum StopReason {
        case cancelled
        case tooManyRedirects
        case sinkFailed(Error)
    }

    private struct Control {
        var stopReason: StopReason?
        var continuation: CheckedContinuation<TransferOutcome, Error>?
    }

    let request: TransferRequest
    let sink: ResponseSink
    let task: URLSessionTask

    private let control = Locked(Control())
    private(set) var head: ResponseHead?
    private(set) var bytesReceived: Int64 = 0
    var redirects = 0
    /// The request as the last redirect left it (`RedirectPolicy`).
    var current: TransferRequest
    var redirectLimitExceeded = false
    /// Why a redirect was not followed (`RedirectPolicy`), reported instead of the 3xx.
    var refusedRedirect: TransportError?

    init(request: TransferRequest, sink: ResponseSink, task: URLSessionTask) {
        self.request = request
        self.current = request
        self.sink = sink
        self.task = task
    }

    /// Called once, before the task resumes; a stop that came first answers at once.
    func await(_ continuation: CheckedContinuation<TransferOutcome, Error>) {
        let stoppedBy = control.withLock { control -> StopReason? in
            if control.stopReason == nil { control.continuation = continuation }
            return control.stopReason
        }
        if let stoppedBy { continuation.resume(throwing: error(for: stoppedBy)) }
    }

    /// Stops the task and answers the caller with the reason; the first reason given wins.
    func cancel(because reason: StopReason) {
        let waiting = control.withLock { control -> CheckedContinuation<TransferOutcome, Error>?? in
            guard control.stopReason == nil else { return .none }
            control.stopReason = reason
            defer { control.continuation = nil }
            return .some(control.continuation)
        }
        guard case .some(let continuation) = waiting else { return }
        // Never from the caller's thread: FoundationNetworking's cancel() waits for its work queue
        // (`sync`), which `BoundedDelegateQueue` may hold until the delegate queue drains; called
        // from a delegate block, that wait would never end.
        let task = self.task
        DispatchQueue.global().async { task.cancel() }
        continuation?.resume(throwing: error(for: reason))
    }

    private func error(for reason: StopReason) -> Error {
        switch reason {
        case .sinkFailed(let sinkError):
            return sinkError
        case .tooManyRedirects:
            return TransportError(.tooManyRedirects, url: request.url, message: "more than \(request.maxRedirects) redirects")
        case .cancelled:
            return TransportError(.cancelled, url: request.url, message: "cancelled")
        }
    }

    /// Runs `body` with the sink unless the exchange has stopped; a thrown error stops it.
    /// Returns whether `body` ran and succeeded.
    private func withSink(_ body: (ResponseSink) throws -> Void) -> Bool {
        let failure = control.withLock { control -> Error?? in
            guard control.stopReason == nil else { return .none }
            do {
                try body(sink)
                return .some(nil)
            } catch {
                return .some(error)
            }
        }
        switch failure {
        case .none:
            return false
        case .some(nil):
            return true
        case .some(.some(let error)):
            cancel(because: .sinkFailed(error))
            return false
        }
    }

    func receive(response: URLResponse) -> Bool {
        if redirectLimitExceeded {
            cancel(because: .tooManyRedirects)
            return false
        }
        if let refusedRedirect {
            cancel(because: .sinkFailed(refusedRedirect))
            return false
        }
        guard let http = response as? HTTPURLResponse else {
            cancel(because: .sinkFailed(TransportError(.protocolError, url: request.url, message: "not an HTTP response")))
            return false
        }
        // FoundationNetworking has no interim-answer callback: it reports each complete header block,
        // a 1xx one included (the resumable-upload draft's 104), to the delegate as though it were
        // the response. An interim answer is never the answer: dropped here (the backend declares
        // no `.interimResponses`), and the final one follows.
        if (100..<200).contains(http.statusCode), http.statusCode != 101 { return true }
        var headers = HTTPHeaders()
        for (name, value) in http.allHeaderFields {
            headers.add(String(describing: name), String(describing: value))
        }
        let received = ResponseHead(status: http.statusCode, headers: headers, url: http.url ?? request.url)
        head = received
        if (200..<300).contains(http.statusCode), let encoding = headers["Content-Encoding"], encoding.lowercased() != "identity",
           request.method.uppercased() != "HEAD" {
            // URLSession decodes such a body and hands over other bytes than the server counted:
            // nothing could check them against Content-Length or the server's checksums.
            cancel(because: .sinkFailed(TransportError(.unsupported, url: request.url, message:
                "the server sent the body with Content-Encoding: \(HTTPHeaders.visible(encoding)) although transferd asked for identity; "
                + "the urlsession backend can only see the decoded bytes, which nothing can check. "
                + "Use --transport curl (it saves the bytes as sent, checked against Content-Length)")))
            return false
        }
        return withSink { try $0.receive(head: received) }
    }

    func receive(data: Data) {
        guard withSink({ sink in try data.withUnsafeBytes { try sink.receive(body: $0) } }) else { return }
        bytesReceived += Int64(data.count)
        request.onProgress?(0, bytesReceived)
    }

    func complete(error: Error?) {
        // Nil when a stop already answered the caller.
        guard let continuation = control.withLock({ control -> CheckedContinuation<TransferOutcome, Error>? in
            defer { control.continuation = nil }
            return control.continuation
        }) else { return }
        if redirectLimitExceeded {
            continuation.resume(throwing: TransportError(.tooManyRedirects, url: request.url,
                message: "more than \(request.maxRedirects) redirects"))
            return
        }
        if let error {
            continuation.resume(throwing: Self.classify(error, url: request.url))
            return
        }
        guard let head else {
            continuation.resume(throwing: TransportError(.protocolError, url: request.url, message: "no response"))
            return
        }
        // URLSession does not always report a short body; check the announced length.
        if request.method.uppercased() != "HEAD", head.status != 304, head.status != 204,
           let announced = head.headers["Content-Length"].flatMap(Int64.init),
           head.headers["Content-Encoding"] == nil, bytesReceived < announced {
            continuation.resume(throwing: TransportError(.truncated, url: request.url,
                message: "received \(bytesReceived) of \(announced) bytes"))
            return
        }
        continuation.resume(returning: TransferOutcome(head: head, bytesReceived: bytesReceived,
                                                       bytesSent: task.countOfBytesSent))
    }

    static func classify(_ error: Error, url: URL) -> TransportError {
        let ns = error as NSError
        let message = ns.localizedDescription
        let kind: TransportError.Kind
        switch ns.code {
        case NSURLErrorCannotFindHost, NSURLErrorDNSLookupFailed:
            kind = .dns
        case NSURLErrorCannotConnectToHost:
            kind = .connect
        case NSURLErrorTimedOut:
            kind = .timeout
        case NSURLErrorNetworkConnectionLost, NSURLErrorNotConnectedToInternet:
            kind = .reset
        case NSURLErrorSecureConnectionFailed, NSURLErrorServerCertificateUntrusted,
             NSURLErrorServerCertificateHasBadDate, NSURLErrorServerCertificateNotYetValid,
             NSURLErrorServerCertificateHasUnknownRoot, NSURLErrorClientCertificateRejected:
            kind = .tls
        case NSURLErrorHTTPTooManyRedirects:
            kind = .tooManyRedirects
        case NSURLErrorBadServerResponse:
            kind = .protocolError
        case NSURLErrorBadURL:
            // FoundationNetworking's answer to an IPv6 literal host, also one a redirect led to.
            return TransportError(.unsupported, url: url, message: "the urlsession backend could not use a URL it was given "
                + "or redirected to (FoundationNetworking refuses IPv6 literal hosts such as [::1]); use --transport curl")
        default:
            // libcurl's TLS failures surface as code -1 with curl's message.
            let lowered = message.lowercased()
            if lowered.contains("ssl") || lowered.contains("certificate") || lowered.contains("tls") {
                kind = .tls
            } else if lowered.contains("partial") || lowered.contains("transfer closed") {
                kind = .truncated
            } else if lowered == "out of memory" {
                // FoundationNetworking runs libcurl, whose word this is for a header block past its
                // 100 KiB limit: no memory ran out (see CurlExchange.complete).
                return TransportError(.protocolError, url: url,
                                      message: "the server's response headers are larger than the 100 KiB libcurl accepts")
            } else {
                kind = .other
            }
        }
        return TransportError(kind, url: url, message: message)
    }
}
