import Foundation
import TransferCore
import XCTest
@testable import transferd

/// The three renderings of one run, byte for byte.
final class RendererTests: XCTestCase {
    private let mib = Scenario.mib

    /// A run with every kind of event: a rejected file, starts, progress, a
    /// retry, a failure, successes and a pause.
    private func play(_ renderer: RunRenderer, clock: FixedClock) {
        renderer.handle(.runStarted(pending: 2))
        renderer.handle(.ingested(files: 2, jobs: 1, rejected: [RejectedFile(file: "bad.json", error: "bad.json: job 1: field \"url\": is missing\nbad.json: job 2: field \"x\": unknown key")]))
        renderer.handle(Scenario.start("a", "alpha.bin", total: 8 * mib))
        renderer.handle(Scenario.start("b", "beta.bin", total: 4 * mib))
        renderer.handle(Scenario.start("c", "gamma.bin", total: nil))
        for tick in 1...8 {
            clock.advance(0.25)
            renderer.handle(Scenario.progress(("a", Int64(tick) * mib / 2, 8 * mib), ("b", Int64(tick) * mib / 4, 4 * mib),
                                              ("c", Int64(tick) * mib / 8, nil)))
            // Events between frames: these must not each cause a redraw.
            renderer.handle(.progress([]))
        }
        renderer.handle(.retrying(JobRetry(id: "b", attempt: 1, delay: 2, reason: "HTTP 503 from http://127.0.0.1:8080/beta.bin")))
        renderer.handle(Scenario.failed("c", "gamma.bin", error: "HTTP 404 from http://127.0.0.1:8080/gamma.bin: Not Found"))
        clock.advance(0.25)
        renderer.handle(.progress([JobProgress(id: "a", bytesDone: 6 * mib, bytesTotal: 8 * mib)]))
        clock.advance(0.25)
        renderer.handle(Scenario.done("a", "alpha.bin", bytes: 8 * mib, seconds: 2.5))
        clock.advance(2)
        renderer.handle(Scenario.start("b", "beta.bin", total: 4 * mib, done: 2 * mib, attempt: 2))
        clock.advance(0.25)
        renderer.handle(.paused(ids: ["b"]))
        var summary = RunSummary()
        summary.done = 1
        summary.failed = 1
        summary.failedInStore = 1
        summary.rejectedFiles = 1
        summary.interrupted = true
        renderer.finish(summary)
    }

    private func context(_ clock: FixedClock, _ output: CapturedOutput, color: Bool = false) -> RenderContext {
        RenderContext(out: { output.writeOut($0) }, err: { output.writeErr($0) }, now: { clock.now }, size: { (80, 24) }, color: color,
                      failedFolder: "queue.d/failed")
    }

    func testTerminalFrames() {
        let clock = FixedClock()
        let output = CapturedOutput()
        play(TTYRenderer(context: context(clock, output)), clock: clock)
        let text = output.out
        XCTAssertTrue(text.hasPrefix(TerminalScreen.hideCursor), "the cursor is hidden while the view is live")
        XCTAssertTrue(text.hasSuffix(TerminalScreen.showCursor), "and shown again at the end")
        let frames = text.components(separatedBy: "\u{1B}[J").count - 1
        XCTAssertLessThanOrEqual(frames, 16, "at most one frame per 0.1 s of the 4.5 s played (plus the last): \(frames)")
        XCTAssertEqual(output.err, "")
        Golden.check(Golden.visible(text).replacingOccurrences(of: "⎋[J", with: "⎋[J\n"), "tty-frames")
    }

    func testPlainLinesHaveNoEscapes() {
        let clock = FixedClock()
        let output = CapturedOutput()
        play(PlainRenderer(context: context(clock, output), interval: 1), clock: clock)
        XCTAssertFalse(output.out.contains("\u{1B}"), "no escape codes in logs")
        XCTAssertTrue(output.out.contains("progress: "), "a progress line every interval")
        Golden.check(output.out, "plain")
    }

    func testQuietShowsOnlyErrors() {
        let clock = FixedClock()
        let output = CapturedOutput()
        play(QuietRenderer(context: context(clock, output)), clock: clock)
        XCTAssertEqual(output.out, "", "nothing on stdout")
        XCTAssertFalse(output.err.contains("alpha"), "successes are not mentioned")
        Golden.check(output.err, "quiet")
    }

    func testJSONLinesParseAndCoverEveryEvent() throws {
        let clock = FixedClock()
        let output = CapturedOutput()
        play(JSONRenderer(context: context(clock, output), interval: 1), clock: clock)
        var kinds: [String] = []
        for line in output.out.split(separator: "\n") {
            let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], String(line))
            kinds.append(try XCTUnwrap(object["event"] as? String))
            XCTAssertNotNil(object["time"] as? String)
        }
        XCTAssertEqual(Set(kinds), ["run_started", "ingested", "started", "progress", "retrying", "finished", "paused", "summary"])
        XCTAssertEqual(kinds.last, "summary")
        Golden.check(output.out, "json")
    }

    func testColourFollowsTheContext() {
        let clock = FixedClock()
        let output = CapturedOutput()
        play(TTYRenderer(context: context(clock, output, color: true)), clock: clock)
        XCTAssertTrue(output.out.contains("\u{1B}[31mFAILED"), "failures are red")
    }
}
