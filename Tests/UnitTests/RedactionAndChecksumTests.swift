import Foundation
import XCTest
@testable import TransferCore

final class RedactionTests: XCTestCase {
    func testURLSecretsAreRedacted() throws {
        let url = try XCTUnwrap(URL(string: "https://tok3n:pw@example.com/a?X-Amz-Signature=abc&sig=s&key=k&page=2&refresh_token=r"))
        let shown = Redaction.url(url)
        for secret in ["tok3n", "pw", "abc", "=s&", "=k&", "=r"] {
            XCTAssertFalse(shown.contains(secret), "\(secret) in \(shown)")
        }
        XCTAssertTrue(shown.contains("page=2"), shown)
    }

    func testURLTextIsParsedOnlyWhenItCouldHoldASecret() {
        XCTAssertEqual(Redaction.url(string: "http://example.com/plain/f1.bin"), "http://example.com/plain/f1.bin")
        let shown = Redaction.url(string: "https://user:pw@example.com/a?token=t&page=2")
        XCTAssertFalse(shown.contains("pw") || shown.contains("user") || shown.contains("=t&"), shown)
        XCTAssertTrue(shown.contains("page=2"), shown)
    }

    func testHeaderValues() {
        XCTAssertEqual(Redaction.headerValue(name: "Authorization", value: "AWS4-HMAC-SHA256 Credential=AKIA/..."), "REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "X-Auth-Token", value: "t"), "REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "Location", value: "https://b.s3.amazonaws.com/k?X-Amz-Signature=abc"),
                       "https://b.s3.amazonaws.com/k?X-Amz-Signature=REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "Content-Length", value: "12"), "12")
    }

    func testRegisteredSecretsAreHiddenUnderAnyName() {
        Redaction.registerSecret("s3cr3t-value-from-env")
        XCTAssertEqual(Redaction.headerValue(name: "X-Upload-Auth", value: "Bearer s3cr3t-value-from-env"), "Bearer REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "X-Custom", value: "v=s3cr3t-value-from-env"), "v=REDACTED")
    }
}

final class CRC32Tests: XCTestCase {
    func testKnownValueAndS3Encoding() {
        var crc = CRC32()
        let text = Array("123456789".utf8)
        text.withUnsafeBytes { crc.update($0) }
        XCTAssertEqual(crc.value, 0xCBF4_3926, "the standard CRC-32 check value")
        XCTAssertEqual(crc.base64, "y/Q5Jg==", "big-endian bytes in base64, as x-amz-checksum-crc32 carries them")
        var split = CRC32()
        text[..<4].withUnsafeBytes { split.update($0) }
        text[4...].withUnsafeBytes { split.update($0) }
        XCTAssertEqual(split.value, crc.value, "pieces give the same value as the whole")
    }
}
