import Foundation

/// One HTTP exchange: a request (with an optional streamed body) whose response
/// head and body are delivered, in order, to a `ResponseSink`.
///
/// A transport never interprets the status code: a 404 or a 503 is a normal
/// exchange whose head and body reach the sink. It throws `TransportError` for
/// what prevented the exchange (DNS, connect, reset, timeout, TLS, truncation),
/// and rethrows whatever the sink threw. Cancellation is cooperative: cancelling
/// the calling task aborts the exchange with `TransportError.Kind.cancelled`.
public protocol Transport: Sendable {
    /// The backend's name as users type it (`curl`, `urlsession`).
    var name: String { get }
    /// What this backend can do; requests needing more are refused up front.
    var capabilities: TransportCapabilities { get }
    func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome
}

/// Receives a response. Called on a transport's thread, never concurrently for
/// one exchange. Throwing from either method aborts the exchange and the error
/// is rethrown by `Transport.execute`.
public protocol ResponseSink: AnyObject {
    /// The final response's status and headers (after redirects), before any body byte.
    func receive(head: ResponseHead) throws
    /// The next piece of the body. The buffer is only valid during the call.
    func receive(body: UnsafeRawBufferPointer) throws
    /// The transport holds this exchange back `seconds` for a rate limit before its next piece:
    /// waiting on purpose, which a speed floor must not count as slowness.
    func willWait(seconds: TimeInterval)
}

extension ResponseSink {
    public func willWait(seconds: TimeInterval) {}
}

/// Things a backend may or may not be able to do.
public struct TransportCapabilities: OptionSet, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Trust a CA bundle given by path.
    public static let customCA = TransportCapabilities(rawValue: 1 << 0)
    /// Skip certificate verification on explicit request.
    public static let insecureTLS = TransportCapabilities(rawValue: 1 << 1)
    /// Pin the server's public key (`sha256//BASE64`).
    public static let publicKeyPinning = TransportCapabilities(rawValue: 1 << 2)
    /// Send a byte range of a file with an exact Content-Length, without a temporary copy.
    public static let fileRegionBody = TransportCapabilities(rawValue: 1 << 3)
    /// Stop reading from the network while the sink is busy (bounded memory by design).
    public static let backpressure = TransportCapabilities(rawValue: 1 << 4)
    /// Cap the receive rate of one exchange.
    public static let receiveRateLimit = TransportCapabilities(rawValue: 1 << 5)

    /// Receive a body sent with a Content-Encoding as the bytes the server counted
    /// (URLSession decodes it, so its length and checksums cannot be checked).
    public static let encodedBodyAsSent = TransportCapabilities(rawValue: 1 << 6)
    /// Cap the send rate of one exchange's body, alone or with others (`--limit-rate` on uploads).
    public static let sendRateLimit = TransportCapabilities(rawValue: 1 << 7)
    /// Reach a host written as an IPv6 literal (`http://[::1]:8080/`): FoundationNetworking
    /// refuses such URLs (NSURLErrorBadURL), redirects to them included.
    public static let ipv6LiteralHosts = TransportCapabilities(rawValue: 1 << 8)
    /// Hand 1xx interim answers (the resumable-upload draft's `104 Upload Resumption Supported`)
    /// to `TransferRequest.onInterim` while the request is under way. FoundationNetworking has
    /// no callback for them (it reports one as though it were the response, which the urlsession
    /// backend drops); an engine that needs one chooses another way up front.
    public static let interimResponses = TransportCapabilities(rawValue: 1 << 9)

    public static let all: TransportCapabilities = [.customCA, .insecureTLS, .publicKeyPinning,
                                                     .fileRegionBody, .backpressure, .receiveRateLimit,
                                                     .encodedBodyAsSent, .sendRateLimit, .ipv6LiteralHosts,
                                                     .interimResponses]

    static let names: [(TransportCapabilities, String)] = [
        (.customCA, "custom CA bundle (--cacert)"),
        (.insecureTLS, "insecure TLS (--insecure)"),
        (.publicKeyPinning, "public key pinning (--pin)"),
        (.fileRegionBody, "file-region request bodies without a temporary copy"),
        (.backpressure, "network backpressure"),
        (.receiveRateLimit, "per-transfer rate limit"),
        (.encodedBodyAsSent, "content-encoded bodies saved as sent"),
        (.sendRateLimit, "upload rate limit (--limit-rate on uploads)"),
        (.ipv6LiteralHosts, "IPv6 literal hosts ([::1])"),
        (.interimResponses, "1xx interim answers (104 Upload Resumption Supported)"),
    ]

    public var description: String {
        Self.names.filter { contains($0.0) }.map(\.1).joined(separator: ", ")
    }
}

/// TLS settings for https URLs.
public struct TLSOptions: Sendable, Equatable {
    /// A PEM bundle of CA certificates to trust instead of the system's.
    public var caBundlePath: String?
    /// Skip certificate and host name verification (explicit opt-in only).
    public var insecure: Bool
    /// A public key pin in curl's format, `sha256//BASE64[;sha256//...]`.
    public var pinnedPublicKey: String?

    public init(caBundlePath: String? = nil, insecure: Bool = false, pinnedPublicKey: String? = nil) {
        self.caBundlePath = caBundlePath
        self.insecure = insecure
        self.pinnedPublicKey = pinnedPublicKey
    }

    /// The capabilities a backend needs to honour these options.
    public var requiredCapabilities: TransportCapabilities {
        var needed: TransportCapabilities = []
        if caBundlePath != nil { needed.insert(.customCA) }
        if insecure { needed.insert(.insecureTLS) }
        if pinnedPublicKey != nil { needed.insert(.publicKeyPinning) }
        return needed
    }
}

/// A request body, streamed by the transport from where it lives.
public enum RequestBody: Sendable, Equatable {
    case none
    case data(Data)
    /// `length` bytes of the file at `path`, starting at `offset`.
    case file(path: String, offset: Int64, length: Int64)
    /// Pieces sent one after another (a multipart/form-data body: small
    /// preambles in memory between file regions), with an exact total length.
    case composed([BodyPart])

    public var length: Int64 {
        switch self {
        case .none: return 0
        case .data(let data): return Int64(data.count)
        case .file(_, _, let length): return length
        case .composed(let parts): return parts.reduce(0) { $0 + $1.length }
        }
    }

    /// The body as a list of pieces (empty for `.none`).
    var parts: [BodyPart] {
        switch self {
        case .none: return []
        case .data(let data): return [.data(data)]
        case .file(let path, let offset, let length): return [.file(path: path, offset: offset, length: length)]
        case .composed(let parts): return parts
        }
    }
}

/// One piece of a composed request body.
public enum BodyPart: Sendable, Equatable {
    case data(Data)
    case file(path: String, offset: Int64, length: Int64)

    public var length: Int64 {
        switch self {
        case .data(let data): return Int64(data.count)
        case .file(_, _, let length): return length
        }
    }
}

/// Everything one exchange needs.
public struct TransferRequest: Sendable {
    public var method: String
    public var url: URL
    public var headers: HTTPHeaders
    public var body: RequestBody
    /// Seconds allowed to establish the connection (TCP and TLS).
    public var connectTimeout: TimeInterval
    /// Abort when no body byte arrives (or can be sent) for this many seconds.
    public var idleTimeout: TimeInterval
    public var maxRedirects: Int
    public var tls: TLSOptions
    /// Receive at most this many bytes per second (nil: unlimited).
    public var maxReceiveRate: Int64?
    /// The transfer's own receive bucket, which several exchanges may share (a download's
    /// limit over all its connections): the transport pauses reading this exchange, never
    /// the others it runs, while the bucket is empty. A pause is not idleness.
    public var receiveLimiter: BandwidthLimiter?
    /// The run's download bucket (`RunBandwidth.down`), shared by every transfer of the run:
    /// kept as `receiveLimiter` is, by pausing this exchange alone.
    public var runReceiveLimiter: BandwidthLimiter?
    /// Send the body at most this fast, in bytes per second (nil: unlimited).
    public var maxSendRate: Int64?
    /// A bucket the body's bytes are taken from as they are sent, shared with
    /// other exchanges (a run's `--limit-rate`).
    public var sendLimiter: BandwidthLimiter?
    /// Called with (bytes sent, bytes received) as the exchange progresses.
    public var onProgress: (@Sendable (Int64, Int64) -> Void)?
    /// Called on the transport's thread with each 1xx interim answer (status 101 aside) before
    /// the final one, by backends with `.interimResponses` (others never call it). Returning
    /// false stops the exchange at once (a transport error follows). Keep it short: the
    /// transport's other exchanges wait while it runs.
    public var onInterim: (@Sendable (ResponseHead) -> Bool)?

    public init(method: String = "GET", url: URL, headers: HTTPHeaders = [:], body: RequestBody = .none,
                connectTimeout: TimeInterval = 15, idleTimeout: TimeInterval = 30, maxRedirects: Int = 10,
                tls: TLSOptions = TLSOptions(), maxReceiveRate: Int64? = nil,
                onProgress: (@Sendable (Int64, Int64) -> Void)? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.maxRedirects = maxRedirects
        self.tls = tls
        self.maxReceiveRate = maxReceiveRate
        self.onProgress = onProgress
    }

    /// The capabilities a backend needs to carry out this request as asked.
    public var requiredCapabilities: TransportCapabilities {
        var needed = tls.requiredCapabilities
        if maxReceiveRate != nil || receiveLimiter != nil || runReceiveLimiter != nil { needed.insert(.receiveRateLimit) }
        if url.host?.contains(":") == true || url.absoluteString.contains("://[") { needed.insert(.ipv6LiteralHosts) }
        if maxSendRate != nil || sendLimiter != nil { needed.insert(.sendRateLimit) }
        return needed
    }
}

/// The final response's status line and headers.
public struct ResponseHead: Sendable, Equatable {
    public var status: Int
    public var headers: HTTPHeaders
    /// The URL that answered, after redirects.
    public var url: URL

    public init(status: Int, headers: HTTPHeaders, url: URL) {
        self.status = status
        self.headers = headers
        self.url = url
    }
}

/// What an exchange did.
public struct TransferOutcome: Sendable {
    public var head: ResponseHead
    /// Body bytes delivered to the sink.
    public var bytesReceived: Int64
    /// Request body bytes sent.
    public var bytesSent: Int64

    public init(head: ResponseHead, bytesReceived: Int64, bytesSent: Int64) {
        self.head = head
        self.bytesReceived = bytesReceived
        self.bytesSent = bytesSent
    }
}

extension Transport {
    /// Throws `TransportError.unsupported` when this backend cannot honour the request.
    public func checkSupports(_ request: TransferRequest) throws {
        // A header with CR, LF or NUL would add lines of its own or be cut short: never sent.
        if let problem = request.headers.problem {
            throw TransportError(.unsupported, url: request.url, message: "refused to send the request: \(problem)")
        }
        let missing = request.requiredCapabilities.subtracting(capabilities)
        guard missing.isEmpty else {
            throw TransportError(.unsupported, url: request.url,
                                 message: "the \(name) backend cannot do \(missing); use --transport curl")
        }
    }
}
