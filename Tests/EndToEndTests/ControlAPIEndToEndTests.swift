import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd run --listen` driven over real HTTP with curl: every endpoint,
/// its refusals, and an event stream that a client leaves and rejoins with
/// `Last-Event-ID` without losing or repeating an event.
final class ControlAPIEndToEndTests: XCTestCase {
    private func freePort() throws -> Int { try ControlAPIClient.freePort() }

    private func curl(_ method: String, _ url: String, token: String?, body: String? = nil, bodyFile: String? = nil,
                      headers: [String] = []) throws -> ControlAPIClient.Reply {
        try ControlAPIClient(base: "").request(method, url, token: .some(token), body: body, bodyFile: bodyFile, headers: headers)
    }

    private func waitForAPI(_ base: String) throws { try ControlAPIClient(base: base).waitUntilServing() }

    private func waitForState(_ base: String, token: String, id: String, _ states: Set<String>,
                              file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try ControlAPIClient(base: base, token: token).waitForState(id, states, file: file, line: line)
    }

    private func run(_ tool: String, _ arguments: [String]) throws -> (stdout: String, stderr: String, status: Int32) {
        try ControlAPIClient.runTool(tool, arguments)
    }

    func testEveryEndpointOverHTTPWithItsRefusals() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "api", sizes: [300_000, 4 << 20])
        let port = try freePort()
        let base = "http://127.0.0.1:\(port)"
        let run = try fixture.start(["--watch", "--listen", "127.0.0.1:\(port)", "--quiet"])
        defer { if run.process.isRunning { run.process.terminate() } }
        try waitForAPI(base)
        let tokenPath = fixture.queue + "/.transferd/api.token"
        let token = try String(contentsOfFile: tokenPath, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(token.count, 64)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: tokenPath)[.posixPermissions] as? Int, 0o600)

        // The token, and JSON errors for what is not an endpoint.
        XCTAssertEqual(try curl("GET", base + "/v1/summary", token: nil).status, 401)
        XCTAssertEqual(try curl("GET", base + "/v1/summary", token: "wrong-token-wrong").status, 401)
        XCTAssertEqual(try curl("GET", base + "/v1/summary", token: token).status, 200)
        let missing = try curl("GET", base + "/v1/teapot", token: token)
        XCTAssertEqual(missing.status, 404)
        XCTAssertNotNil(missing.json["error"])
        XCTAssertEqual(try curl("DELETE", base + "/v1/jobs", token: token).status, 405)

        // A job file through the API runs like a dropped one; "later" names a file that is not there yet.
        let later = "later-\(UUID().uuidString).bin"
        let add = try curl("POST", base + "/v1/jobs", token: token, body: """
            {"version": 1, "jobs": [{"id": "small", "url": "\(servers.http.absoluteString)/\(names[0])", "dest": "out/small.bin"},
                                    {"id": "slow", "url": "\(servers.http.absoluteString)/crawl/\(names[1])", "dest": "out/slow.bin"},
                                    {"id": "later", "url": "\(servers.http.absoluteString)/api/\(later)", "dest": "out/later.bin"}]}
            """, headers: ["Content-Type: application/json"])
        XCTAssertEqual(add.status, 201, add.body)
        _ = try waitForState(base, token: token, id: "small", ["done"])
        XCTAssertEqual(try servers.sha256(of: "api/" + names[0].split(separator: "/").last!),
                       SHA256Hasher.hex(of: try Data(contentsOf: URL(fileURLWithPath: fixture.root + "/out/small.bin"))))

        // Cancel a running job; retry a failed one once its file exists.
        _ = try waitForState(base, token: token, id: "slow", ["running"])
        XCTAssertEqual(try curl("POST", base + "/v1/jobs/slow/cancel", token: token).status, 200)
        _ = try waitForState(base, token: token, id: "slow", ["cancelled"])
        let failed = try waitForState(base, token: token, id: "later", ["failed"])
        XCTAssertTrue((failed["last_error"] as? String ?? "").contains("404"), "\(failed)")
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: servers.path("api/" + later)))
        XCTAssertEqual(try curl("POST", base + "/v1/jobs/later/retry", token: token).status, 200)
        _ = try waitForState(base, token: token, id: "later", ["done"])

        // Refusals of bad input.
        let invalid = try curl("POST", base + "/v1/jobs", token: token, body: "{\"version\": 1, \"jobs\": [{\"url\": \"gopher://x\"}]}")
        XCTAssertEqual(invalid.status, 422)
        XCTAssertFalse((invalid.json["errors"] as? [[String: Any]] ?? []).isEmpty)
        let big = fixture.root + "/big.json"
        try Data(repeating: 0x20, count: ControlAPI.bodyLimit + 1).write(to: URL(fileURLWithPath: big))
        XCTAssertEqual(try curl("POST", base + "/v1/jobs", token: token, bodyFile: big).status, 413)

        // Pages, summary and metrics.
        let page = try curl("GET", base + "/v1/jobs?limit=2", token: token).json
        XCTAssertEqual((page["jobs"] as? [[String: Any]])?.count, 2)
        let next = try XCTUnwrap(page["next"] as? String)
        let rest = try curl("GET", base + "/v1/jobs?limit=2&cursor=" + next, token: token).json
        XCTAssertEqual((rest["jobs"] as? [[String: Any]])?.map { $0["id"] as? String }, ["later"])
        let summary = try curl("GET", base + "/v1/summary", token: token).json
        XCTAssertEqual((summary["jobs"] as? [String: Any])?["done"] as? Int, 2)
        let metrics = try curl("GET", base + "/metrics", token: nil).body
        let downloaded = metrics.split(separator: "\n").first { $0.hasPrefix("transferd_bytes_total{direction=\"download\"}") }
        XCTAssertGreaterThanOrEqual(Int(downloaded?.split(separator: " ").last ?? "") ?? 0, 301_000, metrics)

        kill(run.process.processIdentifier, SIGINT)
        let result = run.wait()
        XCTAssertEqual(result.status, 130, "interrupted, as without --listen: " + result.stderr)
        XCTAssertTrue(result.stderr.contains("control API and dashboard at \(base)/"), result.stderr)
        XCTAssertFalse(result.stderr.contains(token) || result.stdout.contains(token), "the token is never printed")
        XCTAssertNotEqual(try? curl("GET", base + "/metrics", token: nil).status, 200, "the server stops with the run")
    }

    /// The frames of an event stream: (id, event name or nil, data).
    private func frames(_ text: String) -> [(id: String, event: String?, data: String)] {
        text.components(separatedBy: "\n\n").compactMap { block in
            var id: String?
            var event: String?
            var data: [String] = []
            for line in block.split(separator: "\n") {
                if line.hasPrefix("id: ") { id = String(line.dropFirst(4)) }
                if line.hasPrefix("event: ") { event = String(line.dropFirst(7)) }
                if line.hasPrefix("data: ") { data.append(String(line.dropFirst(6))) }
            }
            return id.map { ($0, event, data.joined(separator: "\n")) }
        }
    }

    func testAStreamLeftAndRejoinedWithLastEventIDLosesAndRepeatsNothing() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        // 1 MB/s each, two at a time: about six seconds of events.
        let names = try Fixtures.makeFiles(in: servers, folder: "sse", sizes: Array(repeating: 1_500_000, count: 8))
        try fixture.drop("sse.json", jobs: names.enumerated().map { index, name in
            ["id": "s\(index)", "url": servers.http.absoluteString + "/crawl/" + name, "dest": "out/s\(index).bin"]
        })
        let port = try freePort()
        let base = "http://127.0.0.1:\(port)"
        let run = try fixture.start(["--jobs", "2", "--listen", "127.0.0.1:\(port)", "--quiet"])
        defer { if run.process.isRunning { run.process.terminate() } }
        try waitForAPI(base)
        let token = try String(contentsOfFile: fixture.queue + "/.transferd/api.token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let stream = base + "/v1/events"
        let header = "Authorization: Bearer \(token)"

        // The reference stays connected until the run ends; the other leaves after two seconds.
        let reference = LockedBox("")
        let whole = Thread {
            // Not through `self.run`: the thread's closure is @Sendable and a test case is not.
            let text = (try? ControlAPIClient.runTool("/usr/bin/curl", ["-sN", "--max-time", "60", "-H", header, stream]).stdout) ?? ""
            reference.withLock { $0 = text }
        }
        whole.start()
        let first = try self.run("/usr/bin/curl", ["-sN", "--max-time", "2", "-H", header, stream]).stdout
        let before = frames(first)
        let lastSeen = try XCTUnwrap(before.last?.id, "events came in the first two seconds: \(first)")
        Thread.sleep(forTimeInterval: 1.5)
        let second = try self.run("/usr/bin/curl", ["-sN", "--max-time", "60", "-H", header, "-H", "Last-Event-ID: \(lastSeen)", stream]).stdout
        let after = frames(second)
        XCTAssertFalse(after.contains { $0.event == "reset" }, "nothing was dropped: no reset")
        let result = run.wait()
        XCTAssertEqual(result.status, 0, result.stderr)
        while reference.withLock({ $0.isEmpty }) { Thread.sleep(forTimeInterval: 0.05) }

        let all = frames(reference.withLock { $0 })
        let rejoined = before + after
        guard let start = all.firstIndex(where: { $0.id == rejoined.first?.id }) else {
            return XCTFail("the reference never saw \(rejoined.first?.id ?? "-")")
        }
        XCTAssertEqual(rejoined.map(\.id), all[start...].map(\.id), "the same events, in order, none twice")
        XCTAssertEqual(rejoined.map(\.data), all[start...].map(\.data))
        XCTAssertEqual(Set(rejoined.map(\.id)).count, rejoined.count)
        XCTAssertGreaterThan(after.count, 3)
        XCTAssertTrue(after.last?.data.contains("\"event\":\"summary\"") ?? false, "the stream ends with the run's summary")
        let finished = all.filter { $0.data.contains("\"event\":\"finished\"") }
        XCTAssertEqual(finished.count, 8, "every job's end is in the stream")
    }

    func testListeningBeyondThisMachineNeedsATokenFileOfTheUsersOwn() throws {
        let fixture = try QueueFixture()
        let open = try fixture.run(["--listen", "0.0.0.0:0"])
        XCTAssertEqual(open.status, 2)
        XCTAssertTrue(open.stderr.contains("--api-token-file"), open.stderr)
        let tokenFile = fixture.root + "/token"
        try "0123456789abcdef0123456789abcdef\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
        chmod(tokenFile, 0o644)
        let readable = try fixture.run(["--listen", "127.0.0.1:0", "--api-token-file", tokenFile])
        XCTAssertEqual(readable.status, 2)
        XCTAssertTrue(readable.stderr.contains("chmod 600"), readable.stderr)
        XCTAssertFalse(readable.stderr.contains("0123456789abcdef0123456789abcdef"))
        XCTAssertEqual(try fixture.run(["--listen", "not-an-address"]).status, 2)
        XCTAssertEqual(try fixture.run(["--api-token-file", tokenFile]).status, 2, "a token file without --listen is a mistake")

        // The user's own token is the one the API takes.
        chmod(tokenFile, 0o600)
        let port = try freePort()
        let run = try fixture.start(["--watch", "--listen", "127.0.0.1:\(port)", "--api-token-file", tokenFile, "--quiet"])
        defer { if run.process.isRunning { run.process.terminate() } }
        try waitForAPI("http://127.0.0.1:\(port)")
        XCTAssertEqual(try curl("GET", "http://127.0.0.1:\(port)/v1/summary", token: "0123456789abcdef0123456789abcdef").status, 200)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.queue + "/.transferd/api.token"))
        // A second run on a port in use says so.
        let other = try QueueFixture("second")
        let busy = try other.run(["--listen", "127.0.0.1:\(port)"])
        XCTAssertEqual(busy.status, 2)
        XCTAssertTrue(busy.stderr.contains("could not listen"), busy.stderr)
        kill(run.process.processIdentifier, SIGTERM)
        XCTAssertEqual(run.wait().status, 130)
    }
}
