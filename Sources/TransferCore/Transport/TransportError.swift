import Foundation

/// Why an exchange did not complete, classified so the retry policy can decide.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable {
        /// The host name did not resolve.
        case dns
        /// The TCP connection was refused or could not be made.
        case connect
        /// The connection broke while sending or receiving.
        case reset
        /// Connecting took too long, or no data moved for the idle timeout.
        case timeout
        /// Certificate, handshake or pinning failure.
        case tls
        /// The body ended before the length the server announced.
        case truncated
        /// More redirects than allowed.
        case tooManyRedirects
        /// The exchange was cancelled by the caller.
        case cancelled
        /// The backend cannot do what the request needs.
        case unsupported
        /// A redirect to a URL transferd does not follow (not http or https).
        case redirectRefused
        /// The server sent something that is not valid HTTP.
        case protocolError
        /// Anything else.
        case other
    }

    public let kind: Kind
    public let url: URL?
    public let message: String

    public init(_ kind: Kind, url: URL?, message: String) {
        self.kind = kind
        self.url = url
        self.message = message
    }

    public var description: String {
        let target = url.map { " (\(Redaction.url($0)))" } ?? ""
        return "\(kind.phrase)\(target): \(Redaction.message(message))"
    }
}

extension TransportError.Kind {
    /// What happened, in the user's words (the case names are for code).
    public var phrase: String {
        switch self {
        case .dns: return "could not resolve the host"
        case .connect: return "could not connect"
        case .reset: return "the connection broke"
        case .timeout: return "timed out"
        case .tls: return "TLS failed"
        case .truncated: return "the answer ended early"
        case .tooManyRedirects: return "too many redirects"
        case .cancelled: return "cancelled"
        case .unsupported: return "not supported by this backend"
        case .redirectRefused: return "redirect not followed"
        case .protocolError: return "the server's answer is not valid HTTP"
        case .other: return "the transfer failed"
        }
    }
}
