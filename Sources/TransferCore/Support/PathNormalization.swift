/// Lexical path normalisation: resolves `.`, `..` and repeated slashes
/// without touching the filesystem (`standardizingPath` also resolves
/// symlinks, one `readlink` per component).
enum PathNormalization {
    static func normalize(_ path: String) -> String {
        var parts: [Substring] = []
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch component {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(component)
            }
        }
        return "/" + parts.joined(separator: "/")
    }
}
