import Foundation
import TransferCore

/// Options shared by every command that moves bytes (`get` now; `put` and queue jobs later).
enum TransferFlags {
    static let transport = Flag.string("--transport", value: "curl|urlsession", help: "HTTP backend (default: curl)")
    static let header = Flag.repeated("-H", "--header", value: "'NAME: VALUE'", help: "extra request header (repeatable)")
    static let retries = Flag.integer("--retries", value: "N", range: 1...1000, help: "attempts without progress before giving up (default: 5)")
    static let limitRate = Flag.byteSize("--limit-rate", value: "RATE", help: "cap the speed, e.g. 500K or 10M (bytes/s)")
    static let connectTimeout = Flag.seconds("--connect-timeout", help: "time allowed to connect (default: 15)")
    static let idleTimeout = Flag.seconds("--idle-timeout", help: "abort an attempt when no byte moves this long (default: 30)")
    static let maxRedirects = Flag.integer("--max-redirects", value: "N", range: 0...100, help: "redirects to follow (default: 10; 0 disables)")
    /// Read as text: `0` turns the floor off, anything else is a size (`lowSpeed`).
    static let speedLimit = Flag.string("--speed-limit", value: "RATE",
                                        help: "abandon a download's attempt slower than this for --speed-time (default: 1K; 0 disables)")
    static let speedTime = Flag.seconds("--speed-time", help: "how long a download may stay under --speed-limit (default: 60)")
    static let cacert = Flag.string("--cacert", value: "PATH", help: "trust the CA certificates in this PEM file (curl backend)")
    static let pin = Flag.string("--pin", value: "sha256//BASE64", help: "require this server public key (curl backend)")
    static let insecure = Flag.presence("--insecure", help: "do not verify the server certificate (curl backend)")
    static let verbose = Flag.presence("-v", "--verbose", help: "log every request and response on stderr, secrets redacted")
    static let logFile = Flag.string("--log-file", value: "PATH", help: "append that log to PATH instead")

    static let specs: [OptionSpec] = [
        transport.spec, header.spec, retries.spec, limitRate.spec, connectTimeout.spec, idleTimeout.spec, maxRedirects.spec,
        speedLimit.spec, speedTime.spec, cacert.spec, pin.spec, insecure.spec, verbose.spec, logFile.spec,
    ]

    /// The flags `run` takes from here (it has its own output flags).
    static var queueSpecs: [OptionSpec] {
        let left = [header.name, verbose.name, logFile.name]
        return [QueueFlags.queue.spec] + specs.filter { !left.contains($0.key) }
    }

    /// `--speed-limit` and `--speed-time` (nil: `--speed-limit 0`, no floor).
    static func lowSpeed(_ options: TransferOptions) throws -> LowSpeedLimit? {
        var limit = LowSpeedLimit.default
        if let text = options.speedLimit {
            if text == "0" { return nil }
            limit.bytesPerSecond = try OptionValue.byteSize(text, option: speedLimit.name)
        }
        if let seconds = try options.speedTime { limit.seconds = seconds }
        return limit
    }

    static func transport(_ options: TransferOptions) throws -> Transport {
        let base: Transport
        switch options.transport ?? "curl" {
        case "curl": base = CurlTransport()
        case "urlsession": base = URLSessionTransport()
        case let other: throw UsageError("--transport must be curl or urlsession, not '\(other)'")
        }
        if let path = options.logFile {
            let file = try DebugLogFile(path: path)
            return LoggingTransport(base) { file.write($0) }
        }
        if options.verbose {
            // Clear the progress line first so the log never lands in the middle of it.
            let prefix = Output.stderrIsTerminal ? "\r\u{1B}[2K" : ""
            return LoggingTransport(base) { Output.err(prefix + $0 + "\n") }
        }
        return base
    }

    static func headers(_ options: TransferOptions) throws -> HTTPHeaders {
        var headers = HTTPHeaders()
        for line in options.header {
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

    static func tls(_ options: TransferOptions) throws -> TLSOptions {
        let ca = options.cacert
        if let ca, !FileManager.default.isReadableFile(atPath: ca) {
            throw UsageError("--cacert \(ca): no readable file there")
        }
        let pin = options.pin
        if let pin, !pin.hasPrefix("sha256//") {
            throw UsageError("--pin must look like sha256//BASE64 (see docs/downloads.md: computing a pin)")
        }
        return TLSOptions(caBundlePath: ca, insecure: options.insecure, pinnedPublicKey: pin)
    }

    static func retry(_ options: TransferOptions) throws -> RetryPolicy {
        var policy = RetryPolicy.default
        if let attempts = try options.retries { policy.maxAttempts = attempts }
        return policy
    }
}

/// The transfer flags of one command line, typed. A value is checked where the command reads
/// it, as each command always has: a flag a command takes and has no use for is not checked.
struct TransferOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var transport: String? { arguments[TransferFlags.transport] }
    var header: [String] { arguments[TransferFlags.header] }
    var retries: Int? { get throws { try arguments.read(TransferFlags.retries) } }
    var limitRate: Int64? { get throws { try arguments.read(TransferFlags.limitRate) } }
    var connectTimeout: Double? { get throws { try arguments.read(TransferFlags.connectTimeout) } }
    var idleTimeout: Double? { get throws { try arguments.read(TransferFlags.idleTimeout) } }
    var maxRedirects: Int? { get throws { try arguments.read(TransferFlags.maxRedirects) } }
    var speedLimit: String? { arguments[TransferFlags.speedLimit] }
    var speedTime: Double? { get throws { try arguments.read(TransferFlags.speedTime) } }
    var cacert: String? { arguments[TransferFlags.cacert] }
    var pin: String? { arguments[TransferFlags.pin] }
    var insecure: Bool { arguments[TransferFlags.insecure] }
    var verbose: Bool { arguments[TransferFlags.verbose] }
    var logFile: String? { arguments[TransferFlags.logFile] }
}
