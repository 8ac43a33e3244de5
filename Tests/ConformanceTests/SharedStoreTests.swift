import Foundation
import TestSupport
import TransferCore
import XCTest

/// What a fleet relies on from the PostgreSQL store: claims that never
/// overlap, leases that run out, and fencing of a worker presumed dead.
final class SharedStoreTests: XCTestCase {
    func job(_ id: String, host: String = "a.example") -> JobSpec {
        JobSpec(id: id, kind: .download, url: "https://\(host)/\(id)", destination: "/data/\(id)")
    }

    func worker(_ url: String, _ name: String, lease: Double = 30) throws -> PostgresQueueStore {
        let store = try PostgresQueueStore(url: url, worker: name, leaseSeconds: lease)
        try store.enlist()
        return store
    }

    func testWorkersClaimingAtOnceNeverTakeTheSameJob() throws {
        let url = try TestStores.freshPostgresDatabase()
        let setup = try worker(url, "setup")
        _ = try setup.ingest(fileName: "a.json", contentHash: "h", jobs: (0..<400).map { job("j\($0)", host: "h\($0 % 7).example") })
        let claims = Locked<[String: [String]]>([:])
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { index in
            do {
                let store = try worker(url, "w\(index)")
                while true {
                    let taken = try store.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { _ in true }
                    if taken.isEmpty { break }
                    claims.withLock { $0["w\(index)", default: []] += taken.map(\.id) }
                    try store.finishDone(taken.map { ($0.id, 1, nil) }, at: Date())
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(failures.current, [])
        let all = claims.current.values.flatMap { $0 }
        XCTAssertEqual(all.count, 400, "every job claimed exactly once")
        XCTAssertEqual(Set(all).count, 400)
        XCTAssertEqual(try setup.counts()[.done], 400)
        XCTAssertGreaterThan(claims.current.count, 1, "more than one worker got work: \(claims.current.mapValues(\.count))")
    }

    func testAJobWhoseLeaseRanOutMovesOnAndItsOldWorkerIsFencedOff() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first", lease: 1)
        let second = try worker(url, "second", lease: 30)
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2")])
        XCTAssertEqual(try first.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["1", "2"])
        try first.saveCheckpoint("{\"from\":\"first\"}", for: "1")
        try first.saveProgress(["1": ProgressSnapshot(bytesDone: 7, bytesTotal: 10, speed: 1)])
        XCTAssertTrue(try second.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }.isEmpty,
                      "a live lease is not taken")
        XCTAssertEqual(try first.job("1")?.worker, "first")

        // `first` stops renewing (frozen, or dead) past its lease.
        Thread.sleep(forTimeInterval: 1.5)
        let taken = try second.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }
        XCTAssertEqual(taken.map(\.id), ["1", "2"])
        XCTAssertEqual(taken.first?.checkpoint, "{\"from\":\"first\"}", "the checkpoint travels with the job")
        XCTAssertEqual(taken.first?.bytesDone, 7)
        XCTAssertEqual(try second.job("1")?.worker, "second")

        // `first` wakes up: nothing it writes for the jobs changes them.
        try first.saveCheckpoint("{\"from\":\"stale\"}", for: "1")
        try first.saveProgress(["1": ProgressSnapshot(bytesDone: 9, bytesTotal: 10, speed: 1)])
        XCTAssertEqual(try first.markFinishing([("1", 10, nil)]), ["1"], "the stale worker learns it lost the job")
        try first.finishDone([("2", 10, nil)], at: Date())
        try first.finish("1", state: .failed, error: "stale", bytes: nil, sha256: nil, at: Date())
        XCTAssertEqual(try second.job("1")?.state, .running)
        XCTAssertEqual(try second.job("1")?.checkpoint, "{\"from\":\"first\"}")
        XCTAssertEqual(try second.job("1")?.bytesDone, 7)
        XCTAssertEqual(try second.job("2")?.state, .running)
        XCTAssertEqual(try first.renewLeases(), [], "it already learnt of both (markFinishing, and writes that matched nothing are not losses)")

        // The new holder finishes them.
        XCTAssertEqual(try second.markFinishing([("1", 10, nil), ("2", 10, nil)]), [])
        try second.finishDone([("1", 10, nil), ("2", 10, nil)], at: Date())
        XCTAssertEqual(try second.counts()[.done], 2)
    }

    func testRenewalKeepsALeaseAndReportsTheJobsLost() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first", lease: 1)
        let second = try worker(url, "second")
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("kept"), job("lost", host: "b.example")])
        _ = try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "kept" }
        for _ in 0..<4 {
            Thread.sleep(forTimeInterval: 0.4)
            XCTAssertEqual(try first.renewLeases(), [])
        }
        XCTAssertTrue(try second.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { $0.id == "kept" }.isEmpty,
                      "a renewed lease holds past its first second")
        _ = try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "lost" }
        Thread.sleep(forTimeInterval: 1.5)
        XCTAssertEqual(try second.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { _ in true }.map(\.id).sorted(),
                       ["kept", "lost"])
        XCTAssertEqual(try first.renewLeases(), ["kept", "lost"], "both went to `second` while `first` was not renewing")
    }

    func testAFinishingJobOfAGoneWorkerIsCompletedByAnother() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first", lease: 1)
        let second = try worker(url, "second")
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1")])
        _ = try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }
        XCTAssertEqual(try first.markFinishing([("1", 10, "abc")]), [])
        XCTAssertEqual(try second.abandonedFinishing().map(\.id), [], "its worker may still be renaming it")
        Thread.sleep(forTimeInterval: 1.5)
        let abandoned = try second.abandonedFinishing()
        XCTAssertEqual(abandoned.map(\.id), ["1"])
        XCTAssertEqual(abandoned.first?.sha256, "abc")
        try second.finishDone([("1", 10, "abc")], at: Date())
        XCTAssertEqual(try second.job("1")?.state, .done)
    }

    func testWorkersAreListedWithTheirJobsUntilTheyRetire() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first")
        let second = try worker(url, "second")
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2"), job("3")])
        _ = try first.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }
        let listed = try second.workers()
        XCTAssertEqual(listed.map(\.name), ["first", "second"])
        XCTAssertEqual(listed.map(\.jobsHeld), [2, 0])
        XCTAssertEqual(listed.first?.pid, Int(getpid()))
        XCTAssertLessThan(listed.first?.secondsSinceHeartbeat ?? 99, 10)
        try first.retire()
        XCTAssertEqual(try second.workers().map(\.name), ["second"])
    }

    func testAWrongPasswordIsAClearErrorWithoutThePassword() throws {
        let url = try TestStores.postgresURL()
        guard var components = URLComponents(string: url) else { return XCTFail("bad URL") }
        components.password = "not-the-password-4711"
        XCTAssertThrowsError(try PostgresQueueStore(url: components.string!)) { error in
            let text = String(describing: error)
            XCTAssertTrue(text.contains("password authentication failed"), text)
            XCTAssertFalse(text.contains("not-the-password-4711"), text)
        }
    }
}
