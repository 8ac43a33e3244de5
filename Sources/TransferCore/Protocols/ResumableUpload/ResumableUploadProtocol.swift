import Foundation

/// The header values of "Resumable Uploads for HTTP", the IETF httpbis draft that grew out of tus:
/// draft-ietf-httpbis-resumable-upload-12 (July 2026), whose interop version is 8 (its section
/// "Draft Version Identification"). Every request carries `Upload-Draft-Interop-Version: 8`, and a
/// `104 (Upload Resumption Supported)` interim answer without that version is ignored, as the
/// draft asks. Everything read is outside input: parsed strictly as RFC 9651 structured fields,
/// never trusted past what it says (the fuzz target `resumable-headers`).
package enum ResumableHeaders {
    /// The draft transferd speaks.
    package static let draft = "draft-ietf-httpbis-resumable-upload-12"
    /// Its interop version, sent as `Upload-Draft-Interop-Version` on every request.
    package static let interopVersion = 8
    /// An append's media type.
    package static let partialUploadType = "application/partial-upload"
    /// The interim status that announces an upload resource.
    package static let uploadResumptionSupported = 104

    /// An Item structured field's bare item, without its parameters (`;key=value...`, checked
    /// for shape and ignored), trimmed of spaces; nil when the parameters are malformed.
    static func bareItem(_ text: String?) -> Substring? {
        guard let text else { return nil }
        let trimmed = text.trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        guard let semicolon = trimmed.firstIndex(of: ";") else { return Substring(trimmed) }
        var parser = StructuredFieldParser(trimmed[semicolon...])
        guard parser.skipParameters(), parser.atEnd else { return nil }
        return trimmed[..<semicolon]
    }

    /// `Upload-Offset` or `Upload-Length`: a structured-field Integer (at most 15 digits) that is
    /// not negative; nil for anything else (the draft: other values make the field ignored).
    package static func integer(_ text: String?) -> Int64? {
        guard let item = bareItem(text), !item.isEmpty, item.utf8.count <= 15,
              item.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(item)
    }

    /// `Upload-Complete`: a structured-field Boolean, `?1` or `?0`; nil for anything else.
    package static func boolean(_ text: String?) -> Bool? {
        switch bareItem(text) {
        case "?1"?: return true
        case "?0"?: return false
        default: return nil
        }
    }

    /// A Boolean as sent.
    package static func boolean(_ value: Bool) -> String { value ? "?1" : "?0" }

    /// `Location`, resolved against the URL that answered; only an http(s) URL with a host.
    package static func location(_ text: String?, relativeTo base: URL) -> URL? {
        guard let text, !text.isEmpty, text.utf8.count <= 8192,
              !text.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }),
              let url = URL(string: text, relativeTo: base)?.absoluteURL,
              ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host?.isEmpty == false else { return nil }
        return url
    }

    /// Whether an interim (or any) answer carries this draft's interop version.
    package static func speaksOurVersion(_ headers: HTTPHeaders) -> Bool {
        guard let item = bareItem(headers["Upload-Draft-Interop-Version"]), item.utf8.count <= 15,
              item.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
        return Int(item) == interopVersion
    }
}

/// `Upload-Limit`: a structured-field Dictionary of the server's limits. Unknown keys are
/// ignored; a known key whose value is not an Integer (or a negative one) makes the whole field
/// ignored (nil), as the draft asks. draft-12 names the lifetime `max-age` (`expires` in the
/// drafts before -06 is an unknown key now, so ignored).
package struct UploadLimits: Equatable, Sendable, Codable {
    package var maxSize: Int64?
    package var minSize: Int64?
    package var maxAppendSize: Int64?
    package var minAppendSize: Int64?
    package var maxAge: Int64?

    package init(maxSize: Int64? = nil, minSize: Int64? = nil, maxAppendSize: Int64? = nil, minAppendSize: Int64? = nil,
                 maxAge: Int64? = nil) {
        self.maxSize = maxSize
        self.minSize = minSize
        self.maxAppendSize = maxAppendSize
        self.minAppendSize = minAppendSize
        self.maxAge = maxAge
    }

    package var isEmpty: Bool { self == UploadLimits() }

    /// The field's value parsed, or nil when absent, malformed, or a known key is not an Integer.
    package static func parse(_ text: String?) -> UploadLimits? {
        guard let text, text.utf8.count <= 4096 else { return nil }
        var parser = StructuredFieldParser(Substring(text))
        guard let members = parser.dictionary() else { return nil }
        var limits = UploadLimits()
        for (key, value) in members {
            let known: WritableKeyPath<UploadLimits, Int64?>?
            switch key {
            case "max-size": known = \.maxSize
            case "min-size": known = \.minSize
            case "max-append-size": known = \.maxAppendSize
            case "min-append-size": known = \.minAppendSize
            case "max-age": known = \.maxAge
            default: known = nil
            }
            guard let known else { continue }
            guard case .integer(let number) = value, number >= 0 else { return nil }
            limits[keyPath: known] = number
        }
        return limits
    }

    /// Why a file of `size` bytes cannot be uploaded under these limits, or nil.
    package func problem(fileSize size: Int64) -> String? {
        if let maxSize, size > maxSize {
            return "the file is \(size) bytes, more than the server's max-size of \(maxSize) (Upload-Limit)"
        }
        if let minSize, size < minSize {
            return "the file is \(size) bytes, less than the server's min-size of \(minSize) (Upload-Limit)"
        }
        if let maxAppendSize, maxAppendSize == 0, size > 0 {
            return "the server's max-append-size is 0 (Upload-Limit): no request may carry a byte"
        }
        if let maxAppendSize, let minAppendSize, minAppendSize > maxAppendSize {
            return "the server's min-append-size \(minAppendSize) is above its max-append-size \(maxAppendSize) (Upload-Limit)"
        }
        return nil
    }

    /// How many bytes the next request carries from `offset` of a file of `size` bytes: the rest,
    /// at most `max-append-size` and `cap` (what the backend sends without a temporary copy too
    /// large). A piece that does not end the upload is never below `min-append-size`.
    package func appendLength(offset: Int64, size: Int64, cap: Int64 = .max) -> Int64 {
        let rest = max(0, size - offset)
        var length = min(rest, max(1, cap))
        if let maxAppendSize { length = min(length, maxAppendSize) }
        if length < rest, let minAppendSize, length < minAppendSize {
            length = min(rest, maxAppendSize.map { min($0, minAppendSize) } ?? minAppendSize)
        }
        return length
    }

    /// These limits with any the server announced later laid over them.
    package func merged(with newer: UploadLimits?) -> UploadLimits {
        guard let newer else { return self }
        return UploadLimits(maxSize: newer.maxSize ?? maxSize, minSize: newer.minSize ?? minSize,
                            maxAppendSize: newer.maxAppendSize ?? maxAppendSize,
                            minAppendSize: newer.minAppendSize ?? minAppendSize, maxAge: newer.maxAge ?? maxAge)
    }
}

/// A small RFC 9651 parser: enough to read a Dictionary (`Upload-Limit`) and skip the
/// parameters of an Item. Bare items: Integer, Decimal, String, Token, Byte Sequence, Boolean,
/// Date, Display String; inner lists. Anything else is malformed (nil).
struct StructuredFieldParser {
    enum Value: Equatable {
        case integer(Int64)
        case other
    }

    private let bytes: [UInt8]
    private var index = 0

    init(_ text: Substring) { bytes = Array(text.utf8) }

    var atEnd: Bool { index >= bytes.count }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpaces(tabs: Bool = false) {
        while let byte = current, byte == 0x20 || (tabs && byte == 0x09) { index += 1 }
    }

    private static func isLowerAlpha(_ byte: UInt8) -> Bool { byte >= 0x61 && byte <= 0x7A }
    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }
    private static func isAlpha(_ byte: UInt8) -> Bool { (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A }
    private static let tcharSymbols = Set("!#$%&'*+-.^_`|~".utf8)

    mutating func key() -> String? {
        guard let first = current, Self.isLowerAlpha(first) || first == UInt8(ascii: "*") else { return nil }
        let start = index
        while let byte = current, Self.isLowerAlpha(byte) || Self.isDigit(byte) || "_-.*".utf8.contains(byte) { index += 1 }
        guard index - start <= 64 else { return nil }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    /// `*( ";" SP* key [ "=" bare-item ] )`
    mutating func skipParameters() -> Bool {
        var count = 0
        while current == UInt8(ascii: ";") {
            index += 1
            count += 1
            guard count <= 64 else { return false }
            skipSpaces()
            guard key() != nil else { return false }
            if current == UInt8(ascii: "=") {
                index += 1
                guard bareItem() != nil else { return false }
            }
        }
        return true
    }

    /// A bare item; `.integer` for an Integer, `.other` for any other valid one.
    mutating func bareItem() -> Value? {
        guard let first = current else { return nil }
        switch first {
        case UInt8(ascii: "-"), 0x30...0x39:
            return number()
        case UInt8(ascii: "\""):
            index += 1
            while let byte = current {
                index += 1
                if byte == UInt8(ascii: "\\") {
                    guard let escaped = current, escaped == UInt8(ascii: "\"") || escaped == UInt8(ascii: "\\") else { return nil }
                    index += 1
                } else if byte == UInt8(ascii: "\"") {
                    return .other
                } else if byte < 0x20 || byte > 0x7E {
                    return nil
                }
            }
            return nil
        case UInt8(ascii: ":"):
            index += 1
            while let byte = current, byte != UInt8(ascii: ":") {
                guard Self.isAlpha(byte) || Self.isDigit(byte) || "+/=".utf8.contains(byte) else { return nil }
                index += 1
            }
            guard current == UInt8(ascii: ":") else { return nil }
            index += 1
            return .other
        case UInt8(ascii: "?"):
            index += 1
            guard let value = current, value == UInt8(ascii: "0") || value == UInt8(ascii: "1") else { return nil }
            index += 1
            return .other
        case UInt8(ascii: "@"):
            index += 1
            guard case .integer? = number() else { return nil }
            return .other
        case UInt8(ascii: "%"):
            index += 1
            guard current == UInt8(ascii: "\"") else { return nil }
            index += 1
            while let byte = current {
                index += 1
                if byte == UInt8(ascii: "\"") { return .other }
                if byte < 0x20 || byte > 0x7E { return nil }
            }
            return nil
        default:
            guard Self.isAlpha(first) || first == UInt8(ascii: "*") else { return nil }
            while let byte = current, Self.isAlpha(byte) || Self.isDigit(byte) || Self.tcharSymbols.contains(byte)
                || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "/") { index += 1 }
            return .other
        }
    }

    /// An Integer (at most 15 digits) or a Decimal (at most 12 digits, a dot, 1 to 3 digits).
    private mutating func number() -> Value? {
        var negative = false
        if current == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        let start = index
        while let byte = current, Self.isDigit(byte) { index += 1 }
        let digits = index - start
        guard digits >= 1 else { return nil }
        if current == UInt8(ascii: ".") {
            guard digits <= 12 else { return nil }
            index += 1
            let fraction = index
            while let byte = current, Self.isDigit(byte) { index += 1 }
            guard (1...3).contains(index - fraction) else { return nil }
            return .other
        }
        guard digits <= 15, let value = Int64(String(decoding: bytes[start..<index], as: UTF8.self)) else { return nil }
        return .integer(negative ? -value : value)
    }

    /// A Dictionary: members in order (a repeated key keeps its last value); nil when malformed.
    mutating func dictionary() -> [(String, Value)]? {
        var members: [(String, Value)] = []
        skipSpaces()
        if atEnd { return [] }
        while true {
            guard members.count < 64, let key = key() else { return nil }
            var value = Value.other
            if current == UInt8(ascii: "=") {
                index += 1
                if current == UInt8(ascii: "(") {
                    guard innerList() else { return nil }
                    value = .other
                } else {
                    guard let item = bareItem() else { return nil }
                    value = item
                }
            }
            guard skipParameters() else { return nil }
            members.removeAll { $0.0 == key }
            members.append((key, value))
            skipSpaces(tabs: true)
            if atEnd { return members }
            guard current == UInt8(ascii: ",") else { return nil }
            index += 1
            skipSpaces(tabs: true)
            guard !atEnd else { return nil }
        }
    }

    private mutating func innerList() -> Bool {
        index += 1
        var count = 0
        while true {
            skipSpaces()
            if current == UInt8(ascii: ")") {
                index += 1
                return skipParameters()
            }
            count += 1
            guard count <= 64, bareItem() != nil, skipParameters() else { return false }
            guard let next = current, next == UInt8(ascii: " ") || next == UInt8(ascii: ")") else { return false }
        }
    }
}

/// What to do with a recorded upload resource, given the server's answer to HEAD on it, the
/// offset it confirmed before and the file's length. A pure value: `ResumableUpload` acts on it,
/// the unit tests check it without a server.
package enum ResumableResumeDecision: Equatable, Sendable {
    /// Append from this offset (the server holds every byte before it).
    case resume(at: Int64)
    /// The server says the upload is complete, with every byte of the file.
    case complete
    /// The server no longer has the upload (404 or 410): a new one may be created. The reason is told.
    case lost(reason: String)
    /// The server's answer contradicts itself or what it confirmed: never guess, never succeed.
    case fail(reason: String)
    /// A transient answer (408, 425, 429, 5xx): ask again after a pause.
    case retry(status: Int)

    /// - Parameters:
    ///   - status, headers: HEAD's answer.
    ///   - confirmed: the highest offset the server confirmed for this upload.
    ///   - fileSize: the file's length (unchanged since the upload began: checked before).
    ///   - where: the upload URL, redacted, for the reasons.
    package static func decide(status: Int, headers: HTTPHeaders, confirmed: Int64, fileSize: Int64,
                               where place: String) -> ResumableResumeDecision {
        switch status {
        case 404, 410:
            return .lost(reason: "the server no longer has the upload at \(place) (HTTP \(status) to HEAD)")
        case 200..<300:
            let rawOffset = headers["Upload-Offset"]
            guard let offset = ResumableHeaders.integer(rawOffset) else {
                return .fail(reason: "the server answered HEAD on \(place) without a valid Upload-Offset"
                    + (rawOffset.map { " (it sent \"\(TerminalText.escaped(String($0.prefix(40))))\")" } ?? "")
                    + ", so where to continue is unknown")
            }
            if let rawLength = headers["Upload-Length"] {
                guard let length = ResumableHeaders.integer(rawLength), length == fileSize else {
                    return .fail(reason: "the upload at \(place) has Upload-Length \(TerminalText.escaped(String(rawLength.prefix(40)))),"
                        + " but the file is \(fileSize) bytes: the server holds another upload at this address")
                }
            }
            if offset > fileSize {
                return .fail(reason: "the server reports offset \(offset) for the upload at \(place), past the file's \(fileSize) bytes")
            }
            if offset < confirmed {
                return .fail(reason: "the server reports offset \(offset) for the upload at \(place), below the \(confirmed) bytes"
                    + " it had confirmed: its offset went backwards, so it lost bytes it accepted")
            }
            if ResumableHeaders.boolean(headers["Upload-Complete"]) == true {
                guard offset == fileSize else {
                    return .fail(reason: "the server reports the upload at \(place) complete at offset \(offset),"
                        + " but the file is \(fileSize) bytes")
                }
                return .complete
            }
            return .resume(at: offset)
        case 408, 425, 429, 500...599:
            return .retry(status: status)
        default:
            return .fail(reason: "the server answered HEAD on \(place) with HTTP \(status)"
                + (status == 401 || status == 403 ? " (refused: check the credentials in the headers)" : ""))
        }
    }
}

/// What a final answer to a request that carried bytes (the creation, or an append) means.
package enum ResumableAnswer: Equatable, Sendable {
    /// The request's bytes were all taken; the upload is complete (it carried `Upload-Complete: ?1`).
    case complete
    /// The request's bytes were all taken; the next append starts at this offset.
    case appended(offset: Int64)
    /// The server's offset is not the one sent (409): ask it (HEAD).
    case conflict
    /// The upload resource is gone (404 or 410).
    case lost
    /// Too large for the server (413): the limits it answered, if any, say how to split.
    case tooLarge(UploadLimits?)
    /// Worth another try after a pause, then HEAD (408, 425, 429, 5xx).
    case retry(status: Int)
    /// Refused for good, or contradicting what was sent.
    case fail(reason: String)

    /// - Parameters:
    ///   - offset, length: where the request's bytes began and how many it carried.
    ///   - completes: whether it carried `Upload-Complete: ?1`.
    ///   - creation: the creation request (a 404 there is the target refusing, not a lost upload).
    package static func decide(status: Int, headers: HTTPHeaders, offset: Int64, length: Int64, completes: Bool,
                               creation: Bool, where place: String) -> ResumableAnswer {
        switch status {
        case 200..<300:
            let end = offset + length
            if let answered = headers["Upload-Offset"] {
                guard let reported = ResumableHeaders.integer(answered), reported == end else {
                    return .fail(reason: "the server took bytes \(offset)-\(end - 1) at \(place) (HTTP \(status))"
                        + " but answered Upload-Offset \(TerminalText.escaped(String(answered.prefix(40)))), not \(end)")
                }
            }
            if completes {
                if ResumableHeaders.boolean(headers["Upload-Complete"]) == false {
                    return .fail(reason: "the server answered the last bytes to \(place) with Upload-Complete: ?0 (HTTP \(status)),"
                        + " so it did not complete the upload")
                }
                return .complete
            }
            return .appended(offset: end)
        case 409 where !creation:
            return .conflict
        case 404, 410:
            if creation {
                return .fail(reason: "\(place) answered HTTP \(status) to the upload's creation")
            }
            return .lost
        case 413:
            return .tooLarge(UploadLimits.parse(headers["Upload-Limit"]))
        case 408, 425, 429, 500...599:
            // A 5xx to a request that completed the upload is the target failing to process
            // the whole file: resuming would not mend it.
            if completes && ResumableHeaders.boolean(headers["Upload-Complete"]) == true {
                return .fail(reason: "the server received the whole file at \(place) but answered HTTP \(status) processing it")
            }
            return .retry(status: status)
        default:
            return .fail(reason: "\(place) answered HTTP \(status)"
                + (status == 401 || status == 403 ? " (refused: check the credentials in the headers)" : "")
                + (status == 415 ? " (the server does not take application/partial-upload appends)" : ""))
        }
    }
}

/// What one run learned from an interim `104` answer: the upload resource it names, and limits.
package struct InterimAnnouncement: Equatable, Sendable {
    package var location: URL?
    package var limits: UploadLimits?
    package var offset: Int64?

    /// nil for an interim answer that is not a `104` of this draft's interop version (ignored, as
    /// the draft asks); otherwise what it says (a Location resolved against `base`).
    package static func read(_ head: ResponseHead, base: URL) -> InterimAnnouncement? {
        guard head.status == ResumableHeaders.uploadResumptionSupported, ResumableHeaders.speaksOurVersion(head.headers) else {
            return nil
        }
        return InterimAnnouncement(location: ResumableHeaders.location(head.headers["Location"], relativeTo: base),
                                   limits: UploadLimits.parse(head.headers["Upload-Limit"]),
                                   offset: ResumableHeaders.integer(head.headers["Upload-Offset"]))
    }
}

/// A resumable upload that failed: the reason, where, and what the next run does.
package struct ResumableFailure: Error, Equatable, Sendable, CustomStringConvertible {
    package enum Next: Equatable, Sendable {
        /// The record was dropped (the server contradicted itself): the next run starts a new upload.
        case forgotten
        /// The record is kept: the next run continues the upload.
        case kept
        /// Refused before any upload was made (a limit, a target that does not take them).
        case nothingSent
    }

    package var reason: String
    package var next: Next

    package init(reason: String, next: Next = .forgotten) {
        self.reason = reason
        self.next = next
    }

    package var description: String {
        switch next {
        case .forgotten:
            return "resumable upload failed: \(reason). transferd does not guess which bytes the server holds and forgot this upload;"
                + " running the same upload again starts a new one from the first byte"
        case .kept:
            return "resumable upload failed: \(reason). The upload is kept: running the same upload again continues it"
        case .nothingSent:
            return "resumable upload refused: \(reason)"
        }
    }
}
