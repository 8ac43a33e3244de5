import Foundation
@testable import TransferCore
import XCTest

/// Job ids as people type them: derived from the job file, shown short, taken back from a prefix.
final class JobIDsTests: XCTestCase {
    func testDerivedIDsAreStableAndDifferEarly() {
        let hash = String(repeating: "ab", count: 32)
        let first = JobIDs.derived(stem: "photos", contentHash: hash, number: 1)
        XCTAssertEqual(first, JobIDs.derived(stem: "photos", contentHash: hash, number: 1), "the same file gives the same ids")
        XCTAssertTrue(first.hasPrefix("photos-"), first)
        XCTAssertEqual(first.count, "photos-".count + 16)
        let many = (1...10_000).map { JobIDs.derived(stem: "photos", contentHash: hash, number: $0) }
        XCTAssertEqual(Set(many).count, many.count)
        XCTAssertNotEqual(JobIDs.derived(stem: "photos", contentHash: String(repeating: "cd", count: 32), number: 1), first,
                          "another file's content gives other ids")
        // Ten thousand jobs of one file: a handful of digits after the stem names each.
        let shown = JobIDs.shortest(among: many)
        XCTAssertLessThanOrEqual(shown.values.map(\.count).max()!, "photos-".count + 8)
        XCTAssertEqual(Set(shown.values).count, many.count)
    }

    func testTheShortestPrefixIsUniqueAndNeverShorterThanFourDigits() {
        let ids = ["photos-3f9a2c71b0d4e8a2", "photos-3f9b00000000000", "photos-77aa000000000000", "alpha-1", "alpha-10", "beta"]
        let shown = JobIDs.shortest(among: ids)
        XCTAssertEqual(shown["photos-3f9a2c71b0d4e8a2"], "photos-3f9a")
        XCTAssertEqual(shown["photos-3f9b00000000000"], "photos-3f9b")
        XCTAssertEqual(shown["photos-77aa000000000000"], "photos-77aa", "four digits even when one would do")
        XCTAssertEqual(shown["alpha-1"], "alpha-1", "an id another starts with is shown whole (typed whole, it names itself)")
        XCTAssertEqual(shown["alpha-10"], "alpha-10")
        XCTAssertEqual(shown["beta"], "beta", "an id without a dash is shown whole")
        // Each shown form, typed, names its job and no other.
        for (id, short) in shown {
            let matches = ids.filter { $0 == short || $0.hasPrefix(short) }
            XCTAssertTrue(matches == [id] || matches.contains(short) && short == id, "\(short): \(matches)")
        }
        let close = ["x-aaaaaaaa11", "x-aaaaaaaa12"]
        XCTAssertEqual(JobIDs.shortest(among: close), ["x-aaaaaaaa11": "x-aaaaaaaa11", "x-aaaaaaaa12": "x-aaaaaaaa12"])
    }

    func testBisectionAsksTheStoreAFewTimesAnID() {
        let id = "list-0123456789abcdef"
        var asked = 0
        let short = JobIDs.shortest(id) { prefix in
            asked += 1
            return prefix.count >= "list-0123456".count
        }
        XCTAssertEqual(short, "list-0123456")
        XCTAssertLessThanOrEqual(asked, 4)
    }

    func testATypedPrefixNamesOneJobOrSaysWhy() {
        XCTAssertEqual(try JobIDs.choose("pho", among: ["photos-1"]), "photos-1")
        XCTAssertThrowsError(try JobIDs.choose("zz", among: [])) { error in
            XCTAssertEqual(String(describing: error), "no job with id \"zz\"; `transferd status` lists them")
        }
        XCTAssertEqual(try JobIDs.choose("bet", among: ["beta"]), "beta")
        XCTAssertEqual(try JobIDs.choose("photos-3f", among: ["photos-3f9a2c71b0d4e8a2"]), "photos-3f9a2c71b0d4e8a2")
        XCTAssertEqual(try JobIDs.choose("photos-3f9", among: ["photos-3f9a2c71b0d4e8a2"]), "photos-3f9a2c71b0d4e8a2")
        // Not a name: job-2 (gone, say purged) must not stand for job-20, nor "" for a queue's only job.
        for (typed, match) in [("job-2", "job-20"), ("", "beta"), ("be", "beta"), ("alpha-1", "alpha-10")] {
            XCTAssertThrowsError(try JobIDs.choose(typed, among: [match]), typed) { error in
                XCTAssertTrue(String(describing: error).contains("no job with id \"\(typed)\"; \(match) starts with it"),
                              String(describing: error))
            }
        }
        XCTAssertEqual(try JobIDs.choose("job-20", among: ["job-20"]), "job-20")
        XCTAssertThrowsError(try JobIDs.choose("a", among: ["a-1", "a-2"])) { error in
            XCTAssertEqual(String(describing: error), "\"a\" starts 2 job ids (a-1, a-2); type more of the one you mean")
        }
        XCTAssertThrowsError(try JobIDs.choose("a", among: (1...6).map { "a-\($0)" })) { error in
            XCTAssertTrue(String(describing: error).hasPrefix("\"a\" starts more than 5 job ids (a-1, a-2, a-3, a-4, a-5, …)"),
                          String(describing: error))
        }
    }

    func testAListsJobsGetDerivedIDs() throws {
        let text = (1...50).map { "https://example.com/f\($0).bin" }.joined(separator: "\n") + "\n"
        let parser = JobFileParser(root: "/data")
        guard case .success(let whole) = parser.parse(name: "list.urls", data: Data(text.utf8)) else { return XCTFail("rejected") }
        XCTAssertEqual(Set(whole.map(\.id)).count, 50)
        XCTAssertTrue(whole.allSatisfy { $0.id.hasPrefix("list-") && $0.id.count == "list-".count + 16 })
    }
}
