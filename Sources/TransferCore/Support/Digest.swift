import CCrypto

/// An incremental MD5, SHA-1, SHA-256 or SHA-512 (OpenSSL EVP), for upload checksums
/// (SHA-1 only where a protocol names it: tus's checksum extension).
struct Digest: ~Copyable {
    enum Algorithm { case md5, sha1, sha256, sha512 }
    private let context: OpaquePointer

    init(_ algorithm: Algorithm) {
        context = EVP_MD_CTX_new()
        let method: OpaquePointer? = switch algorithm {
        case .md5: EVP_md5()
        case .sha1: EVP_sha1()
        case .sha256: EVP_sha256()
        case .sha512: EVP_sha512()
        }
        EVP_DigestInit_ex(context, method, nil)
    }

    deinit { EVP_MD_CTX_free(context) }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    consuming func finalize() -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &output, &length)
        return Array(output.prefix(Int(length)))
    }
}
