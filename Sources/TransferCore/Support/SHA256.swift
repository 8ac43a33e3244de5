import CCrypto
import Foundation

/// Incremental SHA-256 on OpenSSL's libcrypto (Foundation on Linux has no CryptoKit).
public struct SHA256Hasher: ~Copyable {
    private let context: OpaquePointer

    public init() {
        context = EVP_MD_CTX_new()
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
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
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &digest, &length)
        return digest.prefix(Int(length)).hexString
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
