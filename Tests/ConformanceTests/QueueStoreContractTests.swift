import Foundation
import TestSupport
import TransferCore
import XCTest

/// The store contract: what the runner and the CLI rely on, checked on every
/// store (SQLite, and PostgreSQL in a fresh database of the test server).
final class QueueStoreContractTests: XCTestCase {
    func job(_ id: String, priority: Int = 0, host: String = "a.example") -> JobSpec {
        JobSpec(id: id, kind: .download, url: "https://\(host)/\(id)", destination: "/data/\(id)", priority: priority)
    }

    /// Runs `body` once per store kind, each with an empty store; failures name the store.
    func forEachStore(_ body: (QueueStore) throws -> Void, file: StaticString = #filePath, line: UInt = #line) throws {
        for (name, open) in try TestStores.all() {
            print("store: \(name)")
            do {
                try body(try open(nil))
            } catch {
                XCTFail("\(name): \(error)", file: file, line: line)
            }
        }
    }

    func testIngestingTheSameContentTwiceAddsNothing() throws {
        try forEachStore { store in
            XCTAssertEqual(try store.ingest(fileName: "a.json", contentHash: "h1", jobs: [job("1"), job("2")]).added, 2)
            let again = try store.ingest(fileName: "a-copy.json", contentHash: "h1", jobs: [job("1"), job("2")])
            XCTAssertTrue(again.duplicateFile)
            XCTAssertEqual(again.added, 0)
            let sameIDs = try store.ingest(fileName: "b.json", contentHash: "h2", jobs: [job("1"), job("3")])
            XCTAssertEqual(sameIDs.added, 1)
            XCTAssertEqual(sameIDs.alreadyKnown, 1)
            XCTAssertEqual(try store.jobs().count, 3)
        }
    }

    func testAnIDReusedForADifferentJobIsRejected() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h1", jobs: [job("1")])
            var other = job("1")
            other.url = "https://a.example/other"
            XCTAssertThrowsError(try store.ingest(fileName: "b.json", contentHash: "h2", jobs: [job("9"), other])) { error in
                XCTAssertTrue(String(describing: error).contains("a different job with this id came from a.json"))
            }
            XCTAssertNil(try store.job("9"), "the whole file is one transaction")
        }
    }

    func testABatchOfFilesIsRecordedFileByFile() throws {
        try forEachStore { store in
            var conflicting = job("1")
            conflicting.url = "https://a.example/elsewhere"
            let results = try store.ingest([
                JobFileContent(fileName: "a.json", contentHash: "ha", jobs: [job("1"), job("2")]),
                JobFileContent(fileName: "b.json", contentHash: "hb", jobs: [job("3"), conflicting]),
                JobFileContent(fileName: "c.json", contentHash: "hc", jobs: [job("4")]),
                JobFileContent(fileName: "a-again.json", contentHash: "ha", jobs: [job("1"), job("2")]),
            ])
            XCTAssertEqual(results[0], .recorded(IngestOutcome(added: 2, alreadyKnown: 0, duplicateFile: false)))
            XCTAssertEqual(results[1], .idTaken(IDConflict(jobID: "1", storedFile: "a.json")))
            XCTAssertEqual(results[2], .recorded(IngestOutcome(added: 1, alreadyKnown: 0, duplicateFile: false)))
            XCTAssertEqual(results[3], .recorded(IngestOutcome(added: 0, alreadyKnown: 2, duplicateFile: true)))
            XCTAssertEqual(try store.jobs().map(\.id), ["1", "2", "4"], "the refused file left no job behind")
        }
    }

    func testClaimsByPriorityThenAgeAndHonoursAccept() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("low"), job("high", priority: 5), job("mid", priority: 1), job("other", host: "b.example")])
            let first = try store.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }
            XCTAssertEqual(first.map(\.id), ["high", "mid"])
            XCTAssertTrue(first.allSatisfy { $0.state == .running })
            let second = try store.claimRunnable(limit: 5, now: Date(), excludingHosts: []) { $0.host == "b.example" }
            XCTAssertEqual(second.map(\.id), ["other"])
            XCTAssertEqual(try store.counts()[.running], 3)
        }
    }

    func testFullHostsArePassedOverAndDueRetriesMergeByPriority() throws {
        try forEachStore { store in
            var wide = job("wide", host: "c.example")
            wide.connections = 4
            _ = try store.ingest(fileName: "a.json", contentHash: "h",
                                 jobs: [job("a1"), job("a2"), job("b1", host: "b.example"), wide, job("retry", priority: 2, host: "d.example")])
            _ = try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "retry" }
            try store.scheduleRetry("retry", at: Date().addingTimeInterval(-1), error: "HTTP 503", attempts: 1)
            var seen: [ClaimCandidate] = []
            let claimed = try store.claimRunnable(limit: 10, now: Date(), excludingHosts: ["a.example"]) { seen.append($0); return true }
            // The due retry (priority 2) first, then by age; a.example's jobs never reach `accept`.
            XCTAssertEqual(claimed.map(\.id), ["retry", "b1", "wide"])
            XCTAssertEqual(seen.map(\.host), ["d.example", "b.example", "c.example"])
            XCTAssertEqual(seen.last?.connections, 4)
        }
    }

    func testAHostRefusedOnceIsPassedOverForTheRestOfTheClaim() throws {
        try forEachStore { store in
            let crowd = (0..<100).map { job("a\($0)") }
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: crowd + [job("b", host: "b.example")])
            var asked: [String] = []
            let claimed = try store.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { candidate in
                asked.append(candidate.id)
                return candidate.host == "b.example"
            }
            XCTAssertEqual(claimed.map(\.id), ["b"], "100 jobs of a host with no room do not hide the next host's job")
            XCTAssertEqual(asked, ["a0", "b"])
        }
    }

    func testResultRowsListFinishedJobsOnly() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2"), job("3")])
            _ = try store.claimRunnable(limit: 3, now: Date(), excludingHosts: []) { _ in true }
            try store.finishDone([("1", 10, "abc")], at: Date())
            try store.finish("2", state: .failed, error: "HTTP 404", bytes: nil, sha256: nil, at: Date())
            let rows = try store.results(fromFile: "a.json")
            XCTAssertEqual(rows.map(\.id), ["1", "2"])
            XCTAssertEqual(rows[0].url, "https://a.example/1")
            XCTAssertEqual(rows[0].destination, "/data/1")
            XCTAssertEqual(rows[0].bytes, 10)
            XCTAssertEqual(rows[0].sha256, "abc")
            XCTAssertEqual(rows[1].state, .failed)
            XCTAssertEqual(rows[1].lastError, "HTTP 404")
        }
    }

    func testWaitingJobsAreRunnableOnlyWhenDue() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1")])
            _ = try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }
            let later = Date().addingTimeInterval(60)
            try store.scheduleRetry("1", at: later, error: "HTTP 503", attempts: 1)
            XCTAssertTrue(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.isEmpty)
            XCTAssertEqual(try store.nextWakeup()?.timeIntervalSince1970 ?? 0, later.timeIntervalSince1970, accuracy: 0.001)
            XCTAssertEqual(try store.claimRunnable(limit: 1, now: later.addingTimeInterval(1), excludingHosts: []) { _ in true }.map(\.id), ["1"])
            XCTAssertEqual(try store.job("1")?.attempts, 1)
        }
    }

    func testInterruptedJobsComeBackAndFinishedOnesStay() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2"), job("3")])
            _ = try store.claimRunnable(limit: 3, now: Date(), excludingHosts: []) { _ in true }
            try store.finishDone([("1", 10, nil)], at: Date())
            try store.pause(["2"])
            // SQLite requeues both here; PostgreSQL queued the paused one at once (for other workers).
            XCTAssertGreaterThanOrEqual(try store.recoverInterrupted(), 1)
            XCTAssertEqual(try store.job("1")?.state, .done)
            XCTAssertEqual(try store.job("2")?.state, .queued)
            XCTAssertEqual(try store.job("3")?.state, .queued)
        }
    }

    /// Every write follows `JobState.after`: a late or racing write finds its job moved on and changes nothing.
    func testWritesThatDoNotApplyToAJobsStateChangeNothing() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2"), job("3")])
            XCTAssertEqual(try store.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { $0.id != "3" }.map(\.id), ["1", "2"])
            XCTAssertEqual(try store.markFinishing([("1", 10, nil)]), [])
            XCTAssertEqual(try store.cancel("1"), .finishing)
            // The holder's rename went through; its "done" does not undo the user's cancel, and says so.
            XCTAssertEqual(try store.finishDone([("1", 10, nil), ("2", 5, nil)], at: Date()), ["1"])
            XCTAssertEqual(try store.job("1")?.state, .cancelled)
            XCTAssertEqual(try store.job("2")?.state, .done)
            // A finished job takes no retry, failure, pause or progress.
            try store.scheduleRetry("2", at: Date(), error: "HTTP 503", attempts: 1)
            XCTAssertFalse(try store.finish("2", state: .failed, error: "late", bytes: nil, sha256: nil, at: Date()),
                           "the store says it did not record the failure (no failed hook runs for it)")
            try store.pause(["2"])
            XCTAssertEqual(try store.job("2")?.state, .done)
            XCTAssertNil(try store.job("2")?.lastError)
            // A queued job cannot be marked finishing or done by a stray write.
            XCTAssertEqual(try store.markFinishing([("3", 1, nil)]), ["3"])
            XCTAssertEqual(try store.finishDone([("3", 1, nil)], at: Date()), ["3"])
            XCTAssertEqual(try store.job("3")?.state, .queued)
            // Retry takes failed, cancelled and waiting jobs, never a done one.
            XCTAssertEqual(try store.requeue(id: "2"), 0)
            XCTAssertEqual(try store.requeue(id: "1"), 1)
            XCTAssertEqual(try store.job("1")?.state, .queued)
        }
    }

    func testRetryAndCancel() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2")])
            _ = try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "1" }
            XCTAssertTrue(try store.finish("1", state: .failed, error: "HTTP 404", bytes: nil, sha256: nil, at: Date()))
            XCTAssertEqual(try store.requeue(id: nil), 1)
            XCTAssertEqual(try store.job("1")?.state, .queued)
            XCTAssertNil(try store.job("1")?.lastError)
            XCTAssertEqual(try store.cancel("2"), .queued)
            XCTAssertEqual(try store.job("2")?.state, .cancelled)
            _ = try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }
            XCTAssertEqual(try store.cancel("1"), .running)
            XCTAssertEqual(try store.steering(among: ["1"]).stops, ["1": .cancel])
            XCTAssertNil(try store.cancel("nope"))
        }
    }

    func testAHeldJobIsNeverClaimedOrRecoveredOnlyResumedOrCancelled() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2"), job("3"), job("4")])
            XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "1" }.map(\.id), ["1"])
            XCTAssertTrue(try store.saveCheckpoint("{\"at\":7}", for: "1"))
            // Running and queued jobs are held; the running one's runner is told to stop it.
            XCTAssertEqual(try store.hold("1"), .running)
            XCTAssertEqual(try store.hold("2"), .queued)
            XCTAssertEqual(try store.job("1")?.state, .held)
            XCTAssertEqual(try store.steering(among: ["1", "3"]).stops, ["1": .hold])
            // Its runner's late writes change nothing: it stays held with its checkpoint.
            XCTAssertFalse(try store.finish("1", state: .failed, error: "stopped", bytes: nil, sha256: nil, at: Date()))
            try store.pause(["1"])
            try store.scheduleRetry("1", at: Date(), error: "x", attempts: 1)
            XCTAssertEqual(try store.job("1")?.state, .held)
            XCTAssertEqual(try store.checkpoint(for: "1"), "{\"at\":7}")
            // Never claimed, never recovered by a new run.
            XCTAssertEqual(try store.recoverInterrupted(), 0)
            let claimed = try store.claimRunnable(limit: 10, now: Date(), excludingHosts: []) { _ in true }.map(\.id)
            XCTAssertEqual(Set(claimed), ["3", "4"])
            XCTAssertEqual(try store.counts()[.held], 2)
            // A done job is not held; an unknown one is nil.
            XCTAssertTrue(try store.finish("3", state: .done, error: nil, bytes: 1, sha256: nil, at: Date()))
            XCTAssertEqual(try store.hold("3"), .done)
            XCTAssertEqual(try store.job("3")?.state, .done)
            XCTAssertNil(try store.hold("nope"))
            // Resumed: queued again, from its checkpoint; a second resume changes nothing.
            XCTAssertEqual(try store.unhold("1"), .held)
            XCTAssertEqual(try store.unhold("1"), .queued)
            XCTAssertEqual(try store.job("1")?.state, .queued)
            XCTAssertEqual(try store.checkpoint(for: "1"), "{\"at\":7}")
            XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "1" }.first?.checkpoint,
                           "{\"at\":7}")
            // A held job is cancelled at once.
            XCTAssertEqual(try store.cancel("2"), .held)
            XCTAssertEqual(try store.job("2")?.state, .cancelled)
            // A cancel requested of a running job is the other stop a runner learns.
            XCTAssertEqual(try store.cancel("1"), .running)
            XCTAssertEqual(try store.steering(among: ["1", "4"]).stops, ["1": .cancel])
            XCTAssertEqual(try store.steering(among: []), RunSteering())
        }
    }

    func testAPriorityAPersonSetsOrdersClaimsAndLeavesTheJobTheSame() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2"), job("3")])
            XCTAssertEqual(try store.setPriority("3", to: 5), .queued)
            XCTAssertNil(try store.setPriority("nope", to: 1))
            XCTAssertEqual(try store.job("3")?.spec.priority, 5)
            XCTAssertEqual(try store.jobs(in: .queued, firstInClaimOrder: 3).map(\.id), ["3", "1", "2"])
            XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["3"])
            // The same file read again is the same jobs, whatever their priority now.
            let again = try store.ingest(fileName: "a.json", contentHash: "h2", jobs: [job("1"), job("2"), job("3")])
            XCTAssertEqual(again.alreadyKnown, 3)
            XCTAssertEqual(again.added, 0)
            XCTAssertEqual(try store.setPriority("1", to: -1), .queued)
            XCTAssertEqual(try store.claimRunnable(limit: 2, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["2", "1"])
        }
    }

    func testAJobsOwnRateIsASettingEveryRunReadsAndLeavesTheJobTheSame() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1"), job("2")])
            XCTAssertNil(try store.setJobRate("nope", to: "1024"), "an unknown job")
            XCTAssertEqual(try store.settings().jobRates, [:], "nothing set for it")
            XCTAssertEqual(try store.setJobRate("1", to: "65536"), .queued)
            XCTAssertEqual(try store.setJobRate("2", to: "0"), .queued)
            XCTAssertEqual(try store.settings().jobRates, ["1": 65536, "2": 0])
            XCTAssertEqual(try store.steering(among: ["1"]).settings.jobRates, ["1": 65536, "2": 0], "a run reads it with its stops")
            XCTAssertEqual(try store.settings().rate(of: "1", file: 10), 65536)
            XCTAssertNil(try store.settings().rate(of: "2", file: 10), "0: no limit, not even the file's")
            XCTAssertEqual(try store.settings().rate(of: "3", file: 10), 10, "none set: the file's")
            XCTAssertEqual(try store.setJobRate("1", to: nil), .queued)
            XCTAssertEqual(try store.settings().jobRates, ["2": 0], "back to the file's")
            let again = try store.ingest(fileName: "a.json", contentHash: "h2", jobs: [job("1"), job("2")])
            XCTAssertEqual(again.alreadyKnown, 2, "the job file read again is the same jobs")
            // A purged job's rate goes with it.
            XCTAssertEqual(try store.cancel("2"), .queued)
            XCTAssertEqual(try store.purge(states: [.cancelled], finishedBefore: nil, excluding: []), 1)
            XCTAssertEqual(try store.settings().jobRates, [:])
        }
    }

    func testTheWholeQueuePausesAndResumes() throws {
        try forEachStore { store in
            XCTAssertFalse(try store.isQueuePaused())
            try store.setQueuePaused(true)
            XCTAssertTrue(try store.isQueuePaused())
            // A run learns it in the same read as its stops, with or without jobs of its own.
            XCTAssertEqual(try store.steering(among: []), RunSteering(settings: QueueSettings(paused: true)))
            XCTAssertEqual(try store.steering(among: ["nope"]), RunSteering(settings: QueueSettings(paused: true)))
            try store.setQueuePaused(true)
            XCTAssertTrue(try store.isQueuePaused())
            try store.setQueuePaused(false)
            XCTAssertFalse(try store.isQueuePaused())
            XCTAssertFalse(try store.steering(among: []).settings.paused)
        }
    }

    func testPurgeForgetsOnlyEndedJobsOfTheStatesAndAgeAsked() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: (1...5).map { job(String($0)) })
            let long = Date().addingTimeInterval(-3600)
            _ = try store.claimRunnable(limit: 3, now: Date(), excludingHosts: []) { ["1", "2", "3"].contains($0.id) }
            XCTAssertTrue(try store.finish("1", state: .done, error: nil, bytes: 1, sha256: nil, at: long))
            XCTAssertTrue(try store.finish("2", state: .done, error: nil, bytes: 1, sha256: nil, at: Date()))
            XCTAssertTrue(try store.finish("3", state: .failed, error: "HTTP 404", bytes: nil, sha256: nil, at: long))
            XCTAssertEqual(try store.cancel("4"), .queued)
            // Not ended: never purged, whatever is asked.
            XCTAssertEqual(try store.purge(states: [.queued, .running], finishedBefore: nil, excluding: []), 0)
            XCTAssertEqual(try store.purge(states: [.done], finishedBefore: Date().addingTimeInterval(-60), excluding: []), 1)
            XCTAssertNil(try store.job("1"))
            XCTAssertNotNil(try store.job("2"))
            // A job a hook is still owed for stays.
            XCTAssertEqual(try store.purge(states: [.done, .failed, .cancelled], finishedBefore: nil, excluding: ["3"]), 2)
            XCTAssertEqual(try store.job("3")?.state, .failed)
            XCTAssertEqual(try store.purge(states: [.failed], finishedBefore: nil, excluding: []), 1)
            XCTAssertEqual(try store.counts(), [.queued: 1])
            // The file stays known: dropped again, it adds nothing.
            XCTAssertEqual(try store.ingest(fileName: "a.json", contentHash: "h", jobs: (1...5).map { job(String($0)) }).added, 0)
        }
    }

    func testSettingsAreKeptForEveryRunAndClearedToTheirDefault() throws {
        try forEachStore { store in
            XCTAssertEqual(try store.settings(), QueueSettings())
            try store.setSetting(.rateLimit, to: "08:00,512K 19:00,off")
            try store.setQueuePaused(true)
            XCTAssertEqual(try store.settings(), QueueSettings(paused: true, rateLimit: "08:00,512K 19:00,off"))
            // A run reads them with its stops.
            XCTAssertEqual(try store.steering(among: ["nope"]).settings, try store.settings())
            try store.setSetting(.rateLimit, to: "1M:off")
            try store.setSetting(.jobs, to: "4")
            XCTAssertEqual(try store.settings(), QueueSettings(paused: true, rateLimit: "1M:off", jobs: 4))
            try store.setSetting(.jobs, to: nil)
            try store.setSetting(.rateLimit, to: nil)
            try store.setQueuePaused(false)
            XCTAssertEqual(try store.settings(), QueueSettings())
        }
    }

    func testPagesFollowTheOrderJobsWereAddedAndFilterByState() throws {
        try forEachStore { store in
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: (1...7).map {
                job("j\($0)", priority: $0 % 3, host: $0 == 4 ? "b.example" : "a.example")
            })
            XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "j4" }.map(\.id), ["j4"])
            try store.finish("j4", state: .failed, error: "HTTP 404", bytes: nil, sha256: nil, at: Date())
            var seen: [String] = []
            var after: Int64 = 0
            while true {
                let page = try store.jobs(in: nil, after: after, limit: 3)
                XCTAssertLessThanOrEqual(page.count, 3)
                guard let last = page.last else { break }
                seen += page.map(\.id)
                after = last.seq
            }
            XCTAssertEqual(seen, (1...7).map { "j\($0)" }, "each job once, in the order added, whatever its priority")
            XCTAssertEqual(try store.jobs(in: .failed, after: 0, limit: 10).map(\.id), ["j4"])
            XCTAssertEqual(try store.jobs(in: .queued, after: 0, limit: 2).map(\.id), ["j1", "j2"])
            let queuedAfter = try XCTUnwrap(store.job("j4")?.seq)
            XCTAssertEqual(try store.jobs(in: .queued, after: queuedAfter, limit: 10).map(\.id), ["j5", "j6", "j7"])
        }
    }

    func testIDsAreFoundByTheirPrefixInByteOrder() throws {
        try forEachStore { store in
            let ids = ["alpha-1", "alpha-10", "alpha-2", "beta", "alp", "b\u{E9}ta", "Alpha-3"]
            _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: ids.map { job($0) })
            XCTAssertEqual(try store.jobIDs(startingWith: "alpha-1", limit: 10), ["alpha-1", "alpha-10"])
            XCTAssertEqual(try store.jobIDs(startingWith: "alp", limit: 10), ["alp", "alpha-1", "alpha-10", "alpha-2"],
                           "byte order, whatever the database's collation; no upper case")
            XCTAssertEqual(try store.jobIDs(startingWith: "alp", limit: 2), ["alp", "alpha-1"], "at most the limit")
            XCTAssertEqual(try store.jobIDs(startingWith: "b", limit: 10), ["beta", "b\u{E9}ta"])
            XCTAssertEqual(try store.jobIDs(startingWith: "b\u{E9}", limit: 10), ["b\u{E9}ta"])
            XCTAssertEqual(try store.jobIDs(startingWith: "gamma", limit: 10), [])
            XCTAssertEqual(try store.jobIDs(startingWith: "", limit: 3), ["Alpha-3", "alp", "alpha-1"])
        }
    }
}
