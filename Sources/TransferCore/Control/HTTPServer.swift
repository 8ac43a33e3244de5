import CMicroHTTPD
import Foundation

/// The control API's listener: libmicrohttpd with a thread per connection, so
/// an event stream that waits for events holds up neither other requests nor the
/// run loop. Requests become `HTTPRequest` values and `handler` answers them;
/// bodies longer than `bodyLimit` are refused (413) without being kept. A
/// `ConnectionGuard` bounds how long a request's headers may take and how many
/// connections without the token (`isTrusted`) are held, so a client with the
/// token is answered however many idle sockets others hold open.
// The callbacks reach the server only through the context pointer libmicrohttpd hands back.
final class HTTPServer: Sendable {
    typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse

    /// The running daemon and the port it bound: set in init, cleared by `stop()`.
    private let bound = Locked<(daemon: OpaquePointer?, port: Int)>((nil, 0))
    let handler: Handler
    /// Asked when a request's headers are in, before any body is read: a response refuses the
    /// request there (an unknown route, a missing token, a body where none belongs), so nobody
    /// without the token makes the server hold a body.
    let preflight: @Sendable (HTTPRequest) -> HTTPResponse?
    let bodyLimit: Int
    /// Whether a request (its headers) bears the token: its connection is then never closed to make room.
    let isTrusted: @Sendable (HTTPRequest) -> Bool
    let guardian: ConnectionGuard
    /// Connections at once, each a thread; `untrustedLimit` of them at most without the token.
    static let connectionLimit: UInt32 = 64
    /// Seconds a request's headers may take on a connection without the token.
    static let headerTimeout: TimeInterval = 5
    /// The port bound (the system's choice when 0 was asked for).
    var port: Int { bound.current.port }

    /// One request's state between libmicrohttpd's calls of the access handler.
    final class Exchange {
        var body = Data()
    }

    init(address: ListenAddress, bodyLimit: Int, preflight: @escaping @Sendable (HTTPRequest) -> HTTPResponse? = { _ in nil },
         isTrusted: @escaping @Sendable (HTTPRequest) -> Bool = { _ in false },
         headerTimeout: TimeInterval = HTTPServer.headerTimeout, untrustedLimit: Int = Int(HTTPServer.connectionLimit) / 2,
         handler: @escaping Handler) throws {
        self.handler = handler
        self.preflight = preflight
        self.bodyLimit = bodyLimit
        self.isTrusted = isTrusted
        guardian = ConnectionGuard(headerTimeout: headerTimeout, untrustedLimit: untrustedLimit)
        let context = Unmanaged.passUnretained(self).toOpaque()
        let daemon = try Self.withSocketAddress(address) { socketAddress in
            transferd_mhd_start(socketAddress, address.isIPv6 ? 1 : 0, Self.accessHandler, context,
                                Self.requestCompleted, context, Self.connectionNotice, context,
                                Self.connectionLimit,
                                120,      // seconds a connection may stay silent (event streams send a heartbeat)
                                64 << 10) // bytes of request line and headers per connection
        }
        guard let daemon else {
            throw ListenAddressError(description: "could not listen on \(address): \(String(cString: strerror(errno)))"
                                     + " (is the port in use? --listen 127.0.0.1:0 lets the system choose one)")
        }
        bound.withLock { $0 = (daemon, Int(transferd_mhd_port(daemon))) }
        guardian.start()
    }

    /// Stops listening and closes every connection (a streamed response's source is
    /// released when its connection ends).
    func stop() {
        guard let daemon = bound.withLock({ state -> OpaquePointer? in
            defer { state.daemon = nil }
            return state.daemon
        }) else { return }
        guardian.stop()
        MHD_stop_daemon(daemon)
    }

    deinit { stop() }

    private static func withSocketAddress<R>(_ address: ListenAddress, _ body: (UnsafePointer<sockaddr>) -> R) throws -> R {
        if address.isIPv6 {
            var socketAddress = sockaddr_in6()
            socketAddress.sin6_family = sa_family_t(AF_INET6)
            socketAddress.sin6_port = in_port_t(UInt16(address.port).bigEndian)
            _ = inet_pton(AF_INET6, address.host, &socketAddress.sin6_addr)
            return withUnsafePointer(to: &socketAddress) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = in_port_t(UInt16(address.port).bigEndian)
        _ = inet_pton(AF_INET, address.host, &socketAddress.sin_addr)
        return withUnsafePointer(to: &socketAddress) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    }

    // MARK: libmicrohttpd's callbacks

    /// Called once when the headers are in, then once per piece of body, then once more with
    /// none left: the request is answered on that last call.
    private static let accessHandler: MHD_AccessHandlerCallback = { context, connection, url, method, _, uploadData, uploadSize, exchangeSlot in
        guard let context, let connection, let uploadSize, let exchangeSlot else { return .NO }
        let server = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue()
        guard let exchangePointer = exchangeSlot.pointee else {
            server.guardian.headersIn(UnsafeMutableRawPointer(connection),
                                      trusted: server.isTrusted(request(connection, url: url, method: method, body: Data())))
            // The headers: a declared body over the limit is refused before it is read.
            if let length = lookup(connection, .HEADER_KIND, "content-length").flatMap(Int.init), length > server.bodyLimit {
                return queue(tooLarge(server.bodyLimit), on: connection)
            }
            if let refusal = server.preflight(request(connection, url: url, method: method, body: Data())) {
                return queue(refusal, on: connection)
            }
            exchangeSlot.pointee = Unmanaged.passRetained(Exchange()).toOpaque()
            return .YES
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(exchangePointer).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            guard exchange.body.count + uploadSize.pointee <= server.bodyLimit, let uploadData else {
                // A chunked body that outgrew the limit: the connection is closed.
                return .NO
            }
            exchange.body.append(UnsafeRawPointer(uploadData).assumingMemoryBound(to: UInt8.self), count: uploadSize.pointee)
            uploadSize.pointee = 0
            return .YES
        }
        let complete = request(connection, url: url, method: method, body: exchange.body)
        exchange.body = Data()
        return queue(server.handler(complete), on: connection)
    }

    private static func request(_ connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
                                body: Data) -> HTTPRequest {
        let fullURL = url.map { String(cString: $0) } ?? "/"
        return HTTPRequest(method: method.map { String(cString: $0) } ?? "GET",
                           path: fullURL.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "/",
                           query: values(connection, .GET_ARGUMENT_KIND),
                           headers: values(connection, .HEADER_KIND),
                           body: body)
    }

    private static let requestCompleted: MHD_RequestCompletedCallback = { context, connection, exchangeSlot, _ in
        if let context, let connection {
            Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().guardian.answered(UnsafeMutableRawPointer(connection))
        }
        guard let exchangeSlot, let pointer = exchangeSlot.pointee else { return }
        Unmanaged<Exchange>.fromOpaque(pointer).release()
        exchangeSlot.pointee = nil
    }

    /// A connection opened or closed: the guard keeps count.
    private static let connectionNotice: MHD_NotifyConnectionCallback = { context, connection, _, notice in
        guard let context, let connection else { return }
        let guardian = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().guardian
        if notice == TRANSFERD_MHD_CONNECTION_STARTED {
            guardian.opened(UnsafeMutableRawPointer(connection), socket: transferd_mhd_connection_fd(connection))
        } else {
            guardian.closed(UnsafeMutableRawPointer(connection))
        }
    }

    private static func tooLarge(_ limit: Int) -> HTTPResponse {
        .error(413, "the request body is larger than \(limit) bytes", fix: "split the job file into several requests")
    }

    private static func lookup(_ connection: OpaquePointer, _ kind: MHD_ValueKind, _ key: String) -> String? {
        MHD_lookup_connection_value(connection, kind, key).map { String(cString: $0) }
    }

    private final class Collected { var values: [String: String] = [:] }

    private static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [String: String] {
        let collected = Collected()
        let pointer = Unmanaged.passUnretained(collected).toOpaque()
        _ = MHD_get_connection_values(connection, kind, { context, _, key, value in
            guard let context, let key else { return .YES }
            let collected = Unmanaged<Collected>.fromOpaque(context).takeUnretainedValue()
            collected.values[String(cString: key).lowercased()] = value.map { String(cString: $0) } ?? ""
            return .YES
        }, pointer)
        return withExtendedLifetime(collected) { collected.values }
    }

    private static func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
        let native: OpaquePointer?
        if let stream = response.stream {
            let box = Unmanaged.passRetained(StreamBox(stream)).toOpaque()
            native = MHD_create_response_from_callback(UInt64.max, 16 << 10, { context, _, buffer, limit in
                guard let context, let buffer else { return -2 }
                let box = Unmanaged<StreamBox>.fromOpaque(context).takeUnretainedValue()
                // nil: the stream ended (MHD_CONTENT_READER_END_OF_STREAM).
                guard let data = box.stream.next(limit: limit), !data.isEmpty else { return -1 }
                let count = min(data.count, limit)
                data.copyBytes(to: UnsafeMutableRawPointer(buffer).assumingMemoryBound(to: UInt8.self), count: count)
                return count
            }, box, { context in
                guard let context else { return }
                Unmanaged<StreamBox>.fromOpaque(context).release()
            })
        } else {
            native = response.body.withUnsafeBytes { bytes in
                MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                                .RESPMEM_MUST_COPY)
            }
        }
        guard let native else { return .NO }
        defer { MHD_destroy_response(native) }
        for header in response.headers {
            _ = MHD_add_response_header(native, header.name, header.value)
        }
        return MHD_queue_response(connection, UInt32(response.status), native)
    }

    private final class StreamBox {
        let stream: ResponseStream
        init(_ stream: ResponseStream) { self.stream = stream }
    }
}
