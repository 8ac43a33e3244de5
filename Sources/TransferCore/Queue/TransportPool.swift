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
            let made = fresh(named: name)
            pool[name] = made
            return made
        }
    }

    /// A transport of its own, for a job that may hold its thread (a streamed copy's sequential source).
    func fresh(named name: String) -> Transport {
        let made: Transport = name == "urlsession" ? URLSessionTransport() : CurlTransport(loops: 1)
        return log.map { LoggingTransport(made, write: $0) } ?? made
    }
}
