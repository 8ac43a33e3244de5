import Foundation

/// One event of a Server-Sent Events stream.
package struct ServerSentEvent: Sendable, Equatable {
    /// `message` unless the stream named it (`event: reset`).
    package var type: String
    package var data: String
    /// The stream's last event id when this event was dispatched (it carries over, as in the spec).
    package var lastEventID: String

    package init(type: String = "message", data: String, lastEventID: String = "") {
        self.type = type
        self.data = data
        self.lastEventID = lastEventID
    }
}

/// The client side of `text/event-stream`, as the WHATWG HTML standard's
/// "Interpreting an event stream" defines it: lines end in CRLF, LF or CR (a CR at the
/// end of one chunk and an LF at the start of the next are one line end); a leading
/// BOM is dropped; `:` lines are comments; one space after the colon is dropped;
/// `data` lines join with LF; an `id` holding NUL is ignored; `retry` takes digits only;
/// a blank line dispatches, and an event without data is not dispatched.
/// Hand-written because no library in the dependency set parses SSE. A server that
/// sends a line or an event beyond the bounds gets `broken` (and `overflowed`) set: the
/// client should drop the connection rather than buffer without end.
package struct ServerSentEventParser: Sendable {
    package static let maxLineBytes = 1 << 20
    package static let maxEventBytes = 8 << 20

    package private(set) var lastEventID = ""
    /// The reconnection delay the stream asked for, in milliseconds.
    package private(set) var retry: Int?
    /// The bound the stream broke, if it did: nothing more is parsed after it.
    package private(set) var broken: Bound?
    package var overflowed: Bool { broken != nil }

    package enum Bound: Sendable, Equatable {
        /// A line longer than `maxLineBytes`.
        case line
        /// An event whose data is longer than `maxEventBytes`.
        case event
    }

    private var line: [UInt8] = []
    private var data: [UInt8] = []
    private var hasData = false
    private var type = ""
    private var pendingID: String?
    private var lastWasCR = false
    private var atStart = true

    package init() {}

    /// Feeds bytes as they arrive; returns the events they completed.
    package mutating func feed<Bytes: Sequence>(_ bytes: Bytes) -> [ServerSentEvent] where Bytes.Element == UInt8 {
        var events: [ServerSentEvent] = []
        guard !overflowed else { return events }
        for byte in bytes {
            if lastWasCR {
                lastWasCR = false
                if byte == 0x0A { continue }  // the LF of a CRLF
            }
            switch byte {
            case 0x0D:
                lastWasCR = true
                if let event = endLine() { events.append(event) }
            case 0x0A:
                if let event = endLine() { events.append(event) }
            default:
                guard line.count < Self.maxLineBytes else {
                    broken = .line
                    return events
                }
                line.append(byte)
            }
            if overflowed { return events }
        }
        return events
    }

    private mutating func endLine() -> ServerSentEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if atStart {
            atStart = false
            if line.starts(with: [0xEF, 0xBB, 0xBF]) { line.removeFirst(3) }
        }
        if line.isEmpty { return dispatch() }
        if line[0] == UInt8(ascii: ":") { return nil }
        let field: ArraySlice<UInt8>
        var value: ArraySlice<UInt8>
        if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
            field = line[..<colon]
            value = line[(colon + 1)...]
            if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        } else {
            field = line[...]
            value = []
        }
        switch String(decoding: field, as: UTF8.self) {
        case "event":
            type = String(decoding: value, as: UTF8.self)
        case "data":
            guard data.count + value.count + 1 <= Self.maxEventBytes else {
                broken = .event
                return nil
            }
            data.append(contentsOf: value)
            data.append(0x0A)
            hasData = true
        case "id":
            if !value.contains(0) { pendingID = String(decoding: value, as: UTF8.self) }
        case "retry":
            if !value.isEmpty, value.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), value.count <= 9 {
                retry = Int(String(decoding: value, as: UTF8.self))
            }
        default:
            break
        }
        return nil
    }

    private mutating func dispatch() -> ServerSentEvent? {
        if let pendingID {
            lastEventID = pendingID
            self.pendingID = nil
        }
        defer {
            data.removeAll(keepingCapacity: true)
            hasData = false
            type = ""
        }
        guard hasData else { return nil }
        data.removeLast()  // the LF after the last data line
        return ServerSentEvent(type: type.isEmpty ? "message" : type, data: String(decoding: data, as: UTF8.self),
                               lastEventID: lastEventID)
    }
}
