@testable import TransferCore
import XCTest

/// CRC-32C against published vectors: RFC 3720 appendix B.4 (iSCSI) and the "check" value of
/// the CRC catalogue ("123456789").
final class CRC32CTests: XCTestCase {
    private func crc(_ bytes: [UInt8]) -> UInt32 {
        var crc = CRC32C()
        crc.update(bytes)
        return crc.value
    }

    func testPublishedVectors() {
        XCTAssertEqual(crc(Array("123456789".utf8)), 0xE306_9283)
        XCTAssertEqual(crc(Array(repeating: 0, count: 32)), 0x8A91_36AA)
        XCTAssertEqual(crc(Array(repeating: 0xFF, count: 32)), 0x62A8_AB43)
        XCTAssertEqual(crc((0..<32).map(UInt8.init)), 0x46DD_794E)
        XCTAssertEqual(crc((0..<32).reversed().map(UInt8.init)), 0x113F_DB5C)
        XCTAssertEqual(crc([]), 0)
    }

    func testPiecesGiveTheSameValueAsTheWhole() {
        let bytes = (0..<10_007).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let whole = crc(bytes)
        for cut in [1, 7, 8, 9, 4096, 10_006] {
            var pieces = CRC32C()
            pieces.update(Array(bytes[..<cut]))
            pieces.update(Array(bytes[cut...]))
            XCTAssertEqual(pieces.value, whole, "cut at \(cut)")
        }
    }

    func testTheHeaderFormIsBigEndianBase64() {
        var crc = CRC32C()
        crc.update(Array("123456789".utf8))
        // 0xE3069283 as bytes E3 06 92 83.
        XCTAssertEqual(crc.base64, Data([0xE3, 0x06, 0x92, 0x83]).base64EncodedString())
    }
}
