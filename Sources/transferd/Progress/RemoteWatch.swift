import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import TransferCore

/// `transferd status --watch --remote http://HOST:PORT`: the live view of a run
/// on another machine, from its control API: a snapshot, then its event stream.
/// A dropped stream is rejoined with `Last-Event-ID` (after the delay the
/// stream asked for); a `reset` reads the snapshot again. Ends by itself when
/// the run's summary arrives, or at Ctrl-C.
struct RemoteWatch {
    let base: URL
    let token: String
    let interval: TimeInterval
    let color: Bool

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    func run() throws -> ExitCode {
        let stop = Locked(false)
        let signals = SignalHandler { stop.withLock { $0 = true } }
        defer { signals.restore() }
        let session = URLSession(configuration: .ephemeral)
        var remote = try snapshot(session)
        let stream = EventStreamClient(session: session)
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
            var (events, closed) = stream.take()
            for event in events where !remote.apply(event, at: now) {
                // Too far behind, or a new run: the view starts again from the run's present.
                do {
                    remote = try snapshot(session)
                    stream.connect(to: url("/v1/events"), token: token, lastEventID: remote.lastEventID)
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
    private func snapshot(_ session: URLSession) throws -> RemoteRun {
        let summary = try get(session, "/v1/summary")
        var pages: [Data] = []
        for state in ["running", "waiting"] {
            var cursor: String?
            repeat {
                var path = "/v1/jobs?state=\(state)&limit=1000"
                if let cursor { path += "&cursor=" + cursor }
                let page = try get(session, path)
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

    private func get(_ session: URLSession, _ path: String) throws -> Data {
        var request = URLRequest(url: url(path), timeoutInterval: 15)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let answer = Locked<(Data?, URLResponse?, Error?)>((nil, nil, nil))
        let done = DispatchSemaphore(value: 0)
        session.dataTask(with: request) { data, response, error in
            answer.withLock { $0 = (data, response, error) }
            done.signal()
        }.resume()
        done.wait()
        let (data, response, error) = answer.current
        let shown = Redaction.url(base)
        if let error {
            throw Failure(description: "could not reach \(shown): \(Redaction.message(error.localizedDescription))"
                          + " (is `transferd run --listen` running there, and is the address the one it printed?)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        if status == 401 {
            throw Failure(description: "\(shown) refused the token: give --api-token-file FILE holding the run's token"
                          + " (QUEUE_DIR/.transferd/api.token on that machine), or set TRANSFERD_API_TOKEN")
        }
        guard status == 200, let data else {
            throw Failure(description: "\(shown)\(path.split(separator: "?").first ?? "") answered HTTP \(status)")
        }
        return data
    }
}

/// One event stream connection at a time, read as it arrives (URLSession's data
/// delegate) into a Server-Sent Events parser; the watch loop takes what came.
// @unchecked: every mutable field is guarded by `lock`.
final class EventStreamClient: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var parser = ServerSentEventParser()
    private var events: [ServerSentEvent] = []
    private var closedReason: String?
    private var task: URLSessionDataTask?
    private var isConnected = false
    private var delegateSession: URLSession?
    private let configuration: URLSessionConfiguration

    init(session: URLSession) {
        configuration = session.configuration
        super.init()
    }

    var connected: Bool { lock.withLock { isConnected } }

    /// The delay the stream asked for (`retry:`), 2 s when it did not.
    var retryDelay: TimeInterval { lock.withLock { Double(min(parser.retry ?? retryMilliseconds, 60_000)) / 1000 } }
    private var retryMilliseconds = 2000

    func connect(to url: URL, token: String, lastEventID: String?) {
        close()
        var request = URLRequest(url: url)
        request.timeoutInterval = 60  // the server's heartbeat comes every 15 s
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        if let lastEventID { request.setValue(lastEventID, forHTTPHeaderField: "Last-Event-ID") }
        let session = URLSession(configuration: configuration, delegate: self, delegateQueue: nil)
        let task = session.dataTask(with: request)
        lock.withLock {
            // The delay a stream asked for holds for the next connections too.
            if let retry = parser.retry { retryMilliseconds = retry }
            parser = ServerSentEventParser()
            closedReason = nil
            isConnected = false
            self.task = task
            delegateSession = session
        }
        task.resume()
    }

    func close() {
        let (task, session) = lock.withLock { () -> (URLSessionDataTask?, URLSession?) in
            defer {
                self.task = nil
                delegateSession = nil
            }
            return (self.task, delegateSession)
        }
        task?.cancel()
        session?.finishTasksAndInvalidate()
    }

    /// The events that came since the last call, and why the stream closed (nil while open).
    func take() -> ([ServerSentEvent], String?) {
        lock.withLock {
            defer { events.removeAll() }
            return (events, closedReason)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        lock.withLock {
            guard dataTask === task else { return }
            if status == 200 { isConnected = true } else { closedReason = "HTTP \(status)" }
        }
        completionHandler(status == 200 ? .allow : .cancel)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        lock.withLock {
            guard dataTask === task else { return }
            events += parser.feed(data)
            if parser.overflowed {
                closedReason = "the stream sent a line or an event beyond its bounds"
                dataTask.cancel()
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        lock.withLock {
            guard task === self.task else { return }
            isConnected = false
            if closedReason == nil {
                closedReason = error.map { Redaction.message($0.localizedDescription) } ?? "the stream ended"
            }
        }
    }
}
