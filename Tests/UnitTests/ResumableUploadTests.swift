import Foundation
@testable import TransferCore
import XCTest

/// The IETF resumable-upload draft's values decided without I/O: the structured-field parsers
/// (Upload-Offset, Upload-Complete, Upload-Length, Upload-Limit, Location), the 104 interim
/// answer, where to resume after HEAD, and what an append's answer means.
final class ResumableUploadTests: XCTestCase {
    let place = "http://h/uploads/r1"

    func testThePinnedDraftAndItsInteropVersion() {
        XCTAssertEqual(ResumableHeaders.draft, "draft-ietf-httpbis-resumable-upload-12")
        XCTAssertEqual(ResumableHeaders.interopVersion, 8)
        XCTAssertEqual(ResumableHeaders.partialUploadType, "application/partial-upload")
    }

    func testIntegersAreStructuredFieldIntegersThatAreNotNegative() {
        XCTAssertEqual(ResumableHeaders.integer("0"), 0)
        XCTAssertEqual(ResumableHeaders.integer(" 1048576 "), 1_048_576)
        XCTAssertEqual(ResumableHeaders.integer("999999999999999"), 999_999_999_999_999, "15 digits, the most an Integer has")
        XCTAssertEqual(ResumableHeaders.integer("25;a=1;b"), 25, "parameters are ignored")
        for bad in [nil, "", " ", "-1", "+1", "1e6", "0x10", "1 2", "12a", "1.5", "1234567890123456", "?1", "\"5\"", "5;", "5;A=1", "١٢"] {
            XCTAssertNil(ResumableHeaders.integer(bad), "\(bad ?? "nil")")
        }
    }

    func testBooleansAreQuestionMarkOneOrZero() {
        XCTAssertEqual(ResumableHeaders.boolean("?1"), true)
        XCTAssertEqual(ResumableHeaders.boolean(" ?0 "), false)
        XCTAssertEqual(ResumableHeaders.boolean("?1;x=2"), true)
        for bad in [nil, "", "1", "0", "true", "?", "?2", "?10", "? 1"] {
            XCTAssertNil(ResumableHeaders.boolean(bad), "\(bad ?? "nil")")
        }
        XCTAssertEqual(ResumableHeaders.boolean(true), "?1")
        XCTAssertEqual(ResumableHeaders.boolean(false), "?0")
    }

    func testLocationsResolveAgainstTheTargetAndAreHTTPOnly() {
        let base = URL(string: "http://h:8080/_ietf/upload?key=k")!
        XCTAssertEqual(ResumableHeaders.location("uploads/r1", relativeTo: base)?.absoluteString, "http://h:8080/_ietf/uploads/r1")
        XCTAssertEqual(ResumableHeaders.location("https://other/u/1", relativeTo: base)?.absoluteString, "https://other/u/1")
        for bad in [nil, "", "ftp://h/u", "javascript:alert(1)", "uploads/a b", "uploads/\u{7F}"] {
            XCTAssertNil(ResumableHeaders.location(bad, relativeTo: base), "\(bad ?? "nil")")
        }
    }

    func testUploadLimitIsADictionaryWhoseKnownKeysAreIntegers() {
        XCTAssertEqual(UploadLimits.parse("max-size=1234567890, max-append-size=1048576, min-append-size=10, min-size=1, max-age=3600"),
                       UploadLimits(maxSize: 1_234_567_890, minSize: 1, maxAppendSize: 1 << 20, minAppendSize: 10, maxAge: 3600))
        XCTAssertEqual(UploadLimits.parse("max-age=3600"), UploadLimits(maxAge: 3600))
        XCTAssertEqual(UploadLimits.parse(""), UploadLimits())
        // Unknown keys are ignored, whatever their value (the drafts before -06 said `expires`).
        XCTAssertEqual(UploadLimits.parse(#"expires=60, x="a,b", y=(1 2);p, z=?1, w=:AAE=:, max-size=5"#), UploadLimits(maxSize: 5))
        // A repeated key keeps its last value.
        XCTAssertEqual(UploadLimits.parse("max-size=5, max-size=7"), UploadLimits(maxSize: 7))
        // A known key with another type, or a negative value, makes the whole field ignored.
        for bad in ["max-size=\"5\"", "max-size", "max-size=1.5", "max-size=-1", "max-size=?1, max-age=3", "max-append-size=abc"] {
            XCTAssertNil(UploadLimits.parse(bad), bad)
        }
        // So does a malformed dictionary.
        for bad in ["max-size=5,", "Max-Size=5", "max-size=5 max-age=3", ",max-size=5", "max-size=5;;", "a=\"unterminated"] {
            XCTAssertNil(UploadLimits.parse(bad), bad)
        }
        XCTAssertNil(UploadLimits.parse(nil))
    }

    func testLimitsRefuseAFileUpFrontAndSplitAppends() {
        XCTAssertNil(UploadLimits(maxSize: 100).problem(fileSize: 100))
        XCTAssertEqual(UploadLimits(maxSize: 100).problem(fileSize: 101)?.contains("max-size of 100"), true)
        XCTAssertEqual(UploadLimits(minSize: 10).problem(fileSize: 9)?.contains("min-size"), true)
        XCTAssertNotNil(UploadLimits(maxAppendSize: 5, minAppendSize: 6).problem(fileSize: 100))
        XCTAssertNotNil(UploadLimits(maxAppendSize: 0).problem(fileSize: 1))

        XCTAssertEqual(UploadLimits().appendLength(offset: 0, size: 1000), 1000, "the rest in one request")
        XCTAssertEqual(UploadLimits().appendLength(offset: 0, size: 1000, cap: 300), 300, "a backend's cap")
        XCTAssertEqual(UploadLimits(maxAppendSize: 400).appendLength(offset: 0, size: 1000), 400)
        XCTAssertEqual(UploadLimits(maxAppendSize: 400).appendLength(offset: 800, size: 1000), 200, "the last piece is what is left")
        XCTAssertEqual(UploadLimits(maxAppendSize: 400, minAppendSize: 350).appendLength(offset: 0, size: 1000, cap: 100), 350,
                       "never below min-append-size unless it ends the upload")
        XCTAssertEqual(UploadLimits(minAppendSize: 350).appendLength(offset: 900, size: 1000, cap: 50), 100)
        XCTAssertEqual(UploadLimits().appendLength(offset: 1000, size: 1000), 0)
        // Every piece of a split upload within the limits, and together the file.
        let limits = UploadLimits(maxAppendSize: 300, minAppendSize: 100)
        var offset: Int64 = 0
        while offset < 1000 {
            let length = limits.appendLength(offset: offset, size: 1000)
            XCTAssertLessThanOrEqual(length, 300)
            XCTAssertTrue(length >= 100 || offset + length == 1000)
            offset += length
        }
        XCTAssertEqual(offset, 1000)
        XCTAssertEqual(UploadLimits(maxSize: 1).merged(with: UploadLimits(maxAppendSize: 2)), UploadLimits(maxSize: 1, maxAppendSize: 2))
    }

    func testAnInterimAnswerCountsOnlyAt104WithOurInteropVersion() {
        let base = URL(string: "http://h/_ietf/upload")!
        let good = ResponseHead(status: 104, headers: ["Location": "uploads/r1", "Upload-Draft-Interop-Version": "8",
                                                       "Upload-Limit": "max-append-size=10"], url: base)
        XCTAssertEqual(InterimAnnouncement.read(good, base: base),
                       InterimAnnouncement(location: URL(string: "http://h/_ietf/uploads/r1"), limits: UploadLimits(maxAppendSize: 10)))
        for (status, version) in [(104, nil), (104, "7"), (104, "8.0"), (103, "8"), (100, "8")] as [(Int, String?)] {
            var headers: HTTPHeaders = ["Location": "uploads/r1"]
            if let version { headers.add("Upload-Draft-Interop-Version", version) }
            XCTAssertNil(InterimAnnouncement.read(ResponseHead(status: status, headers: headers, url: base), base: base),
                         "\(status) \(version ?? "none")")
        }
    }

    func decide(_ status: Int, _ headers: HTTPHeaders, confirmed: Int64 = 0, size: Int64 = 1000) -> ResumableResumeDecision {
        ResumableResumeDecision.decide(status: status, headers: headers, confirmed: confirmed, fileSize: size, where: place)
    }

    func testResumesAtTheServersOffsetNeverBelowWhatItConfirmed() {
        XCTAssertEqual(decide(204, ["Upload-Offset": "0", "Upload-Complete": "?0"]), .resume(at: 0))
        XCTAssertEqual(decide(204, ["Upload-Offset": "600", "Upload-Complete": "?0", "Upload-Length": "1000"], confirmed: 500),
                       .resume(at: 600), "bytes of a cut request the server kept")
        XCTAssertEqual(decide(200, ["Upload-Offset": "1000", "Upload-Complete": "?1"]), .complete)
        XCTAssertEqual(decide(204, ["Upload-Offset": "1000"]), .resume(at: 1000), "all bytes but not complete: a last empty append")
        guard case .fail(let backwards) = decide(204, ["Upload-Offset": "400"], confirmed: 500) else { return XCTFail() }
        XCTAssertTrue(backwards.contains("went backwards") && backwards.contains(place), backwards)
        guard case .fail(let past) = decide(204, ["Upload-Offset": "1001"]) else { return XCTFail() }
        XCTAssertTrue(past.contains("past the file"), past)
        guard case .fail(let other) = decide(204, ["Upload-Offset": "10", "Upload-Length": "999"]) else { return XCTFail() }
        XCTAssertTrue(other.contains("another upload"), other)
        guard case .fail(let early) = decide(204, ["Upload-Offset": "10", "Upload-Complete": "?1"]) else { return XCTFail() }
        XCTAssertTrue(early.contains("complete at offset 10"), early)
        guard case .fail(let missing) = decide(204, ["Upload-Offset": "-3\u{1B}[2J"]) else { return XCTFail() }
        XCTAssertTrue(missing.contains("without a valid Upload-Offset") && !missing.contains("\u{1B}"), missing)
    }

    func testALostUploadIsSaidAndTransientAnswersAreRetried() {
        for status in [404, 410] {
            guard case .lost(let reason) = decide(status, [:]) else { return XCTFail("\(status)") }
            XCTAssertTrue(reason.contains("no longer has the upload at \(place)") && reason.contains("HTTP \(status)"), reason)
        }
        for status in [408, 425, 429, 500, 503] { XCTAssertEqual(decide(status, [:]), .retry(status: status)) }
        guard case .fail(let refused) = decide(403, [:]) else { return XCTFail() }
        XCTAssertTrue(refused.contains("credentials"), refused)
    }

    func answer(_ status: Int, _ headers: HTTPHeaders = [:], offset: Int64 = 100, length: Int64 = 50, completes: Bool = false,
                creation: Bool = false) -> ResumableAnswer {
        ResumableAnswer.decide(status: status, headers: headers, offset: offset, length: length, completes: completes,
                               creation: creation, where: place)
    }

    func testAnAppendsAnswerMovesTheOffsetByWhatWasSentOnly() {
        XCTAssertEqual(answer(204, ["Upload-Complete": "?0"]), .appended(offset: 150))
        XCTAssertEqual(answer(204, ["Upload-Complete": "?0", "Upload-Offset": "150"]), .appended(offset: 150))
        XCTAssertEqual(answer(200, ["Upload-Complete": "?1"], completes: true), .complete)
        XCTAssertEqual(answer(201, ["Location": "x"], offset: 0, length: 0, creation: true), .appended(offset: 0))
        guard case .fail(let lie) = answer(204, ["Upload-Offset": "157"]) else { return XCTFail() }
        XCTAssertTrue(lie.contains("not 150"), lie)
        guard case .fail(let unfinished) = answer(200, ["Upload-Complete": "?0"], completes: true) else { return XCTFail() }
        XCTAssertTrue(unfinished.contains("did not complete"), unfinished)
        XCTAssertEqual(answer(409, ["Upload-Offset": "120"]), .conflict)
        XCTAssertEqual(answer(404), .lost)
        XCTAssertEqual(answer(410), .lost)
        guard case .fail = answer(404, creation: true) else { return XCTFail("a 404 to the creation is the target's refusal") }
        XCTAssertEqual(answer(413, ["Upload-Limit": "max-append-size=10"]), .tooLarge(UploadLimits(maxAppendSize: 10)))
        XCTAssertEqual(answer(413), .tooLarge(nil))
        XCTAssertEqual(answer(503), .retry(status: 503))
        guard case .fail(let processing) = answer(500, ["Upload-Complete": "?1"], completes: true) else { return XCTFail() }
        XCTAssertTrue(processing.contains("processing it"), processing)
        guard case .fail(let media) = answer(415) else { return XCTFail() }
        XCTAssertTrue(media.contains("application/partial-upload"), media)
    }

    func testAFailureSaysWhatHappensNext() {
        XCTAssertTrue(String(describing: ResumableFailure(reason: "x")).contains("starts a new one"))
        XCTAssertTrue(String(describing: ResumableFailure(reason: "x", next: .kept)).contains("continues it"))
        XCTAssertTrue(String(describing: ResumableFailure(reason: "x", next: .nothingSent)).hasPrefix("resumable upload refused: x"))
    }

    func testContentDispositionNamesTheFileInASCIIAndUTF8() {
        XCTAssertEqual(ResumableUpload.contentDisposition(for: "/d/report.pdf"),
                       "inline; filename=\"report.pdf\"; filename*=UTF-8''report.pdf")
        XCTAssertEqual(ResumableUpload.contentDisposition(for: "/d/ä \"b\".bin"),
                       "inline; filename=\"_ _b_.bin\"; filename*=UTF-8''%C3%A4%20%22b%22.bin")
    }
}
