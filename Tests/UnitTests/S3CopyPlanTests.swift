import TransferCore
import XCTest

/// The copy's pure decisions: how an object is copied, whether a copy holds it already,
/// and what a finished copy proves.
final class S3CopyPlanTests: XCTestCase {
    let md5A = "0123456789abcdef0123456789abcdef"
    let md5B = "fedcba9876543210fedcba9876543210"

    func testAMultipartSourceIsCopiedAlongItsOwnPartsWhenTheyAreRegular() {
        let mib: Int64 = 1 << 20
        // 3 parts of 5 MiB and a last of 2 MiB: its own layout.
        XCTAssertEqual(S3CopyPlan.method(size: 12 * mib, etag: "\"\(md5A)-3\"", firstPartSize: 5 * mib, requestedPartSize: 64 * mib),
                       .parts(partSize: 5 * mib, parts: 3, sourceLayout: true))
        // The first part and the count do not fit the size: not its layout, one CopyObject.
        XCTAssertEqual(S3CopyPlan.method(size: 30 * mib, etag: "\(md5A)-3", firstPartSize: 5 * mib, requestedPartSize: 64 * mib), .whole)
        // No first part size known (the server does not say): one CopyObject.
        XCTAssertEqual(S3CopyPlan.method(size: 12 * mib, etag: "\(md5A)-3", firstPartSize: nil, requestedPartSize: 64 * mib), .whole)
        // Parts below S3's minimum cannot be copied as parts: one CopyObject.
        XCTAssertEqual(S3CopyPlan.method(size: 3 * mib, etag: "\(md5A)-3", firstPartSize: mib, requestedPartSize: 64 * mib), .whole)
    }

    func testASinglePartObjectIsOneCopyObjectUpTo5GiBThenParts() {
        XCTAssertEqual(S3CopyPlan.method(size: 5 << 30, etag: md5A, firstPartSize: nil, requestedPartSize: 64 << 20), .whole)
        XCTAssertEqual(S3CopyPlan.method(size: (5 << 30) + 1, etag: md5A, firstPartSize: nil, requestedPartSize: 64 << 20),
                       .parts(partSize: 64 << 20, parts: 81, sourceLayout: false))
        // An SSE-KMS ETag (no MD5) over 5 GiB: parts of the requested size, grown to fit 10,000.
        XCTAssertEqual(S3CopyPlan.method(size: 1 << 40, etag: "not-a-digest", firstPartSize: nil, requestedPartSize: 8 << 20),
                       .parts(partSize: 105 << 20, parts: 9987, sourceLayout: false))
    }

    func testACopyHoldsTheSourceOnlyByTheSameDigestETagAndSize() {
        XCTAssertTrue(S3CopyPlan.holds(size: 10, etag: "\"\(md5A)\"", sourceSize: 10, sourceETag: md5A.uppercased()))
        XCTAssertTrue(S3CopyPlan.holds(size: 10, etag: "\(md5A)-2", sourceSize: 10, sourceETag: "\"\(md5A)-2\""))
        XCTAssertFalse(S3CopyPlan.holds(size: 11, etag: md5A, sourceSize: 10, sourceETag: md5A))
        XCTAssertFalse(S3CopyPlan.holds(size: 10, etag: md5B, sourceSize: 10, sourceETag: md5A))
        // ETags that are no digest (SSE-KMS, a server's own) are never taken for one, equal or not.
        XCTAssertFalse(S3CopyPlan.holds(size: 10, etag: "abc", sourceSize: 10, sourceETag: "abc"))
        XCTAssertFalse(S3CopyPlan.holds(size: 10, etag: "", sourceSize: 10, sourceETag: ""))
    }

    func testTheVerdictOnAFinishedCopy() {
        XCTAssertEqual(S3CopyPlan.verdict(sourceSize: 10, sourceETag: md5A, copySize: 10, copyETag: "\"\(md5A)\"", method: .whole), .sameETag)
        // A CopyObject of a single-part object with another MD5 holds other bytes.
        guard case .differs = S3CopyPlan.verdict(sourceSize: 10, sourceETag: md5A, copySize: 10, copyETag: md5B, method: .whole) else {
            return XCTFail("another MD5 is another content")
        }
        guard case .differs = S3CopyPlan.verdict(sourceSize: 10, sourceETag: md5A, copySize: 9, copyETag: md5A, method: .whole) else {
            return XCTFail("another size is another content")
        }
        // moto's CopyObject of a multipart source gives the MD5 of the whole: nothing to compare.
        guard case .sizeOnly = S3CopyPlan.verdict(sourceSize: 10, sourceETag: "\(md5A)-2", copySize: 10, copyETag: md5B, method: .whole) else {
            return XCTFail("a multipart ETag and an MD5 say nothing of each other")
        }
        // SeaweedFS's part ETags are no MD5s: the copy's ETag is its own.
        let parts = S3CopyPlan.Method.parts(partSize: 5 << 20, parts: 2, sourceLayout: true)
        guard case .sizeOnly = S3CopyPlan.verdict(sourceSize: 10, sourceETag: "\(md5A)-2", copySize: 10, copyETag: "\(md5B)-2",
                                                  method: parts, partETags: ["\(md5A)-2", md5B]) else {
            return XCTFail("part ETags that are no MD5s prove nothing")
        }
        XCTAssertEqual(S3CopyPlan.verdict(sourceSize: 10, sourceETag: "\(md5A)-2", copySize: 10, copyETag: "\(md5A)-2",
                                          method: parts, partETags: [md5A, md5B]), .sameETag)
    }

    func testWhatACopyNames() {
        XCTAssertEqual(S3CopyTarget(source: "s3://a/x/y.bin", destination: "s3://b/z/"),
                       .object(S3Location(bucket: "a", key: "x/y.bin"), bucket: "b", key: "z/y.bin"))
        XCTAssertEqual(S3CopyTarget(source: "s3://a/x/", destination: "s3://b/z"),
                       .prefix(S3Location(bucket: "a", key: "x/"), bucket: "b", prefix: "z/"))
        XCTAssertEqual(S3CopyTarget(source: "s3://a", destination: "s3://b/"),
                       .prefix(S3Location(bucket: "a", key: ""), bucket: "b", prefix: ""))
        XCTAssertNil(S3CopyTarget(source: "s3://a/x", destination: "https://b/z"))
        XCTAssertNotNil(S3CopyTarget(source: "s3://a/x/", destination: "s3://a/x/y/")?.problem)
        XCTAssertNotNil(S3CopyTarget(source: "s3://a/x/", destination: "s3://a/")?.problem, "the destination holds the source")
        XCTAssertNil(S3CopyTarget(source: "s3://a/x/", destination: "s3://a/xy/")?.problem, "x/ and xy/ do not overlap")
        XCTAssertNotNil(S3CopyTarget(source: "s3://a/k", destination: "s3://a/k")?.problem)
    }
}
