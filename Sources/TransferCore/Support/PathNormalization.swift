/// Lexical path normalisation: resolves `.`, `..` and repeated slashes
/// without touching the filesystem (`standardizingPath` also resolves
/// symlinks, one `readlink` per component).
///
/// Paths are split on the byte `/`, as the kernel reads them, never on
/// Characters: `/` followed by a combining mark (U+0301) is one Character, so
/// a Character-wise split would hide a `..` segment the kernel still follows.
enum PathNormalization {
    static func normalize(_ path: String) -> String {
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
