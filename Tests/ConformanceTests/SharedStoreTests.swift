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
        // Four threads of their own (concurrentPerform would run only as many as there are cores).
        let stores = try (0..<4).map { try worker(url, "w\($0)") }
        let claimAll: @Sendable (Int, PostgresQueueStore) -> Void = { index, store in
            do {
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
        let group = DispatchGroup()
        let go = DispatchSemaphore(value: 0)
        for (index, store) in stores.enumerated() {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                go.wait()
                claimAll(index, store)
            }
            thread.start()
        }
        for _ in stores { go.signal() }
        group.wait()
        XCTAssertEqual(failures.current, [])
        let all = claims.current.values.flatMap { $0 }
        XCTAssertEqual(all.count, 400, "every job claimed exactly once")
        XCTAssertEqual(Set(all).count, 400)
        XCTAssertEqual(try setup.counts()[.done], 400)
        XCTAssertGreaterThan(claims.current.count, 1, "more than one worker got work: \(claims.current.mapValues(\.count))")
    }

    func testAJobWhoseLeaseRanOutMovesOnAndItsOldWorkerIsFencedOff() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first", lease: 2)
        let second = try worker(url, "second", lease: 30)
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2")])
        XCTAssertEqual(try first.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["1", "2"])
        XCTAssertTrue(try first.saveCheckpoint("{\"from\":\"first\"}", for: "1"))
        try first.saveProgress(["1": ProgressSnapshot(bytesDone: 7, bytesTotal: 10, speed: 1)])
        XCTAssertTrue(try second.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }.isEmpty,
                      "a live lease is not taken")
        XCTAssertEqual(try first.job("1")?.worker, "first")

        // `first` stops renewing (frozen, or dead) past its lease.
        Thread.sleep(forTimeInterval: 2.5)
        let taken = try second.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }
        XCTAssertEqual(taken.map(\.id), ["1", "2"])
        XCTAssertEqual(taken.first?.checkpoint, "{\"from\":\"first\"}", "the checkpoint travels with the job")
        XCTAssertEqual(taken.first?.bytesDone, 7)
        XCTAssertEqual(try second.job("1")?.worker, "second")

        // `first` wakes up: nothing it writes for the jobs changes them.
        XCTAssertFalse(try first.saveCheckpoint("{\"from\":\"stale\"}", for: "1"),
                       "the stale worker learns it lost the job at its next checkpoint, and stops there")
        try first.saveProgress(["1": ProgressSnapshot(bytesDone: 9, bytesTotal: 10, speed: 1)])
        XCTAssertEqual(try first.markFinishing([("1", 10, nil)]), ["1"], "the stale worker learns it lost the job")
        try first.finishDone([("2", 10, nil)], at: Date())
        XCTAssertFalse(try first.finish("1", state: .failed, error: "stale", bytes: nil, sha256: nil, at: Date()),
                       "a fenced end is not recorded, and says so (its on_failed hook is not run)")
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
        let first = try worker(url, "first", lease: 2)
        let second = try worker(url, "second")
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("kept"), job("lost", host: "b.example")])
        _ = try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "kept" }
        for _ in 0..<6 {
            Thread.sleep(forTimeInterval: 0.5)
            XCTAssertEqual(try first.renewLeases(), [])
        }
        XCTAssertTrue(try second.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { $0.id == "kept" }.isEmpty,
                      "a renewed lease holds past its first two seconds")
        _ = try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "lost" }
        Thread.sleep(forTimeInterval: 2.5)
        XCTAssertEqual(try second.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { _ in true }.map(\.id).sorted(),
                       ["kept", "lost"])
        XCTAssertEqual(try first.renewLeases(), ["kept", "lost"], "both went to `second` while `first` was not renewing")
    }

    func testAFinishingJobOfAGoneWorkerIsCompletedByAnother() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first", lease: 2)
        let second = try worker(url, "second")
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1")])
        _ = try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }
        XCTAssertEqual(try first.markFinishing([("1", 10, "abc")]), [])
        XCTAssertEqual(try second.abandonedFinishing().map(\.id), [], "its worker may still be renaming it")
        Thread.sleep(forTimeInterval: 2.5)
        let abandoned = try second.abandonedFinishing()
        XCTAssertEqual(abandoned.map(\.id), ["1"])
        XCTAssertEqual(abandoned.first?.sha256, "abc")
        try second.finishDone([("1", 10, "abc")], at: Date())
        XCTAssertEqual(try second.job("1")?.state, .done)
    }

    func testAWorkerNeverClaimsAgainAJobItHoldsOrLost() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first", lease: 2)
        _ = try first.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1")])
        XCTAssertEqual(try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["1"])
        // Frozen past its lease, nobody else claimed; on waking its own claim must not take
        // the job a second time (its old task still runs it).
        Thread.sleep(forTimeInterval: 2.5)
        XCTAssertEqual(try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), [])
        let second = try worker(url, "second")
        XCTAssertEqual(try second.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["1"])
        XCTAssertEqual(try first.renewLeases(), ["1"])
        XCTAssertEqual(try first.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), [])
        try first.finish("1", state: .failed, error: "stale", bytes: nil, sha256: nil, at: Date())
        try first.scheduleRetry("1", at: Date(), error: "stale", attempts: 9)
        XCTAssertEqual(try second.job("1")?.state, .running, "nothing the stale worker writes lands")
        XCTAssertEqual(try second.job("1")?.worker, "second")
    }

    func testASecondLiveWorkerUnderOneNameIsRefused() throws {
        let url = try TestStores.freshPostgresDatabase()
        _ = try worker(url, "same")
        // As if another live process on this host had the name (pid 1 is always alive).
        try TestStores.execute(url, "UPDATE transferd_workers SET pid = 1 WHERE name = 'same'")
        XCTAssertThrowsError(try PostgresQueueStore(url: url, worker: "same").enlist()) { error in
            XCTAssertTrue("\(error)".contains("another worker named same is running"), "\(error)")
        }
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

    func testAClaimSeesTheConnectionsOtherWorkersHoldOnEachHost() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first")
        let second = try worker(url, "second")
        _ = try first.ingest(fileName: "a.json", contentHash: "h",
                             jobs: [job("a1"), job("a2"), job("b1", host: "b.example"), job("a3")])
        let taken = try first.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { (candidate: ClaimCandidate) -> Int? in
            candidate.host == "a.example" ? 3 : nil
        }
        XCTAssertEqual(taken.map(\.id), ["a1", "a2"])
        var seen: [String: Int] = [:]
        _ = try second.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { (candidate: ClaimCandidate) -> Int? in
            seen[candidate.host] = candidate.heldElsewhere
            return nil
        }
        XCTAssertEqual(seen, ["a.example": 6, "b.example": 0], "a1 and a2 hold 3 connections each")
        try first.finishDone([("a1", 1, nil)], at: Date())
        _ = try second.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { (candidate: ClaimCandidate) -> Int? in
            seen[candidate.host] = candidate.heldElsewhere
            return nil
        }
        XCTAssertEqual(seen["a.example"], 3, "a finished job holds nothing")
    }

    func testTheRateIsSharedAmongLiveWorkers() throws {
        let url = try TestStores.freshPostgresDatabase()
        let first = try worker(url, "first")
        XCTAssertEqual(try first.rateShare(of: 1000), 1000)
        let second = try worker(url, "second")
        XCTAssertEqual(try first.rateShare(of: 1000), 500)
        try second.retire()
        XCTAssertEqual(try first.rateShare(of: 1000), 1000)
    }

    func testAStoreCarriesOnWhenItsConnectionIsCut() throws {
        let url = try TestStores.freshPostgresDatabase()
        let store = try worker(url, "cut")
        _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2")])
        let cut = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        try TestStores.execute(url, cut)
        XCTAssertEqual(try store.counts()[.queued], 2, "a statement on its own goes again on a new connection")
        try TestStores.execute(url, cut)
        XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["1"],
                       "a transaction goes again on a new connection")
        try TestStores.execute(url, cut)
        XCTAssertEqual(try store.renewLeases(), [], "the claim made before the cut is still held")
    }

    // MARK: The change feed (LISTEN/NOTIFY)

    /// Waits until `count` passes `before` (the feed was called), for at most 5 s.
    private func heard(_ count: Locked<Int>, after before: Int) -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if count.current > before { return true }
            usleep(10_000)
        }
        return false
    }

    func testEveryChangeAWorkerMustSeeAtOnceReachesAnotherWorkersFeed() throws {
        let url = try TestStores.freshPostgresDatabase()
        let listening = try worker(url, "listening")
        let calls = Locked(0)
        let feed = try XCTUnwrap(try listening.changeFeed { calls.withLock { $0 += 1 } }, "PostgreSQL has a feed")
        defer { feed.stop() }
        let other = try worker(url, "other")
        let changes: [(String, () throws -> Void)] = [
            ("jobs added", { _ = try other.ingest(fileName: "a.json", contentHash: "h", jobs: [self.job("1"), self.job("2")]) }),
            ("queue paused", { try other.setQueuePaused(true) }),
            ("queue resumed", { try other.setQueuePaused(false) }),
            ("rate limit set", { try other.setSetting(.rateLimit, to: "1M") }),
            ("job held", { XCTAssertEqual(try other.hold("1"), .queued) }),
            ("job resumed", { XCTAssertEqual(try other.unhold("1"), .held) }),
            ("priority changed", { XCTAssertEqual(try other.setPriority("2", to: 5), .queued) }),
            ("job cancelled", { XCTAssertEqual(try other.cancel("2"), .queued) }),
            ("failed jobs queued again", {
                try TestStores.execute(url, "UPDATE transferd_jobs SET state = 'failed' WHERE id = '1'")
                XCTAssertEqual(try other.requeue(id: nil), 1)
            }),
            ("a worker's host limit cut", { try other.saveHostLimits(["a.example": 3], maximum: 16) }),
            ("a stopping worker's jobs given back", {
                let claimed = try other.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }
                XCTAssertEqual(claimed.map(\.id), ["1"])
                try other.pause(["1"])
            }),
        ]
        for (what, change) in changes {
            usleep(UInt32(0.05 * 2_000_000))
            let before = calls.current
            try change()
            XCTAssertTrue(heard(calls, after: before), "\(what): the feed was not called")
        }
        // A worker's own progress is no news to the others.
        usleep(300_000)
        let quiet = calls.current
        try other.saveProgress([:])
        _ = try other.counts()
        try other.saveHostLimits(["a.example": 5], maximum: 16)
        try other.saveHostLimits([:], maximum: 16)
        usleep(300_000)
        XCTAssertEqual(calls.current, quiet, "reading, saving progress and host limits rising or cleared notify nobody")
    }

    func testTheFeedHearsAgainAfterItsConnectionWasCutAndSaysSo() throws {
        let url = try TestStores.freshPostgresDatabase()
        let proxy = try CutProxy(store: url)
        let listening = try worker(proxy.url, "listening")
        let calls = Locked(0)
        let feed = try XCTUnwrap(try listening.changeFeed { calls.withLock { $0 += 1 } })
        defer { feed.stop() }
        proxy.cut()
        usleep(500_000)
        let duringOutage = calls.current
        proxy.restore()
        XCTAssertTrue(heard(calls, after: duringOutage), "back from an outage, the feed says something may have changed")
        usleep(300_000)
        let before = calls.current
        try worker(url, "other").setQueuePaused(true)
        XCTAssertTrue(heard(calls, after: before), "the feed listens again on its new connection")
    }

    func testThroughAPoolerInTransactionModeThereIsNoFeed() throws {
        let pooler = try XCTUnwrap(ProcessInfo.processInfo.environment["TRANSFERD_TEST_PGBOUNCER"],
                                   "scripts/servers sets TRANSFERD_TEST_PGBOUNCER")
        let store = try PostgresQueueStore(url: pooler, worker: "pooled")
        XCTAssertNil(try store.changeFeed { }, "a LISTEN holds only for one transaction's server session there")
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
