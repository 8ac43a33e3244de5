import XCTest
@testable import TransferCore

/// The job state machine, as a pure function: the rules both stores' statements are built from.
final class JobLifecycleTests: XCTestCase {
    private let all = JobState.allCases

    func testOnlyQueuedAndWaitingJobsAreClaimed() {
        XCTAssertEqual(JobTransition.claim.sources, [.queued, .waiting])
        XCTAssertEqual(JobState.waiting.after(.claim), .running)
    }

    func testDoneIsNeverLeft() {
        for transition in JobTransition.allCases {
            XCTAssertNil(JobState.done.after(transition), "\(transition) must not move a done job")
        }
    }

    func testEndedJobsLeaveOnlyByRequeue() {
        for state in all where state.isFinal {
            for transition in JobTransition.allCases where transition != .requeue {
                XCTAssertNil(state.after(transition), "\(transition) moved a \(state) job")
            }
        }
        XCTAssertEqual(JobState.failed.after(.requeue), .queued)
        XCTAssertEqual(JobState.cancelled.after(.requeue), .queued)
    }

    func testAFinishingJobOnlyEnds() {
        // Its file is complete on disk: it is renamed (done), fails to be, or is cancelled.
        for transition in JobTransition.allCases {
            guard let next = JobState.finishing.after(transition) else { continue }
            XCTAssertTrue(next.isFinal, "\(transition) took a finishing job to \(next)")
        }
    }

    func testOnlyARunningJobIsWrittenByItsRunner() {
        for transition in [JobTransition.scheduleRetry, .pause, .release, .markFinishing, .cancelStopped, .requestCancel] {
            XCTAssertEqual(transition.sources, [.running], "\(transition)")
        }
        XCTAssertEqual(JobTransition.complete.sources, [.running, .finishing])
        XCTAssertEqual(JobTransition.fail.sources, [.running, .finishing])
    }

    func testEveryStateIsReachableAndEveryUnendedJobCanEnd() {
        var reached: Set<JobState> = [.queued]
        var frontier: [JobState] = [.queued]
        while let state = frontier.popLast() {
            for transition in JobTransition.allCases {
                if let next = state.after(transition), reached.insert(next).inserted { frontier.append(next) }
            }
        }
        XCTAssertEqual(reached, Set(all))
        for state in all where !state.isFinal {
            var seen: Set<JobState> = [state]
            var stack = [state]
            var ends = false
            while let current = stack.popLast() {
                if current.isFinal { ends = true; break }
                for transition in JobTransition.allCases {
                    if let next = current.after(transition), seen.insert(next).inserted { stack.append(next) }
                }
            }
            XCTAssertTrue(ends, "a \(state) job can never end")
        }
    }

    func testCancelEndsIdleJobsAndAsksRunnersToStopTheirs() {
        XCTAssertEqual(all.map(\.cancelEffect), [.endsNow, .stopRequested, .endsNow, .endsNow, .endsNow, .endsNow, .none, .none, .none])
        XCTAssertEqual(all.map(\.rawValue), ["queued", "running", "waiting", "paused", "held", "finishing", "done", "failed", "cancelled"])
    }

    func testAHeldJobWaitsForAPersonAlone() {
        // Held from any state a run could still start or is running; never from finishing (its
        // file is complete) or an end.
        XCTAssertEqual(JobTransition.hold.sources, [.queued, .running, .waiting, .paused])
        XCTAssertEqual(JobTransition.unhold.sources, [.held])
        XCTAssertEqual(JobState.held.after(.unhold), .queued)
        // Only a person moves it: no claim, no recovery by a new run, no write of a runner that
        // has not stopped yet.
        for transition in JobTransition.allCases where ![.unhold, .cancelAtOnce].contains(transition) {
            XCTAssertNil(JobState.held.after(transition), "\(transition) moved a held job")
        }
        XCTAssertEqual(JobState.held.cancelEffect, .endsNow)
    }

    func testEndingTransitionsFollowTheEndState() {
        XCTAssertEqual(JobTransition.ending(in: .done), .complete)
        XCTAssertEqual(JobTransition.ending(in: .failed), .fail)
        XCTAssertEqual(JobTransition.ending(in: .cancelled), .cancelStopped)
        XCTAssertEqual(JobState.running.after(.ending(in: .cancelled)), .cancelled)
        XCTAssertNil(JobState.finishing.after(.ending(in: .cancelled)), "a user's cancel ends a finishing job at once, not its runner")
    }

    func testStatementConditionsListTheSources() {
        XCTAssertEqual(JobTransition.requeue.sqlStates, "'waiting', 'failed', 'cancelled'")
        XCTAssertEqual(JobTransition.recover.sqlStates, "'running', 'paused'")
    }

    func testPurgeTakesEndedStatesAndAnAgeAndKeepsTheLastSecondsWhileARunWorks() throws {
        let selection = try PurgeSelection(states: "done, failed", olderThan: "12h")
        XCTAssertEqual(selection.states, [.done, .failed])
        XCTAssertEqual(selection.olderThan, 43_200)
        XCTAssertEqual(try PurgeSelection(states: nil, olderThan: nil).states, [.done])
        let now = Date(timeIntervalSince1970: 1_000_000)
        XCTAssertNil(try PurgeSelection(states: nil, olderThan: nil).finishedBefore(now: now, runActive: false))
        XCTAssertEqual(try PurgeSelection(states: nil, olderThan: nil).finishedBefore(now: now, runActive: true),
                       now.addingTimeInterval(-PurgeSelection.minimumAge))
        XCTAssertEqual(try PurgeSelection(states: nil, olderThan: "90s").finishedBefore(now: now, runActive: true),
                       now.addingTimeInterval(-90))
        for (states, age) in [("queued", nil), ("running,done", nil), ("", nil), ("done", "7"), ("done", "d"), ("done", "-1d"),
                              ("done", "1w")] as [(String, String?)] {
            XCTAssertThrowsError(try PurgeSelection(states: states, olderThan: age), "\(states) \(age ?? "")")
        }
    }

}
