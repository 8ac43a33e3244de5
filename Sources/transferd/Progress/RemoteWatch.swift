import Foundation
import TransferCore

/// `transferd status --watch --remote http://HOST:PORT`: the live view of a run
/// on another machine, from its control API: a snapshot, then its event stream.
/// A dropped stream is rejoined with `Last-Event-ID` (after the delay the
/// stream asked for); a `reset` reads the snapshot again. Ends by itself when
/// the run's summary arrives, or at Ctrl-C; fails when an answer or a line of the
/// stream is longer than transferd reads (`ResponseTooLarge`): that server is not
/// a transferd control API, and asking again would only read as much again.
/// Everything goes through the curl transport: it stops an exchange the moment
/// its sink throws, and reads no faster than the sink takes. (Through URLSession,
/// an endless answer was read whole into memory, and a stopped stream was read
/// on for seconds, its backlog queued without bound: 9 GB and 1.6 GB of RSS in 15 s.)
struct RemoteWatch {
    let base: URL
    let token: String
    let interval: TimeInterval
    let color: Bool

    struct Failure: Error, CustomStringConvertible {
        let description: String
        /// An answer past what transferd reads: asking again would read as much again.
        var tooLarge = false
    }

    /// What to check when the control API's address answers with more than transferd reads.
    private var advice: String {
        "check that \(Redaction.url(base)) is the address `transferd run --listen` printed on that machine"
    }

    func run() throws -> ExitCode {
        let stop = Locked(false)
        let signals = SignalHandler { stop.withLock { $0 = true } }
        defer { signals.restore() }
        let transport = CurlTransport()
        var remote = try snapshot(transport)
        let stream = EventStreamClient(transport: transport)
        stream.connect(to: url("/v1/events"), token: token, lastEventID: remote.lastEventID)
        let interactive = Output.stdoutIsTerminal
        let screen = TerminalScreen(write: Output.out)
        if interactive { TerminalRestore.activate() }
        defer {
            stream.close()
            if interactive {
                screen.end(permanent: [])
                TerminalRestore.deactivate()
            }
        }
        var reconnectAt: Date?
        var state = "live"
        while !stop.current {
            let now = Date()
            var (events, closed, tooLarge) = stream.take()
            if let tooLarge { throw Failure(description: "\(tooLarge)") }
            for event in events where !remote.apply(event, at: now) {
                // Too far behind, or a new run: the view starts again from the run's present.
                do {
                    remote = try snapshot(transport)
                    stream.connect(to: url("/v1/events"), token: token, lastEventID: remote.lastEventID)
                } catch let failure as Failure where failure.tooLarge {
                    throw failure
                } catch {
                    // Gone again meanwhile: retried like a dropped stream (and told to reset again).
                    stream.close()
                    closed = "\(error)"
                }
                break
            }
            if let ended = remote.ended {
                let line = "run ended: \(ended.done) done, \(ended.failed) failed, \(ended.cancelled) cancelled"
                    + (ended.interrupted ? " (interrupted)" : "")
                if interactive { screen.end(permanent: [line]) } else { Output.out(line + "\n") }
                return .success
            }
            if let closed, reconnectAt == nil {
                reconnectAt = now.addingTimeInterval(stream.retryDelay)
                state = "disconnected (\(closed)); reconnecting"
            }
            if let at = reconnectAt {
                if now >= at {
                    reconnectAt = nil
                    stream.connect(to: url("/v1/events"), token: token, lastEventID: remote.lastEventID)
                }
            } else {
                state = stream.connected ? "live" : "connecting"
            }
            draw(remote.progress, state: state, screen: screen, interactive: interactive, now: now)
            let deadline = Date().addingTimeInterval(interval)
            while !stop.current && Date() < deadline { usleep(50_000) }
        }
        return .interrupted
    }

    private func draw(_ progress: RunProgress, state: String, screen: TerminalScreen, interactive: Bool, now: Date) {
        let shown = Redaction.url(base)
        if interactive {
            let size = Output.terminalSize()
            let view = LiveView(width: size.columns, maxJobLines: max(1, min(12, size.rows / 2 - 1)), style: TerminalStyle(color: color))
            let header = TerminalStyle(color: color).dim(Text.truncated("\(shown): \(state) (Ctrl-C to stop)", to: size.columns - 1))
            screen.draw(permanent: [], live: [header] + view.lines(progress, now: now))
        } else {
            Output.out(PlainRenderer.progressLine(progress, now: now) + "; \(shown): \(state)\n")
        }
    }

    private func url(_ path: String) -> URL {
        URL(string: path, relativeTo: base)!.absoluteURL
    }

    /// The run's present: the summary, then every running and waiting job.
    private func snapshot(_ transport: Transport) throws -> RemoteRun {
        let summary = try get(transport, "/v1/summary")
        var pages: [Data] = []
        for state in ["running", "waiting"] {
            var cursor: String?
            repeat {
                var path = "/v1/jobs?state=\(state)&limit=1000"
                if let cursor { path += "&cursor=" + cursor }
                let page = try get(transport, path)
                pages.append(page)
                cursor = (try? JSONSerialization.jsonObject(with: page) as? [String: Any])?["next"] as? String
            } while cursor != nil && pages.count < 100
        }
        do {
            return try RemoteRun(summary: summary, jobs: pages, at: Date())
        } catch {
            throw Failure(description: "\(Redaction.url(base)) answered, but not as transferd's control API: \(error)")
        }
    }

    private func get(_ transport: Transport, _ path: String) throws -> Data {
        var headers = HTTPHeaders()
        headers.set("Authorization", "Bearer \(token)")
        let request = TransferRequest(url: url(path), headers: headers, connectTimeout: 15, idleTimeout: 15)
        let answer: (status: Int, body: Data)
        let shown = Redaction.url(base)
        do {
            answer = try BoundedRead.fetch(request, limit: BoundedRead.apiAnswerLimit, advice: advice, transport: transport)
        } catch let error as ResponseTooLarge {
            throw Failure(description: "\(error)", tooLarge: true)
        } catch {
            throw Failure(description: "could not reach \(shown): \(Redaction.message("\(error)"))"
                          + " (is `transferd run --listen` running there, and is the address the one it printed?)")
        }
        if answer.status == 401 {
            throw Failure(description: "\(shown) refused the token: give --api-token-file FILE holding the run's token"
                          + " (QUEUE_DIR/.transferd/api.token on that machine), or set TRANSFERD_API_TOKEN")
        }
        guard answer.status == 200 else {
            throw Failure(description: "\(shown)\(path.split(separator: "?").first ?? "") answered HTTP \(answer.status)")
        }
        return answer.body
    }
}

/// One event stream connection at a time, read through the transport as it arrives
/// into a Server-Sent Events parser; the watch loop takes what came. A line or an
/// event past the parser's bounds stops the exchange from the sink (the transport
/// reads nothing more) and is handed to the loop as `ResponseTooLarge`.
final class EventStreamClient: Sendable {
    private struct State {
        var parser = ServerSentEventParser()
        var events: [ServerSentEvent] = []
        var closedReason: String?
        var tooLarge: ResponseTooLarge?
        var isConnected = false
        /// Counts connections (and closes): callbacks of an older one are dropped, and stop it.
        var generation = 0
        var task: Task<Void, Never>?
        var retryMilliseconds = 2000
    }

    private let transport: Transport
    private let state = Locked(State())

    init(transport: Transport) {
        self.transport = transport
    }

    var connected: Bool { state.withLock { $0.isConnected } }

    /// The delay the stream asked for (`retry:`), 2 s when it did not.
    var retryDelay: TimeInterval { state.withLock { Double(min($0.parser.retry ?? $0.retryMilliseconds, 60_000)) / 1000 } }

    func connect(to url: URL, token: String, lastEventID: String?) {
        close()
        var headers = HTTPHeaders()
        headers.set("Authorization", "Bearer \(token)")
        headers.set("Accept", "text/event-stream")
        if let lastEventID { headers.set("Last-Event-ID", lastEventID) }
        // The server's heartbeat comes every 15 s: a minute without a byte is a dead connection.
        let request = TransferRequest(url: url, headers: headers, connectTimeout: 15, idleTimeout: 60)
        let generation = state.withLock { state -> Int in
            // The delay a stream asked for holds for the next connections too.
            if let retry = state.parser.retry { state.retryMilliseconds = retry }
            state.parser = ServerSentEventParser()
            state.closedReason = nil
            state.isConnected = false
            state.generation += 1
            return state.generation
        }
        let sink = Sink(client: self, generation: generation, url: url)
        let transport = self.transport
        let task = Task.detached {
            let reason: String
            do {
                _ = try await transport.execute(request, sink: sink)
                reason = "the stream ended"
            } catch let stop as Stop {
                reason = stop.reason
            } catch {
                reason = Redaction.message("\(error)")
            }
            self.ended(generation, reason: reason)
        }
        state.withLock { if $0.generation == generation { $0.task = task } }
    }

    func close() {
        let task = state.withLock { state -> Task<Void, Never>? in
            defer {
                state.task = nil
                state.generation += 1
                state.isConnected = false
            }
            return state.task
        }
        task?.cancel()
    }

    /// The events that came since the last call, why the stream closed (nil while open),
    /// and the bound it broke, if it did.
    func take() -> ([ServerSentEvent], String?, ResponseTooLarge?) {
        state.withLock { state in
            defer { state.events.removeAll() }
            return (state.events, state.closedReason, state.tooLarge)
        }
    }

    /// Why this side stopped an exchange, for `closedReason`.
    private struct Stop: Error {
        let reason: String
    }

    private func opened(_ generation: Int, status: Int) throws {
        try state.withLock { state in
            guard state.generation == generation else { throw Stop(reason: "closed") }
            guard status == 200 else {
                state.closedReason = "HTTP \(status)"
                throw Stop(reason: "HTTP \(status)")
            }
            state.isConnected = true
        }
    }

    private func received(_ generation: Int, _ bytes: UnsafeRawBufferPointer, url: URL) throws {
        try state.withLock { state in
            guard state.generation == generation else { throw Stop(reason: "closed") }
            state.events += state.parser.feed(bytes)
            guard let broken = state.parser.broken else { return }
            let advice = "check that \(Redaction.url(url)) is the event stream of `transferd run --listen`"
                + " (its lines and events are far shorter)"
            let error = broken == .line
                ? ResponseTooLarge("a line of the event stream", url: url, limit: ServerSentEventParser.maxLineBytes, advice: advice)
                : ResponseTooLarge("an event of the event stream", url: url, limit: ServerSentEventParser.maxEventBytes, advice: advice)
            state.tooLarge = error
            throw error
        }
    }

    private func ended(_ generation: Int, reason: String) {
        state.withLock { state in
            guard state.generation == generation else { return }
            state.isConnected = false
            if state.closedReason == nil { state.closedReason = reason }
        }
    }

    /// One connection's bytes, handed to the client under its lock (a transport calls a sink
    /// from one thread at a time; the lock orders it with the watch loop).
    private final class Sink: ResponseSink, Sendable {
        let client: EventStreamClient
        let generation: Int
        let url: URL

        init(client: EventStreamClient, generation: Int, url: URL) {
            self.client = client
            self.generation = generation
            self.url = url
        }

        func receive(head: ResponseHead) throws { try client.opened(generation, status: head.status) }
        func receive(body: UnsafeRawBufferPointer) throws { try client.received(generation, body, url: url) }
    }
}
