@testable import TransferCore
import XCTest

/// Which checksum an answer publishes for the whole file, by header and status.
final class PublishedChecksumTests: XCTestCase {
    private let sha256 = Data(repeating: 0xAB, count: 32).base64EncodedString()
    private let sha512 = Data(repeating: 0xCD, count: 64).base64EncodedString()
    private let crc = Data([0xE3, 0x06, 0x92, 0x83]).base64EncodedString()

    private func published(_ status: Int, _ fields: [(String, String)]) -> PublishedChecksum? {
        PublishedChecksum.from(status: status, headers: HTTPHeaders(fields))
    }

    func testReprDigestHoldsForAnyAnswerAndTheStrongestAlgorithmIsTaken() {
        let both = published(206, [("Repr-Digest", "sha-256=:\(sha256):, sha-512=:\(sha512):;x=1")])
        XCTAssertEqual(both?.algorithm, .sha512)
        XCTAssertEqual(both?.header, "Repr-Digest")
        XCTAssertEqual(both?.value, Array(repeating: 0xCD, count: 64))
        XCTAssertEqual(published(200, [("repr-digest", "SHA-256=:\(sha256):")])?.algorithm, .sha256, "names in any case")
        // Unknown algorithms, values that are not byte sequences, and wrong lengths are passed over.
        XCTAssertNil(published(200, [("Repr-Digest", "md5=:AAAAAAAAAAAAAAAAAAAAAA==:, sha-256=\(sha256)")]))
        XCTAssertNil(published(200, [("Repr-Digest", "sha-256=:\(crc):")]))
        XCTAssertNil(published(200, [("Repr-Digest", "sha-256=:not base64!:")]))
        // A member that is only parameters (found by the headers fuzz target: it trapped).
        XCTAssertNil(published(200, [("Repr-Digest", ";, \r\r")]))
        XCTAssertNil(published(200, [("Content-Digest", ";")]))
    }

    func testContentDigestAndDigestOnlyWhenTheBodyIsTheWholeFile() {
        XCTAssertEqual(published(200, [("Content-Digest", "sha-256=:\(sha256):")])?.header, "Content-Digest")
        XCTAssertNil(published(206, [("Content-Digest", "sha-256=:\(sha256):")]), "a range's digest is not the file's")
        XCTAssertNil(published(206, [("Content-Digest", "sha-256=:\(sha256):"), ("Content-Range", "bytes 0-99/1000")]))
        XCTAssertEqual(published(206, [("Content-Digest", "sha-256=:\(sha256):"), ("Content-Range", "bytes 0-999/1000")])?.header,
                       "Content-Digest", "a range of every byte is the whole file")
        XCTAssertNil(published(200, [("Content-Digest", "sha-256=:\(sha256):"), ("Content-Encoding", "gzip")]))
        XCTAssertEqual(published(200, [("Digest", "MD5=AAAAAAAAAAAAAAAAAAAAAA==,SHA-256=\(sha256)")])?.header, "Digest")
        XCTAssertNil(published(206, [("Digest", "SHA-256=\(sha256)")]))
        // Repr-Digest wins over the others.
        XCTAssertEqual(published(200, [("Content-Digest", "sha-512=:\(sha512):"), ("Repr-Digest", "sha-256=:\(sha256):")])?.header,
                       "Repr-Digest")
    }

    func testS3ChecksumsOnlyWhenTheyAreOfTheWholeObject() {
        XCTAssertEqual(published(200, [("x-amz-checksum-crc32c", crc)]),
                       PublishedChecksum(algorithm: .crc32c, value: [0xE3, 0x06, 0x92, 0x83], header: "x-amz-checksum-crc32c"))
        XCTAssertEqual(published(206, [("x-amz-checksum-sha256", sha256), ("x-amz-checksum-crc32c", crc)])?.algorithm, .sha256)
        let composite = HTTPHeaders([("x-amz-checksum-crc32c", crc + "-3")])
        XCTAssertNil(PublishedChecksum.from(status: 200, headers: composite))
        XCTAssertTrue(PublishedChecksum.unchecked(headers: composite)?.contains("checksum of its parts' checksums") == true)
        let typed = HTTPHeaders([("x-amz-checksum-crc32c", crc), ("x-amz-checksum-type", "COMPOSITE")])
        XCTAssertNil(PublishedChecksum.from(status: 200, headers: typed))
        XCTAssertNil(published(200, [("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")]), "an algorithm this does not check")
    }

    func testEachAlgorithmDigestsAFile() throws {
        let path = NSTemporaryDirectory() + "/published-\(UUID().uuidString)"
        try Data("123456789".utf8).write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        func digest(_ algorithm: PublishedChecksum.Algorithm) throws -> String {
            PublishedChecksum.shown(try PublishedChecksum(algorithm: algorithm, value: [], header: "").digest(ofFileAt: path), algorithm)
        }
        XCTAssertEqual(try digest(.sha256), "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225")
        XCTAssertEqual(try digest(.crc32c), Data([0xE3, 0x06, 0x92, 0x83]).base64EncodedString())
        XCTAssertEqual(try digest(.crc32), Data([0xCB, 0xF4, 0x39, 0x26]).base64EncodedString())
        XCTAssertEqual(try digest(.sha512).count, 128)
    }
}
