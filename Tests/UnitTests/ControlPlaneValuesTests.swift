import XCTest
@testable import TransferCore

/// The control API's decisions as values: routes, cursors, the event buffer and
/// ids, the byte counters, the metrics text, listen addresses and tokens.
final class ControlPlaneValuesTests: XCTestCase {
    func testRoutesMatchMethodAndPath() {
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/").get(), .asset(.page))
        XCTAssertEqual(try APIRoute.match(method: "HEAD", path: "/dashboard.js").get(), .asset(.script))
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/v1/jobs").get(), .listJobs)
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/v1/jobs/").get(), .listJobs)
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/jobs").get(), .addJobs)
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/v1/jobs/a.b-1").get(), .job("a.b-1"))
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/jobs/x/cancel").get(), .cancel("x"))
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/jobs/x/retry").get(), .retry("x"))
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/jobs/x/pause").get(), .pause("x"))
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/jobs/x/resume").get(), .resume("x"))
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/pause").get(), .pauseQueue)
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/jobs/x/priority").get(), .prioritize("x"))
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/resume").get(), .resumeQueue)
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/v1/limit").get(), .limit)
        XCTAssertEqual(try APIRoute.match(method: "POST", path: "/v1/limit").get(), .setLimit)
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/v1/events").get(), .events)
        XCTAssertEqual(try APIRoute.match(method: "GET", path: "/metrics").get(), .metrics)
        XCTAssertEqual(APIRoute.match(method: "GET", path: "/v1/jobs/x/cancel"), .failure(.methodNotAllowed(allowed: ["POST"])))
        XCTAssertEqual(APIRoute.match(method: "DELETE", path: "/v1/jobs"), .failure(.methodNotAllowed(allowed: ["GET", "POST"])))
        XCTAssertEqual(APIRoute.match(method: "GET", path: "/v1/jobs/x/explode"), .failure(.notFound))
        XCTAssertEqual(APIRoute.match(method: "GET", path: "/v2/jobs"), .failure(.notFound))
        XCTAssertEqual(APIRoute.match(method: "GET", path: "/v1//cancel"), .failure(.notFound))
        XCTAssertFalse(APIRoute.metrics.needsToken)
        XCTAssertFalse(APIRoute.asset(.page).needsToken)
        XCTAssertTrue(APIRoute.events.needsToken)
        XCTAssertTrue(APIRoute.summary.needsToken)
    }

    func testCursorsRoundTripAndRefuseAnythingElse() {
        for seq: Int64 in [0, 1, 99, 1 << 40] {
            XCTAssertEqual(JobCursor(token: JobCursor(seq: seq).token), JobCursor(seq: seq))
        }
        XCTAssertFalse(JobCursor(seq: 7).token.contains("="))
        for bad in ["", "7", "djE6LTE", "not base64!", String(repeating: "A", count: 100), "djI6Nw"] {
            XCTAssertNil(JobCursor(token: bad), bad)
        }
    }

    func testTheEventBufferReplaysWhatItKeepsAndSaysWhenItDroppedSome() {
        var buffer = EventBuffer(capacity: 3, byteLimit: 1 << 20)
        XCTAssertEqual(buffer.read(after: 0, limit: 10), .entries([]))
        for name in ["a", "b", "c", "d"] { buffer.append(name) }
        XCTAssertEqual(buffer.newest, 4)
        XCTAssertEqual(buffer.oldest, 2)
        XCTAssertEqual(buffer.read(after: 1, limit: 10), .entries([.init(number: 2, data: "b"), .init(number: 3, data: "c"),
                                                                   .init(number: 4, data: "d")]))
        XCTAssertEqual(buffer.read(after: 2, limit: 1), .entries([.init(number: 3, data: "c")]))
        XCTAssertEqual(buffer.read(after: 4, limit: 10), .entries([]))
        XCTAssertEqual(buffer.read(after: 0, limit: 10), .behind(newest: 4), "event 1 was dropped")
        XCTAssertEqual(buffer.read(after: 9, limit: 10), .behind(newest: 4), "an id this run never gave")
    }

    func testTheEventBufferKeepsItsByteBoundAndCompacts() {
        var buffer = EventBuffer(capacity: 10_000, byteLimit: 100)
        for _ in 0..<5000 { buffer.append(String(repeating: "x", count: 30)) }
        XCTAssertEqual(buffer.count, 3, "three 30-byte events fit in 100 bytes")
        XCTAssertEqual(buffer.read(after: 4997, limit: 10), .entries((4998...5000).map { .init(number: $0, data: String(repeating: "x", count: 30)) }))
        var one = EventBuffer(capacity: 10, byteLimit: 10)
        one.append(String(repeating: "y", count: 50))
        XCTAssertEqual(one.count, 1, "an event larger than the bound is still kept until the next")
    }

    func testEventIDsParseWithTheirRun() {
        XCTAssertEqual(EventID(parsing: "k3x9-42"), EventID(run: "k3x9", number: 42))
        XCTAssertNil(EventID(parsing: "a-b-7"), "a run id is base 36, without dashes")
        XCTAssertNil(EventID(parsing: "r-+7"))
        XCTAssertNil(EventID(parsing: "-7"))
        XCTAssertEqual(EventID(run: "r", number: 5).description, "r-5")
        XCTAssertNil(EventID(parsing: "42"))
        XCTAssertNil(EventID(parsing: "r-"))
        XCTAssertNil(EventID(parsing: "r--3"))
    }

    func testTheTallyCountsThisRunsBytesByDirection() {
        var tally = TransferTally()
        tally.apply(.started(JobStarted(id: "d", kind: "download", name: "d", url: "u", destination: "/d", bytesDone: 100)))
        tally.apply(.started(JobStarted(id: "u", kind: "s3-upload", name: "u", url: "u", destination: nil)))
        tally.apply(.progress([JobProgress(id: "d", bytesDone: 150, bytesTotal: 300), JobProgress(id: "u", bytesDone: 10, bytesTotal: 20)]))
        tally.apply(.progress([JobProgress(id: "d", bytesDone: 140, bytesTotal: 300)]))
        XCTAssertEqual(tally.downloaded, 50, "bytes from an earlier run are not counted, nor a step back")
        XCTAssertEqual(tally.uploaded, 10)
        tally.apply(.finished(JobFinished(id: "d", state: .done, name: "d", url: "u", destination: "/d", bytes: 300)))
        tally.apply(.retrying(JobRetry(id: "u", attempt: 1, delay: 1, reason: "503")))
        tally.apply(.finished(JobFinished(id: "s", state: .done, name: "s", url: "u", destination: "/s", bytes: 999, skipped: true)))
        XCTAssertEqual(tally.downloaded, 200)
        XCTAssertEqual(tally.uploaded, 10)
        XCTAssertEqual(tally.retries, 1)
        XCTAssertEqual(tally.finished[.done], 2)
    }

    func testMetricsAreInPrometheusTextFormat() {
        var tally = TransferTally()
        tally.apply(.started(JobStarted(id: "d", kind: "download", name: "d", url: "u", destination: "/d")))
        tally.apply(.progress([JobProgress(id: "d", bytesDone: 42, bytesTotal: nil)]))
        let text = MetricsText.render(tally: tally, jobs: [.queued: 3, .failed: 1],
                                      hosts: [HostUse(host: "b\"ad\\host\n", connections: 2, limit: 4),
                                              HostUse(host: "a.example", connections: 1, limit: 8)])
        let lines = text.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("transferd_bytes_total{direction=\"download\"} 42"))
        XCTAssertTrue(lines.contains("transferd_bytes_total{direction=\"upload\"} 0"))
        XCTAssertTrue(lines.contains("transferd_jobs{state=\"queued\"} 3"))
        XCTAssertTrue(lines.contains("transferd_jobs{state=\"running\"} 0"))
        XCTAssertTrue(lines.contains("transferd_host_connection_limit{host=\"b\\\"ad\\\\host\\n\"} 4"))
        XCTAssertLessThan(lines.firstIndex(of: "transferd_host_connections{host=\"a.example\"} 1")!,
                          lines.firstIndex(of: "transferd_host_connections{host=\"b\\\"ad\\\\host\\n\"} 2")!)
        for line in lines where !line.hasPrefix("#") {
            XCTAssertNotNil(line.range(of: #"^[a-z_]+(\{[^\n]*\})? -?[0-9.]+$"#, options: .regularExpression), line)
        }
    }

    func testListenAddressesAndWhetherOnlyThisMachineCanConnect() throws {
        let v4 = try ListenAddress(parsing: "127.0.0.1:8080")
        XCTAssertEqual(v4.port, 8080)
        XCTAssertTrue(v4.isLoopback)
        XCTAssertEqual(try ListenAddress(parsing: "localhost:0").host, "127.0.0.1")
        let v6 = try ListenAddress(parsing: "[::1]:9")
        XCTAssertTrue(v6.isIPv6 && v6.isLoopback)
        XCTAssertEqual(v6.url(port: 9), "http://[::1]:9")
        XCTAssertFalse(try ListenAddress(parsing: "0.0.0.0:80").isLoopback)
        XCTAssertFalse(try ListenAddress(parsing: "192.168.1.2:80").isLoopback)
        XCTAssertFalse(try ListenAddress(parsing: "[::]:80").isLoopback)
        for bad in ["8080", ":8080", "127.0.0.1", "127.0.0.1:70000", "127.0.0.1:x", "example.com:80", "[::1]8080", "::1:80x"] {
            XCTAssertThrowsError(try ListenAddress(parsing: bad), bad) { error in
                XCTAssertTrue("\(error)".contains("127.0.0.1:8080"), "the message shows the form: \(error)")
            }
        }
    }

    func testTokensMatchOnlyThemselves() {
        let token = APIToken(value: "0123456789abcdef0123", path: "/t")
        XCTAssertTrue(token.matches("0123456789abcdef0123"))
        XCTAssertFalse(token.matches("0123456789abcdef012"))
        XCTAssertFalse(token.matches("0123456789abcdef01234"))
        XCTAssertFalse(token.matches("1123456789abcdef0123"))
        XCTAssertFalse(token.matches(""))
    }
}
