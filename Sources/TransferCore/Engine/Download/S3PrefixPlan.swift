import Foundation

/// Pure decisions of a prefix download, tested without I/O: where a key goes
/// below the destination folder (or why it goes nowhere), whether the
/// filters take it, and whether a local file already holds it.
package enum S3PrefixPlan {
    /// What to do with one listed key.
    package enum Placement: Equatable, Sendable {
        /// Save it at this path, relative to the destination folder.
        case file(String)
        /// A folder marker (`prefix/dir/`, often of size 0): nothing to save.
        case folderMarker
        /// Never saved: the reason says why.
        case refused(String)
    }

    /// The path below the destination folder for `key`, listed under `prefix`:
    /// the key with the prefix taken off. A key that would leave the folder
    /// or cannot be a file name is refused with a reason, never rewritten.
    package static func placement(key: String, prefix: String) -> Placement {
        // Bytes, as the kernel reads a path: a `/` followed by a combining mark is one
        // Character, and Character-wise checks would miss the segment it starts.
        guard PathNormalization.hasBytePrefix(key, prefix) else {
            return .refused("the key does not start with the prefix \(prefix)")
        }
        let relative = String(decoding: key.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
        if relative.isEmpty || relative.utf8.last == UInt8(ascii: "/") { return .folderMarker }
        if relative.utf8.first == UInt8(ascii: "/") {
            return .refused("the key below the prefix starts with /: it would name an absolute path")
        }
        if relative.utf8.contains(0) { return .refused("the key holds a NUL byte") }
        if relative.unicodeScalars.contains(where: HTTPHeaders.isInvisibleControl) {
            return .refused("the key holds a control character (or a bidirectional override)")
        }
        let components = PathNormalization.components(relative, omittingEmpty: false)
        for (index, component) in components.enumerated() {
            let bytes = Array(component.utf8)
            if bytes.isEmpty { return .refused("the key has an empty path segment (//)") }
            if bytes == [0x2E] || bytes == [0x2E, 0x2E] {
                return .refused("the key has a \(component) segment: it would lead out of the folder")
            }
            // 255 bytes is a file name's limit; the last segment also gets the checkpoint's suffixes while it downloads.
            let limit = index == components.count - 1 ? PartialNames.longestName : 255
            if bytes.count > limit {
                return .refused("a segment of the key is over \(limit) bytes, too long for a file name here")
            }
        }
        return .file(relative)
    }

    /// `--include` / `--exclude` globs (fnmatch(3), where `*` also matches `/`,
    /// as in `aws s3 cp --recursive`) over the path below the prefix: a path
    /// is taken when it matches an include (or none is given) and no exclude.
    package struct Filter: Sendable, Equatable, Codable {
        package var include: [String]
        package var exclude: [String]

        package init(include: [String] = [], exclude: [String] = []) {
            self.include = include
            self.exclude = exclude
        }

        package func takes(_ relative: String) -> Bool {
            if !include.isEmpty && !include.contains(where: { Self.matches($0, relative) }) { return false }
            return !exclude.contains { Self.matches($0, relative) }
        }

        static func matches(_ pattern: String, _ path: String) -> Bool {
            fnmatch(pattern, path, 0) == 0
        }
    }

    /// Whether the local file already holds the listed object, by what is
    /// known without reading it: its size, and the ETag recorded when it was
    /// saved (an extended attribute) — or, for a file saved by something else,
    /// its MD5 when the ETag is a plain MD5. `localMD5` is only asked for then.
    package static func unchanged(listed: S3ListedObject, localSize: Int64?, recordedETag: String?,
                                 localMD5: () -> String?) -> Bool {
        guard let localSize, localSize == listed.size else { return false }
        if let recordedETag { return recordedETag == listed.etag }
        guard listed.etag.count == 32, listed.etag.allSatisfy(\.isHexDigit) else { return false }
        return localMD5()?.lowercased() == listed.etag.lowercased()
    }
}
