import TransferCore
import XCTest

/// A streamed copy's pure decisions: what the first answer says of the source, and
/// whether a part's answer is that part of that version.
final class StreamedCopyPlanTests: XCTestCase {
    let version = ResponseValidators(etag: "\"v1\"", lastModified: "Mon, 07 Dec 2026 10:00:00 GMT")

    func testTheFirstAnswerSaysWhatTheSourceIs() {
        XCTAssertEqual(StreamedCopyPlan.source(status: 206, headers: ["Content-Range": "bytes 0-0/1000", "ETag": "\"v1\""]),
                       .ranged(size: 1000, validators: ResponseValidators(etag: "\"v1\"")))
        // A 200 carrying the range's Content-Range (some S3-compatible servers).
        XCTAssertEqual(StreamedCopyPlan.source(status: 200, headers: ["Content-Range": "bytes 0-0/1000"]),
                       .ranged(size: 1000, validators: ResponseValidators()))
        XCTAssertEqual(StreamedCopyPlan.source(status: 200, headers: ["Content-Length": "1000"]), .whole(size: 1000))
        XCTAssertEqual(StreamedCopyPlan.source(status: 200, headers: [:]), .whole(size: nil))
        XCTAssertEqual(StreamedCopyPlan.source(status: 206, headers: ["Content-Range": "bytes 0-0/*"]), .unknownLength)
        XCTAssertEqual(StreamedCopyPlan.source(status: 416, headers: ["Content-Range": "bytes */0"]), .empty(validators: ResponseValidators()))
        XCTAssertEqual(StreamedCopyPlan.source(status: 416, headers: ["Content-Range": "bytes */10"]), .failed(status: 416))
        XCTAssertEqual(StreamedCopyPlan.source(status: 403, headers: [:]), .failed(status: 403))
    }

    func testPartsAskForTheVersionFirstSeen() {
        XCTAssertEqual(StreamedCopyPlan.conditions(version), ["If-Match": "\"v1\""])
        XCTAssertEqual(StreamedCopyPlan.conditions(ResponseValidators(etag: "W/\"v1\"", lastModified: "date")),
                       ["If-Unmodified-Since": "date"], "a weak ETag cannot be matched")
        XCTAssertEqual(StreamedCopyPlan.conditions(ResponseValidators()), [:])
    }

    func testAPartsAnswerIsThatPartOfThatVersionOrNot() {
        func check(_ status: Int, _ headers: HTTPHeaders, first: Int64 = 100, last: Int64 = 199) -> StreamedCopyPlan.PartAnswer {
            StreamedCopyPlan.part(status: status, headers: headers, first: first, last: last, size: 1000, validators: version)
        }
        let both: HTTPHeaders = ["Content-Range": "bytes 100-199/1000", "ETag": "\"v1\"", "Last-Modified": "Mon, 07 Dec 2026 10:00:00 GMT"]
        XCTAssertEqual(check(206, both), .part)
        guard case .changed = check(206, ["Content-Range": "bytes 100-199/1000"]) else {
            return XCTFail("an answer without the validators first seen could be of any version")
        }
        guard case .changed = check(206, ["Content-Range": "bytes 100-199/1000", "ETag": "\"v1\""]) else {
            return XCTFail("the Last-Modified first seen must come back too")
        }
        guard case .refused = check(206, ["Content-Range": "bytes 100-199/*", "ETag": "\"v1\"",
                                          "Last-Modified": "Mon, 07 Dec 2026 10:00:00 GMT"]) else {
            return XCTFail("a range without the file's length")
        }
        guard case .changed = check(412, [:]) else { return XCTFail("412 is a changed source") }
        guard case .changed = check(416, ["Content-Range": "bytes */50"]) else { return XCTFail("416 inside the first size: shorter now") }
        var other = both
        other.set("ETag", "\"v2\"")
        guard case .changed = check(206, other) else { return XCTFail("other ETag") }
        var longer = both
        longer.set("Content-Range", "bytes 100-199/2000")
        guard case .changed = check(206, longer) else { return XCTFail("other size") }
        var elsewhere = both
        elsewhere.set("Content-Range", "bytes 0-99/1000")
        guard case .refused = check(206, elsewhere) else { return XCTFail("other range") }
        var whole = both
        whole.remove("Content-Range")
        whole.set("Content-Length", "1000")
        guard case .refused = check(200, whole) else { return XCTFail("the whole file to a range") }
        guard case .refused = check(500, [:]) else { return XCTFail("an error status") }
        // The whole file asked for as one range may come back as a plain 200 of that length.
        XCTAssertEqual(check(200, whole, first: 0, last: 999), .part)
    }
}
