import Foundation
@testable import TransferCore
import XCTest

/// tus 1.0 values decided without I/O: the header parsers, what OPTIONS says, and
/// `TusResumeDecision` (resume, start over, fail) given HEAD's answer and what was recorded.
final class TusTests: XCTestCase {
    let place = "http://h/files/u1"

    func testOffsetsAreDigitsOnlyAndFitInt64() {
        XCTAssertEqual(TusHeaders.offset("0"), 0)
        XCTAssertEqual(TusHeaders.offset(" 1048576 "), 1_048_576)
        XCTAssertEqual(TusHeaders.offset("9223372036854775807"), Int64.max)
        for bad in [nil, "", " ", "-1", "+1", "1e6", "0x10", "1 2", "12a", "9223372036854775808", "99999999999999999999", "١٢"] {
            XCTAssertNil(TusHeaders.offset(bad), "\(bad ?? "nil")")
        }
    }

    func testListsAreTrimmedLowercasedAndBounded() {
        XCTAssertEqual(TusHeaders.list("creation, Termination ,,checksum"), ["creation", "termination", "checksum"])
        XCTAssertEqual(TusHeaders.list(nil), [])
        XCTAssertEqual(TusHeaders.list(String(repeating: "a,", count: 1000)).count, 64)
    }

    func testMetadataIsBase64AndLeavesOutBadKeys() {
        XCTAssertEqual(TusHeaders.metadata([("filename", "ä b.bin"), ("filetype", "application/octet-stream")]),
                       "filename \(Data("ä b.bin".utf8).base64EncodedString()),filetype YXBwbGljYXRpb24vb2N0ZXQtc3RyZWFt")
        XCTAssertEqual(TusHeaders.metadata([("bad key", "x"), ("a,b", "y"), ("", "z"), ("ok", "")]), "ok ")
    }

    func testServerInfoChoosesSHA1OnlyWhenOffered() {
        let full = TusServerInfo(status: 204, headers: ["Tus-Version": "1.0.0,0.2.2", "Tus-Extension": "creation,termination,checksum",
                                                        "Tus-Checksum-Algorithm": "md5,SHA1", "Tus-Max-Size": "100"])
        XCTAssertEqual(full.checksum, "sha1")
        XCTAssertNil(full.problem(fileSize: 100))
        XCTAssertNotNil(full.problem(fileSize: 101), "past Tus-Max-Size")
        // tuspyserver: no checksum extension.
        let noChecksum = TusServerInfo(status: 204, headers: ["Tus-Version": "1.0.0", "Tus-Extension": "creation,termination"])
        XCTAssertNil(noChecksum.checksum)
        let md5Only = TusServerInfo(status: 204, headers: ["Tus-Extension": "creation,checksum", "Tus-Checksum-Algorithm": "md5"])
        XCTAssertNil(md5Only.checksum)
        // An OPTIONS the server (or a proxy) refuses says nothing: tried without checksums.
        let refused = TusServerInfo(status: 405, headers: ["Tus-Extension": "checksum", "Tus-Checksum-Algorithm": "sha1"])
        XCTAssertNil(refused.checksum)
        XCTAssertNil(refused.problem(fileSize: 1 << 40))
        XCTAssertEqual(TusServerInfo(status: 204, headers: ["Tus-Version": "2.0.0"]).problem(fileSize: 1)?.contains("not 1.0.0"), true)
        XCTAssertEqual(TusServerInfo(status: 204, headers: ["Tus-Extension": "termination"]).problem(fileSize: 1)?
            .contains("creation"), true)
    }

    func decide(_ status: Int, _ offset: String?, length: String? = "1000", confirmed: Int64 = 0, size: Int64 = 1000) -> TusResumeDecision {
        TusResumeDecision.decide(status: status, offset: offset, length: length, confirmed: confirmed, fileSize: size, where: place)
    }

    func testResumesAtTheServersOffsetWhenItHoldsAtLeastWhatItConfirmed() {
        XCTAssertEqual(decide(200, "0"), .resume(at: 0))
        XCTAssertEqual(decide(200, "600", confirmed: 500), .resume(at: 600), "bytes of a cut PATCH the server kept")
        XCTAssertEqual(decide(204, "500", confirmed: 500), .resume(at: 500))
        XCTAssertEqual(decide(200, "1000", confirmed: 500), .resume(at: 1000), "complete: nothing left to send")
        XCTAssertEqual(decide(200, "10", length: nil), .resume(at: 10), "Upload-Length is optional (deferred length)")
    }

    func testAServerThatLostTheUploadStartsANewOneAndSaysSo() {
        for status in [404, 410] {
            guard case .startOver(let reason) = decide(status, nil, confirmed: 700) else { return XCTFail("\(status)") }
            XCTAssertTrue(reason.contains("HTTP \(status)") && reason.contains(place) && reason.contains("new upload"), reason)
        }
    }

    func testInconsistentOffsetsFailAndNeverResume() {
        func reason(_ decision: TusResumeDecision) -> String {
            guard case .fail(let reason) = decision else {
                XCTFail("expected a failure, got \(decision)")
                return ""
            }
            return reason
        }
        XCTAssertTrue(reason(decide(200, "400", confirmed: 500)).contains("below the 500 bytes it had confirmed"))
        XCTAssertTrue(reason(decide(200, "1001", length: nil)).contains("past the file's 1000 bytes"))
        XCTAssertTrue(reason(decide(200, "10", length: "999")).contains("another upload"))
        XCTAssertTrue(reason(decide(200, "10", length: "x")).contains("another upload"))
        XCTAssertTrue(reason(decide(200, nil)).contains("without a valid Upload-Offset"))
        XCTAssertTrue(reason(decide(200, "-5")).contains("\"-5\""))
        XCTAssertTrue(reason(decide(200, "\u{1B}[2J1")).contains("\\u{1B}") || !reason(decide(200, "\u{1B}[2J1")).contains("\u{1B}"),
                      "a server's text is escaped before it is shown")
        XCTAssertTrue(reason(decide(403, nil)).contains("credentials"))
        XCTAssertTrue(reason(decide(400, nil)).contains("HTTP 400"))
        for reasonText in [reason(decide(200, "400", confirmed: 500)), reason(decide(403, nil))] {
            XCTAssertTrue(reasonText.contains(place), "says where: \(reasonText)")
        }
    }

    func testTransientAnswersAreAskedAgain() {
        for status in [408, 425, 429, 500, 502, 503] { XCTAssertEqual(decide(status, nil), .retry(status: status)) }
    }

    func testAPatchAnswerMustLieWithinWhatWasSent() {
        XCTAssertEqual(try TusResumeDecision.afterPatch(offset: 100, length: 50, answered: "150", where: place).get(), 150)
        XCTAssertEqual(try TusResumeDecision.afterPatch(offset: 100, length: 50, answered: "120", where: place).get(), 120)
        XCTAssertEqual(try TusResumeDecision.afterPatch(offset: 100, length: 50, answered: "100", where: place).get(), 100)
        for bad in ["151", "99", nil, "x"] {
            XCTAssertThrowsError(try TusResumeDecision.afterPatch(offset: 100, length: 50, answered: bad, where: place).get())
        }
    }

    func testAFailureSaysWhatHappensNext() {
        let text = String(describing: TusFailure(reason: "the server reports offset 1 for the upload at \(place)"))
        XCTAssertTrue(text.contains(place) && text.contains("starts a new one"), text)
    }

    func testTusJobsParseWithBoundedChunkSizes() throws {
        let parser = JobFileParser(root: "/data")
        let text = #"{"type": "tus", "url": "https://e.com/files/", "source": "a.bin", "chunk_size": "4M", "content_type": "video/mp4"}"#
        let jobs = try parser.parse(name: "jobs.json", data: Data(text.utf8)).get()
        XCTAssertEqual(jobs.first?.kind, .tus)
        XCTAssertEqual(jobs.first?.source, "/data/a.bin")
        XCTAssertEqual(jobs.first?.chunkSize, 4 << 20)
        XCTAssertEqual(jobs.first?.contentType, "video/mp4")
        for (chunk, field) in [("1K", "chunk_size"), ("2G", "chunk_size")] {
            let bad = #"{"type": "tus", "url": "https://e.com/files/", "source": "a.bin", "chunk_size": "\#(chunk)"}"#
            guard case .failure(let rejection) = parser.parse(name: "jobs.json", data: Data(bad.utf8)) else { return XCTFail(chunk) }
            XCTAssertEqual(rejection.errors.first?.field, field)
            XCTAssertNotNil(rejection.errors.first?.fix)
        }
        for bad in [#"{"type": "tus", "url": "s3://b/k", "source": "a.bin"}"#, #"{"type": "tus", "url": "https://e.com/f"}"#,
                    #"{"type": "tus", "url": "https://e.com/f", "source": "a", "part_size": "8M"}"#] {
            guard case .failure = parser.parse(name: "jobs.json", data: Data(bad.utf8)) else { return XCTFail(bad) }
        }
    }

    func testChunkSizeIsStoredWithTheJob() throws {
        var spec = JobSpec(id: "t", kind: .tus, url: "https://e.com/files/", source: "/data/a.bin")
        spec.chunkSize = 1 << 20
        let restored = try JobSpec(stored: spec.storedJSON)
        XCTAssertEqual(restored, spec)
    }

    func testOptionsBoundTheChunkSize() {
        let url = URL(string: "http://h/files")!
        XCTAssertEqual(TusOptions(endpoint: url, source: "/a", chunkSize: 1).chunkSize, 64 << 10)
        XCTAssertEqual(TusOptions(endpoint: url, source: "/a", chunkSize: 1 << 40).chunkSize, 1 << 30)
    }
}
