import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's sink, continuation and flags. Callbacks arrive on the session's
/// serial delegate queue.
// @unchecked: `head`, `bytesReceived`, `redirects`, `current` and the redirect flags are touched only on the
// session's serial delegate queue; the stop reason, also set by cancellation, is `Locked`; `continuation`
// is set before the task resumes and taken once on the delegate queue.
final class URLSessionExchange: @unchecked Sendable {
    /// Why this side stopped the task, to report instead of "cancelled".
    enum StopReason {
        case cancelled
        case tooManyRedirects
        case sinkFailed(Error)
    }

    let request: TransferRequest
    let sink: ResponseSink
    let task: URLSessionTask
    var continuation: CheckedContinuation<TransferOutcome, Error>?

    private let stopReason = Locked<StopReason?>(nil)
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

    var isStopped: Bool { stopReason.current != nil }

    /// Stops the task; the first reason given wins.
    func cancel(because reason: StopReason) {
        let first = stopReason.withLock { current -> Bool in
            guard current == nil else { return false }
            current = reason
            return true
        }
        if first { task.cancel() }
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
        do {
            try sink.receive(head: received)
            return true
        } catch {
            cancel(because: .sinkFailed(error))
            return false
        }
    }

    func receive(data: Data) {
        guard !isStopped else { return }
        do {
            try data.withUnsafeBytes { try sink.receive(body: $0) }
            bytesReceived += Int64(data.count)
            request.onProgress?(0, bytesReceived)
        } catch {
            cancel(because: .sinkFailed(error))
        }
    }

    func complete(error: Error?) {
        guard let continuation else { return }
        self.continuation = nil
        switch stopReason.current {
        case .sinkFailed(let sinkError):
            continuation.resume(throwing: sinkError)
            return
        case .tooManyRedirects:
            continuation.resume(throwing: TransportError(.tooManyRedirects, url: request.url,
                message: "more than \(request.maxRedirects) redirects"))
            return
        case .cancelled:
            continuation.resume(throwing: TransportError(.cancelled, url: request.url, message: "cancelled"))
            return
        case nil:
            break
        }
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
        default:
            // libcurl's TLS failures surface as code -1 with curl's message.
            let lowered = message.lowercased()
            if lowered.contains("ssl") || lowered.contains("certificate") || lowered.contains("tls") {
                kind = .tls
            } else if lowered.contains("partial") || lowered.contains("transfer closed") {
                kind = .truncated
            } else {
                kind = .other
            }
        }
        return TransportError(kind, url: url, message: message)
    }
}
