import Foundation
@testable import TransferCore
import TestSupport
import XCTest

/// Known answers from AWS's published Signature Version 4 examples.
final class SigV4SignerTests: XCTestCase {
    func date(_ text: String) -> Date { amzTimestamp(text) }

    /// "Signature Version 4 signing process": IAM ListUsers.
    func testIAMListUsersExample() {
        let signer = SigV4Signer(credentials: AWSCredentials(accessKeyID: "AKIDEXAMPLE",
                                                             secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                                 region: "us-east-1", service: "iam")
        let result = signer.sign(method: "GET", url: URL(string: "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08")!,
                                 headers: ["Content-Type": "application/x-www-form-urlencoded; charset=utf-8"],
                                 payloadHash: SigV4Signer.emptyPayloadHash, date: date("20150830T123600Z"))
        XCTAssertEqual(result.canonicalRequest, """
            GET
            /
            Action=ListUsers&Version=2010-05-08
            content-type:application/x-www-form-urlencoded; charset=utf-8
            host:iam.amazonaws.com
            x-amz-date:20150830T123600Z

            content-type;host;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        XCTAssertEqual(result.signature, "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7")
    }

    /// "Examples: Signature Calculations", S3 GET Object with a range.
    func testS3GetObjectExample() {
        let signer = SigV4Signer(credentials: AWSCredentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE",
                                                             secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                                 region: "us-east-1")
        let result = signer.sign(method: "GET", url: URL(string: "https://examplebucket.s3.amazonaws.com/test.txt")!,
                                 headers: ["Range": "bytes=0-9"], payloadHash: SigV4Signer.emptyPayloadHash,
                                 date: date("20130524T000000Z"))
        XCTAssertEqual(result.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        let authorization = result.headers["Authorization"] ?? ""
        XCTAssertTrue(authorization.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature="), authorization)
        XCTAssertFalse(String(describing: signer.credentials).contains("wJalr"), "the secret never prints")
    }

    func testTimestampAndHeaderValueFolding() {
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 0)), "19700101T000000Z")
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 1_440_938_160)), "20150830T123600Z")
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 4_102_444_799)), "20991231T235959Z")
        for (value, folded) in [("a b", "a b"), ("  a   b  ", "a b"), ("a\tb", "a b"), ("", ""), (" ", ""), ("x", "x"),
                                ("a \t b", "a b"), ("bytes=0-99", "bytes=0-99"), ("\ta", "a"), ("a ", "a")] {
            XCTAssertEqual(SigV4Signer.collapsedSpaces(value), folded, value)
        }
    }

    /// The day's signing key is kept; another day, region or secret gets its own.
    func testSigningKeyFollowsItsScope() {
        func key(_ secret: String, _ day: String, _ region: String) -> [UInt8] {
            SigV4Signer(credentials: AWSCredentials(accessKeyID: "AKID", secretAccessKey: secret), region: region).signingKey(day: day)
        }
        func derived(_ secret: String, _ day: String, _ region: String) -> [UInt8] {
            var key = HMACSHA256.mac(key: Array("AWS4\(secret)".utf8), message: day)
            for part in [region, "s3", "aws4_request"] { key = HMACSHA256.mac(key: key, message: part) }
            return key
        }
        for (secret, day, region) in [("s1", "20261203", "us-east-1"), ("s1", "20261203", "us-east-1"), ("s2", "20261203", "us-east-1"),
                                      ("s2", "20261204", "us-east-1"), ("s2", "20261204", "eu-west-1"), ("s1", "20261203", "us-east-1")] {
            XCTAssertEqual(key(secret, day, region), derived(secret, day, region), "\(secret) \(day) \(region)")
        }
    }

    func testQueryEncodingAndSessionToken() {
        let signer = SigV4Signer(credentials: AWSCredentials(accessKeyID: "AK", secretAccessKey: "SK", sessionToken: "TOKEN"),
                                 region: "eu-west-1")
        let result = signer.sign(method: "PUT", url: URL(string: "http://127.0.0.1:9000/b/a%20b?uploadId=x%2By&partNumber=2")!,
                                 payloadHash: SigV4Signer.unsignedPayload, date: date("20240101T000000Z"))
        let lines = result.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)
        XCTAssertEqual(lines[1], "/b/a%20b")
        XCTAssertEqual(lines[2], "partNumber=2&uploadId=x%2By")
        XCTAssertTrue(lines.contains("host:127.0.0.1:9000"))
        XCTAssertTrue(lines.contains("x-amz-security-token:TOKEN"))
        XCTAssertEqual(lines.last, "UNSIGNED-PAYLOAD")
        XCTAssertEqual(AWSEncoding.encode("a b/ü~", keepSlash: true), "a%20b/%C3%BC~")
    }

    /// Every download from S3 is signed and asks for S3's request size: one call sets both.
    func testAnObjectsDownloadIsSignedAndAsksForS3sRequestSize() throws {
        let configuration = S3Configuration(endpoint: URL(string: "http://127.0.0.1:9000")!, region: "us-east-1",
                                            credentials: AWSCredentials(accessKeyID: "AKID", secretAccessKey: "secret"),
                                            pathStyle: true)
        let source = try S3Client(configuration: configuration, transport: URLSessionTransport())
            .downloadSource(bucket: "b", key: "dir/a b.bin")
        XCTAssertEqual(source.url.absoluteString, "http://127.0.0.1:9000/b/dir/a%20b.bin")
        var options = DownloadOptions(url: source.url, destination: "/nonexistent/a.bin")
        XCTAssertNil(options.signer)
        XCTAssertEqual(options.requestFloor, 16 << 20)
        source.configure(&options)
        XCTAssertEqual(options.requestFloor, S3Client.requestFloor)
        XCTAssertGreaterThan(S3Client.requestFloor, 16 << 20)
        let signed = try XCTUnwrap(options.signer)("GET", source.url, [:])
        XCTAssertTrue(signed["Authorization"]?.hasPrefix("AWS4-HMAC-SHA256 Credential=AKID/") ?? false)
    }
}
