import Foundation

/// A JSON object that keeps its keys in the order they were added.
package struct JSONObject: Sendable {
    package indirect enum Value: Sendable {
        case string(String)
        case int(Int64)
        case number(Double)
        case bool(Bool)
        case null
        case array([Value])
        case object(JSONObject)
    }

    private var fields: [(String, Value)] = []

    package init() {}

    package mutating func add(_ key: String, _ value: Value) { fields.append((key, value)) }
    package mutating func add(_ key: String, _ value: String) { fields.append((key, .string(value))) }
    package mutating func add(_ key: String, _ value: Int) { fields.append((key, .int(Int64(value)))) }
    package mutating func add(_ key: String, _ value: Int64) { fields.append((key, .int(value))) }

    /// On one line, or indented by two spaces a level for people to read.
    package func serialized(pretty: Bool = false) -> String {
        var text = ""
        Self.write(.object(self), to: &text, indent: pretty ? "\n" : nil)
        return text
    }

    /// `indent` is nil for one line, else the newline and indentation of the current level.
    static func write(_ value: Value, to text: inout String, indent: String?) {
        switch value {
        case .string(let string): appendQuoted(string, to: &text)
        case .int(let number): text += String(number)
        case .number(let number): text += number.isFinite ? String(number) : "null"
        case .bool(let flag): text += flag ? "true" : "false"
        case .null: text += "null"
        case .array(let items):
            writeList(items.count, open: "[", close: "]", to: &text, indent: indent) { index, text, inner in
                write(items[index], to: &text, indent: inner)
            }
        case .object(let object):
            writeList(object.fields.count, open: "{", close: "}", to: &text, indent: indent) { index, text, inner in
                let (key, value) = object.fields[index]
                appendQuoted(key, to: &text)
                text += indent == nil ? ":" : ": "
                write(value, to: &text, indent: inner)
            }
        }
    }

    /// Brackets, separators and line breaks around `count` items; `item` writes one.
    private static func writeList(_ count: Int, open: String, close: String, to text: inout String, indent: String?,
                                  item: (Int, inout String, String?) -> Void) {
        text += open
        guard count > 0 else { return text += close }
        let inner = indent.map { $0 + "  " }
        for index in 0..<count {
            if index > 0 { text += "," }
            if let inner { text += inner }
            item(index, &text, inner)
        }
        if let indent { text += indent }
        text += close
    }

    /// A whole array, one line or indented.
    package static func serialized(_ items: [Value], pretty: Bool = false) -> String {
        var text = ""
        write(.array(items), to: &text, indent: pretty ? "\n" : nil)
        return text
    }

    package static func quoted(_ string: String) -> String {
        var text = ""
        appendQuoted(string, to: &text)
        return text
    }

    /// `string` as a JSON string, appended to `text` (no temporaries: result files hold a line per job).
    static func appendQuoted(_ string: String, to text: inout String) {
        // Most strings (URLs, paths, ids) need no escape: copied whole.
        if !string.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }) {
            text += "\""
            text += string
            text += "\""
            return
        }
        text += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case _ where scalar.value < 0x20: text += String(format: "\\u%04x", scalar.value)
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }

    /// RFC 3339 UTC with milliseconds: `2026-11-29T17:30:00.125Z`.
    package static func timestamp(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(milliseconds % 1000))
    }

    /// RFC 3339 UTC to the second: `2026-11-29T17:30:00Z`.
    package static func timestampSeconds(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

extension JSONObject.Value {
    /// A parsed value written out again (key order is not kept: keys are sorted).
    init(parsed value: JSONValue) {
        switch value {
        case .null: self = .null
        case .bool(let flag): self = .bool(flag)
        case .integer(let number): self = .int(number)
        case .number(let number): self = .number(number)
        case .string(let text): self = .string(text)
        case .array(let items): self = .array(items.map(JSONObject.Value.init(parsed:)))
        case .object(let members):
            var object = JSONObject()
            for key in members.keys.sorted() { object.add(key, JSONObject.Value(parsed: members[key]!)) }
            self = .object(object)
        }
    }
}
