import XCTest
@testable import TransferCore

/// The run loop's decisions without a store, a task or a file.
final class QueueSchedulerTests: XCTestCase {
    private func candidate(_ id: String, host: String = "a.example", connections: Int? = nil,
                           heldElsewhere: Int = 0) -> ClaimCandidate {
        ClaimCandidate(id: id, host: host, connections: connections, heldElsewhere: heldElsewhere)
    }

    private func download(_ destination: String, host: String = "a.example", connections: Int = 1) -> QueueScheduler.Slot {
        .init(host: host, connections: connections, destination: destination)
    }

    private func result(_ path: String) -> DownloadResult {
        DownloadResult(path: path, size: 1, sha256: nil, bytesFetched: 1, resumedFrom: 0, skipped: false,
                       completedPartPath: path + ".part", restarts: 0, segments: 1, elapsed: 0)
    }

    func testClaimsInGroupsOfHalfTheSlotsOrAfterAPause() {
        var scheduler = QueueScheduler(maxJobs: 8, defaultConnections: 1, maxConnectionsPerHost: 8)
        XCTAssertEqual(scheduler.claimSize(now: 0), 8)
        scheduler.claimed(found: 8, asked: 8, in: scheduler.claimRound(), now: 0)
        for i in 0..<8 { scheduler.started("\(i)", download("/d/\(i)")) }
        XCTAssertNil(scheduler.claimSize(now: 1), "no slot free")
        _ = scheduler.settle("0", outcome: .failed("x"), attempts: 0, sent: 0, now: 1, serving: 0)
        XCTAssertNil(scheduler.claimSize(now: 1), "one free slot of eight: wait for a group")
        for i in 1..<4 { _ = scheduler.settle("\(i)", outcome: .failed("x"), attempts: 0, sent: 0, now: 1.05, serving: 0) }
        XCTAssertEqual(scheduler.claimSize(now: 1.05), 4, "half the slots free: claim them together")
        scheduler.claimed(found: 4, asked: 4, in: scheduler.claimRound(), now: 1.05)
        for i in 0..<4 { scheduler.started("n\(i)", download("/d/n\(i)")) }
        _ = scheduler.settle("4", outcome: .failed("x"), attempts: 0, sent: 0, now: 2, serving: 0)
        XCTAssertNil(scheduler.claimSize(now: 2.05))
        XCTAssertEqual(scheduler.claimSize(now: 2.1), 1, "a slot free for \(QueueScheduler.claimPause) s is claimed alone")
    }

    func testAStoreWithCheapClaimsFillsEveryFreeSlotAtOnce() {
        var scheduler = QueueScheduler(maxJobs: 8, defaultConnections: 1, maxConnectionsPerHost: 8, claimsInGroups: false)
        XCTAssertEqual(scheduler.claimSize(now: 0), 8)
        scheduler.claimed(found: 8, asked: 8, in: scheduler.claimRound(), now: 0)
        for i in 0..<8 { scheduler.started("\(i)", download("/d/\(i)")) }
        XCTAssertNil(scheduler.claimSize(now: 1), "no slot free")
        _ = scheduler.settle("0", outcome: .failed("x"), attempts: 0, sent: 0, now: 1, serving: 0)
        XCTAssertEqual(scheduler.claimSize(now: 1), 1, "one free slot of eight is claimed without waiting")
        for i in 1..<3 { _ = scheduler.settle("\(i)", outcome: .failed("x"), attempts: 0, sent: 0, now: 1, serving: 0) }
        XCTAssertEqual(scheduler.claimSize(now: 1), 3, "the slots freed together are claimed together")
    }

    func testWithTheHostsAsTheLimitCheapClaimsGatherRoomToo() {
        var scheduler = QueueScheduler(maxJobs: 64, defaultConnections: 1, maxConnectionsPerHost: 16, claimsInGroups: false)
        XCTAssertEqual(scheduler.claimSize(now: 0), 64)
        var round = scheduler.claimRound()
        for i in 0..<16 { XCTAssertNotNil(round.accept(candidate("\(i)"))) }
        XCTAssertNil(round.accept(candidate("16")), "the host is full")
        scheduler.claimed(found: 16, asked: 64, in: round, now: 0)
        for i in 0..<16 { scheduler.started("\(i)", download("/d/\(i)")) }
        _ = scheduler.settle("0", outcome: .failed("x"), attempts: 0, sent: 0, now: 0.02, serving: 0)
        XCTAssertNil(scheduler.claimSize(now: 0.02), "room for one of 16 on the host: wait for a group, as a shared store does")
        XCTAssertEqual(scheduler.claimSize(now: 0.13), 1, "or a slot free for \(QueueScheduler.claimPause) s")
    }

    func testAMailboxHandsOverEverythingWaitingInOrder() async {
        let mailbox = Mailbox<Int>()
        for i in 0..<5 { mailbox.yield(i) }
        let first = await mailbox.next()
        XCTAssertEqual(first, [0, 1, 2, 3, 4])
        let reader = Task { await mailbox.next() }
        try? await Task.sleep(nanoseconds: 20_000_000)
        mailbox.yield(5)
        let woken = await reader.value
        XCTAssertEqual(woken, [5], "a waiting reader is woken by the next message")
        mailbox.yield(6)
        mailbox.yield(7)
        let rest = await mailbox.next()
        XCTAssertEqual(rest, [6, 7])
    }

    func testAClaimThatFoundNothingWaitsHalfASecondOrAChange() {
        var scheduler = QueueScheduler(maxJobs: 4, defaultConnections: 1, maxConnectionsPerHost: 4)
        scheduler.claimed(found: 0, asked: 4, in: scheduler.claimRound(), now: 10)
        XCTAssertNil(scheduler.claimSize(now: 10.2))
        XCTAssertEqual(scheduler.claimSize(now: 10.5), 4)
        scheduler.somethingChanged()
        XCTAssertEqual(scheduler.claimSize(now: 10.1), 4)
    }

    func testAShortClaimWaitsForRoomOnTheHostsThatHadNone() {
        // 64 slots, one host with room for 16: the queue's other jobs are all that host's.
        var scheduler = QueueScheduler(maxJobs: 64, defaultConnections: 1, maxConnectionsPerHost: 16)
        XCTAssertEqual(scheduler.claimSize(now: 0), 64)
        var round = scheduler.claimRound()
        for i in 0..<16 { XCTAssertEqual(round.accept(candidate("\(i)")), 1) }
        XCTAssertNil(round.accept(candidate("16")), "the host is full")
        XCTAssertEqual(round.hostsWithoutRoom, ["a.example"])
        scheduler.claimed(found: 16, asked: 64, in: round, now: 0)
        for i in 0..<16 { scheduler.started("\(i)", download("/d/\(i)")) }
        XCTAssertNil(scheduler.claimSize(now: 0.01), "48 slots free, but nothing runnable beyond the full host")
        _ = scheduler.settle("0", outcome: .failed("x"), attempts: 0, sent: 0, now: 0.02, serving: 0)
        XCTAssertNil(scheduler.claimSize(now: 0.02), "room for one of 16 on the host: wait for a group")
        XCTAssertEqual(scheduler.claimSize(now: 0.13), 1, "or a slot free for \(QueueScheduler.claimPause) s, and ask for the host's room only")
        round = scheduler.claimRound()
        XCTAssertEqual(round.accept(candidate("n0")), 1)
        scheduler.claimed(found: 1, asked: 1, in: round, now: 0.13)
        scheduler.started("n0", download("/d/n0"))
        XCTAssertNil(scheduler.claimSize(now: 0.14), "a claim held to the host's room keeps the picture")
        for i in 1..<8 { _ = scheduler.settle("\(i)", outcome: .failed("x"), attempts: 0, sent: 0, now: 0.15, serving: 0) }
        XCTAssertNil(scheduler.claimSize(now: 0.15), "7 of 16 free on the host: wait for a group")
        _ = scheduler.settle("8", outcome: .failed("x"), attempts: 0, sent: 0, now: 0.16, serving: 0)
        XCTAssertEqual(scheduler.claimSize(now: 0.16), 8, "half the host's room free: claimed together")
        XCTAssertEqual(scheduler.claimSize(now: 0.6), 56, "after \(QueueScheduler.recheckInterval) s the whole queue is asked again")
        scheduler.somethingChanged()
        XCTAssertEqual(scheduler.claimSize(now: 0.2), 56, "new files: the whole queue again")
    }

    func testAShortClaimRefusedForAWideJobWaitsForMoreRoomThanThen() {
        var scheduler = QueueScheduler(maxJobs: 16, defaultConnections: 4, maxConnectionsPerHost: 6)
        var round = scheduler.claimRound()
        XCTAssertEqual(round.accept(candidate("1")), 4)
        XCTAssertNil(round.accept(candidate("2")), "4 + 4 is over 6")
        scheduler.claimed(found: 1, asked: 16, in: round, now: 0)
        scheduler.started("1", download("/d/1", connections: 4))
        XCTAssertNil(scheduler.claimSize(now: 0.2), "room 2, as when the claim was refused")
        _ = scheduler.settle("1", outcome: .failed("x"), attempts: 0, sent: 0, now: 0.3, serving: 0)
        XCTAssertEqual(scheduler.claimSize(now: 0.3), 6, "the host's room grew: claimed (the slots all free)")
    }

    /// One of three workers on a host that answered 429: its limit was cut to 1, and the fleet's
    /// other workers hold the host's connections, so it finds no room and gets no success that
    /// would raise the limit (before: it sat idle for the rest of the run). Time raises it.
    func testAWorkerWithACutLimitAndNoSuccessesGetsRoomBackWithTime() {
        var scheduler = QueueScheduler(maxJobs: 4, defaultConnections: 1, maxConnectionsPerHost: 4)
        scheduler.started("1", download("/d/1"))
        let refused = QueueRunner.JobOutcome.retry(delay: 1, reason: "HTTP 429", failures: 1, throttled: true)
        _ = scheduler.settle("1", outcome: refused, attempts: 0, sent: 0, now: 100, serving: 1)
        XCTAssertEqual(scheduler.hostLimits.limit(for: "a.example"), 1)
        var round = scheduler.claimRound()
        XCTAssertNil(round.accept(candidate("2", heldElsewhere: 2)), "the fleet holds 2, over this worker's limit of 1")
        scheduler.timePassed(now: 105)
        round = scheduler.claimRound()
        XCTAssertNil(round.accept(candidate("2", heldElsewhere: 2)))
        for now in [110.0, 120, 130] { scheduler.timePassed(now: now) }
        XCTAssertEqual(scheduler.hostLimits.limit(for: "a.example"), 4, "back at the maximum after three quiet intervals")
        round = scheduler.claimRound()
        XCTAssertEqual(round.accept(candidate("2", heldElsewhere: 2)), 1, "room again")
    }

    func testCandidatesFitTheirHostsLimitCountingOtherWorkers() {
        var scheduler = QueueScheduler(maxJobs: 16, defaultConnections: 2, maxConnectionsPerHost: 4)
        scheduler.started("busy", download("/d/busy", connections: 2))
        var round = scheduler.claimRound()
        XCTAssertEqual(round.fullHosts, [])
        XCTAssertEqual(round.accept(candidate("1")), 2, "2 + 2 fits a limit of 4")
        XCTAssertNil(round.accept(candidate("2")), "the host is full")
        XCTAssertEqual(round.fullHosts, ["a.example"])
        XCTAssertEqual(round.accept(candidate("3", host: "b.example", heldElsewhere: 2)), 2, "2 elsewhere + 2 fits")
        XCTAssertNil(round.accept(candidate("4", host: "b.example", heldElsewhere: 2)), "the fleet's 4 are taken")
        XCTAssertEqual(round.accept(candidate("5", host: "c.example", connections: 16)), 4,
                       "a job wider than the limit is narrowed to it and may run alone")
        XCTAssertNil(round.accept(candidate("6", host: "c.example", connections: 1)))
    }

    func testADownloadWaitsForAnotherJobWritingItsFile() {
        var scheduler = QueueScheduler(maxJobs: 4, defaultConnections: 1, maxConnectionsPerHost: 4)
        scheduler.started("a", download("/d/x"))
        XCTAssertEqual(scheduler.writer(of: "/d/x"), "a")
        XCTAssertNil(scheduler.writer(of: "/d/y"))
        // No destination is another's partial file (`PartialNames`): x.part and x do not meet.
        XCTAssertNil(scheduler.writer(of: "/d/x.part"))
        // A completed download keeps its file busy until its batch is renamed.
        XCTAssertEqual(scheduler.settle("a", outcome: .done(result("/d/x")), attempts: 0, sent: 0, now: 1, serving: 0), .awaitBatch)
        XCTAssertEqual(scheduler.writer(of: "/d/x"), "a")
        scheduler.renamed(["a"])
        XCTAssertNil(scheduler.writer(of: "/d/x"))
    }

    func testFilesHeldOpenUntilTheirRenameLimitTheClaims() {
        // Running downloads and finished ones waiting for their batch each hold a file open.
        var scheduler = QueueScheduler(maxJobs: 4, defaultConnections: 1, maxConnectionsPerHost: 4, claimsInGroups: false,
                                       heldFilesLimit: 3)
        XCTAssertEqual(scheduler.claimSize(now: 0), 3, "four slots, room for three open files")
        scheduler.claimed(found: 3, asked: 3, in: scheduler.claimRound(), now: 0)
        for id in ["a", "b", "c"] { scheduler.started(id, download("/d/\(id)")) }
        XCTAssertNil(scheduler.claimSize(now: 1))
        for id in ["a", "b"] {
            XCTAssertEqual(scheduler.settle(id, outcome: .done(result("/d/\(id)")), attempts: 0, sent: 0, now: 1, serving: 0),
                           .awaitBatch)
        }
        _ = scheduler.settle("c", outcome: .failed("x"), attempts: 0, sent: 0, now: 1, serving: 0)
        XCTAssertEqual(scheduler.claimSize(now: 1), 1, "two files wait for their rename, one failed and closed")
        scheduler.renamed(["a", "b"])
        XCTAssertEqual(scheduler.claimSize(now: 1), 3)
    }

    func testAQueueJobWaitsForABusyPartialFileOrForFileDescriptors() {
        let busy = DownloadExecutor.deferral(of: DownloadError.partInUse(path: "/d/x.part"), failures: 2)
        XCTAssertEqual(busy?.delay, 5)
        XCTAssertEqual(busy?.failures, 2, "waiting counts no failure")
        for code in [EMFILE, ENFILE] {
            let out = DownloadExecutor.deferral(of: DownloadError.local(POSIXFailure(operation: "open", path: "/d/x.part", code: code)),
                                                failures: 2)
            XCTAssertEqual(out?.delay, 1)
            XCTAssertEqual(out?.failures, 3, "counted: a process that never frees a descriptor ends its jobs")
            XCTAssertTrue(out?.reason.contains("/d/x.part") ?? false, out?.reason ?? "nil")
        }
        let folder = DownloadExecutor.deferral(of: POSIXFailure(operation: "open", path: "/d", code: EMFILE), failures: 0)
        XCTAssertEqual(folder?.failures, 1, "the folder of its file, out of descriptors too")
        XCTAssertNil(DownloadExecutor.deferral(of: DownloadError.local(POSIXFailure(operation: "open", path: "/d/x.part", code: EACCES)),
                                               failures: 2), "a file it may not open fails, with the reason")
        XCTAssertNil(DownloadExecutor.deferral(of: POSIXFailure(operation: "open", path: "/d", code: ENOSPC), failures: 2))
    }

    func testOutcomesBecomeStoreDispositions() {
        var scheduler = QueueScheduler(maxJobs: 4, defaultConnections: 1, maxConnectionsPerHost: 4)
        for id in ["1", "2", "3", "4", "5"] { scheduler.started(id, .init(host: "a.example", connections: 1, destination: nil)) }
        XCTAssertEqual(scheduler.settle("1", outcome: .completed(size: 9), attempts: 0, sent: 0, now: 1, serving: 0), .done(size: 9))
        XCTAssertEqual(scheduler.settle("2", outcome: .failed("HTTP 404"), attempts: 0, sent: 0, now: 1, serving: 0), .fail("HTTP 404"))
        XCTAssertEqual(scheduler.settle("3", outcome: .cancelled, attempts: 0, sent: 0, now: 1, serving: 0), .cancelled)
        XCTAssertEqual(scheduler.settle("4", outcome: .interrupted, attempts: 0, sent: 0, now: 1, serving: 0), .pause)
        XCTAssertEqual(scheduler.settle("5", outcome: .retry(delay: 2, reason: "HTTP 500", failures: 3, throttled: false),
                                        attempts: 2, sent: 0, now: 1, serving: 0),
                       .retry(delay: 2, reason: "HTTP 500", attempts: 3))
        XCTAssertEqual(scheduler.running, [:])
        XCTAssertEqual(scheduler.hostLimits.limit(for: "a.example"), 4, "no refusal: the limit stays")
    }

    func testARefusalCutsTheHostAndAnOvershootCostsTheJobNothing() {
        var scheduler = QueueScheduler(maxJobs: 8, defaultConnections: 1, maxConnectionsPerHost: 8)
        for id in ["1", "2"] { scheduler.started(id, .init(host: "a.example", connections: 1, destination: nil)) }
        let refused = QueueRunner.JobOutcome.retry(delay: 1, reason: "HTTP 429", failures: 1, throttled: true)
        XCTAssertEqual(scheduler.settle("1", outcome: refused, attempts: 0, sent: 5, now: 10, serving: 3),
                       .retry(delay: 1, reason: "HTTP 429", attempts: 1))
        XCTAssertEqual(scheduler.hostLimits.limit(for: "a.example"), 3, "cut to what it was seen serving")
        XCTAssertEqual(scheduler.settle("2", outcome: refused, attempts: 0, sent: 6, now: 11, serving: 3),
                       .retry(delay: 1, reason: "HTTP 429", attempts: 0), "sent before the cut: not the job's failure")
        var round = scheduler.claimRound()
        XCTAssertEqual(round.accept(candidate("3")), 1)
        XCTAssertEqual(round.accept(candidate("4")), 1)
        XCTAssertEqual(round.accept(candidate("5")), 1)
        XCTAssertNil(round.accept(candidate("6")), "the cut limit holds new claims to 3")
    }

    func testAJobTakenOverByAnotherWorkerLeavesNoTrace() {
        var scheduler = QueueScheduler(maxJobs: 2, defaultConnections: 1, maxConnectionsPerHost: 2)
        scheduler.started("1", download("/d/x"))
        scheduler.forget("1")
        XCTAssertNil(scheduler.writer(of: "/d/x"))
        XCTAssertEqual(scheduler.claimSize(now: 0), 2)
        XCTAssertEqual(scheduler.settle("1", outcome: .failed("late"), attempts: 0, sent: 0, now: 0, serving: 0), .pause,
                       "an unknown job is never recorded ended")
    }

    /// A job claimed less than half a lease ago is certainly still held; the clock keeps counting while stopped.
    func testAJobIsCertainlyHeldForHalfALeaseFromTheClaimSent() {
        XCTAssertTrue(LeaseClock.certainlyHeld(claimSentAt: 100, now: 100, lease: 30))
        XCTAssertTrue(LeaseClock.certainlyHeld(claimSentAt: 100, now: 114.9, lease: 30))
        XCTAssertFalse(LeaseClock.certainlyHeld(claimSentAt: 100, now: 115, lease: 30), "half the lease gone: ask the store")
        XCTAssertFalse(LeaseClock.certainlyHeld(claimSentAt: 100, now: 99, lease: 30), "a clock that went back proves nothing")
        let before = LeaseClock.now()
        var stopped = timespec(tv_sec: 0, tv_nsec: 20_000_000)
        nanosleep(&stopped, nil)
        XCTAssertGreaterThanOrEqual(LeaseClock.now() - before, 0.019)
    }

    func testARefusalCutsTheHostToWhatTheWholeFleetWasSeenServing() {
        var scheduler = QueueScheduler(maxJobs: 16, defaultConnections: 1, maxConnectionsPerHost: 16)
        var round = scheduler.claimRound()
        // Other workers hold 3 connections on the host; this one takes 2.
        XCTAssertNotNil(round.accept(candidate("a", heldElsewhere: 3)))
        XCTAssertNotNil(round.accept(candidate("b", heldElsewhere: 3)))
        scheduler.claimed(found: 2, asked: 16, in: round, now: 0)
        scheduler.started("a", download("/d/a"))
        scheduler.started("b", download("/d/b"))
        _ = scheduler.settle("a", outcome: .retry(delay: 0, reason: "429", failures: 1, throttled: true),
                             attempts: 0, sent: 0, now: 1, serving: 1)
        XCTAssertEqual(scheduler.hostLimits.limit(for: "a.example"), 4,
                       "this worker's one connection receiving data and the fleet's other 3, not 1")
        XCTAssertEqual(scheduler.hostLimits.ownCuts, ["a.example": 4])
    }
}
