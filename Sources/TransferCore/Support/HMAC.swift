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

extension Array where Element == UInt8 {
    var hexString: String { map { String(format: "%02x", $0) }.joined() }
}
