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
        return "\(kind.rawValue) error\(target): \(Redaction.message(message))"
    }
}
