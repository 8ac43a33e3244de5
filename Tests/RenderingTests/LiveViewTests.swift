import Foundation
import TransferCore
import XCTest
@testable import transferd

/// The live view's lines for fixed event sequences, clock and widths, against golden files.
final class LiveViewTests: XCTestCase {
    private let mib = Scenario.mib

    /// Two downloads (one of unknown size) at steady speeds, 2 s in, at several widths.
    private func twoJobs(_ clock: FixedClock) -> RunProgress {
        var progress = RunProgress(startedAt: clock.now)
        progress.apply(.runStarted(pending: 4), at: clock.now)
        progress.apply(Scenario.start("iso", "debian-12.8.0-amd64-netinst-with-a-long-name.iso", total: 1024 * mib), at: clock.now)
        progress.apply(Scenario.start("log", "stream.log", total: nil), at: clock.now)
        for tick in 1...8 {
            clock.advance(0.25)
            progress.apply(Scenario.progress(("iso", Int64(tick) * 10 * mib, 1024 * mib), ("log", Int64(tick) * mib, nil)), at: clock.now)
        }
        return progress
    }

    func testTwoJobsAtSeveralWidths() {
        let clock = FixedClock()
        let progress = twoJobs(clock)
        var text = ""
        for width in [120, 100, 80, 60, 40] {
            let view = LiveView(width: width, maxJobLines: 10, style: TerminalStyle(color: false))
            let lines = view.lines(progress, now: clock.now)
            text += "width \(width):\n" + lines.joined(separator: "\n") + "\n"
            for line in lines {
                XCTAssertLessThan(line.count, width, "a line never reaches the last column (no wrap): \(line)")
            }
        }
        Golden.check(text, "live-two-jobs")
    }

    func testSpeedAndEtaFollowTheSamples() {
        let clock = FixedClock()
        let progress = twoJobs(clock)
        let iso = progress.running[0]
        XCTAssertEqual(iso.speed, 40 * Double(mib), accuracy: 1, "10 MiB every 0.25 s is 40 MiB/s")
        XCTAssertEqual(iso.eta ?? -1, Double(1024 - 80) / 40, accuracy: 0.01)
        XCTAssertEqual(progress.speed, 44 * Double(mib), accuracy: 1)
        XCTAssertEqual(progress.pending, 2, "4 pending at the start, 2 started")
        XCTAssertEqual(progress.bytesTotal?.exact, false, "one running and two pending jobs have no known size")
    }

    func testManyJobsAreCappedWithMore() {
        let clock = FixedClock()
        var progress = RunProgress(startedAt: clock.now)
        progress.apply(.runStarted(pending: 40), at: clock.now)
        for index in 1...20 {
            progress.apply(Scenario.start("job-\(index)", "file-\(index).bin", total: 64 * mib), at: clock.now)
        }
        clock.advance(0.5)
        progress.apply(.progress((1...20).map { JobProgress(id: "job-\($0)", bytesDone: Int64($0) * mib, bytesTotal: 64 * mib) }),
                       at: clock.now)
        progress.apply(.retrying(JobRetry(id: "job-20", attempt: 1, delay: 2, reason: "HTTP 503")), at: clock.now)
        let view = LiveView(width: 100, maxJobLines: 6, style: TerminalStyle(color: false))
        let lines = view.lines(progress, now: clock.now)
        XCTAssertEqual(lines.count, 7, "5 jobs, one +N more line, the total")
        Golden.check(lines.joined(separator: "\n") + "\n", "live-many-jobs")
    }

    func testRetriesAndFailures() {
        let clock = FixedClock()
        var progress = RunProgress(startedAt: clock.now)
        progress.apply(.runStarted(pending: 3), at: clock.now)
        progress.apply(Scenario.start("a", "alpha.tar.gz", total: 100 * mib), at: clock.now)
        progress.apply(Scenario.start("b", "beta.img", total: 50 * mib), at: clock.now)
        progress.apply(Scenario.start("c", "gamma.bin", total: nil), at: clock.now)
        clock.advance(1)
        progress.apply(Scenario.progress(("a", 20 * mib, 100 * mib), ("b", 5 * mib, 50 * mib)), at: clock.now)
        progress.apply(.retrying(JobRetry(id: "b", attempt: 2, delay: 4,
                                          reason: "HTTP 503 from http://127.0.0.1:8080/beta.img: Service Unavailable")), at: clock.now)
        progress.apply(Scenario.failed("c", "gamma.bin", error: "HTTP 404 from http://127.0.0.1:8080/gamma.bin: Not Found"), at: clock.now)
        clock.advance(1.5)
        progress.apply(Scenario.progress(("a", 50 * mib, 100 * mib)), at: clock.now)
        let view = LiveView(width: 90, maxJobLines: 10, style: TerminalStyle(color: false))
        var text = progress.takeFinished().flatMap(view.finishedLines).joined(separator: "\n") + "\n"
        text += view.lines(progress, now: clock.now).joined(separator: "\n") + "\n"
        progress.apply(Scenario.done("a", "alpha.tar.gz", bytes: 100 * mib, seconds: 4), at: clock.now)
        text += progress.takeFinished().flatMap(view.finishedLines).joined(separator: "\n") + "\n"
        var summary = RunSummary()
        summary.done = 1
        summary.failed = 1
        summary.failedInStore = 1
        clock.advance(1)
        text += RunReport(progress: progress, summary: summary, now: clock.now, style: TerminalStyle(color: false),
                          failedFolder: "queue.d/failed").lines().joined(separator: "\n") + "\n"
        XCTAssertTrue(text.contains("retry 2 in 3s"), "the countdown counts down: \(text)")
        for line in text.split(separator: "\n") where !line.hasPrefix(" ") && !line.hasPrefix("Summary") {
            XCTAssertLessThan(line.count, 90, "no live or permanent line reaches the last column: \(line)")
        }
        Golden.check(text, "live-retries-failures")
    }

    /// At any width the counts stay and an error keeps its fix: the name is shortened, never
    /// the message, which goes on over indented lines.
    func testNarrowTerminalsKeepCountsAndWholeMessages() {
        let clock = FixedClock()
        var progress = RunProgress(startedAt: clock.now)
        progress.apply(.runStarted(pending: 9), at: clock.now)
        progress.apply(Scenario.start("a", "a-rather-long-file-name-for-a-narrow-terminal.tar.gz", total: 100 * mib), at: clock.now)
        clock.advance(1)
        progress.apply(Scenario.progress(("a", 20 * mib, 100 * mib)), at: clock.now)
        let message = "HTTP 403 from https://downloads.example.com/private/a-rather-long-file-name.tar.gz: Forbidden"
            + " — check the credentials in the job's headers, then transferd retry a"
        progress.apply(Scenario.failed("b", "another-long-name-of-a-file.iso", error: message), at: clock.now)
        var text = ""
        for width in [200, 80, 40] {
            let view = LiveView(width: width, maxJobLines: 5, style: TerminalStyle(color: false))
            let finished = progress.recentlyFinished.flatMap(view.finishedLines)
            let live = view.lines(progress, now: clock.now)
            text += "width \(width):\n" + (finished + live).joined(separator: "\n") + "\n"
            for line in finished + live {
                XCTAssertLessThan(line.count, width, "no line reaches the last column: \(line)")
            }
            let said = finished.map { $0.dropFirst(7).trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
            XCTAssertTrue(said.contains("then transferd retry a"), "width \(width): the fix is all there: \(finished)")
            for count in ["1 failed", "1 running", "8 queued"] {
                XCTAssertTrue(live.joined(separator: " ").contains(count), "width \(width): \(count) is shown: \(live)")
            }
        }
        Golden.check(text, "live-narrow")
    }

    /// A resumed job's speed is of what this run moved: 36 MiB already on disk are no speed.
    func testAResumedJobsSpeedIsOfTheBytesThisRunMoved() {
        let clock = FixedClock()
        var progress = RunProgress(startedAt: clock.now)
        progress.apply(.runStarted(pending: 1), at: clock.now)
        progress.apply(Scenario.start("r", "resumed.bin", total: 48 * mib, done: 36 * mib), at: clock.now)
        clock.advance(1)
        progress.apply(Scenario.done("r", "resumed.bin", bytes: 48 * mib, seconds: 1), at: clock.now)
        let end = progress.takeFinished()[0]
        XCTAssertEqual(end.resumedFrom, 36 * mib)
        XCTAssertEqual(end.transferred, 12 * mib)
        let line = LiveView(width: 100, maxJobLines: 5, style: TerminalStyle(color: false)).finishedLines(end).joined()
        XCTAssertTrue(line.contains("48.0 MiB in 1.0 s (12.0 MiB/s), 36.0 MiB already on disk"), line)
        XCTAssertTrue(PlainRenderer.finishedLine(end).contains("(36.0 MiB were already on disk)"), PlainRenderer.finishedLine(end))
    }

    /// A download whose bytes are all in frees its slot before it is done: it leaves the running
    /// jobs for those being made durable, and is counted once.
    func testACompletedDownloadLeavesRunningBeforeItIsDone() {
        let clock = FixedClock()
        var progress = RunProgress(startedAt: clock.now)
        progress.apply(.runStarted(pending: 2), at: clock.now)
        progress.apply(Scenario.start("a", "a.bin", total: 10 * mib), at: clock.now)
        clock.advance(0.5)
        progress.apply(Scenario.progress(("a", 5 * mib, 10 * mib)), at: clock.now)
        progress.apply(.completing(id: "a", bytes: 10 * mib), at: clock.now)
        XCTAssertTrue(progress.running.isEmpty)
        XCTAssertEqual(progress.completing.map(\.id), ["a"])
        XCTAssertEqual(progress.active, 1)
        XCTAssertEqual(progress.bytesDone, 10 * mib)
        let total = LiveView(width: 120, maxJobLines: 5, style: TerminalStyle(color: false)).totalLines(progress, now: clock.now)
        XCTAssertTrue(total.joined().contains("0 running, 1 finishing"), "\(total)")
        XCTAssertTrue(PlainRenderer.progressLine(progress, now: clock.now).contains("1 being made durable"))
        progress.apply(Scenario.done("a", "a.bin", bytes: 10 * mib, seconds: 1), at: clock.now)
        XCTAssertTrue(progress.completing.isEmpty)
        XCTAssertEqual(progress.done, 1)
        XCTAssertEqual(progress.bytesTransferred, 10 * mib, "counted once")
    }

    func testColourOnlyWhenAsked() {
        let clock = FixedClock()
        let progress = twoJobs(clock)
        let plain = LiveView(width: 100, maxJobLines: 5, style: TerminalStyle(color: false)).lines(progress, now: clock.now)
        let coloured = LiveView(width: 100, maxJobLines: 5, style: TerminalStyle(color: true)).lines(progress, now: clock.now)
        XCTAssertFalse(plain.joined().contains("\u{1B}"))
        XCTAssertTrue(coloured.joined().contains("\u{1B}[32m"), "the bar is green")
        XCTAssertEqual(coloured.map(TerminalStyle.visibleCount), plain.map(\.count), "colour does not change the layout")
    }

    func testMiddleTruncationKeepsTheExtension() {
        XCTAssertEqual(Text.middleTruncated("a-very-long-file-name.iso", to: 12), "a-very…e.iso")
        XCTAssertEqual(Text.middleTruncated("short.iso", to: 12), "short.iso")
        XCTAssertEqual(Text.middleTruncated("ünïcødé-ñame.bin", to: 9), "ünïc….bin")
    }
}
