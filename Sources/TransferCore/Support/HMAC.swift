import CCrypto
import Foundation

/// HMAC-SHA256 through OpenSSL's libcrypto.
enum HMACSHA256 {
    static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        _ = key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { messageBuffer in
                HMAC(EVP_sha256(), keyBuffer.baseAddress, Int32(keyBuffer.count),
                     messageBuffer.baseAddress, messageBuffer.count, &output, &length)
            }
        }
        return Array(output.prefix(Int(length)))
    }

    static func mac(key: [UInt8], message: String) -> [UInt8] { mac(key: key, message: Array(message.utf8)) }
}

extension Sequence where Element == UInt8 {
    /// Lowercase hex, two digits a byte (a table lookup: `String(format:)` per
    /// byte made hashing each ingested job file cost more than parsing it).
    package var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
