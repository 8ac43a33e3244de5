import Foundation

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as S3 computes
/// `x-amz-checksum-crc32c`. Written here because neither zlib nor OpenSSL has it; a table
/// of 8 × 256 entries lets the loop take 8 bytes a step ("slicing by 8"). Checked against
/// the published vectors of RFC 3720 (iSCSI) and "123456789" (`CRC32CTests`).
struct CRC32C {
    private(set) var value: UInt32 = 0

    /// table[k][b]: the CRC of byte b followed by k zero bytes.
    private static let table: [[UInt32]] = {
        var table = Array(repeating: Array(repeating: UInt32(0), count: 256), count: 8)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            table[0][byte] = crc
        }
        for byte in 0..<256 {
            for k in 1..<8 { table[k][byte] = (table[k - 1][byte] >> 8) ^ table[0][Int(table[k - 1][byte] & 0xFF)] }
        }
        return table
    }()

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var crc = ~value
        Self.table.withUnsafeBufferPointer { tables in
            let t0 = tables[0], t1 = tables[1], t2 = tables[2], t3 = tables[3]
            let t4 = tables[4], t5 = tables[5], t6 = tables[6], t7 = tables[7]
            var index = 0
            let count = bytes.count
            while count - index >= 8 {
                let low = crc ^ (UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8
                                 | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24)
                crc = t7[Int(low & 0xFF)] ^ t6[Int(low >> 8 & 0xFF)] ^ t5[Int(low >> 16 & 0xFF)] ^ t4[Int(low >> 24)]
                    ^ t3[Int(bytes[index + 4])] ^ t2[Int(bytes[index + 5])] ^ t1[Int(bytes[index + 6])] ^ t0[Int(bytes[index + 7])]
                index += 8
            }
            while index < count {
                crc = (crc >> 8) ^ t0[Int((crc ^ UInt32(bytes[index])) & 0xFF)]
                index += 1
            }
        }
        value = ~crc
    }

    mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Big-endian bytes in base64, as the `x-amz-checksum-crc32c` header carries it.
    var base64: String {
        Data([UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]).base64EncodedString()
    }
}
