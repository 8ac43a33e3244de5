import Foundation

/// A transport that writes each exchange to a debug log: the request line and
/// headers, the response status and headers with the time to the first byte,
/// and the outcome with bytes and duration. Every secret is redacted first:
/// credentials in headers, signatures and tokens in URLs, user info. Wraps
/// either backend, so both log the same way.
package struct LoggingTransport: Transport {
    let base: Transport
    let write: @Sendable (String) -> Void
    private let sequence = Locked<Int>(0)

    package init(_ base: Transport, write: @escaping @Sendable (String) -> Void) {
        self.base = base
        self.write = write
    }

    package var name: String { base.name }
    package var capabilities: TransportCapabilities { base.capabilities }

    package func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome {
        let number = sequence.withLock { value -> Int in
            value += 1
            return value
        }
        let tag = "[\(base.name) #\(number)]"
        let started = Date()
        var lines = ["\(Self.clock(started)) \(tag) > \(request.method) \(Redaction.url(request.url))"]
        for field in request.headers.fields {
            lines.append("\(tag) >   \(field.name): \(Redaction.headerValue(name: field.name, value: field.value))")
        }
        if request.body.length > 0 { lines.append("\(tag) >   (body: \(request.body.length) bytes)") }
        write(lines.joined(separator: "\n"))
        let observer = HeadLogger(sink: sink, tag: tag, started: started, write: write)
        var logged = request
        if let onInterim = request.onInterim {
            let write = self.write
            logged.onInterim = { head in
                var lines = ["\(Self.clock(Date())) \(tag) < \(head.status) (interim)"]
                for field in head.headers.fields {
                    lines.append("\(tag) <   \(field.name): \(Redaction.headerValue(name: field.name, value: field.value))")
                }
                write(lines.joined(separator: "\n"))
                return onInterim(head)
            }
        }
        do {
            let outcome = try await base.execute(logged, sink: observer)
            let elapsed = Date().timeIntervalSince(started)
            write("\(Self.clock(Date())) \(tag) = \(outcome.head.status): \(outcome.bytesReceived) bytes received, "
                  + "\(outcome.bytesSent) sent in \(String(format: "%.3f", elapsed)) s")
            return outcome
        } catch {
            let elapsed = Date().timeIntervalSince(started)
            write("\(Self.clock(Date())) \(tag) ! failed after \(String(format: "%.3f", elapsed)) s: \(error)")
            throw error
        }
    }

    /// `17:30:01.123` (UTC).
    static func clock(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        let secondsOfDay = milliseconds / 1000 % 86_400
        return String(format: "%02d:%02d:%02d.%03d", Int(secondsOfDay / 3600), Int(secondsOfDay / 60 % 60),
                      Int(secondsOfDay % 60), Int(milliseconds % 1000))
    }
}

/// Logs the response head as it arrives, then passes everything on.
private final class HeadLogger: ResponseSink {
    let sink: ResponseSink
    let tag: String
    let started: Date
    let write: @Sendable (String) -> Void

    init(sink: ResponseSink, tag: String, started: Date, write: @escaping @Sendable (String) -> Void) {
        self.sink = sink
        self.tag = tag
        self.started = started
        self.write = write
    }

    func receive(head: ResponseHead) throws {
        let elapsed = Date().timeIntervalSince(started)
        var lines = ["\(LoggingTransport.clock(Date())) \(tag) < \(head.status) after \(String(format: "%.3f", elapsed)) s"
                     + " from \(Redaction.url(head.url))"]
        for field in head.headers.fields {
            lines.append("\(tag) <   \(field.name): \(Redaction.headerValue(name: field.name, value: field.value))")
        }
        write(lines.joined(separator: "\n"))
        try sink.receive(head: head)
    }

    func receive(body: UnsafeRawBufferPointer) throws {
        try sink.receive(body: body)
    }
}
