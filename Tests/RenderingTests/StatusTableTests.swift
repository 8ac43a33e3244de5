import Foundation
import TransferCore
import XCTest
@testable import transferd

/// `status`'s job table: the ids it shows are the ones a person types back.
final class StatusTableTests: XCTestCase {
    private func record(_ id: String, seq: Int64) -> JobRecord {
        JobRecord(seq: seq, spec: JobSpec(id: id, kind: .download, url: "https://a.example/\(seq)", destination: "/d/\(seq)"),
                  state: .queued, sourceFile: "f.json", createdAt: Date())
    }

    func testAnIDLongerThanTheColumnIsShownWholeNeverCut() {
        let long = "nightly-backup-production-db-eu-west-1-3f9a2c71b0d4e8a2"
        let jobs = [record(long, seq: 1), record("beta", seq: 2)]
        let width = StatusTable.idWidth(jobs)
        XCTAssertEqual(width, 40, "the column stays at most 40 wide")
        let rows = StatusTable.rows(jobs, idWidth: width, width: 200).split(separator: "\n")
        XCTAssertTrue(rows[0].hasPrefix(long + " "), "cut to the column, the id would name no job: \(rows[0])")
        XCTAssertTrue(rows[1].hasPrefix("beta" + String(repeating: " ", count: 36) + "  "), String(rows[1]))
    }
}
