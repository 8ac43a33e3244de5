import Foundation
@testable import TransferCore
import XCTest

/// A run ends the same way whether a signal stops it or the task that runs it is cancelled;
/// its loop, which calls the store, runs on a thread of its own.
final class QueueRunnerCancellationTests: XCTestCase {
    /// The loop's work (its events, and so its store calls, which block) is done on the
    /// `transferd.run-loop` thread, not on one of the cooperative threads the transfers use.
    func testTheLoopRunsOnAThreadOfItsOwn() async throws {
        let folder = NSTemporaryDirectory() + "/transferd-loop-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let layout = QueueLayout(directory: folder + "/queue.d")
        try FileManager.default.createDirectory(atPath: layout.directory, withIntermediateDirectories: true)
        try layout.prepare()
        let threads = Locked<[String]>([])
        let runner = QueueRunner(layout: layout, store: try SQLiteQueueStore(path: layout.database), options: RunOptions()) { _ in
            threads.withLock { $0.append(DedicatedThreadExecutor.currentName ?? "a thread of no executor") }
        }
        _ = try await runner.run()
        XCTAssertFalse(threads.current.isEmpty)
        XCTAssertEqual(Set(threads.current), ["transferd.run-loop"])
    }

    func testCancellingTheRunsTaskStopsItAsAStopDoes() async throws {
        let folder = NSTemporaryDirectory() + "/transferd-cancel-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let layout = QueueLayout(directory: folder + "/queue.d")
        try FileManager.default.createDirectory(atPath: layout.directory, withIntermediateDirectories: true)
        try layout.prepare()
        let store = try SQLiteQueueStore(path: layout.database)
        var options = RunOptions()
        options.watch = true // nothing queued: the run waits for job files until it is stopped
        let runner = QueueRunner(layout: layout, store: store, options: options)
        let run = Task { try await runner.run() }
        try await Task.sleep(nanoseconds: 300_000_000)
        run.cancel()
        // Without the cancellation reaching the loop the run would wait for ever: stop it after 10 s
        // and fail, rather than hang the suite.
        let forced = Task {
            try await Task.sleep(nanoseconds: 10_000_000_000)
            runner.stop()
            return true
        }
        let summary = try await run.value
        forced.cancel()
        let hadToForce = (try? await forced.value) ?? false
        XCTAssertFalse(hadToForce, "cancelling the run's task did not end the run")
        XCTAssertTrue(summary.interrupted, "a cancelled run reports itself interrupted, as a stopped one does")
    }
}
