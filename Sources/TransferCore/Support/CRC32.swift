import CZlib
import Foundation

/// CRC-32 (IEEE 802.3, as zlib and S3's `x-amz-checksum-crc32` compute it).
struct CRC32 {
    private(set) var value: UInt32 = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        var crc = UInt(value)
        var offset = 0
        // zlib takes a 32-bit length: feed it at most 1 GiB at a time.
        while offset < bytes.count {
            let count = min(bytes.count - offset, 1 << 30)
            crc = CZlib.crc32(crc, base.advanced(by: offset).assumingMemoryBound(to: Bytef.self), uInt(count))
            offset += count
        }
        value = UInt32(truncatingIfNeeded: crc)
    }

    /// Big-endian bytes in base64, as the `x-amz-checksum-crc32` header carries it.
    var base64: String {
        Data([UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]).base64EncodedString()
    }
}
