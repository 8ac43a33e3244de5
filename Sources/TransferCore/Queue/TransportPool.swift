import Foundation

/// One instance of each backend for the whole run, made on first use.
final class TransportPool: Sendable {
    private let transports = Locked<[String: Transport]>([:])
    private let log: (@Sendable (String) -> Void)?

    init(log: (@Sendable (String) -> Void)? = nil) {
        self.log = log
    }

    func transport(named name: String) -> Transport {
        transports.withLock { pool in
            if let existing = pool[name] { return existing }
            var made: Transport = name == "urlsession" ? URLSessionTransport() : CurlTransport()
            if let log { made = LoggingTransport(made, write: log) }
            pool[name] = made
            return made
        }
    }
}
