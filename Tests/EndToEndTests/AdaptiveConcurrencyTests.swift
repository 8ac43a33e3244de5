import Foundation
import TestSupport
import TransferCore
import XCTest

/// A host that takes only a few requests at once: the run's per-host limit
/// follows its 429s down, and no job fails for them.
final class AdaptiveConcurrencyTests: XCTestCase {
    func testAHostAnswering429BeyondFourConnectionsIsWorkedAtAboutFour() async throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "adaptive", sizes: Array(repeating: 256 << 10, count: 48))
        let key = "adaptive-\(UUID().uuidString)"
        try fixture.drop("many.json", jobs: names.enumerated().map { index, name in
            // 256 KiB at 512 KiB/s: each response takes half a second.
            ["id": "a\(index)", "url": servers.fault.absoluteString + "/\(name)?max_active=4&rate=524288&key=\(key)",
             "dest": "out/a\(index).bin"]
        })
        let run = try fixture.start(["--per-host", "32", "--jobs", "32", "--quiet"])
        // `status` shows the lowered limit while the run works.
        var shown = ""
        try await waitUntil(timeout: 30) {
            shown = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root).stdout
            return shown.contains("limit lowered") || !run.process.isRunning
        }
        let result = run.wait()
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(shown.contains("127.0.0.1:") && shown.contains("of 32 connections"), shown)
        let jobs = try fixture.store().jobs()
        XCTAssertEqual(jobs.filter { $0.state == .done }.count, 48, "no job failed for the host's 429s")

        let stats = try servers.rawStats(key: key)
        let refused = stats["refused"] as? Int ?? -1
        let history = (stats["active_history"] as? [[Double]] ?? []).map { (time: $0[0], active: $0[1]) }
        XCTAssertFalse(history.isEmpty)
        // Time-weighted responses under way over the middle half of the run (the first quarter
        // is the descent from 32, the last the queue running dry).
        let end = history.last?.time ?? 0
        let (from, to) = (end * 0.25, end * 0.75)
        var weighted = 0.0
        for (point, next) in zip(history, history.dropFirst()) where next.time > from && point.time < to {
            weighted += point.active * (min(next.time, to) - max(point.time, from))
        }
        let mean = weighted / max(0.001, to - from)
        print("adaptive: 48 jobs in \(String(format: "%.1f", end)) s of responses; \(refused) refused with 429; "
              + "\(String(format: "%.2f", mean)) under way on average over the middle half")
        XCTAssertGreaterThanOrEqual(mean, 2.5, "the limit settled well below what the host takes")
        XCTAssertLessThanOrEqual(mean, 4.0, "the host takes 4 at once")
        // Without adaptation 28 of every 32 requests are refused for as long as the run lasts, and
        // jobs fail when their retries run out; with it, the first bursts and a probe now and then.
        XCTAssertLessThan(refused, 96, "the run went on asking beyond the host's limit")
    }
}
