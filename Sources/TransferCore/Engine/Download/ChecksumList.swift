import Foundation

/// A published list of SHA-256 checksums, as `sha256sum` writes it (`SHA256SUMS`): the file a
/// job names in `checksums` (`get --checksums URL`), from which the download takes the line of
/// its own file. Outside input: bounded (`maxBytes`) and fuzzed (`checksum-list`).
///
/// Lines read: `HEX  NAME` (text mode), `HEX *NAME` (binary mode), and the BSD form
/// `SHA256 (NAME) = HEX`; a leading `./` on the name is ignored, as are blank lines and
/// `#` comments. Lines of other lengths (an MD5 or SHA-512 list) are not SHA-256 and are
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
            guard !line.isEmpty, !line.hasPrefix("#"), let (name, hex) = Self.entry(Substring(line)) else { continue }
            let key = Self.normalised(name)
            guard !key.isEmpty else { continue }
            if let known = entries[key], known != hex {
                ambiguous.insert(key)
            } else {
                entries[key] = hex
            }
        }
        for name in ambiguous { entries[name] = nil }
    }

    /// The SHA-256 listed for `name` (a file name or a path's last components), if exactly one is.
    func sha256(for name: String) -> String? {
        entries[Self.normalised(name)]
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
