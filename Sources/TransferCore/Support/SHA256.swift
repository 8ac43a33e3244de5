import CCrypto
import Foundation

/// Incremental SHA-256 on OpenSSL's libcrypto (Foundation on Linux has no CryptoKit).
public struct SHA256Hasher: ~Copyable {
    private let context: OpaquePointer

    /// SHA-256 fetched from the provider once: with OpenSSL 3 every `EVP_sha256()` init
    /// looks the algorithm up again (a locked property query), for every hasher made.
    // nonisolated(unsafe): set once and never changed; OpenSSL lets many threads use one fetched EVP_MD.
    nonisolated(unsafe) private static let algorithm: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)

    public init() {
        context = EVP_MD_CTX_new()
        EVP_DigestInit_ex(context, Self.algorithm ?? EVP_sha256(), nil)
    }

    deinit { EVP_MD_CTX_free(context) }

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    public mutating func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// The digest as lowercase hex.
    public consuming func finalizeHex() -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Int(EVP_MAX_MD_SIZE)) { digest in
            var length: UInt32 = 0
            EVP_DigestFinal_ex(context, digest.baseAddress, &length)
            return UnsafeBufferPointer(rebasing: digest[0..<Int(length)]).hexString
        }
    }

    /// The digest of a string's UTF-8 bytes, as lowercase hex (no copy into `Data` first).
    public static func hex(of text: String) -> String {
        var hasher = SHA256Hasher()
        var text = text
        text.withUTF8 { hasher.update(UnsafeRawBufferPointer($0)) }
        return hasher.finalizeHex()
    }

    /// Hashes `data` in one call.
    public static func hex(of data: Data) -> String {
        var hasher = SHA256Hasher()
        hasher.update(data)
        return hasher.finalizeHex()
    }

    /// Hashes a file by streaming it in 4 MiB reads.
    public static func hex(ofFileAt path: String) throws -> String {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw POSIXFailure(operation: "open", path: path) }
        defer { close(fd) }
        var hasher = SHA256Hasher()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = read(fd, buffer.baseAddress, buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                throw POSIXFailure(operation: "read", path: path)
            }
            if n == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
        return hasher.finalizeHex()
    }
}
