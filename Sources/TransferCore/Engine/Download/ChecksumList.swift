import Foundation

/// A published list of SHA-256 checksums, as `sha256sum` writes it (`SHA256SUMS`): the file a
/// job names in `checksums` (`get --checksums URL`), from which the download takes the line of
/// its own file. Outside input: bounded (`maxBytes`) and fuzzed (`checksum-list`).
///
/// Lines read: `HEX  NAME` (text mode), `HEX *NAME` (binary mode), the same led by `\` for a
/// name GNU sha256sum escaped, and the BSD form `SHA256 (NAME) = HEX`; a leading `./` on the
/// name is ignored, as are blank lines and `#` comments. Lines of other lengths (an MD5 or SHA-512 list) are not SHA-256 and are
/// skipped; a name listed twice with two values is ambiguous and is not used.
struct ChecksumList: Equatable, Sendable {
    /// The most a list may hold: a release's list of thousands of files is well under it.
    static let maxBytes = 4 << 20

    /// Lowercase hex by name.
    private(set) var entries: [String: String] = [:]
    /// Names listed twice with different values.
    private(set) var ambiguous: Set<String> = []

    init(_ text: String) {
        for raw in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw[...]
            // GNU sha256sum writes a name holding `\` or a line break escaped, its line led by `\`.
            let escaped = line.hasPrefix("\\")
            guard !line.isEmpty, !line.hasPrefix("#"),
                  let (name, hex) = Self.entry(escaped ? Substring(line.dropFirst()) : Substring(line)) else { continue }
            let key = Self.normalised(escaped ? Substring(Self.unescaped(name)) : name)
            guard !key.isEmpty else { continue }
            if let known = entries[key], known != hex {
                ambiguous.insert(key)
            } else {
                entries[key] = hex
            }
        }
        for name in ambiguous { entries[name] = nil }
    }

    /// The SHA-256 listed for `name`: the line that names it whole, else the one line whose path
    /// ends with it (`dist/tool.tgz` for `tool.tgz`); nil when none does, or several do.
    func sha256(for name: String) -> String? {
        let key = Self.normalised(name)
        if let exact = entries[key] { return exact }
        guard !ambiguous.contains(key) else { return nil }
        let ending = entries.filter { $0.key.hasSuffix("/" + key) }
        return ending.count == 1 ? ending.first?.value : nil
    }

    private static func entry(_ line: Substring) -> (name: Substring, hex: String)? {
        if line.hasPrefix("SHA256 ("), let close = line.range(of: ") = ", options: .backwards) {
            let name = line[line.index(line.startIndex, offsetBy: 8)..<close.lowerBound]
            let hex = line[close.upperBound...]
            return isSHA256(hex) ? (name, hex.lowercased()) : nil
        }
        guard line.count > 66 else { return nil }
        let hex = line.prefix(64)
        let rest = line.dropFirst(64)
        guard isSHA256(hex), rest.first == " ", let marker = rest.dropFirst().first, marker == " " || marker == "*" else { return nil }
        return (rest.dropFirst(2), hex.lowercased())
    }

    /// `\\` and `\n` in a name as GNU sha256sum escapes them.
    private static func unescaped(_ name: Substring) -> String {
        var result = ""
        var iterator = name.makeIterator()
        while let character = iterator.next() {
            guard character == "\\", let next = iterator.next() else { result.append(character); continue }
            result.append(next == "n" ? "\n" : next)
        }
        return result
    }

    private static func isSHA256(_ text: Substring) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) || ($0 >= 65 && $0 <= 70) }
    }

    private static func normalised(_ name: Substring) -> String {
        var name = name
        while name.hasPrefix("./") { name = name.dropFirst(2) }
        return String(name)
    }

    private static func normalised(_ name: String) -> String { normalised(Substring(name)) }
}
