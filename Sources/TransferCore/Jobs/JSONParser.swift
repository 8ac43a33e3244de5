import Foundation

/// A strict RFC 8259 parser from UTF-8 bytes to `JSONValue`, in one pass.
///
/// Whole numbers without a fraction or exponent become `.integer`, others
/// `.number`. A key given twice in one object is an error (readers disagree
/// on which one wins, so a checker and a runner could see different jobs).
/// Errors name the line and column.
struct JSONParser {
    struct Failure: Error, CustomStringConvertible {
        let message: String
        let line: Int
        let column: Int
        /// For a key given twice in one object: the key, and where it was first given.
        var duplicate: (key: String, line: Int, column: Int)?
        var description: String { "\(message) at line \(line), column \(column)" }
    }

    /// A step from a value to one inside it, for `position(of:in:)`.
    enum PathStep: Equatable {
        case key(String)
        case index(Int)
    }

    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0
    /// Nesting beyond this is refused (a job file never needs it; it bounds the recursion).
    private static let maxDepth = 512

    static func parse(_ data: Data) throws -> JSONValue {
        var parser = JSONParser(bytes: [UInt8](data))
        return try parser.document()
    }

    static func parse(_ text: String) throws -> JSONValue {
        var parser = JSONParser(bytes: Array(text.utf8))
        return try parser.document()
    }

    private init(bytes: [UInt8]) {
        self.bytes = bytes
        // A UTF-8 byte order mark is allowed before the document.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
    }

    private mutating func document() throws -> JSONValue {
        skipSpace()
        let value = try self.value()
        skipSpace()
        guard index == bytes.count else { throw failure("unexpected text after the JSON value") }
        return value
    }

    // MARK: Values

    private mutating func value() throws -> JSONValue {
        guard index < bytes.count else { throw failure("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("unexpected character \(shown(bytes[index]))")
        }
    }

    private mutating func object() throws -> JSONValue {
        let start = index
        try enter()
        index += 1
        var members: [String: JSONValue] = [:]
        skipSpace()
        if peek(UInt8(ascii: "}")) {
            index += 1
            depth -= 1
            return .object(members)
        }
        while true {
            skipSpace()
            guard peek(UInt8(ascii: "\"")) else { throw failure("expected a quoted key") }
            let keyStart = index
            let key = try string()
            guard members[key] == nil else { throw duplicateFailure(key, at: keyStart, objectStart: start) }
            skipSpace()
            guard peek(UInt8(ascii: ":")) else { throw failure("expected ':' after the key \"\(key)\"") }
            index += 1
            skipSpace()
            members[key] = try value()
            skipSpace()
            if peek(UInt8(ascii: ",")) { index += 1; continue }
            if peek(UInt8(ascii: "}")) { index += 1; break }
            throw failure("expected ',' or '}' in an object")
        }
        depth -= 1
        return .object(members)
    }

    private mutating func array() throws -> JSONValue {
        try enter()
        index += 1
        var items: [JSONValue] = []
        skipSpace()
        if peek(UInt8(ascii: "]")) {
            index += 1
            depth -= 1
            return .array(items)
        }
        while true {
            skipSpace()
            items.append(try value())
            skipSpace()
            if peek(UInt8(ascii: ",")) { index += 1; continue }
            if peek(UInt8(ascii: "]")) { index += 1; break }
            throw failure("expected ',' or ']' in a list")
        }
        depth -= 1
        return .array(items)
    }

    private mutating func string() throws -> String {
        index += 1  // the opening quote
        let start = index
        // Fast path: no escapes, copied as one slice.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                defer { index += 1 }
                return try decoded(bytes[start..<index], from: start)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw failure("a control character inside a string (write it as an escape)") }
            index += 1
        }
        var text = [UInt8](bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return try decoded(text[...], from: start)
            case UInt8(ascii: "\\"):
                index += 1
                try escape(into: &text)
            case 0..<0x20:
                throw failure("a control character inside a string (write it as an escape)")
            default:
                text.append(byte)
                index += 1
            }
        }
        throw failure("a string is not closed")
    }

    private mutating func escape(into text: inout [UInt8]) throws {
        guard index < bytes.count else { throw failure("a string is not closed") }
        let byte = bytes[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""): text.append(byte)
        case UInt8(ascii: "\\"): text.append(byte)
        case UInt8(ascii: "/"): text.append(byte)
        case UInt8(ascii: "b"): text.append(0x08)
        case UInt8(ascii: "f"): text.append(0x0C)
        case UInt8(ascii: "n"): text.append(0x0A)
        case UInt8(ascii: "r"): text.append(0x0D)
        case UInt8(ascii: "t"): text.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xD800..<0xDC00).contains(scalar) {
                // A high surrogate must be followed by an escaped low one.
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw failure("an unpaired surrogate escape")
                }
                index += 2
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low) else { throw failure("an unpaired surrogate escape") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00..<0xE000).contains(scalar) {
                throw failure("an unpaired surrogate escape")
            }
            text.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
        default:
            index -= 1
            throw failure("an unknown escape \\\(shown(byte))")
        }
    }

    private mutating func hex4() throws -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("a \\u escape needs four hex digits") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("a \\u escape needs four hex digits")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private func decoded(_ slice: ArraySlice<UInt8>, from start: Int) throws -> String {
        guard let text = String(validating: slice, as: UTF8.self) else {
            var parser = self
            parser.index = start
            throw parser.failure("a string is not valid UTF-8")
        }
        return text
    }

    private mutating func number() throws -> JSONValue {
        let start = index
        var whole = true
        if peek(UInt8(ascii: "-")) { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw failure("a number needs digits") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw failure("a number cannot start with 0") }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if peek(UInt8(ascii: ".")) {
            whole = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure("a fraction needs digits") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if peek(UInt8(ascii: "e")) || peek(UInt8(ascii: "E")) {
            whole = false
            index += 1
            if peek(UInt8(ascii: "+")) || peek(UInt8(ascii: "-")) { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure("an exponent needs digits") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if whole, let integer = Int64(text) { return .integer(integer) }
        guard let double = Double(text), double.isFinite else {
            index = start
            throw failure("the number \(text) is out of range")
        }
        // 1.0 or 1e3 is a whole number too, when exactly one.
        if double == double.rounded(), abs(double) < 9.0e15 { return .integer(Int64(double)) }
        return .number(double)
    }

    // MARK: Duplicate keys and positions

    /// The failure for `key` given again at `keyStart`: the object from `objectStart` is read
    /// once more to find where it was given first (only on this error: no cost otherwise).
    private func duplicateFailure(_ key: String, at keyStart: Int, objectStart: Int) -> Failure {
        var scan = self
        scan.index = objectStart
        let first = (try? scan.keyOffset(key)) ?? nil
        let firstPosition = first.map { position(of: $0) } ?? position(of: keyStart)
        var again = self
        again.index = keyStart
        var failure = again.failure(
            "the key \"\(key)\" is given twice in one object (first at line \(firstPosition.line), column \(firstPosition.column))")
        failure.duplicate = (key, firstPosition.line, firstPosition.column)
        return failure
    }

    /// The offset of the opening quote of `key` in the object starting at `index`, if given there.
    private mutating func keyOffset(_ key: String) throws -> Int? {
        guard peek(UInt8(ascii: "{")) else { return nil }
        index += 1
        while true {
            skipSpace()
            guard peek(UInt8(ascii: "\"")) else { return nil }
            let start = index
            if try string() == key { return start }
            skipSpace()
            guard peek(UInt8(ascii: ":")) else { return nil }
            index += 1
            skipSpace()
            _ = try value()
            skipSpace()
            guard peek(UInt8(ascii: ",")) else { return nil }
            index += 1
        }
    }

    /// Where the value at `path` is named in a document that parses: the line and column of
    /// its key's opening quote (of the value itself for a list item). Nil when there is no
    /// such value. Used for messages only, so a document is read again rather than every
    /// position kept while parsing.
    static func position(of path: [PathStep], in data: Data) -> (line: Int, column: Int)? {
        var parser = JSONParser(bytes: [UInt8](data))
        parser.skipSpace()
        guard let offset = try? parser.locate(path[...]) else { return nil }
        return parser.position(of: offset)
    }

    private mutating func locate(_ path: ArraySlice<PathStep>) throws -> Int? {
        guard let step = path.first else { return index }
        switch step {
        case .key(let key):
            guard let keyStart = try keyOffset(key) else { return nil }
            if path.count == 1 { return keyStart }
            skipSpace()
            index += 1  // the ':'
            skipSpace()
            return try locate(path.dropFirst())
        case .index(let wanted):
            guard peek(UInt8(ascii: "[")) else { return nil }
            index += 1
            for _ in 0..<wanted {
                skipSpace()
                _ = try value()
                skipSpace()
                guard peek(UInt8(ascii: ",")) else { return nil }
                index += 1
            }
            skipSpace()
            guard index < bytes.count, !peek(UInt8(ascii: "]")) else { return nil }
            return try locate(path.dropFirst())
        }
    }

    // MARK: Helpers

    private mutating func literal(_ word: String) throws {
        let expected = Array(word.utf8)
        guard bytes.count - index >= expected.count, bytes[index..<index + expected.count].elementsEqual(expected) else {
            throw failure("unexpected character \(shown(bytes[index]))")
        }
        index += expected.count
    }

    private mutating func enter() throws {
        depth += 1
        guard depth <= Self.maxDepth else { throw failure("nested more than \(Self.maxDepth) levels deep") }
    }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private func peek(_ byte: UInt8) -> Bool { index < bytes.count && bytes[index] == byte }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private func shown(_ byte: UInt8) -> String {
        (0x21..<0x7F).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : String(format: "0x%02X", byte)
    }

    /// A failure at the current position, with its line and column (1-based, in bytes).
    private func failure(_ message: String) -> Failure {
        let (line, column) = position(of: index)
        return Failure(message: message, line: line, column: column)
    }

    /// The line and column (1-based, in bytes) of a byte offset.
    private func position(of offset: Int) -> (line: Int, column: Int) {
        let upTo = bytes[..<min(offset, bytes.count)]
        let line = upTo.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
        let lineStart = upTo.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
        return (line, offset - lineStart + 1)
    }
}
