import Foundation
import TransferCore
import XCTest

/// `--delete`'s pure decisions: what is extraneous, and when a delete is refused.
final class SyncPlanTests: XCTestCase {
    func testOnlyWhatTheFiltersTakeAndTheSourceLacksIsDeleted() {
        let source: Set<Data> = [Data("a.bin".utf8), Data("logs/b.bin".utf8)]
        let destination = ["a.bin", "old.bin", "logs/b.bin", "logs/c.bin", "tmp/x.bin", "e\u{301}.bin"]
        XCTAssertEqual(SyncPlan.extraneous(source: source, destination: destination, filter: S3PrefixPlan.Filter(exclude: ["tmp/*"])),
                       ["e\u{301}.bin", "logs/c.bin", "old.bin"], "excluded names are never deleted; sorted by bytes")
        // The same name in another Unicode form is another name.
        XCTAssertEqual(SyncPlan.extraneous(source: [Data("\u{e9}.bin".utf8)], destination: ["e\u{301}.bin"],
                                           filter: S3PrefixPlan.Filter()), ["e\u{301}.bin"])
    }

    func testDeletingAllOrMoreThanTheShareNeedsForce() {
        let options = SyncOptions(delete: true)
        XCTAssertNil(SyncPlan.refusal(deleting: 0, of: 0, options: options))
        XCTAssertNil(SyncPlan.refusal(deleting: 5, of: 10, options: options), "half is allowed by default")
        XCTAssertNotNil(SyncPlan.refusal(deleting: 6, of: 10, options: options))
        XCTAssertNotNil(SyncPlan.refusal(deleting: 1, of: 1, options: options), "all of it, however few")
        XCTAssertNil(SyncPlan.refusal(deleting: 10, of: 10, options: SyncOptions(delete: true, force: true)))
        XCTAssertNil(SyncPlan.refusal(deleting: 9, of: 10, options: SyncOptions(delete: true, maxDeleteShare: 0.9)))
        XCTAssertTrue(SyncPlan.refusal(deleting: 6, of: 10, options: options)?.contains("60%") ?? false)
    }
}
