import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The FoundationNetworking backend.
///
/// On Linux URLSession has no backpressure of its own: every received chunk is
/// queued for the delegate however slowly it is consumed. `BoundedDelegateQueue`
/// adds it (about 8 MiB pending at most). The backend still declares no
/// `.backpressure`, so the download engine asks for bounded Range windows
/// (4 MiB shared by a file's connections) where a server allows ranges.
///
/// What it cannot do is declared in `capabilities`: no custom CA, insecure
/// mode or pinning (no server-trust challenge reaches the delegate on Linux),
/// and a file-region body is sent from a temporary copy because a streamed
/// body is always sent chunked.
public final class URLSessionTransport: Transport, Sendable {
    public let name = "urlsession"
    public let capabilities: TransportCapabilities = []

    private let session: URLSession
    private let router: URLSessionRouter
    private let delegateQueue: OperationQueue

    public init(maxConnectionsPerHost: Int = 16) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.httpCookieStorage = nil
        delegateQueue = BoundedDelegateQueue()
        delegateQueue.name = "transferd.urlsession"
        router = URLSessionRouter()
        session = URLSession(configuration: configuration, delegate: router, delegateQueue: delegateQueue)
    }

    deinit {
        // Not on this thread: invalidateAndCancel() waits for FoundationNetworking's work queue, which
        // a fast stream being cancelled can keep busy for seconds (see `URLSessionExchange`).
        let session = self.session
        DispatchQueue.global().async { session.invalidateAndCancel() }
    }

    public func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome {
        try checkSupports(request)
        try Task.checkCancellation()
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method.uppercased()
        urlRequest.timeoutInterval = request.idleTimeout
        for field in request.headers {
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name)
        }
        if !request.headers.contains("Accept-Encoding") {
            // The default asks for compressed bodies, which breaks ranges and lengths.
            urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }

        var temporaryCopy: String?
        let task: URLSessionTask
        switch request.body {
        case .none:
            task = session.dataTask(with: urlRequest)
        case .data(let data):
            urlRequest.httpBody = data
            task = session.dataTask(with: urlRequest)
        case .file(let path, 0, let length)
            where (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value == length:
            urlRequest.setValue(String(length), forHTTPHeaderField: "Content-Length")
            task = session.uploadTask(with: urlRequest, fromFile: URL(fileURLWithPath: path))
        case .file, .composed:
            // A streamed body would go out chunked: send an exact-length temporary copy instead.
            let copy = try Self.materialize(request.body.parts)
            temporaryCopy = copy
            urlRequest.setValue(String(request.body.length), forHTTPHeaderField: "Content-Length")
            task = session.uploadTask(with: urlRequest, fromFile: URL(fileURLWithPath: copy))
        }
        defer { if let temporaryCopy { unlink(temporaryCopy) } }

        let exchange = URLSessionExchange(request: request, sink: sink, task: task)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransferOutcome, Error>) in
                exchange.await(continuation)
                router.register(exchange)
                task.resume()
            }
        } onCancel: {
            exchange.cancel(because: .cancelled)
        }
    }

    /// Writes the body's pieces to a temporary file (see the type's notes).
    private static func materialize(_ parts: [BodyPart]) throws -> String {
        let directory = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        let target = "\(directory)/transferd-body-\(UUID().uuidString)"
        let output = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw POSIXFailure(operation: "create", path: target) }
        defer { close(output) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        func put(_ pointer: UnsafeRawPointer, _ count: Int) throws {
            guard write(output, pointer, count) == count else {
                unlink(target)
                throw POSIXFailure(operation: "write", path: target)
            }
        }
        for part in parts {
            switch part {
            case .data(let data):
                try data.withUnsafeBytes { if let base = $0.baseAddress { try put(base, $0.count) } }
            case .file(let path, let offset, let length):
                let input = open(path, O_RDONLY | O_CLOEXEC)
                guard input >= 0 else { unlink(target); throw POSIXFailure(operation: "open", path: path) }
                defer { close(input) }
                var copied: Int64 = 0
                while copied < length {
                    let n = pread(input, buffer, Int(min(Int64(1 << 20), length - copied)), off_t(offset + copied))
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { unlink(target); throw POSIXFailure(operation: "read", path: path) }
                    try put(buffer, n)
                    copied += Int64(n)
                }
            }
        }
        return target
    }
}
