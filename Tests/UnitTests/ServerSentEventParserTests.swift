import Foundation
@testable import TransferCore
import XCTest

/// The event stream's client side as values: the SSE parser against the
/// standard's rules, the events read back from their JSON, the remote view.
final class ServerSentEventParserTests: XCTestCase {
    private func parse(_ chunks: [String]) -> (events: [ServerSentEvent], parser: ServerSentEventParser) {
        var parser = ServerSentEventParser()
        var events: [ServerSentEvent] = []
        for chunk in chunks { events += parser.feed(Array(chunk.utf8)) }
        return (events, parser)
    }

    func testFieldsLinesAndDispatchFollowTheStandard() {
        let (events, parser) = parse(["\u{FEFF}retry: 1500\n\n: comment\nid: r-1\ndata: {\"a\":1}\n\n",
                                      "event: reset\ndata:one\ndata:  two\n\n", "data\n\nid: r-3\n\n", "data: tail"])
        XCTAssertEqual(events, [
            ServerSentEvent(data: "{\"a\":1}", lastEventID: "r-1"),
            ServerSentEvent(type: "reset", data: "one\n two", lastEventID: "r-1"),
            ServerSentEvent(data: "", lastEventID: "r-1"),
        ], "one space after the colon is dropped, a field without a colon has an empty value, the id carries over")
        XCTAssertEqual(parser.retry, 1500)
        XCTAssertEqual(parser.lastEventID, "r-3", "an event without data still sets the last id")
    }

    func testEveryLineEndingAndAnyChunkingGiveTheSameEvents() {
        let text = "id: 1\r\ndata: a\r\n\r\nid: 2\rdata: b\r\rid: 3\ndata: c\n\n"
        let whole = parse([text]).events
        XCTAssertEqual(whole.map(\.data), ["a", "b", "c"])
        XCTAssertEqual(whole.map(\.lastEventID), ["1", "2", "3"])
        let bytes = Array(text.utf8)
        for size in 1...7 {
            var parser = ServerSentEventParser()
            var events: [ServerSentEvent] = []
            var index = 0
            while index < bytes.count {
                events += parser.feed(bytes[index..<min(index + size, bytes.count)])
                index += size
            }
            XCTAssertEqual(events, whole, "chunks of \(size) bytes (a CRLF split across two)")
        }
    }

    func testIgnoredValuesAndBounds() {
        let (events, parser) = parse(["retry: 12x\nretry: -1\nid: a\u{0}b\ndata: x\n\n"])
        XCTAssertNil(parser.retry, "retry takes digits only")
        XCTAssertEqual(events.first?.lastEventID, "", "an id with NUL is ignored")
        var long = ServerSentEventParser()
        _ = long.feed([UInt8](repeating: 0x61, count: ServerSentEventParser.maxLineBytes + 1))
        XCTAssertTrue(long.overflowed, "a line without end is not buffered without end")
        XCTAssertEqual(long.broken, .line, "and the bound is named, for the client's message")
        XCTAssertEqual(long.feed(Array("\n\ndata: x\n\n".utf8)), [], "and the stream is done")
        var big = ServerSentEventParser()
        let line = Array(("data: " + String(repeating: "b", count: 1 << 19) + "\n").utf8)
        for _ in 0..<20 { _ = big.feed(line) }
        XCTAssertTrue(big.overflowed, "an event without end is not buffered without end")
        XCTAssertEqual(big.broken, .event)
    }

    func testTheEncodersEventsReadBack() {
        var encoder = QueueEventEncoder(startedAt: Date(timeIntervalSince1970: 0), interval: 0)
        let events: [QueueEvent] = [
            .runStarted(pending: 3),
            .started(JobStarted(id: "a", kind: "download", name: "a.bin", url: "https://h/a.bin", destination: "/d/a.bin",
                                bytesDone: 5, bytesTotal: 100, attempt: 2)),
            .progress([JobProgress(id: "a", bytesDone: 50, bytesTotal: 100)]),
            .retrying(JobRetry(id: "a", attempt: 2, delay: 1.5, reason: "HTTP 503")),
            .finished(JobFinished(id: "a", state: .failed, name: "a.bin", url: "https://h/a.bin", destination: "/d/a.bin",
                                  elapsed: 2.5, error: "HTTP 404")),
            .paused(ids: ["b", "c"]),
        ]
        for (index, event) in events.enumerated() {
            let json = encoder.encode(event, at: Date(timeIntervalSince1970: Double(index + 1)))!.serialized()
            XCTAssertEqual(DecodedQueueEvent(json: json), .event(event), json)
        }
        var summary = RunSummary()
        summary.done = 4
        summary.failed = 1
        XCTAssertEqual(DecodedQueueEvent(json: encoder.summary(summary, at: Date()).serialized()),
                       .summary(done: 4, failed: 1, cancelled: 0, interrupted: false))
        XCTAssertEqual(DecodedQueueEvent(json: #"{"event":"reset","reason":"x"}"#), .reset)
        XCTAssertEqual(DecodedQueueEvent(json: #"{"event":"started"}"#), .other, "a started event without an id")
        XCTAssertEqual(DecodedQueueEvent(json: "[1]"), .other)
        XCTAssertEqual(DecodedQueueEvent(json: #"{"event":"hook"}"#), .other)
    }

    func testTheRemoteViewStartsFromTheSnapshotAndFollowsTheStream() throws {
        let summary = Data(#"{"event_id":"r1-7","jobs":{"queued":2,"running":1,"done":3,"failed":0},"run":{}}"#.utf8)
        let running = Data(#"""
            {"jobs":[{"id":"a","kind":"download","state":"running","url":"https://h/a","destination":"/d/a.bin","bytes_done":10,
              "bytes_total":100,"speed":5,"attempts":0,"started_at":"2026-12-02T01:00:00.000Z"}],"next":null}
            """#.utf8)
        var remote = try RemoteRun(summary: summary, jobs: [running], at: Date())
        XCTAssertEqual(remote.lastEventID, "r1-7")
        XCTAssertEqual(remote.progress.running.map(\.id), ["a"])
        XCTAssertEqual(remote.progress.running.first?.bytesDone, 10)
        XCTAssertEqual(remote.progress.done, 3)
        XCTAssertTrue(remote.apply(ServerSentEvent(data: #"{"event":"progress","jobs":[{"id":"a","bytes_done":60,"bytes_total":100}]}"#,
                                                   lastEventID: "r1-8"), at: Date()))
        XCTAssertEqual(remote.progress.running.first?.bytesDone, 60)
        XCTAssertEqual(remote.lastEventID, "r1-8")
        XCTAssertTrue(remote.apply(ServerSentEvent(data: #"{"event":"finished","id":"a","state":"done","url":"u","bytes":100}"#,
                                                   lastEventID: "r1-9"), at: Date()))
        XCTAssertTrue(remote.progress.running.isEmpty)
        XCTAssertFalse(remote.apply(ServerSentEvent(type: "reset", data: #"{"event":"reset"}"#, lastEventID: "r2-1"), at: Date()),
                       "a reset asks for a new snapshot")
        XCTAssertTrue(remote.apply(ServerSentEvent(data: #"{"event":"summary","done":4,"failed":0,"cancelled":0,"interrupted":true}"#),
                                   at: Date()))
        XCTAssertEqual(remote.ended?.done, 4)
        XCTAssertEqual(remote.ended?.interrupted, true)
        XCTAssertThrowsError(try RemoteRun(summary: Data("<html>".utf8), jobs: [], at: Date()))
        XCTAssertThrowsError(try RemoteRun(summary: summary, jobs: [Data("{}".utf8)], at: Date()))
    }
}
