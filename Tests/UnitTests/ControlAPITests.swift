import XCTest
@testable import TransferCore

/// Every endpoint of the control API answered from plain requests, against a
/// real SQLite store in a fresh queue folder (no socket: `ControlServer` only
/// carries these requests and responses).
final class ControlAPITests: XCTestCase {
    private var folder = ""
    private var layout: QueueLayout!
    private var store: SQLiteQueueStore!
    private var api: ControlAPI!
    private var monitor: RunMonitor!
    private var changes = Locked(0)
    private let token = APIToken(value: "secret-token-0123456789", path: "/q/.transferd/api.token")

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "/transferd-api-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder + "/queue.d", withIntermediateDirectories: true)
        layout = QueueLayout(directory: folder + "/queue.d")
        try layout.prepare()
        store = try SQLiteQueueStore(path: layout.database)
        monitor = RunMonitor(journal: EventJournal(capacity: 4, byteLimit: 1 << 20, run: "r1"))
        let changes = self.changes
        api = ControlAPI(store: store, layout: layout, token: token, monitor: monitor, heartbeat: 0.05,
                         hosts: { [HostUse(host: "h.example", connections: 2, limit: 4)] },
                         changed: { changes.withLock { $0 += 1 } })
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func call(_ method: String, _ path: String, query: [String: String] = [:], body: String = "",
                      headers: [String: String]? = nil) -> (status: Int, json: [String: Any], response: HTTPResponse) {
        let request = HTTPRequest(method: method, path: path, query: query,
                                  headers: headers ?? ["Authorization": "Bearer \(token.value)"], body: Data(body.utf8))
        let response = api.respond(to: request)
        let json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
        return (response.status, json, response)
    }

    private func jobFile(_ ids: [String]) -> String {
        let jobs = ids.map { "{\"id\": \"\($0)\", \"url\": \"http://h.example/\($0)\", \"dest\": \"out/\($0)\"}" }
        return "{\"version\": 1, \"jobs\": [\(jobs.joined(separator: ","))]}"
    }

    func testEveryEndpointButThePageAndMetricsNeedsTheToken() {
        for (method, path) in [("GET", "/v1/jobs"), ("GET", "/v1/jobs/x"), ("POST", "/v1/jobs"), ("POST", "/v1/jobs/x/cancel"),
                               ("POST", "/v1/jobs/x/retry"), ("POST", "/v1/jobs/x/pause"), ("POST", "/v1/jobs/x/resume"),
                               ("POST", "/v1/pause"), ("POST", "/v1/resume"), ("GET", "/v1/limit"), ("POST", "/v1/limit"), ("POST", "/v1/purge"),
                               ("GET", "/v1/summary"), ("GET", "/v1/events")] {
            let missing = call(method, path, headers: [:])
            XCTAssertEqual(missing.status, 401, path)
            XCTAssertEqual(missing.response.header("WWW-Authenticate"), "Bearer")
            XCTAssertTrue((missing.json["fix"] as? String ?? "").contains(token.path))
            let wrong = call(method, path, headers: ["Authorization": "Bearer nope"])
            XCTAssertEqual(wrong.status, 401, path)
            XCTAssertFalse(String(decoding: wrong.response.body, as: UTF8.self).contains(token.value), "the token is never echoed")
        }
        XCTAssertEqual(call("GET", "/", headers: [:]).status, 200)
        XCTAssertEqual(call("GET", "/metrics", headers: [:]).status, 200)
        XCTAssertEqual(call("GET", "/v1/jobs", query: ["token": token.value], headers: [:]).status, 401,
                       "only the event stream takes the token in the query")
        XCTAssertEqual(call("GET", "/v1/events", query: ["token": token.value], headers: [:]).status, 200)
    }

    func testRequestsAreRefusedOnTheirHeadersBeforeAnyBodyIsRead() {
        let auth = "Bearer \(token.value)"
        XCTAssertEqual(api.preflight(HTTPRequest(method: "POST", path: "/v1/jobs", headers: ["Content-Length": "8000000"]))?.status, 401,
                       "no token: refused before the body is taken in")
        XCTAssertNil(api.preflight(HTTPRequest(method: "POST", path: "/v1/jobs", headers: ["Content-Length": "800", "Authorization": auth])))
        XCTAssertEqual(api.preflight(HTTPRequest(method: "POST", path: "/metrics", headers: ["Content-Length": "8000000"]))?.status, 405)
        XCTAssertEqual(api.preflight(HTTPRequest(method: "GET", path: "/v1/summary",
                                                 headers: ["Content-Length": "10", "Authorization": auth]))?.status, 400)
        XCTAssertEqual(api.preflight(HTTPRequest(method: "POST", path: "/v1/jobs/a/cancel",
                                                 headers: ["Transfer-Encoding": "chunked", "Authorization": auth]))?.status, 400)
        XCTAssertEqual(api.preflight(HTTPRequest(method: "GET", path: "/nowhere"))?.status, 404)
        XCTAssertNil(api.preflight(HTTPRequest(method: "GET", path: "/metrics")), "metrics need no token")
    }

    func testUnknownRoutesAndMethodsGetJSONErrors() {
        let missing = call("GET", "/v1/nothing")
        XCTAssertEqual(missing.status, 404)
        XCTAssertEqual(missing.response.header("Content-Type"), "application/json")
        XCTAssertNotNil(missing.json["error"])
        let wrongMethod = call("PUT", "/v1/jobs")
        XCTAssertEqual(wrongMethod.status, 405)
        XCTAssertEqual(wrongMethod.response.header("Allow"), "GET, POST")
    }

    func testAJobFilePostedIsCheckedAsADroppedOneAndRecordedAllOrNothing() throws {
        let added = call("POST", "/v1/jobs", body: jobFile(["a", "b"]), headers: ["Authorization": "Bearer \(token.value)",
                                                                                 "Content-Type": "application/json"])
        XCTAssertEqual(added.status, 201, "\(added.json)")
        XCTAssertEqual(added.json["added"] as? Int, 2)
        XCTAssertEqual(added.json["ids"] as? [String], ["a", "b"])
        XCTAssertEqual(changes.current, 1, "the run is told at once")
        let file = try XCTUnwrap(added.json["file"] as? String)
        let copy = layout.accepted + "/" + file
        XCTAssertEqual(try String(contentsOfFile: copy, encoding: .utf8), jobFile(["a", "b"]), "a copy is kept like a dropped file's")
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: copy)[.posixPermissions] as? Int, 0o600)

        let invalid = call("POST", "/v1/jobs", body: "{\"version\": 1, \"jobs\": [{\"id\": \"c\", \"url\": \"http://h/c\"}, {\"id\": \"d\", \"url\": \"ftp://h/d\"}]}")
        XCTAssertEqual(invalid.status, 422)
        let errors = try XCTUnwrap(invalid.json["errors"] as? [[String: Any]])
        XCTAssertEqual(errors.first?["job"] as? Int, 2)
        XCTAssertEqual(errors.first?["field"] as? String, "url")
        XCTAssertNotNil(errors.first?["fix"] as? String)
        XCTAssertNil(try store.job("c"), "all or nothing: the valid job of a rejected file is not recorded")

        XCTAssertEqual(call("POST", "/v1/jobs", body: "not json").status, 422)
        XCTAssertEqual(call("POST", "/v1/jobs", body: "").status, 422)
        let taken = call("POST", "/v1/jobs", body: "{\"version\": 1, \"jobs\": [{\"id\": \"a\", \"url\": \"http://other/a\"}]}")
        XCTAssertEqual(taken.status, 409)
        XCTAssertTrue((taken.json["text"] as? String ?? "").contains("a different job with this id"))

        let list = call("POST", "/v1/jobs", body: "http://h.example/x1\nhttp://h.example/x2\n",
                        headers: ["Authorization": "Bearer \(token.value)", "Content-Type": "text/plain"])
        XCTAssertEqual(list.status, 201, "\(list.json)")
        XCTAssertEqual(list.json["added"] as? Int, 2, "a URL list, as a dropped .urls file")
    }

    func testJobsComeInPagesWithACursorAndAStateFilter() throws {
        XCTAssertEqual(call("POST", "/v1/jobs", body: jobFile((1...5).map { "j\($0)" })).status, 201)
        XCTAssertEqual(try store.cancel("j2"), .queued)
        var seen: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            var query = ["limit": "2"]
            if let cursor { query["cursor"] = cursor }
            let page = call("GET", "/v1/jobs", query: query)
            XCTAssertEqual(page.status, 200)
            seen += (page.json["jobs"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
            cursor = page.json["next"] as? String
            pages += 1
        } while cursor != nil && pages < 10
        XCTAssertEqual(seen, ["j1", "j2", "j3", "j4", "j5"])
        XCTAssertEqual(pages, 3)
        let cancelled = call("GET", "/v1/jobs", query: ["state": "cancelled"])
        XCTAssertEqual((cancelled.json["jobs"] as? [[String: Any]])?.map { $0["id"] as? String }, ["j2"])
        XCTAssertTrue(cancelled.json["next"] is NSNull)
        XCTAssertEqual(call("GET", "/v1/jobs", query: ["state": "sleeping"]).status, 400)
        XCTAssertEqual(call("GET", "/v1/jobs", query: ["limit": "0"]).status, 400)
        XCTAssertEqual(call("GET", "/v1/jobs", query: ["limit": "5000"]).status, 400)
        XCTAssertEqual(call("GET", "/v1/jobs", query: ["cursor": "garbage"]).status, 400)

        let one = call("GET", "/v1/jobs/j3")
        XCTAssertEqual(one.status, 200)
        XCTAssertEqual(one.json["state"] as? String, "queued")
        XCTAssertEqual(one.json["url"] as? String, "http://h.example/j3")
        XCTAssertEqual(call("GET", "/v1/jobs/nope").status, 404)
    }

    func testSecretsInAJobsURLAreRedacted() throws {
        let body = "{\"version\": 1, \"jobs\": [{\"id\": \"s\", \"url\": \"https://user:hunter2@h.example/f?X-Amz-Signature=abc123\"}]}"
        XCTAssertEqual(call("POST", "/v1/jobs", body: body).status, 201)
        let text = String(decoding: call("GET", "/v1/jobs/s").response.body, as: UTF8.self)
        XCTAssertFalse(text.contains("hunter2"), text)
        XCTAssertFalse(text.contains("abc123"), text)
    }

    func testCancelAndRetry() throws {
        XCTAssertEqual(call("POST", "/v1/jobs", body: jobFile(["c1"])).status, 201)
        XCTAssertEqual(call("POST", "/v1/jobs/c1/retry").status, 409, "a queued job is not retried")
        let cancelled = call("POST", "/v1/jobs/c1/cancel")
        XCTAssertEqual(cancelled.status, 200)
        XCTAssertEqual(cancelled.json["previous_state"] as? String, "queued")
        XCTAssertEqual(try store.job("c1")?.state, .cancelled)
        XCTAssertEqual(call("POST", "/v1/jobs/c1/cancel").status, 409, "already cancelled")
        let before = changes.current
        let retried = call("POST", "/v1/jobs/c1/retry")
        XCTAssertEqual(retried.status, 200)
        XCTAssertEqual(try store.job("c1")?.state, .queued)
        XCTAssertEqual(changes.current, before + 1)
        XCTAssertEqual(call("POST", "/v1/jobs/zz/cancel").status, 404)
        XCTAssertEqual(call("POST", "/v1/jobs/zz/retry").status, 404)
    }

    func testPauseAndResumeAJobAndTheWholeQueue() throws {
        XCTAssertEqual(call("POST", "/v1/jobs", body: jobFile(["p1", "p2", "p3"])).status, 201)
        let paused = call("POST", "/v1/jobs/p1/pause")
        XCTAssertEqual(paused.status, 200)
        XCTAssertEqual(paused.json["previous_state"] as? String, "queued")
        XCTAssertEqual(paused.json["state"] as? String, "held")
        XCTAssertEqual(try store.job("p1")?.state, .held)
        XCTAssertEqual(call("POST", "/v1/jobs/p2/resume").status, 409, "a queued job is not held")
        let before = changes.current
        XCTAssertEqual(call("POST", "/v1/jobs/p1/resume").json["state"] as? String, "queued")
        XCTAssertEqual(changes.current, before + 1, "the run is told to claim")
        XCTAssertEqual(try store.job("p1")?.state, .queued)
        XCTAssertEqual(call("POST", "/v1/jobs/zz/pause").status, 404)

        // The whole queue: a running job is held, queued ones stay queued and wait.
        XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["p1"])
        let queue = call("POST", "/v1/pause")
        XCTAssertEqual(queue.status, 200)
        XCTAssertEqual(queue.json["stopping"] as? Int, 1)
        XCTAssertTrue(try store.isQueuePaused())
        XCTAssertEqual(try store.job("p1")?.state, .held)
        XCTAssertEqual(try store.job("p2")?.state, .queued)
        XCTAssertEqual(call("GET", "/v1/summary").json["queue_paused"] as? Bool, true)
        XCTAssertEqual(call("POST", "/v1/pause").status, 200, "pausing twice is no error")
        let resumed = call("POST", "/v1/resume")
        XCTAssertEqual(resumed.json["resumed"] as? Int, 1)
        XCTAssertFalse(try store.isQueuePaused())
        XCTAssertEqual(try store.job("p1")?.state, .queued)
        XCTAssertEqual(call("GET", "/v1/summary").json["queue_paused"] as? Bool, false)
        XCTAssertEqual(call("GET", "/v1/pause").status, 405)
    }

    func testTheQueuesLimitIsReadSetAndCleared() throws {
        let none = call("GET", "/v1/limit")
        XCTAssertEqual(none.status, 200)
        XCTAssertTrue(none.json["rate_limit"] is NSNull)
        let set = call("POST", "/v1/limit", query: ["rate": "1M:off"])
        XCTAssertEqual(set.status, 200)
        XCTAssertEqual(set.json["rate_limit"] as? String, "1M:off")
        XCTAssertEqual(set.json["now"] as? String, "uploads 1 MiB/s, downloads unlimited")
        XCTAssertEqual(try store.settings().rateLimit, "1M:off")
        XCTAssertEqual(call("GET", "/v1/summary").json["rate_limit"] as? String, "1M:off")
        let timetable = call("POST", "/v1/limit", query: ["rate": "19:00,off 08:00,512K"])
        XCTAssertEqual(timetable.json["rate_limit"] as? String, "08:00,512K 19:00,off")
        XCTAssertEqual(timetable.json["timetable"] as? Bool, true)
        let wrong = call("POST", "/v1/limit", query: ["rate": "fast"])
        XCTAssertEqual(wrong.status, 400)
        XCTAssertTrue((wrong.json["error"] as? String ?? "").contains("'fast' is not a rate"), "\(wrong.json)")
        XCTAssertEqual(try store.settings().rateLimit, "08:00,512K 19:00,off", "a mistake changes nothing")
        XCTAssertEqual(call("POST", "/v1/limit").status, 400)
        let jobs = call("POST", "/v1/limit", query: ["jobs": "3"])
        XCTAssertEqual(jobs.json["jobs"] as? Int, 3)
        XCTAssertEqual(jobs.json["rate_limit"] as? String, "08:00,512K 19:00,off", "the rate stays as it was")
        XCTAssertEqual(call("GET", "/v1/summary").json["jobs_limit"] as? Int, 3)
        XCTAssertEqual(call("POST", "/v1/limit", query: ["jobs": "0"]).status, 400)
        XCTAssertEqual(call("POST", "/v1/limit", query: ["jobs": "2", "rate": "fast"]).status, 400)
        XCTAssertEqual(try store.settings().jobs, 3, "a mistake in either changes neither")
        XCTAssertTrue(call("POST", "/v1/limit", query: ["jobs": "default"]).json["jobs"] is NSNull)
        XCTAssertEqual(call("POST", "/v1/limit", query: ["per_host": "2"]).json["per_host"] as? Int, 2)
        XCTAssertEqual(call("POST", "/v1/limit", query: ["per_host": "many"]).status, 400)
        XCTAssertEqual(try store.settings().perHost, 2)
        XCTAssertEqual(call("POST", "/v1/limit", query: ["clear": "1"]).status, 200)
        XCTAssertNil(try store.settings().rateLimit)
        XCTAssertEqual(call("DELETE", "/v1/limit").status, 405)
    }

    func testEndedJobsArePurgedByStateAndAge() throws {
        XCTAssertEqual(call("POST", "/v1/jobs", body: jobFile(["e1", "e2", "e3"])).status, 201)
        // e1 ended two hours ago, e3 just now: the run serving the API may still write e3's result.
        _ = try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { $0.id == "e1" }
        XCTAssertTrue(try store.finish("e1", state: .cancelled, error: nil, bytes: nil, sha256: nil, at: Date().addingTimeInterval(-7200)))
        XCTAssertEqual(try store.cancel("e3"), .queued)
        let young = call("POST", "/v1/purge", query: ["state": "cancelled", "older_than": "3h"])
        XCTAssertEqual(young.json["purged"] as? Int, 0)
        let purged = call("POST", "/v1/purge", query: ["state": "cancelled"])
        XCTAssertEqual(purged.status, 200)
        XCTAssertEqual(purged.json["purged"] as? Int, 1)
        XCTAssertNil(try store.job("e1"))
        XCTAssertEqual(try store.job("e2")?.state, .queued)
        XCTAssertEqual(try store.job("e3")?.state, .cancelled, "ended in the last 10 s: kept")
        let wrong = call("POST", "/v1/purge", query: ["state": "queued"])
        XCTAssertEqual(wrong.status, 400)
        XCTAssertTrue((wrong.json["error"] as? String ?? "").contains("only ended jobs are purged"), "\(wrong.json)")
        XCTAssertEqual(call("POST", "/v1/purge", query: ["older_than": "soon"]).status, 400)
    }

    func testAJobMovesAheadOrTakesAGivenPriority() throws {
        XCTAssertEqual(call("POST", "/v1/jobs", body: jobFile(["o1", "o2", "o3"])).status, 201)
        let ahead = call("POST", "/v1/jobs/o3/priority")
        XCTAssertEqual(ahead.status, 200)
        XCTAssertEqual(ahead.json["priority"] as? Int, 1)
        XCTAssertEqual(try store.jobs(in: .queued, firstInClaimOrder: 3).map(\.id), ["o3", "o1", "o2"])
        XCTAssertEqual(call("POST", "/v1/jobs/o2/priority", query: ["value": "9"]).json["priority"] as? Int, 9)
        XCTAssertEqual(try store.jobs(in: .queued, firstInClaimOrder: 3).map(\.id), ["o2", "o3", "o1"])
        XCTAssertEqual(call("POST", "/v1/jobs/o2/priority", query: ["value": "high"]).status, 400)
        XCTAssertEqual(call("POST", "/v1/jobs/zz/priority").status, 404)
        XCTAssertEqual(call("GET", "/v1/jobs/o2").json["priority"] as? Int, 9, "every view shows the priority set")
    }

    func testSummaryAndMetricsShowTheStoreAndTheRun() throws {
        XCTAssertEqual(call("POST", "/v1/jobs", body: jobFile(["m1", "m2"])).status, 201)
        monitor.handle(.started(JobStarted(id: "m1", kind: "download", name: "m1", url: "u", destination: "/m1")))
        monitor.handle(.progress([JobProgress(id: "m1", bytesDone: 1234, bytesTotal: 5000)]))
        let summary = call("GET", "/v1/summary")
        XCTAssertEqual(summary.status, 200)
        XCTAssertEqual((summary.json["jobs"] as? [String: Any])?["queued"] as? Int, 2)
        XCTAssertEqual((summary.json["run"] as? [String: Any])?["running"] as? Int, 1)
        XCTAssertEqual((summary.json["hosts"] as? [[String: Any]])?.first?["limit"] as? Int, 4)
        let metrics = call("GET", "/metrics", headers: [:])
        XCTAssertEqual(metrics.response.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
        let text = String(decoding: metrics.response.body, as: UTF8.self)
        XCTAssertTrue(text.contains("transferd_jobs{state=\"queued\"} 2\n"), text)
        XCTAssertTrue(text.contains("transferd_bytes_total{direction=\"download\"} 1234\n"), text)
        XCTAssertTrue(text.contains("transferd_host_connections{host=\"h.example\"} 2\n"), text)
    }

    func testTheDashboardIsServedWithAStrictPolicy() {
        let page = call("GET", "/", headers: [:])
        XCTAssertEqual(page.response.header("Content-Type"), "text/html; charset=utf-8")
        let html = String(decoding: page.response.body, as: UTF8.self)
        XCTAssertTrue(html.contains("<script src=\"/dashboard.js\"></script>"))
        XCTAssertFalse(html.contains("http://") || html.contains("https://"), "nothing from elsewhere")
        XCTAssertTrue(page.response.header("Content-Security-Policy")?.contains("default-src 'none'") ?? false)
        XCTAssertTrue(String(decoding: call("GET", "/dashboard.js", headers: [:]).response.body, as: UTF8.self).contains("EventSource"))
        XCTAssertEqual(call("GET", "/dashboard.css", headers: [:]).response.header("Content-Type"), "text/css; charset=utf-8")
    }

    // MARK: The event stream

    private func read(_ stream: ResponseStream, until text: String, timeout: TimeInterval = 5) -> String {
        var received = ""
        let deadline = Date().addingTimeInterval(timeout)
        while !received.contains(text), Date() < deadline, let chunk = stream.next(limit: 7) {
            received += String(decoding: chunk, as: UTF8.self)
        }
        return received
    }

    private func event(_ id: String) -> QueueEvent {
        .finished(JobFinished(id: id, state: .done, name: id, url: "u", destination: nil, bytes: 1))
    }

    func testTheStreamSendsNewEventsWithIDsAndHeartbeats() throws {
        var stream: ResponseStream? = try XCTUnwrap(call("GET", "/v1/events").response.stream)
        XCTAssertTrue(String(decoding: call("GET", "/metrics").response.body, as: UTF8.self).contains("transferd_event_streams 1\n"))
        try checkStream(XCTUnwrap(stream))
        stream = nil
        XCTAssertTrue(String(decoding: call("GET", "/metrics").response.body, as: UTF8.self).contains("transferd_event_streams 0\n"), "a stream let go is not counted")
    }

    private func checkStream(_ stream: ResponseStream) throws {
        monitor.handle(event("e1"))
        let first = read(stream, until: "\"id\":\"e1\"")
        XCTAssertTrue(first.hasPrefix("retry: 2000\n\n"), first)
        XCTAssertTrue(first.contains("id: r1-1\ndata: {\"event\":\"finished\""), first)
        XCTAssertTrue(read(stream, until: ": heartbeat\n\n").contains(": heartbeat\n\n"), "an idle stream sends comments")
        monitor.journal.close()
        XCTAssertNil(stream.next(limit: 100), "the stream ends with the run")
    }

    func testAClientThatReconnectsWithLastEventIDMissesNothingAndGetsNothingTwice() throws {
        monitor.handle(event("a"))
        monitor.handle(event("b"))
        monitor.handle(event("c"))
        let stream = try XCTUnwrap(call("GET", "/v1/events", headers: ["Authorization": "Bearer \(token.value)", "Last-Event-ID": "r1-1"])
            .response.stream)
        let text = read(stream, until: "\"id\":\"c\"")
        XCTAssertFalse(text.contains("\"id\":\"a\""))
        XCTAssertTrue(text.contains("id: r1-2\n") && text.contains("id: r1-3\n"), text)
        XCTAssertFalse(text.contains("reset"))
    }

    func testAClientTooFarBehindOrFromAnotherRunIsToldToReset() throws {
        for name in ["a", "b", "c", "d", "e", "f"] { monitor.handle(event(name)) }
        let behind = try XCTUnwrap(call("GET", "/v1/events", headers: ["Authorization": "Bearer \(token.value)", "Last-Event-ID": "r1-1"])
            .response.stream)
        let text = read(behind, until: "no longer kept")
        XCTAssertTrue(text.contains("id: r1-6\nevent: reset\n"), text)
        let foreign = try XCTUnwrap(call("GET", "/v1/events", headers: ["Authorization": "Bearer \(token.value)", "Last-Event-ID": "old-3"])
            .response.stream)
        let foreignText = read(foreign, until: "not from this run")
        XCTAssertTrue(foreignText.contains("event: reset\n") && foreignText.contains("not from this run"), foreignText)
        monitor.handle(event("g"))
        XCTAssertTrue(read(foreign, until: "\"id\":\"g\"").contains("id: r1-7\n"), "and then it follows on")
    }
}

/// The listener itself, on a loopback port: idle connections must not lock out a client with the token.
final class ControlAPIConnectionTests: XCTestCase {
    private func connectLoopback(_ port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard fd >= 0, connected == 0 else { throw POSIXFailure(operation: "connect", path: "127.0.0.1:\(port)") }
        return fd
    }

    /// Whether the server closed `fd` (EOF or a reset) within `timeout`.
    private func closedByServer(_ fd: Int32, within timeout: TimeInterval) -> Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1000)) == 1 else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, 0) <= 0
    }

    func testIdleSocketsNeitherLockOutATokenHolderNorOutstayTheHeaderTimeout() throws {
        let server = try HTTPServer(address: ListenAddress(parsing: "127.0.0.1:0"), bodyLimit: 1024,
                                    isTrusted: { $0.headers["authorization"] == "Bearer good-token" }, headerTimeout: 2) { _ in
            HTTPResponse(status: 200, contentType: "text/plain", body: Data("answered".utf8))
        }
        defer { server.stop() }
        var idle: [Int32] = []
        defer { idle.forEach { close($0) } }
        for _ in 0..<200 { idle.append(try connectLoopback(server.port)) }

        // The token holder is answered within a few seconds (a liveness bound, not a speed test).
        let started = Date()
        let client = try connectLoopback(server.port)
        defer { close(client) }
        let request = "GET /v1/summary HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer good-token\r\nConnection: close\r\n\r\n"
        XCTAssertEqual(request.utf8.count, request.withCString { send(client, $0, strlen($0), 0) })
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var answer = [UInt8](repeating: 0, count: 4096)
        let count = recv(client, &answer, answer.count, 0)
        let text = String(decoding: answer.prefix(max(0, count)), as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("HTTP/1.1 200") && text.hasSuffix("answered"), "answer: \(text.debugDescription)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "answered within a few seconds of 200 idle sockets")

        // Every idle socket is closed once the header timeout (2 s here) has passed.
        let deadline = Date().addingTimeInterval(8)
        let open = idle.filter { !closedByServer($0, within: max(0.01, deadline.timeIntervalSinceNow)) }
        XCTAssertEqual(open.count, 0, "idle sockets still open after the header timeout")
        let settled = Date().addingTimeInterval(3)
        while server.guardian.counts.all > 0 && Date() < settled { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertEqual(server.guardian.counts.all, 0, "the server holds no connection")
    }
}
