import Foundation

/// Pure decisions of a streamed copy (`StreamedCopy`), tested without I/O: what the
/// source's answer to the first request says of it, and whether the answer to one
/// part's ranged GET is that part of that version.
package enum StreamedCopyPlan {
    /// The source as its answer to `GET` with `Range: bytes=0-0` shows it.
    package enum Source: Equatable, Sendable {
        /// It takes ranges, is `size` bytes long, and is this version.
        case ranged(size: Int64, validators: ResponseValidators)
        /// It is empty (416 to the first byte, `bytes */0`).
        case empty(validators: ResponseValidators)
        /// It answered the whole body: no ranges. `size` when it said its length.
        case whole(size: Int64?)
        /// It answered a range without a length (`bytes 0-0/*`): no part can be planned.
        case unknownLength
        /// Not the file: the HTTP status (4xx, 5xx, a redirect left over).
        case failed(status: Int)
    }

    package static func source(status: Int, headers: HTTPHeaders) -> Source {
        let validators = ResponseValidators(headers: headers)
        switch status {
        case 206:
            guard let range = headers["Content-Range"].flatMap(ContentRange.init(header:)), range.first == 0 else {
                return .whole(size: nil)
            }
            guard let size = range.completeLength else { return .unknownLength }
            return .ranged(size: size, validators: validators)
        case 200:
            // Some S3-compatible servers answer a range with 200 and a Content-Range of the range.
            if let range = headers["Content-Range"].flatMap(ContentRange.init(header:)), range.first == 0, range.last == 0,
               let size = range.completeLength {
                return .ranged(size: size, validators: validators)
            }
            return .whole(size: headers["Content-Length"].flatMap(Int64.init))
        case 416:
            if let text = headers["Content-Range"], HTTPHeaders.trimmed(Substring(text)) == "bytes */0" {
                return .empty(validators: validators)
            }
            return .failed(status: 416)
        default:
            return .failed(status: status)
        }
    }

    /// Headers that make a part's GET fail (412) unless the source is still `validators`:
    /// `If-Match` with a strong ETag, else `If-Unmodified-Since` with Last-Modified.
    package static func conditions(_ validators: ResponseValidators) -> HTTPHeaders {
        if let etag = validators.etag, !etag.hasPrefix("W/") { return ["If-Match": etag] }
        if let date = validators.lastModified { return ["If-Unmodified-Since": date] }
        return [:]
    }

    /// What one part's answer is.
    package enum PartAnswer: Equatable, Sendable {
        /// Bytes `first...last` of the recorded version: take the body (it must hold exactly those).
        case part
        /// The source is another version now (412 to the condition, other validators or another size).
        case changed(String)
        /// Not the part, for the reason given.
        case refused(String)
    }

    /// The answer to `GET Range: bytes=first-last` of a source of `size` bytes recorded as `validators`.
    package static func part(status: Int, headers: HTTPHeaders, first: Int64, last: Int64, size: Int64,
                             validators: ResponseValidators) -> PartAnswer {
        if status == 412 { return .changed("the source answered 412: it is no longer the version being copied") }
        // The range lies inside the size first seen: a source without those bytes is shorter now.
        if status == 416 { return .changed("the source answered 416 to bytes \(first)-\(last) of \(size): it is shorter now") }
        guard status == 206 || status == 200 else { return .refused("HTTP \(status)") }
        // Every validator first seen must come back, the same: an answer without them could be of any version.
        let answered = ResponseValidators(headers: headers)
        if (validators.etag != nil && answered.etag != validators.etag)
            || (validators.lastModified != nil && answered.lastModified != validators.lastModified) {
            return .changed("its validators are \(describe(answered)), not \(describe(validators))")
        }
        guard let range = headers["Content-Range"].flatMap(ContentRange.init(header:)) else {
            return status == 200 && first == 0 && last == size - 1 && headers["Content-Length"] == String(size)
                ? .part : .refused("the answer to a range has no Content-Range: the server ignored the range")
        }
        guard let complete = range.completeLength else {
            return .refused("its Content-Range does not say the file's length (bytes \(range.first)-\(range.last)/*)")
        }
        if complete != size {
            return .changed("it is \(complete) bytes long now, not \(size)")
        }
        guard range.first == first, range.last == last else {
            return .refused("it answered bytes \(range.first)-\(range.last) to a request for \(first)-\(last)")
        }
        return .part
    }

    static func describe(_ validators: ResponseValidators) -> String {
        let parts = [validators.etag.map { "ETag \($0)" }, validators.lastModified.map { "Last-Modified \($0)" }].compactMap { $0 }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }
}
