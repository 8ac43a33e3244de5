import Foundation

/// A checksum of the whole file that the server publishes with its answer: checked when a
/// download completes, unless the job gives its own (`sha256`), which then decides alone.
///
/// Read from, strongest algorithm first where several are given:
/// - `Repr-Digest` (RFC 9530): of the whole representation, so it holds on a 206 too.
/// - `Content-Digest` (RFC 9530) and the older `Digest` (RFC 3230): of the body sent, so
///   only a body that is the whole file (a 200, or a 206 of every byte; no
///   `Content-Encoding`) is checked by it.
/// - S3's `x-amz-checksum-sha256`, `-crc32c` and `-crc32` (a GET sends
///   `x-amz-checksum-mode: ENABLED` to have them): only a full-object checksum. A multipart
///   object's composite one (`…-N`, a checksum of its parts' checksums) cannot be checked
///   without the part sizes, and is left unchecked (`unchecked` says why).
package struct PublishedChecksum: Equatable, Sendable {
    package enum Algorithm: String, Sendable, CaseIterable {
        case sha512 = "sha-512", sha256 = "sha-256", crc32c, crc32
    }

    package let algorithm: Algorithm
    /// The expected digest's bytes.
    package let value: [UInt8]
    /// The header it came from, for messages (`Repr-Digest`, `x-amz-checksum-crc32c`).
    package let header: String

    /// What the answer publishes, if anything this checks: the strongest algorithm of the
    /// most trustworthy header.
    static func from(status: Int, headers: HTTPHeaders) -> PublishedChecksum? {
        if let found = dictionary(headers["Repr-Digest"], header: "Repr-Digest") { return found }
        // The body is the file: a 200, or a 206 whose range is all of it (`bytes 0-(N-1)/N`).
        let whole = status == 200 || (status == 206 && coversEverything(headers["Content-Range"]))
        let wholeBody = whole && (headers["Content-Encoding"].map { $0.isEmpty || $0.lowercased() == "identity" } ?? true)
        if wholeBody {
            if let found = dictionary(headers["Content-Digest"], header: "Content-Digest") { return found }
            if let found = legacy(headers["Digest"]) { return found }
        }
        if !isComposite(headers) {
            for (name, algorithm) in [("x-amz-checksum-sha256", Algorithm.sha256), ("x-amz-checksum-crc32c", .crc32c),
                                      ("x-amz-checksum-crc32", .crc32)] {
                if let text = headers[name], let bytes = Data(base64Encoded: text.trimmingCharacters(in: .whitespaces)),
                   bytes.count == algorithm.length {
                    return PublishedChecksum(algorithm: algorithm, value: Array(bytes), header: name)
                }
            }
        }
        return nil
    }

    /// Whether a 206's `Content-Range` is every byte of the file (`bytes 0-(N-1)/N`).
    private static func coversEverything(_ header: String?) -> Bool {
        guard let header, let range = ContentRange(header: header), let length = range.completeLength else { return false }
        return range.first == 0 && range.last == length - 1
    }

    /// Why a checksum the answer carries is not checked, if one is not (for the log).
    static func unchecked(headers: HTTPHeaders) -> String? {
        guard isComposite(headers), let name = ["x-amz-checksum-sha256", "x-amz-checksum-crc32c", "x-amz-checksum-crc32",
                                                "x-amz-checksum-sha1", "x-amz-checksum-crc64nvme"].first(where: { headers[$0] != nil })
        else { return nil }
        return "\(name) is a multipart object's checksum of its parts' checksums, which cannot be checked without the part sizes"
    }

    private static func isComposite(_ headers: HTTPHeaders) -> Bool {
        if headers["x-amz-checksum-type"]?.uppercased() == "COMPOSITE" { return true }
        return ["x-amz-checksum-sha256", "x-amz-checksum-crc32c", "x-amz-checksum-crc32", "x-amz-checksum-sha1",
                "x-amz-checksum-crc64nvme"].contains { headers[$0]?.range(of: #"-[0-9]+$"#, options: .regularExpression) != nil }
    }

    /// An RFC 9530 dictionary: `sha-256=:BASE64:, sha-512=:BASE64:` (parameters after `;` are
    /// ignored, as are algorithms this does not know and values that are not byte sequences).
    static func dictionary(_ field: String?, header: String) -> PublishedChecksum? {
        guard let field else { return nil }
        var found: [Algorithm: [UInt8]] = [:]
        for member in field.split(separator: ",") {
            let item = member.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0].trimmingCharacters(in: .whitespaces)
            guard let equals = item.firstIndex(of: "=") else { continue }
            let key = item[..<equals].lowercased()
            let value = item[item.index(after: equals)...]
            guard let algorithm = Algorithm(rawValue: key), value.count >= 2, value.hasPrefix(":"), value.hasSuffix(":"),
                  let bytes = Data(base64Encoded: String(value.dropFirst().dropLast())), bytes.count == algorithm.length
            else { continue }
            found[algorithm] = Array(bytes)
        }
        return strongest(found, header: header)
    }

    /// RFC 3230's `Digest: SHA-256=BASE64,…` (SHA-512 and SHA-256 only).
    static func legacy(_ field: String?) -> PublishedChecksum? {
        guard let field else { return nil }
        var found: [Algorithm: [UInt8]] = [:]
        for member in field.split(separator: ",") {
            let item = member.trimmingCharacters(in: .whitespaces)
            guard let equals = item.firstIndex(of: "=") else { continue }
            let key = item[..<equals].lowercased()
            guard let algorithm = Algorithm(rawValue: key), algorithm == .sha256 || algorithm == .sha512,
                  let bytes = Data(base64Encoded: String(item[item.index(after: equals)...])), bytes.count == algorithm.length
            else { continue }
            found[algorithm] = Array(bytes)
        }
        return strongest(found, header: "Digest")
    }

    private static func strongest(_ found: [Algorithm: [UInt8]], header: String) -> PublishedChecksum? {
        for algorithm in Algorithm.allCases { // strongest first
            if let value = found[algorithm] { return PublishedChecksum(algorithm: algorithm, value: value, header: header) }
        }
        return nil
    }

    /// The digest of the file at `path` in this checksum's algorithm.
    func digest(ofFileAt path: String) throws -> [UInt8] {
        switch algorithm {
        case .sha256, .sha512:
            var sha = Digest(algorithm == .sha256 ? .sha256 : .sha512)
            try Self.read(path) { sha.update($0) }
            return sha.finalize()
        case .crc32c:
            var crc = CRC32C()
            try Self.read(path) { crc.update($0) }
            return Self.bigEndian(crc.value)
        case .crc32:
            var crc = CRC32()
            try Self.read(path) { crc.update($0) }
            return Self.bigEndian(crc.value)
        }
    }

    /// Reads the file at `path` a MiB at a time into `body`.
    private static func read(_ path: String, _ body: (UnsafeRawBufferPointer) -> Void) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFailure(operation: "open", path: path) }
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = Foundation.read(fd, buffer.baseAddress, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw POSIXFailure(operation: "read", path: path)
            }
            if count == 0 { return }
            body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// How the value reads in messages: hex for the SHA-2 digests, base64 as S3 writes CRCs.
    static func shown(_ bytes: [UInt8], _ algorithm: Algorithm) -> String {
        switch algorithm {
        case .sha256, .sha512: return bytes.map { String(format: "%02x", $0) }.joined()
        case .crc32c, .crc32: return Data(bytes).base64EncodedString()
        }
    }
}

extension PublishedChecksum.Algorithm {
    /// The digest's length in bytes.
    var length: Int {
        switch self {
        case .sha512: return 64
        case .sha256: return 32
        case .crc32c, .crc32: return 4
        }
    }
}
