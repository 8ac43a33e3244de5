import Foundation
import XCTest
@testable import TransferCore

/// Checkpoint saves handed off the transport's thread: which are owed, and that
/// a drain leaves none behind.
final class CheckpointWriterTests: XCTestCase {
    func testRequestsMergeIntoOneOwedSaveThatKeepsASyncWish() {
        var requests = CheckpointRequests()
        XCTAssertNil(requests.take(), "nothing asked, nothing owed")
        XCTAssertTrue(requests.request(sync: false), "the first request schedules a save")
        XCTAssertFalse(requests.request(sync: true), "a second one joins the owed save")
        XCTAssertFalse(requests.request(sync: false))
        XCTAssertEqual(requests.take(), true, "one of the merged requests wanted a sync")
        XCTAssertNil(requests.take(), "taken: nothing owed")
        XCTAssertTrue(requests.request(sync: false), "after a take, a request schedules again")
        XCTAssertEqual(requests.take(), false)
    }

    func testDrainRunsEveryOwedSaveAndSavesNeverOverlap() {
        let log = Locked<(saves: [Bool], running: Int, overlapped: Bool)>(([], 0, false))
        let writer = CheckpointWriter { sync in
            log.withLock { $0.running += 1; $0.overlapped = $0.overlapped || $0.running > 1 }
            usleep(2_000)
            log.withLock { $0.saves.append(sync); $0.running -= 1 }
        }
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for i in 0..<50 { writer.request(sync: thread == 0 && i == 49) }
        }
        writer.drain()
        let after = log.current
        XCTAssertFalse(after.overlapped, "one save at a time")
        XCTAssertGreaterThanOrEqual(after.saves.count, 1)
        XCTAssertLessThan(after.saves.count, 200, "requests made while a save was owed merged into it")
        XCTAssertTrue(after.saves.contains(true), "the request that wanted a sync got one")
        writer.drain()
        XCTAssertEqual(log.current.saves.count, after.saves.count, "a drain with nothing owed saves nothing")
    }
}
