import Foundation

/// Whether the answer to one download request may be written, and how: one
/// pure function of what was asked (`Asked`), what is already known of the file
/// (`Known`) and what came back (`Answer`). `DownloadSink` acts on the verdict
/// for both transports; it does no I/O, so every server's answer can be tested
/// (and fuzzed: `Tests/Fuzz`, target `response-decision`) without one.
///
/// The rules, in order:
///
/// - A **206** is the range it names in `Content-Range`, which must start where
///   the request did, agree with `Content-Length`, name the same version (ETag,
///   Last-Modified) and the same size as what is known. A 206 without a usable
///   `Content-Range`, or from another offset, is no range at all: the download
///   asks again without `Range`.
/// - A **200 with a `Content-Range`** that is not the whole body (some S3
///   servers) is taken as that range when it starts where asked; otherwise
///   nothing of it is saved.
/// - A **200 to a range request** is the whole file only when it cannot be
///   the range: more bytes than asked, the known size exactly, or a range from
///   0 that the file is shorter than. A 200 that may be either (the asked
///   range's length exactly, bytes from a later offset, no length) is never
///   saved: the download asks for the whole file without `Range`, whose 200 is
///   unambiguous. (A body without a length to a range from 0 is written, and
///   judged when it ends: past the range it was the whole file.)
/// - A **416** is a length: `Content-Range: bytes */N` says the file is N bytes.
///   A range that starts at N has nothing left to fetch (an empty file is a
///   normal file); one past N means the file shrank (it changed); one before N
///   means the server cannot serve ranges (ask without `Range`).
/// - Any other 2xx is refused; every other status is an error whose body is
///   the server's message.
struct ResponseDecision {
    /// What the request asked for.
    struct Asked: Equatable, Sendable {
        /// The first byte wanted (0 for a request without `Range`).
        var offset: Int64
        /// Where the asked range ends (exclusive); nil for `bytes=N-` or no range.
        var end: Int64?
        /// Whether a `Range` header was sent.
        var sentRange: Bool
    }

    /// What the download knew before this answer.
    struct Known: Equatable, Sendable {
        /// The file's size, from an earlier answer, a checkpoint or a listing.
        var totalSize: Int64?
        /// The version earlier answers (or a listing) named; empty when none did.
        var validators: ResponseValidators
        /// Whether several segments are being fetched (a whole file cannot be taken in place).
        var segmented: Bool
    }

    /// What came back (the head only: the decision is made before any byte is written).
    struct Answer: Equatable, Sendable {
        var status: Int
        var contentRange: String?
        var contentLength: Int64?
        var validators: ResponseValidators
        var acceptsRanges: Bool

        init(status: Int, contentRange: String? = nil, contentLength: Int64? = nil,
             validators: ResponseValidators = ResponseValidators(), acceptsRanges: Bool = false) {
            self.status = status
            self.contentRange = contentRange
            self.contentLength = contentLength
            self.validators = validators
            self.acceptsRanges = acceptsRanges
        }

        init(head: ResponseHead) {
            let ranges = head.headers["Accept-Ranges"].map {
                $0.lowercased().split(separator: ",").contains { HTTPHeaders.trimmed($0) == "bytes" }
            } ?? false
            self.init(status: head.status, contentRange: head.headers["Content-Range"],
                      contentLength: head.headers["Content-Length"].flatMap(Self.length),
                      validators: ResponseValidators(headers: head.headers), acceptsRanges: ranges)
        }

        /// A Content-Length as RFC 9110 writes it: digits only (`Int64("+5")` would read it).
        static func length(_ text: String) -> Int64? {
            let trimmed = HTTPHeaders.trimmed(Substring(text))
            guard !trimmed.isEmpty, trimmed.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int64(trimmed)
        }
    }

    enum Verdict: Equatable, Sendable {
        /// Write the body from the asked offset up to `end` (exclusive); `completeLength`
        /// is the file's size when the answer said it.
        case range(end: Int64, completeLength: Int64?)
        /// The body is the whole file from byte 0 (`size` when told). `changed` when it names
        /// another version than the one known; `rangesSupported` whether later ranges may be asked.
        case whole(size: Int64?, changed: Bool, rangesSupported: Bool)
        /// A body without a length, to a range from 0 of `span` bytes: the whole file if it runs
        /// past `span` (written from 0 as it comes), but if it ends exactly there it may have been
        /// only the range, and the download asks again without `Range`. (Deciding at the head
        /// would abandon a long stream at once, which FoundationNetworking is slow to let go of.)
        case wholeUnlessItEndsAt(span: Int64, changed: Bool, rangesSupported: Bool)
        /// Nothing of this answer may be saved: ask for the whole file again, without `Range`.
        case withoutRange(reason: String)
        /// The range asked starts at the file's end: the file is `size` bytes, nothing is left.
        case nothingLeft(size: Int64)
        /// The remote file changed since the bytes already saved: start over from zero.
        case restart(reason: String)
        /// The answer breaks the protocol: nothing of it is saved and the exchange fails.
        case refuse(reason: String)
        /// An error status: its body is the server's message.
        case error(status: Int)
    }

    static func decide(asked: Asked, known: Known, answer: Answer) -> Verdict {
        let range = answer.contentRange.flatMap(ContentRange.init(header:))
        var status = answer.status
        if status == 200, let header = answer.contentRange, !coversWholeBody(header, answer: answer, asked: asked) {
            // Some S3 servers answer a range with 200 and the range's bytes: taken as that range when
            // everything agrees with what was asked, never as the whole file.
            guard asked.sentRange, let range, range.first == asked.offset else {
                return .refuse(reason: "the server answered 200 with Content-Range: \(HTTPHeaders.visible(header)) to "
                    + (asked.sentRange ? "a request for bytes from \(asked.offset)" : "a request for the whole file")
                    + "; a part of the file is not saved as the whole")
            }
            status = 206
        }
        switch status {
        case 206:
            if !asked.sentRange, range.map({ $0.first != 0 || $0.completeLength != $0.last + 1 }) ?? true {
                return .refuse(reason: "the server answered a request for the whole file with 206 and "
                    + (range.map { "only bytes \($0.first)-\($0.last)" } ?? "no usable Content-Range"))
            }
            guard let range else {
                return .withoutRange(reason: "the server answered 206 without a usable Content-Range")
            }
            let count = range.last - range.first + 1
            if let length = answer.contentLength, length != count {
                return .refuse(reason: "Content-Length \(length) disagrees with Content-Range bytes "
                    + "\(range.first)-\(range.last) (\(count) bytes)")
            }
            guard range.first == asked.offset else {
                return .withoutRange(reason: "the server sent bytes from \(range.first) when asked for bytes from \(asked.offset)")
            }
            if let changed = change(known: known, answer: answer, completeLength: range.completeLength) {
                return .restart(reason: changed)
            }
            // Never more than the range the server declared (a chunked body that goes on is cut there).
            return .range(end: min(asked.end ?? .max, range.last + 1), completeLength: range.completeLength)
        case 200:
            let changed = !known.validators.matches(answer.validators)
            guard asked.sentRange else {
                // Another version than the one expected (a listing's ETag, a checkpoint's) is a
                // change: the download starts over and takes what comes then as what it is.
                if changed { return .restart(reason: versionChange(known.validators, answer.validators)) }
                return .whole(size: answer.contentLength, changed: false, rangesSupported: answer.acceptsRanges)
            }
            if answer.contentLength == nil, asked.offset == 0, let span = asked.end, !known.segmented {
                return .wholeUnlessItEndsAt(span: span, changed: changed, rangesSupported: answer.acceptsRanges && !changed)
            }
            if mayBeTheRangeOnly(asked: asked, known: known, length: answer.contentLength) {
                let length = answer.contentLength.map { "\($0) bytes" } ?? "no length"
                return .withoutRange(reason: "the server answered a request for bytes \(rangeText(asked)) with 200 and "
                    + "\(length), which may be that range or the whole file; asking for the whole file")
            }
            if known.segmented {
                return .restart(reason: changed ? versionChange(known.validators, answer.validators)
                    : "the server ignored the range request (200)")
            }
            return .whole(size: answer.contentLength, changed: changed,
                          rangesSupported: answer.acceptsRanges && !changed)
        case 416:
            guard asked.sentRange else { return .error(status: status) }
            if !known.validators.matches(answer.validators) {
                return .restart(reason: versionChange(known.validators, answer.validators))
            }
            guard let length = answer.contentRange.flatMap(unsatisfiedLength) else {
                if let total = known.totalSize, asked.offset >= total { return .nothingLeft(size: total) }
                return .withoutRange(reason: "the server refused bytes \(rangeText(asked)) (416) without the file's size")
            }
            if let total = known.totalSize, total != length {
                return .restart(reason: "the remote size changed from \(total) to \(length) bytes")
            }
            if asked.offset == length { return .nothingLeft(size: length) }
            if asked.offset > length {
                return .restart(reason: "the remote file is now \(length) bytes, shorter than the \(asked.offset) already saved")
            }
            return .withoutRange(reason: "the server refused bytes \(rangeText(asked)) of a \(length)-byte file (416)")
        case 200..<300:
            return .refuse(reason: "unexpected status \(status) for a download")
        default:
            return .error(status: status)
        }
    }

    /// Whether a 200 to a range request could be just the asked range's bytes, sent
    /// without saying so: then it may not be taken as the whole file.
    static func mayBeTheRangeOnly(asked: Asked, known: Known, length: Int64?) -> Bool {
        let span = asked.end.map { $0 - asked.offset }
        guard let length else {
            // No length: a range from 0 to the end is the whole file whichever it is.
            return !(asked.offset == 0 && span == nil)
        }
        // More than asked cannot be the range; the known size exactly is the whole file (a range
        // from a later offset is shorter, and one from 0 of that length is the whole file too).
        if let span, length > span { return false }
        if let total = known.totalSize, length == total { return false }
        if asked.offset == 0 {
            // From 0 the two readings differ only when the body is exactly as long as asked: a file
            // shorter than the range is the same bytes either way.
            guard let span else { return false }
            return length == span
        }
        return true
    }

    /// A `Content-Range` on a 200 that names the whole body (`bytes 0-(N-1)/N`, N the
    /// Content-Length) to a request without Range: harmless, and ignored as RFC 9110 says
    /// a 200 carries none.
    static func coversWholeBody(_ header: String, answer: Answer, asked: Asked) -> Bool {
        guard !asked.sentRange, let range = ContentRange(header: header), range.first == 0,
              let complete = range.completeLength, complete == range.last + 1 else { return false }
        return answer.contentLength.map { $0 == complete } ?? true
    }

    /// The N of a 416's `Content-Range: bytes */N`.
    static func unsatisfiedLength(_ header: String) -> Int64? {
        let trimmed = HTTPHeaders.trimmed(Substring(header))
        guard trimmed.lowercased().hasPrefix("bytes */") else { return nil }
        let digits = trimmed.dropFirst(8)
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(digits)
    }

    /// Why a 206's version or size is not the one known, or nil when they agree.
    private static func change(known: Known, answer: Answer, completeLength: Int64?) -> String? {
        if !known.validators.matches(answer.validators) { return versionChange(known.validators, answer.validators) }
        if let complete = completeLength, let total = known.totalSize, complete != total {
            return "the remote size changed from \(total) to \(complete) bytes"
        }
        return nil
    }

    /// What changed between two versions, in the user's words.
    static func versionChange(_ known: ResponseValidators, _ answered: ResponseValidators) -> String {
        if let before = known.etag, let after = answered.etag, before != after {
            return "the remote file changed (ETag \(HTTPHeaders.visible(before)), now \(HTTPHeaders.visible(after)))"
        }
        if let before = known.lastModified, let after = answered.lastModified, before != after {
            return "the remote file changed (Last-Modified \(HTTPHeaders.visible(before)), now \(HTTPHeaders.visible(after)))"
        }
        return "the remote file changed"
    }

    private static func rangeText(_ asked: Asked) -> String {
        "\(asked.offset)-" + (asked.end.map { String($0 - 1) } ?? "")
    }
}
