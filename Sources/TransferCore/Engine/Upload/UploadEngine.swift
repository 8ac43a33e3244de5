import Foundation

/// What to send in one HTTP upload.
public enum UploadBody: Sendable {
    /// A whole file as the request body.
    case file(path: String)
    /// A multipart/form-data form of fields and files.
    case form(MultipartForm)
}

/// An optional integrity header computed from the file before sending.
public enum UploadChecksum: String, Sendable, CaseIterable {
    /// `Content-MD5` (base64), which S3 and many servers verify.
    case md5
    /// `Content-Digest: sha-256=:base64:` (RFC 9530).
    case sha256
}

public struct UploadOptions: Sendable {
    public var url: URL
    public var method: String
    public var body: UploadBody
    public var headers: HTTPHeaders
    public var contentType: String?
    public var checksum: UploadChecksum?
    public var retry: RetryPolicy
    public var tls: TLSOptions
    public var connectTimeout: TimeInterval
    public var idleTimeout: TimeInterval
    /// Refuse to send a file whose SHA-256 differs (a `put` job's `sha256`).
    public var expectedSHA256: String?
    /// How fast the body may go (`--limit-rate`).
    public var rate = SendRate()

    public init(url: URL, method: String = "PUT", body: UploadBody, headers: HTTPHeaders = [:], contentType: String? = nil,
                checksum: UploadChecksum? = nil, retry: RetryPolicy = .default, tls: TLSOptions = TLSOptions(),
                connectTimeout: TimeInterval = 15, idleTimeout: TimeInterval = 30) {
        self.url = url
        self.method = method
        self.body = body
        self.headers = headers
        self.contentType = contentType
        self.checksum = checksum
        self.retry = retry
        self.tls = tls
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
    }
}

public struct UploadResult: Sendable {
    public var status: Int
    public var bytesSent: Int64
    public var attempts: Int
    public var elapsed: TimeInterval
    /// The start of the server's answer (at most 64 KiB).
    public var responseBody: Data
    public var responseHeaders: HTTPHeaders
}

public enum UploadEvent: Sendable {
    case started(totalSize: Int64)
    case progress(sent: Int64, totalSize: Int64)
    case retrying(attempt: Int, delay: TimeInterval, reason: String)
}

/// A streamed PUT or POST of a file or a form. A plain upload cannot resume
/// mid-body, so a retryable failure sends the whole body again; memory stays
/// constant however large the file.
public final class UploadEngine: Sendable {
    let transport: Transport
    let options: UploadOptions
    let onEvent: @Sendable (UploadEvent) -> Void

    /// The most read of the server's answer to an upload (a receipt, an echo, an error page are
    /// far less): an answer without end stops the upload here rather than run on.
    static let answerLimit = 4 << 20

    public init(transport: Transport, options: UploadOptions, onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.transport = transport
        self.options = options
        self.onEvent = onEvent
    }

    public func run() async throws -> UploadResult {
        let started = Date()
        var headers = options.headers
        let body: RequestBody
        /// The files sent, as they were before the first byte was read.
        var sources: [(path: String, fingerprint: SourceFingerprint)] = []
        switch options.body {
        case .file(let path):
            sources.append((path, try SourceFingerprint(path: path)))
            var info = stat()
            guard stat(path, &info) == 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: path)) }
            guard (info.st_mode & S_IFMT) == S_IFREG else {
                throw UploadError.local(POSIXFailure(operation: "upload (not a regular file)", path: path, code: EISDIR))
            }
            body = .file(path: path, offset: 0, length: Int64(info.st_size))
            if !headers.contains("Content-Type") {
                headers.set("Content-Type", options.contentType ?? MIMEType.guess(forPath: path))
            }
            if options.checksum != nil || options.expectedSHA256 != nil {
                let digests = try FileDigests.compute(path: path, offset: 0, length: Int64(info.st_size))
                if let expected = options.expectedSHA256, digests.sha256.hexString != expected.lowercased() {
                    throw UploadError.verification("\(path) has SHA-256 \(digests.sha256.hexString), not the expected \(expected); nothing was sent")
                }
                switch options.checksum {
                case .md5: headers.set("Content-MD5", Data(digests.md5).base64EncodedString())
                case .sha256: headers.set("Content-Digest", "sha-256=:\(Data(digests.sha256).base64EncodedString()):")
                case nil: break
                }
            }
        case .form(let form):
            for file in form.files { sources.append((file.path, try SourceFingerprint(path: file.path))) }
            do { body = try form.body() } catch let error as POSIXFailure { throw UploadError.local(error) }
            headers.set("Content-Type", form.contentType)
        }
        let total = body.length
        onEvent(.started(totalSize: total))
        var attempt = 0
        while true {
            attempt += 1
            let sink = CapturingSink(limit: Self.answerLimit, url: options.url,
                                     advice: "the upload may have arrived all the same; check that this is the address"
                                        + " meant to receive it before sending it again")
            let events = onEvent
            var request = TransferRequest(method: options.method, url: options.url, headers: headers, body: body,
                                          connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout,
                                          tls: options.tls, onProgress: { sent, _ in events(.progress(sent: sent, totalSize: total)) })
            options.rate.apply(to: &request)
            var failure = RetryPolicy.Failure.transport(.other)
            var described = ""
            do {
                let outcome = try await transport.execute(request, sink: sink)
                for source in sources { try source.fingerprint.check(source.path) }
                if (200..<300).contains(outcome.head.status) {
                    return UploadResult(status: outcome.head.status, bytesSent: total, attempts: attempt,
                                        elapsed: Date().timeIntervalSince(started), responseBody: sink.body,
                                        responseHeaders: outcome.head.headers)
                }
                let retryAfter = outcome.head.headers["Retry-After"].flatMap(RetryAfter.init(header:))
                failure = .http(status: outcome.head.status, retryAfter: retryAfter)
                described = "HTTP \(outcome.head.status)"
                if case .giveUp(let reason) = options.retry.decide(failure, attempt: attempt) {
                    // The reason ("gave up after N attempts") only where attempts were made.
                    throw UploadError.httpStatus(status: outcome.head.status, url: Redaction.url(options.url),
                                                 message: ServerMessage.summary(sink.body),
                                                 reason: failure.isRetryable ? reason : nil)
                }
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                failure = .transport(error.kind)
                described = "\(error.kind.phrase): \(error.message)"
                if case .giveUp(let reason) = options.retry.decide(failure, attempt: attempt) {
                    throw UploadError.transport(error, reason: reason)
                }
            } catch let error as POSIXFailure {
                throw UploadError.local(error)
            }
            guard case .retry(let delay) = options.retry.decide(failure, attempt: attempt) else { continue }
            onEvent(.retrying(attempt: attempt, delay: delay, reason: described))
            if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
        }
    }
}

public enum UploadError: Error, CustomStringConvertible, Sendable {
    case httpStatus(status: Int, url: String, message: String, reason: String?)
    case transport(TransportError, reason: String)
    case local(POSIXFailure)
    case verification(String)
    /// The local file changed while it was being sent.
    case sourceChanged(path: String, detail: String)

    public var description: String {
        switch self {
        case .httpStatus(let status, let url, let message, let reason):
            let detail = message.isEmpty ? "" : ": \(message)"
            return "HTTP \(status) from \(url)\(detail)" + (reason.map { " (\($0))" } ?? "")
        case .transport(let error, let reason):
            return "\(error) — \(reason)"
        case .local(let failure):
            return failure.description
        case .verification(let message):
            return message
        case .sourceChanged(let path, let detail):
            return "\(path) changed while it was being uploaded (\(detail)), so the server may hold a mix of old and new bytes; "
                + "upload a copy that nothing writes to, or retry once the file is complete"
        }
    }
}

/// A one-line summary of what a server said in an error body: an HTML
/// page's title, an S3 error's code and message, or the text itself.
enum ServerMessage {
    static func summary(_ body: Data) -> String {
        var text = String(decoding: body.prefix(4096), as: UTF8.self)
        if let start = text.range(of: "<title>"), let end = text.range(of: "</title>", range: start.upperBound..<text.endIndex) {
            text = String(text[start.upperBound..<end.lowerBound])
        } else if let error = S3ErrorDocument(text) {
            text = error.code + (error.message.isEmpty ? "" : ": \(error.message)")
        } else if text.contains("<") {
            text = text.replacingOccurrences(of: "<[^>]+>", with: " ", options: .regularExpression)
        }
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" })
        // Escaped, then cut: an escape is longer than what it stands for, and a summary never
        // passes 300 characters (the fuzz target s3-xml holds it to that).
        return String(TerminalText.escaped(String(words.joined(separator: " ").prefix(300))).prefix(300))
    }
}

/// MD5 and SHA-256 of a file region in one read.
package enum FileDigests {
    package struct Result {
        package var md5: [UInt8] = []
        var sha256: [UInt8] = []
        var crc32 = CRC32()
    }

    /// The digests of a file's byte range, in one read; only those asked for are computed.
    package static func compute(path: String, offset: Int64, length: Int64, md5 wantMD5: Bool = true, sha256 wantSHA256: Bool = true,
                        crc32 wantCRC32: Bool = false) throws -> Result {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure(operation: "read", path: path) }
        defer { close(fd) }
        var md5 = wantMD5 ? Digest(.md5) : nil
        var sha = wantSHA256 ? Digest(.sha256) : nil
        var crc = CRC32()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < length {
            let n = pread(fd, buffer.baseAddress, Int(min(Int64(buffer.count), length - done)), off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw POSIXFailure(operation: "read", path: path, code: n < 0 ? errno : EIO) }
            let piece = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            md5?.update(piece)
            sha?.update(piece)
            if wantCRC32 { crc.update(piece) }
            done += Int64(n)
        }
        return Result(md5: md5?.finalize() ?? [], sha256: sha?.finalize() ?? [], crc32: crc)
    }
}
