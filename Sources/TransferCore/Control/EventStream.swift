import Foundation

/// One client's Server-Sent Events stream (`GET /v1/events`): the run's events
/// after the one the client last saw (`Last-Event-ID`), each with its `id:`; a
/// comment as a heartbeat when nothing happens, so proxies keep the connection;
/// an explicit `reset` event when the events it asked for are no longer kept
/// (it fell behind the bound, or the id is from another run).
final class EventStream: ResponseStream, Sendable {
    private let journal: EventJournal
    private let heartbeat: TimeInterval
    /// Where the stream is: the last event sent, the bytes not yet sent, and when they last went.
    private struct Position {
        var cursor: Int
        var pending = Data()
        var lastSend: TimeInterval = -.infinity
    }
    /// Used by the one connection thread that pulls the stream; the lock costs nothing uncontended.
    private let position: Locked<Position>
    /// The least time between two sends: events that come meanwhile go out together, so ten
    /// clients cost ten wake-ups a tenth of a second, not ten per event (measured in bench/control.sh).
    private let batchInterval: TimeInterval

    /// - Parameter lastEventID: the client's `Last-Event-ID`; nil: only events from now on.
    init(journal: EventJournal, lastEventID: String?, heartbeat: TimeInterval, batchInterval: TimeInterval = 0.1) {
        self.journal = journal
        self.heartbeat = heartbeat
        self.batchInterval = batchInterval
        journal.readers.withLock { $0 += 1 }
        // The client's reconnection delay, in milliseconds.
        var start = Position(cursor: journal.newest)
        start.pending.append(contentsOf: "retry: 2000\n\n".utf8)
        if let lastEventID {
            if let id = EventID(parsing: lastEventID), id.run == journal.run, id.number <= start.cursor {
                start.cursor = id.number
            } else {
                start.pending.append(Self.reset(run: journal.run, newest: start.cursor,
                                                reason: "the event id \(lastEventID) is not from this run"))
            }
        }
        position = Locked(start)
    }

    deinit { journal.readers.withLock { $0 -= 1 } }

    func next(limit: Int) -> Data? {
        // Taken out whole (the box keeps no second reference to the bytes, which would make each
        // append copy them), and put back on the way out.
        var state = position.withLock { held -> Position in
            defer { held.pending = Data() }
            return held
        }
        defer { position.withLock { $0 = state } }
        while state.pending.isEmpty {
            let sinceLast = ProcessInfo.processInfo.systemUptime - state.lastSend
            if sinceLast < batchInterval { Thread.sleep(forTimeInterval: batchInterval - sinceLast) }
            switch journal.wait(after: state.cursor, limit: 1024, timeout: heartbeat) {
            case .closed:
                return nil
            case .timedOut:
                state.pending.append(contentsOf: ": heartbeat\n\n".utf8)
            case .read(.behind(let newest)):
                state.pending.append(Self.reset(run: journal.run, newest: newest,
                                          reason: "events after \(EventID(run: journal.run, number: state.cursor)) are no longer kept"))
                state.cursor = newest
            case .read(.entries(let entries)):
                for entry in entries {
                    state.pending.append(Self.frame(id: EventID(run: journal.run, number: entry.number), data: entry.data))
                }
                state.cursor = entries.last?.number ?? state.cursor
            }
        }
        let count = min(limit, state.pending.count)
        let chunk = state.pending.prefix(count)
        state.pending.removeFirst(count)
        if state.pending.isEmpty { state.lastSend = ProcessInfo.processInfo.systemUptime }
        return Data(chunk)
    }

    static func frame(id: EventID, event: String? = nil, data: String) -> Data {
        var text = "id: \(id)\n"
        if let event { text += "event: \(event)\n" }
        // One JSON line has no newline, but a `data:` field per line keeps the frame right regardless.
        for line in data.split(separator: "\n", omittingEmptySubsequences: false) { text += "data: \(line)\n" }
        return Data((text + "\n").utf8)
    }

    /// Tells the client that events were missed: reload the jobs and the summary, then follow on.
    static func reset(run: String, newest: Int, reason: String) -> Data {
        var object = JSONObject()
        object.add("event", "reset")
        object.add("reason", reason)
        object.add("fix", "read GET /v1/summary and GET /v1/jobs again; the stream goes on from here")
        return frame(id: EventID(run: run, number: newest), event: "reset", data: object.serialized())
    }
}
