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
        OptionSpec("--speed-limit", value: "RATE", help: "abandon a download's attempt slower than this for --speed-time (default: 1K; 0 disables)"),
        OptionSpec("--speed-time", value: "SECONDS", help: "how long a download may stay under --speed-limit (default: 60)"),
        OptionSpec("--cacert", value: "PATH", help: "trust the CA certificates in this PEM file (curl backend)"),
        OptionSpec("--pin", value: "sha256//BASE64", help: "require this server public key (curl backend)"),
        OptionSpec("--insecure", help: "do not verify the server certificate (curl backend)"),
        OptionSpec("-v", "--verbose", help: "log every request and response on stderr, secrets redacted"),
        OptionSpec("--log-file", value: "PATH", help: "append that log to PATH instead"),
    ]

    /// The flags `run` takes from here (it has its own output flags).
    static var queueSpecs: [OptionSpec] {
        [QueueFlags.queueSpec] + specs.filter { !["--header", "--verbose", "--log-file"].contains($0.key) }
    }

    /// `--speed-limit` and `--speed-time` (nil: `--speed-limit 0`, no floor).
    static func lowSpeed(_ arguments: ParsedArguments) throws -> LowSpeedLimit? {
        var limit = LowSpeedLimit.default
        if let text = arguments.value("--speed-limit") {
            if text == "0" { return nil }
            guard let bytes = try arguments.byteSize("--speed-limit") else { return nil }
            limit.bytesPerSecond = bytes
        }
        if let seconds = try arguments.seconds("--speed-time") { limit.seconds = seconds }
        return limit
    }

    static func transport(_ arguments: ParsedArguments) throws -> Transport {
        let base: Transport
        switch arguments.value("--transport") ?? "curl" {
        case "curl": base = CurlTransport()
        case "urlsession": base = URLSessionTransport()
        case let other: throw UsageError("--transport must be curl or urlsession, not '\(other)'")
        }
        if let path = arguments.value("--log-file") {
            let file = try DebugLogFile(path: path)
            return LoggingTransport(base) { file.write($0) }
        }
        if arguments.has("--verbose") {
            // Clear the progress line first so the log never lands in the middle of it.
            let prefix = Output.stderrIsTerminal ? "\r\u{1B}[2K" : ""
            return LoggingTransport(base) { Output.err(prefix + $0 + "\n") }
        }
        return base
    }

    static func headers(_ arguments: ParsedArguments) throws -> HTTPHeaders {
        var headers = HTTPHeaders()
        for line in arguments.all("--header") {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
                throw UsageError("--header needs 'NAME: VALUE', not '\(line)'")
            }
            let name = String(line[..<colon]).trimmingCharacters(in: .whitespaces)
            let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            if let refusal = JobHeaderRule.refusal(name: name, value: value) { throw UsageError("--header \(refusal)") }
            headers.add(name, value)
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
            throw UsageError("--pin must look like sha256//BASE64 (see docs/downloads.md: computing a pin)")
        }
        return TLSOptions(caBundlePath: ca, insecure: arguments.has("--insecure"), pinnedPublicKey: pin)
    }

    static func retry(_ arguments: ParsedArguments) throws -> RetryPolicy {
        var policy = RetryPolicy.default
        if let attempts = try arguments.integer("--retries", range: 1...1000) { policy.maxAttempts = attempts }
        return policy
    }
}
