import Foundation

/// The header values of the tus 1.0.0 resumable upload protocol
/// (https://tus.io/protocols/resumable-upload) that transferd reads from a
/// server, and the ones it writes. Everything read is outside input: parsed
/// strictly, never trusted past what it says (the fuzz target `tus-headers`).
package enum TusHeaders {
    /// The protocol version transferd speaks, sent as `Tus-Resumable` on every request.
    package static let version = "1.0.0"
    /// The PATCH body's media type.
    package static let patchContentType = "application/offset+octet-stream"

    /// An `Upload-Offset` or `Upload-Length`: a non-negative decimal integer, digits only
    /// (no sign, no spaces inside, no exponent) that fits an Int64; nil otherwise.
    package static func offset(_ text: String?) -> Int64? {
        guard let text else { return nil }
        let trimmed = text.trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        guard !trimmed.isEmpty, trimmed.utf8.count <= 19, trimmed.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(trimmed)
    }

    /// A comma-separated list (`Tus-Version`, `Tus-Extension`, `Tus-Checksum-Algorithm`):
    /// its items trimmed and lowercased, empty ones dropped; at most 64 items are kept.
    package static func list(_ text: String?) -> [String] {
        guard let text else { return [] }
        return Array(text.split(separator: ",").lazy.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .filter { !$0.isEmpty }.prefix(64))
    }

    /// `Upload-Metadata`: `key base64(value)` pairs joined by commas. Keys are ASCII without
    /// spaces or commas (others are left out).
    package static func metadata(_ pairs: [(key: String, value: String)]) -> String {
        pairs.filter { pair in
            !pair.key.isEmpty && pair.key.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") }
        }.map { "\($0.key) \(Data($0.value.utf8).base64EncodedString())" }.joined(separator: ",")
    }
}

/// What a server said to OPTIONS on the creation URL: the versions and
/// extensions it supports and the checksum algorithms it accepts.
package struct TusServerInfo: Equatable, Sendable {
    package var versions: [String]
    package var extensions: [String]
    package var checksumAlgorithms: [String]
    /// `Tus-Max-Size`, when given.
    package var maxSize: Int64?
    /// Whether the server answered OPTIONS with a 2xx (some proxies do not pass OPTIONS through).
    package var answered: Bool

    package init(status: Int, headers: HTTPHeaders) {
        answered = (200..<300).contains(status)
        versions = answered ? TusHeaders.list(headers["Tus-Version"]) : []
        extensions = answered ? TusHeaders.list(headers["Tus-Extension"]) : []
        checksumAlgorithms = answered ? TusHeaders.list(headers["Tus-Checksum-Algorithm"]) : []
        maxSize = answered ? TusHeaders.offset(headers["Tus-Max-Size"]) : nil
    }

    /// The checksum algorithm PATCHes carry: `sha1` when the server lists the checksum
    /// extension and SHA-1 among its algorithms (the one tus servers commonly accept), else none.
    package var checksum: String? {
        extensions.contains("checksum") && checksumAlgorithms.contains("sha1") ? "sha1" : nil
    }

    /// Why this server cannot take the upload, or nil. A server that did not answer OPTIONS
    /// is tried all the same (creation then says whether it speaks tus).
    package func problem(fileSize: Int64) -> String? {
        guard answered else { return nil }
        if !versions.isEmpty, !versions.contains(TusHeaders.version) {
            return "the server speaks tus \(versions.joined(separator: ", ")), not \(TusHeaders.version)"
        }
        if !extensions.isEmpty, !extensions.contains("creation") {
            return "the server does not offer the tus creation extension (it lists \(extensions.joined(separator: ", "))),"
                + " so transferd cannot start an upload there"
        }
        if let maxSize, fileSize > maxSize {
            return "the file is \(fileSize) bytes, more than the server's Tus-Max-Size of \(maxSize)"
        }
        return nil
    }
}

/// What to do with a recorded upload, given the server's answer to HEAD on its URL,
/// the offset the server confirmed before (recorded with it) and the file's length.
/// A pure value: `TusUpload` acts on it, the unit tests check it without a server.
package enum TusResumeDecision: Equatable, Sendable {
    /// Send from this offset (the server holds every byte before it).
    case resume(at: Int64)
    /// The server no longer has the upload: a new one is created. The reason is told to the user.
    case startOver(reason: String)
    /// The server's answer contradicts what it confirmed: never guess, never succeed.
    case fail(reason: String)
    /// A transient answer (408, 425, 429, 5xx): ask again after a pause.
    case retry(status: Int)

    /// - Parameters:
    ///   - status: HEAD's status.
    ///   - offset, length: its `Upload-Offset` and `Upload-Length` headers as sent.
    ///   - confirmed: the highest offset the server confirmed to transferd for this upload.
    ///   - fileSize: the file's length (unchanged since the upload began: checked before).
    ///   - where: the upload URL, redacted, for the reasons.
    package static func decide(status: Int, offset: String?, length: String?, confirmed: Int64, fileSize: Int64,
                               where place: String) -> TusResumeDecision {
        switch status {
        case 404, 410:
            return .startOver(reason: "the server no longer has the upload at \(place) (HTTP \(status) to HEAD); a new upload is started")
        case 200..<300:
            guard let current = TusHeaders.offset(offset) else {
                return .fail(reason: "the server answered HEAD on \(place) without a valid Upload-Offset"
                    + (offset.map { " (it sent \"\(TerminalText.escaped(String($0.prefix(40))))\")" } ?? "")
                    + ", so where to continue is unknown")
            }
            if let length {
                guard let declared = TusHeaders.offset(length), declared == fileSize else {
                    return .fail(reason: "the upload at \(place) has Upload-Length \(TerminalText.escaped(String(length.prefix(40)))),"
                        + " but the file is \(fileSize) bytes: the server holds another upload at this address")
                }
            }
            if current > fileSize {
                return .fail(reason: "the server reports offset \(current) for the upload at \(place), past the file's \(fileSize) bytes")
            }
            if current < confirmed {
                return .fail(reason: "the server reports offset \(current) for the upload at \(place), below the \(confirmed) bytes"
                    + " it had confirmed: it lost bytes it accepted")
            }
            return .resume(at: current)
        case 408, 425, 429, 500...599:
            return .retry(status: status)
        default:
            return .fail(reason: "the server answered HEAD on \(place) with HTTP \(status)"
                + (status == 401 || status == 403 ? " (refused: check the credentials in the headers)" : ""))
        }
    }

    /// Checks a PATCH's answer: the new offset must lie past the old one and at most `length` bytes on.
    /// Returns the new offset, or a reason the answer is inconsistent.
    package static func afterPatch(offset: Int64, length: Int64, answered text: String?, where place: String) -> Result<Int64, TusFailure> {
        guard let new = TusHeaders.offset(text) else {
            return .failure(TusFailure(reason: "the server answered a PATCH to \(place) without a valid Upload-Offset"))
        }
        guard new >= offset, new <= offset + length else {
            return .failure(TusFailure(reason: "the server answered a PATCH of bytes \(offset)-\(offset + length - 1) to \(place)"
                + " with Upload-Offset \(new), outside them"))
        }
        return .success(new)
    }
}

/// A tus server's answer that contradicts the upload: the reason, where, and what to do.
/// `forgotten`: the upload's record was dropped (the server contradicted itself), so the next
/// run starts a new upload; otherwise it is kept and the next run continues it.
package struct TusFailure: Error, Equatable, Sendable, CustomStringConvertible {
    package var reason: String
    package var forgotten: Bool

    package init(reason: String, forgotten: Bool = true) {
        self.reason = reason
        self.forgotten = forgotten
    }

    package var description: String {
        forgotten
            ? "tus upload failed: \(reason). transferd does not guess which bytes the server holds and forgot this upload;"
                + " running the same upload again starts a new one from the first byte"
            : "tus upload failed: \(reason). The upload is kept: running the same upload again continues it"
    }
}
