import Foundation
import TransferCore

/// Options shared by every command that moves bytes (`get` now; `put` and queue jobs later).
enum TransferFlags {
    static let specs: [OptionSpec] = [
        OptionSpec("--transport", value: "curl|urlsession", help: "HTTP backend (default: curl)"),
        OptionSpec("-H", "--header", value: "'NAME: VALUE'", help: "extra request header (repeatable)"),
        OptionSpec("--retries", value: "N", help: "attempts without progress before giving up (default: 5)"),
        OptionSpec("--limit-rate", value: "RATE", help: "cap the speed, e.g. 500K or 10M (bytes/s)"),
        OptionSpec("--connect-timeout", value: "SECONDS", help: "time allowed to connect (default: 15)"),
        OptionSpec("--idle-timeout", value: "SECONDS", help: "abort an attempt when no byte moves this long (default: 30)"),
        OptionSpec("--max-redirects", value: "N", help: "redirects to follow (default: 10; 0 disables)"),
        OptionSpec("--cacert", value: "PATH", help: "trust the CA certificates in this PEM file (curl backend)"),
        OptionSpec("--pin", value: "sha256//BASE64", help: "require this server public key (curl backend)"),
        OptionSpec("--insecure", help: "do not verify the server certificate (curl backend)"),
    ]

    static func transport(_ arguments: ParsedArguments) throws -> Transport {
        switch arguments.value("--transport") ?? "curl" {
        case "curl": return CurlTransport()
        case "urlsession": return URLSessionTransport()
        case let other: throw UsageError("--transport must be curl or urlsession, not '\(other)'")
        }
    }

    static func headers(_ arguments: ParsedArguments) throws -> HTTPHeaders {
        var headers = HTTPHeaders()
        for line in arguments.all("--header") {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
                throw UsageError("--header needs 'NAME: VALUE', not '\(line)'")
            }
            headers.add(String(line[..<colon]).trimmingCharacters(in: .whitespaces),
                        String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        }
        return headers
    }

    static func tls(_ arguments: ParsedArguments) throws -> TLSOptions {
        let ca = arguments.value("--cacert")
        if let ca, !FileManager.default.isReadableFile(atPath: ca) {
            throw UsageError("--cacert \(ca): no readable file there")
        }
        let pin = arguments.value("--pin")
        if let pin, !pin.hasPrefix("sha256//") {
            throw UsageError("--pin must look like sha256//BASE64 (see README: computing a pin)")
        }
        return TLSOptions(caBundlePath: ca, insecure: arguments.has("--insecure"), pinnedPublicKey: pin)
    }

    static func retry(_ arguments: ParsedArguments) throws -> RetryPolicy {
        var policy = RetryPolicy.default
        if let attempts = try arguments.integer("--retries", range: 1...1000) { policy.maxAttempts = attempts }
        return policy
    }
}
