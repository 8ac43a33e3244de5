import Foundation

/// The last events of a run, numbered from 1, within a count and a byte bound:
/// what an event stream replays to a client that reconnects. A value, tested
/// without I/O; `EventJournal` shares one between the run and its streams.
struct EventBuffer: Sendable {
    struct Entry: Sendable, Equatable {
        let number: Int
        /// The event as one line of JSON.
        let data: String
    }

    enum Read: Sendable, Equatable {
        /// The events after the one asked for (empty: none yet).
        case entries([Entry])
        /// Events after the one asked for were dropped to keep the bound: the reader must
        /// start again from a fresh view, then follow from `newest`.
        case behind(newest: Int)
    }

    let capacity: Int
    let byteLimit: Int
    private var entries: [Entry] = []
    /// Index in `entries` of the oldest kept (the ones before it are dropped, compacted now and then).
    private var start = 0
    private var bytes = 0
    /// The number of the newest event (0: none yet).
    private(set) var newest = 0

    init(capacity: Int, byteLimit: Int) {
        self.capacity = max(1, capacity)
        self.byteLimit = max(1, byteLimit)
    }

    var count: Int { entries.count - start }

    /// The number of the oldest event kept (newest + 1 when none is kept).
    var oldest: Int { start < entries.count ? entries[start].number : newest + 1 }

    @discardableResult
    mutating func append(_ data: String) -> Int {
        newest += 1
        entries.append(Entry(number: newest, data: data))
        bytes += data.utf8.count
        while count > capacity || (bytes > byteLimit && count > 1) {
            bytes -= entries[start].data.utf8.count
            start += 1
        }
        if start > 1024 && start * 2 > entries.count {
            entries.removeFirst(start)
            start = 0
        }
        return newest
    }

    /// Up to `limit` events after event `number`.
    func read(after number: Int, limit: Int) -> Read {
        if number > newest { return .behind(newest: newest) }
        if number < oldest - 1 { return .behind(newest: newest) }
        let first = start + (number + 1 - oldest)
        let end = min(entries.count, first + max(1, limit))
        return .entries(first < end ? Array(entries[first..<end]) : [])
    }
}

/// An event's id on the wire, `RUN-NUMBER`: numbers restart with each run, so
/// an id from another run (the server restarted) is told apart and answered
/// with a reset rather than with the wrong events.
struct EventID: Sendable, Equatable, CustomStringConvertible {
    let run: String
    let number: Int

    init(run: String, number: Int) {
        self.run = run
        self.number = number
    }

    init?(parsing text: String) {
        // A run id is base 36 (newRunID) and a number is decimal digits: "r-5".
        guard let dash = text.lastIndex(of: "-") else { return nil }
        let runPart = text[..<dash], numberPart = text[text.index(after: dash)...]
        guard !runPart.isEmpty, runPart.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }),
              !numberPart.isEmpty, numberPart.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(numberPart) else {
            return nil
        }
        run = String(runPart)
        self.number = number
    }

    var description: String { "\(run)-\(number)" }
}

/// The run's events for every event stream: the run appends (never waiting for a
/// reader), each stream reads at its own pace and waits for more. A stream that
/// falls behind the bound is told to reset instead of holding the run's memory.
package final class EventJournal: Sendable {
    /// This run's id, the prefix of every event id.
    package let run: String
    /// The events kept, and whether the run has ended.
    private let state: Conditioned<(buffer: EventBuffer, closed: Bool)>

    package init(capacity: Int = 8192, byteLimit: Int = 8 << 20, run: String = EventJournal.newRunID()) {
        state = Conditioned((EventBuffer(capacity: capacity, byteLimit: byteLimit), false))
        self.run = run
    }

    package static func newRunID() -> String {
        String(UInt64.random(in: 0...UInt64.max) & 0xFFFF_FFFF_FFFF, radix: 36)
    }

    /// Streams following the journal now.
    var streams: Int { readers.current }
    let readers = Locked(0)

    /// Adds an event (one line of JSON) and wakes the streams waiting for it.
    package func append(_ json: String) {
        state.change(wakingAll: true) { $0.buffer.append(json) }
    }

    /// No more events: waiting streams end.
    package func close() {
        state.change(wakingAll: true) { $0.closed = true }
    }

    var newest: Int {
        state.withLock { $0.buffer.newest }
    }

    enum Wait: Equatable {
        case read(EventBuffer.Read)
        case timedOut
        case closed
    }

    /// Events after `number`, waiting up to `timeout` for one to come.
    func wait(after number: Int, limit: Int, timeout: TimeInterval) -> Wait {
        let deadline = Date().addingTimeInterval(timeout)
        return state.wait(deadline: deadline) { state -> Wait? in
            let read = state.buffer.read(after: number, limit: limit)
            if read != .entries([]) { return .read(read) }
            return state.closed ? .closed : nil
        } ?? .timedOut
    }
}
