import Foundation

/// A run's bandwidth limit at one moment: one rate for both directions together (`10M`, as
/// `--limit-rate` has always meant), a rate for each (`UP:DOWN`, either `off`, as rclone's
/// `--bwlimit`), or none (`off`).
package struct RateLimit: Sendable, Equatable {
    /// One rate for uploads and downloads together, in bytes per second.
    package var total: Int64?
    /// Uploads' own rate (when `total` is nil); nil: unlimited.
    package var up: Int64?
    /// Downloads' own rate (when `total` is nil); nil: unlimited.
    package var down: Int64?

    package static let off = RateLimit()

    package init(total: Int64? = nil, up: Int64? = nil, down: Int64? = nil) {
        self.total = total
        self.up = total == nil ? up : nil
        self.down = total == nil ? down : nil
    }

    /// Whether anything is limited.
    package var isOff: Bool { total == nil && up == nil && down == nil }

    /// The limit with every rate changed by `share` (a fleet's worker takes its part of each).
    package func map(_ share: (Int64) throws -> Int64) rethrows -> RateLimit {
        RateLimit(total: try total.map(share), up: try up.map(share), down: try down.map(share))
    }

    /// As `transferd limit` takes it: `off`, `10M` or `UP:DOWN`.
    package var text: String {
        if let total { return Self.size(total) }
        if isOff { return "off" }
        return "\(up.map(Self.size) ?? "off"):\(down.map(Self.size) ?? "off")"
    }

    /// As a person reads it: "10 MiB/s for uploads and downloads together", "uploads 1 MiB/s,
    /// downloads unlimited", "unlimited".
    package var described: String {
        if let total { return "\(Self.rate(total)) for uploads and downloads together" }
        if isOff { return "unlimited" }
        return "uploads \(up.map(Self.rate) ?? "unlimited"), downloads \(down.map(Self.rate) ?? "unlimited")"
    }

    /// A size in the shortest form `ByteSize` reads back exactly.
    static func size(_ bytes: Int64) -> String {
        for (suffix, unit) in [("G", Int64(1) << 30), ("M", Int64(1) << 20), ("K", Int64(1) << 10)] where bytes % unit == 0 {
            return "\(bytes / unit)\(suffix)"
        }
        return "\(bytes)"
    }

    static func rate(_ bytes: Int64) -> String {
        for (suffix, unit) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] as [(String, Int64)] where bytes >= unit {
            let value = Double(bytes) / Double(unit)
            return (value == value.rounded() ? String(Int64(value)) : String(format: "%.1f", value)) + " \(suffix)/s"
        }
        return "\(bytes) B/s"
    }

    /// Reads one limit: `off`, a size (`512K`, `10M`: both directions together), or
    /// `UP:DOWN` with either side a size or `off`.
    package static func parse(_ text: String) throws -> RateLimit {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased() == "off" { return .off }
        let sides = trimmed.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        switch sides.count {
        case 1:
            return RateLimit(total: try rate(sides[0], in: text))
        case 2:
            func side(_ value: String) throws -> Int64? { value.lowercased() == "off" ? nil : try rate(value, in: text) }
            return RateLimit(up: try side(sides[0]), down: try side(sides[1]))
        default:
            throw RateScheduleError("'\(text)' has more than one ':'; a limit is RATE, UP:DOWN or off")
        }
    }

    private static func rate(_ value: String, in text: String) throws -> Int64 {
        guard let bytes = ByteSize.parse(value), bytes > 0 else {
            throw RateScheduleError("'\(value)'\(value == text ? "" : " in '\(text)'") is not a rate: write a size per second such as 512K or 10M, or off")
        }
        return bytes
    }
}

/// A limit that may change with the time of day: one `RateLimit`, or a timetable of them
/// (`08:00,512K 19:00,off`, as rclone's `--bwlimit` timetable): each entry holds from its
/// time (local) until the next, and the last one holds past midnight until the first.
package struct RateSchedule: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        /// Minutes after midnight, local time.
        package var minute: Int
        package var limit: RateLimit
    }

    /// In time order; one entry at minute 0 for a limit that does not change.
    package let entries: [Entry]

    /// A limit that does not change.
    package init(_ limit: RateLimit) {
        entries = [Entry(minute: 0, limit: limit)]
    }

    private init(entries: [Entry]) {
        self.entries = entries
    }

    /// Whether the limit changes with the time of day.
    package var isTimetable: Bool { entries.count > 1 || entries.first?.minute != 0 }

    /// As `transferd limit` takes it back.
    package var text: String {
        guard isTimetable else { return entries[0].limit.text }
        return entries.map { String(format: "%02d:%02d,", $0.minute / 60, $0.minute % 60) + $0.limit.text }
            .joined(separator: " ")
    }

    /// The limit at `minute` after midnight.
    package func limit(atMinute minute: Int) -> RateLimit {
        (entries.last { $0.minute <= minute } ?? entries.last!).limit
    }

    /// The limit at `date`, by the local clock of `calendar`.
    package func limit(at date: Date, calendar: Calendar = .current) -> RateLimit {
        let parts = calendar.dateComponents([.hour, .minute], from: date)
        return limit(atMinute: (parts.hour ?? 0) * 60 + (parts.minute ?? 0))
    }

    /// Reads a limit or a timetable: `10M`, `1M:off`, `off`, or entries `HH:MM,LIMIT`
    /// separated by spaces.
    package static func parse(_ text: String) throws -> RateSchedule {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard !words.isEmpty else { throw RateScheduleError("no limit given: write a rate such as 10M, UP:DOWN, off, or a timetable") }
        if words.count == 1 && !words[0].contains(",") { return RateSchedule(try RateLimit.parse(words[0])) }
        var entries: [Entry] = []
        for word in words {
            let pair = word.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard pair.count == 2, let minute = Self.minute(pair[0]) else {
                throw RateScheduleError("'\(word)' is not a timetable entry: write HH:MM,LIMIT, such as 08:00,512K or 19:00,off")
            }
            guard !entries.contains(where: { $0.minute == minute }) else {
                throw RateScheduleError("the timetable names \(pair[0]) twice")
            }
            entries.append(Entry(minute: minute, limit: try RateLimit.parse(pair[1])))
        }
        return RateSchedule(entries: entries.sorted { $0.minute < $1.minute })
    }

    /// `HH:MM` (00:00 to 23:59) as minutes after midnight.
    private static func minute(_ text: String) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ (1...2).contains($0.count) && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
              let hour = Int(parts[0]), let minute = Int(parts[1]), (0..<24).contains(hour), (0..<60).contains(minute) else { return nil }
        return hour * 60 + minute
    }
}

/// A limit or timetable that cannot be read, with what to write instead.
package struct RateScheduleError: Error, CustomStringConvertible, Equatable {
    package let description: String
    init(_ description: String) { self.description = description }
}
