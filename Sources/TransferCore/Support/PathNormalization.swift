/// Lexical path normalisation: resolves `.`, `..` and repeated slashes
/// without touching the filesystem (`standardizingPath` also resolves
/// symlinks, one `readlink` per component).
///
/// Paths are split on the byte `/`, as the kernel reads them, never on
/// Characters: `/` followed by a combining mark (U+0301) is one Character, so
/// a Character-wise split would hide a `..` segment the kernel still follows.
package enum PathNormalization {
    package static func normalize(_ path: String) -> String {
        // Most paths are already normal (every job's, on every start): one byte scan, no copies.
        isNormal(path) ? path : resolved(path)
    }

    /// `.`, `..` and empty segments resolved, segment by segment.
    static func resolved(_ path: String) -> String {
        var parts: [String] = []
        for component in components(path) {
            switch component {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(component)
            }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// Whether `normalize` would return `path` unchanged: absolute, no empty segment
    /// (`//`, a trailing `/`), no `.` or `..` segment.
    static func isNormal(_ path: String) -> Bool {
        let bytes = path.utf8
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        var segmentLength = 0
        var dots = 0
        for byte in bytes.dropFirst() {
            if byte == UInt8(ascii: "/") {
                if segmentLength == 0 || segmentLength == dots && dots <= 2 { return false }
                segmentLength = 0
                dots = 0
            } else {
                segmentLength += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            }
        }
        return segmentLength > 0 && !(segmentLength == dots && dots <= 2)
    }

    /// The segments between `/` bytes (empty ones left out unless asked for).
    static func components(_ path: String, omittingEmpty: Bool = true) -> [String] {
        path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: omittingEmpty)
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// `path` starts with `prefix`, byte for byte.
    static func hasBytePrefix(_ path: String, _ prefix: String) -> Bool {
        path.utf8.starts(with: prefix.utf8)
    }
}

/// Path text operations that Foundation's `NSString` path methods do, written out: on Linux,
/// `PathText.parent("c")` traps once `FileManager.fileExists(atPath: "c")`
/// has been asked (Swift 6.3.1's Foundation; `get URL -o c` crashed), and these run on what
/// users type.
package enum PathText {
    /// The path without its last component, as `deletingLastPathComponent` gives it: `""` for a
    /// bare name, `"/"` for a name in the root; trailing slashes are ignored.
    package static func parent(_ path: String) -> String {
        let slash = UInt8(ascii: "/")
        var bytes = Array(path.utf8)
        while bytes.count > 1, bytes.last == slash { bytes.removeLast() }
        guard let cut = bytes.lastIndex(of: slash) else { return "" }
        var end = cut
        while end > 0, bytes[end - 1] == slash { end -= 1 }
        if end == 0 { return "/" }
        return String(decoding: bytes[..<end], as: UTF8.self)
    }
}
