/// An ordered list of HTTP header fields with case-insensitive lookup.
///
/// Order and duplicates are kept as sent or received; `subscript` returns the
/// first value for a name.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    public init(_ fields: [(String, String)]) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    public subscript(name: String) -> String? {
        fields.first { Self.sameName($0.name, name) }?.value
    }

    /// Header names compare without regard to ASCII case (no lowercased copies:
    /// every response's headers are looked up on the transfer thread).
    static func sameName(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && zip(a.utf8, b.utf8).allSatisfy { x, y in
            x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= UInt8(ascii: "a") && (x | 0x20) <= UInt8(ascii: "z"))
        }
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// Appends a field, keeping any existing ones with the same name.
    public mutating func add(_ name: String, _ value: String) {
        fields.append((name: name, value: value))
    }

    /// Replaces every field with this name by one field.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    public mutating func remove(_ name: String) {
        fields.removeAll { Self.sameName($0.name, name) }
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }

    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.count == rhs.fields.count
            && zip(lhs.fields, rhs.fields).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    /// What makes `name: value` unfit to send, if anything: a name that is not
    /// an RFC 9110 token, or a value with CR, LF, NUL or another control
    /// character (tab aside). Either would let a job add header lines of its
    /// own choosing, or be cut short by a C string.
    package static func problem(name: String, value: String) -> String? {
        if name.isEmpty { return "an empty header name" }
        let tokenSymbols = Set("!#$%&'*+-.^_`|~".utf8)
        if let bad = name.utf8.first(where: { byte in
            !((byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A) || tokenSymbols.contains(byte))
        }) {
            return "the header name \"\(Self.visible(name))\" contains \(Self.describe(byte: bad)), which a header name may not"
        }
        if let bad = value.utf8.first(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
            return "the value of \(name) contains \(Self.describe(byte: bad)), which a header value may not"
        }
        return nil
    }

    /// The first problem among `fields` (see `problem(name:value:)`).
    package var problem: String? {
        for field in fields { if let problem = Self.problem(name: field.name, value: field.value) { return problem } }
        return nil
    }

    private static func describe(byte: UInt8) -> String {
        switch byte {
        case 0x0D: return "a carriage return (CR)"
        case 0x0A: return "a line feed (LF)"
        case 0x00: return "a NUL byte"
        case 0x20: return "a space"
        case 0x3A: return "a colon"
        case ..<0x20, 0x7F: return "the control character 0x\(String(byte, radix: 16))"
        default: return "the character \"\(String(decoding: [byte], as: UTF8.self))\""
        }
    }

    /// Text with control characters and bidirectional controls escaped (`\u{202E}`), for messages.
    static func visible(_ text: String) -> String {
        TerminalText.escaped(text)
    }

    /// C0 and C1 controls, DEL, and the bidirectional marks, overrides and isolates
    /// (which reorder what a terminal shows): `TerminalText.mustEscape`.
    static func isInvisibleControl(_ scalar: Unicode.Scalar) -> Bool {
        TerminalText.mustEscape(scalar)
    }

    /// Parses one raw header line (`Name: value`), as received from a server.
    /// Returns nil for status lines, blank lines and malformed lines.
    static func parseLine(_ line: String) -> (String, String)? {
        // By UTF-8 bytes, not Characters: this runs for every header line of every response.
        let bytes = line.utf8
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon != bytes.startIndex else { return nil }
        let name = trimmed(Substring(bytes[..<colon]))
        let value = trimmed(Substring(bytes[bytes.index(after: colon)...]))
        guard !name.isEmpty, !name.utf8.contains(UInt8(ascii: " ")) else { return nil }
        return (name, value)
    }

    /// A raw header line as libcurl hands it over, without its line end and edge spaces.
    static func trimmed(_ raw: UnsafeRawBufferPointer) -> String { ByteTrim.string(raw) }

    /// Without ASCII spaces, tabs and line ends at either end.
    static func trimmed(_ text: Substring) -> String { ByteTrim.string(text.utf8) }
}
