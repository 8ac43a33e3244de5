import Foundation

/// What identifies one version of a remote file: the ETag and/or Last-Modified.
package struct ResponseValidators: Codable, Equatable, Sendable {
    package var etag: String?
    package var lastModified: String?

    package init(etag: String? = nil, lastModified: String? = nil) {
        self.etag = etag
        self.lastModified = lastModified
    }

    package init(headers: HTTPHeaders) {
        self.init(etag: headers["ETag"], lastModified: headers["Last-Modified"])
    }

    package var isEmpty: Bool { etag == nil && lastModified == nil }

    /// The value for `If-Range`: a strong ETag, else Last-Modified (weak ETags are not allowed there).
    package var ifRangeValue: String? {
        if let etag, !etag.hasPrefix("W/") { return etag }
        return lastModified
    }

    /// False when the response names a different version than these validators.
    ///
    /// Two strong ETags decide alone. Equal weak ones (`W/"…"`) only say the
    /// versions are equivalent, not byte for byte the same, so Last-Modified
    /// decides when both have it; different tags, weak or strong, are
    /// different versions. With nothing to compare, a response is taken as the
    /// same version (as curl and aria2c take every one).
    package func matches(_ other: ResponseValidators) -> Bool {
        if let etag, let otherTag = other.etag {
            let weak = etag.hasPrefix("W/") || otherTag.hasPrefix("W/")
            guard Self.opaque(etag) == Self.opaque(otherTag) else { return false }
            if !weak { return true }
        }
        if let lastModified, let otherDate = other.lastModified { return lastModified == otherDate }
        return true
    }

    /// The tag without its weakness mark (RFC 9110's weak comparison).
    static func opaque(_ tag: String) -> Substring {
        tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag)
    }
}

/// A parsed `Content-Range: bytes first-last/complete` header.
package struct ContentRange: Equatable, Sendable {
    package var first: Int64
    package var last: Int64
    /// nil when the server sent `*`.
    package var completeLength: Int64?

    package init(first: Int64, last: Int64, completeLength: Int64?) {
        self.first = first
        self.last = last
        self.completeLength = completeLength
    }

    package init?(header: String) {
        let trimmed = HTTPHeaders.trimmed(Substring(header))
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6)
        let parts = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        // Digits only: Int64("+5") and a leading "-" (split away below) would read as numbers.
        guard parts.count == 2, parts[0].allSatisfy({ $0 == "-" || ("0"..."9").contains($0) }),
              parts[1] == "*" || (!parts[1].isEmpty && parts[1].allSatisfy({ ("0"..."9").contains($0) })) else { return nil }
        let bounds = parts[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        // last < Int64.max: the range's byte count, last - first + 1, must be an Int64 too.
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first <= last, last < .max else {
            return nil
        }
        self.first = first
        self.last = last
        if parts[1] == "*" {
            completeLength = nil
        } else if let length = Int64(parts[1]), length > last {
            completeLength = length
        } else {
            return nil
        }
    }
}
