import Foundation

/// Pure decisions of a server-side S3 copy, tested without I/O: how an object is
/// copied, whether a copy already holds it, and what the finished copy proves.
package enum S3CopyPlan {
    /// How one object is copied.
    package enum Method: Equatable, Sendable {
        /// One CopyObject; the server keeps the metadata itself.
        case whole
        /// UploadPartCopy of `parts` ranges of `partSize` bytes (the last shorter), in parallel.
        /// `sourceLayout`: the ranges are the source's own parts, so a server that gives each part
        /// the MD5 of its bytes gives the copy the source's multipart ETag.
        case parts(partSize: Int64, parts: Int, sourceLayout: Bool)
    }

    /// The largest object CopyObject takes (S3's limit), and the largest part.
    package static let wholeCopyLimit: Int64 = 5 << 30
    static let largestPart: Int64 = 5 << 30

    /// The method for an object of `size` bytes with ETag `etag`; `firstPartSize` is the size of
    /// its first part when the server says it was uploaded in parts (`S3Client.firstPartSize`).
    ///
    /// A multipart source is copied part for part along its own layout, when the layout is
    /// regular (every part but the last `firstPartSize` long): on AWS and moto the copy then has
    /// the source's ETag, which the copy checks and `--skip-unchanged` recognises later (a
    /// CopyObject would give it an MD5 of the whole, which is no multipart ETag). Any other
    /// object up to 5 GiB is one CopyObject, which keeps a plain MD5 ETag; a larger one goes in
    /// parts of `requestedPartSize`, grown to fit 10,000 parts.
    package static func method(size: Int64, etag: String, firstPartSize: Int64?, requestedPartSize: Int64) -> Method {
        if let count = ETagShape(etag).partCount, let partSize = firstPartSize, partSize > 0, partSize <= largestPart,
           count <= Int(S3UploadOptions.maximumParts), Int64(count - 1) * partSize < size, size <= Int64(count) * partSize,
           count == 1 || partSize >= S3UploadOptions.minimumPart {
            return .parts(partSize: partSize, parts: count, sourceLayout: true)
        }
        if size <= wholeCopyLimit { return .whole }
        let partSize = min(S3UploadOptions.effectivePartSize(requested: requestedPartSize, fileSize: size), largestPart)
        return .parts(partSize: partSize, parts: Int((size + partSize - 1) / partSize), sourceLayout: false)
    }

    /// Whether an object at the destination (`size`, `etag`) already holds the source:
    /// the same size and the same ETag, where that ETag is a digest (an MD5, or a multipart
    /// `MD5-N`). Any other ETag (SSE-KMS, SSE-C, a server's own) is never taken for one.
    package static func holds(size: Int64, etag: String, sourceSize: Int64, sourceETag: String) -> Bool {
        let copy = ETagShape(etag)
        return size == sourceSize && copy.isDigest && copy.normalized == ETagShape(sourceETag).normalized
    }

    /// What the finished copy was checked against.
    package enum Verdict: Equatable, Sendable {
        /// Its ETag is the source's.
        case sameETag
        /// Its size is the source's; the ETags say nothing more, for the reason given.
        case sizeOnly(String)
        /// It is not the source: the reason says how it differs.
        case differs(String)
    }

    /// The verdict on a copy (`copySize`, `copyETag`) of a source (`sourceSize`, `sourceETag`)
    /// made by `method`; `partETags` are the ETags the server gave the copied parts.
    package static func verdict(sourceSize: Int64, sourceETag: String, copySize: Int64, copyETag: String,
                                method: Method, partETags: [String] = []) -> Verdict {
        guard copySize == sourceSize else {
            return .differs("the copy holds \(copySize) bytes, the source \(sourceSize)")
        }
        let source = ETagShape(sourceETag)
        let copy = ETagShape(copyETag)
        if source.isDigest && copy.normalized == source.normalized { return .sameETag }
        switch method {
        case .whole:
            // CopyObject of a single-part object keeps its MD5 on every server: a different MD5 is other bytes.
            if source.isPlainMD5 && copy.isPlainMD5 {
                return .differs("the copy's MD5 \(copy.normalized) is not the source's \(source.normalized)")
            }
            return .sizeOnly("the server gave the copy an ETag of its own (\(copy.normalized), the source's \(source.normalized))")
        case .parts(_, _, let sourceLayout):
            // Parts whose ETags are their bytes' MD5s, copied along the source's layout, join to
            // the source's ETag; when they do not, the server's part ETags are no MD5s, or the
            // source's parts were not as even as its first part and count suggested.
            guard sourceLayout else {
                return .sizeOnly("copied in parts of its own size, the copy's multipart ETag \(copy.normalized) says nothing of the source's \(source.normalized)")
            }
            if partETags.allSatisfy({ ETagShape($0).isPlainMD5 }),
               S3MultipartUpload.multipartETag(partETags) == copy.normalized {
                return .sizeOnly("the source's parts are not all as long as its first (the copy's ETag \(copy.normalized), the source's \(source.normalized))")
            }
            return .sizeOnly("the server's part ETags are not MD5s of their bytes (the copy's ETag \(copy.normalized), the source's \(source.normalized))")
        }
    }

    /// An ETag read for what it can prove.
    struct ETagShape {
        /// Lower case, quotes removed.
        let normalized: String

        init(_ etag: String) { normalized = S3MultipartUpload.unquote(etag).lowercased() }

        private var pieces: [Substring] { normalized.split(separator: "-", omittingEmptySubsequences: false) }
        private static func isMD5(_ text: Substring) -> Bool { text.count == 32 && text.allSatisfy(\.isHexDigit) }

        var isPlainMD5: Bool { pieces.count == 1 && Self.isMD5(pieces[0]) }
        /// `N` of a multipart ETag `MD5-N`.
        var partCount: Int? {
            guard pieces.count == 2, Self.isMD5(pieces[0]), let count = Int(pieces[1]), count >= 1 else { return nil }
            return count
        }
        var isDigest: Bool { isPlainMD5 || partCount != nil }
    }
}
