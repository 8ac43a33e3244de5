import Foundation
import TestSupport
import TransferCore
import XCTest

/// One truth in every view: one queue run, then what each view says of it. The JSON events'
/// summary, `status`, `status --json`, `GET /v1/summary` and `/metrics` must give the same
/// counts, and the run's bytes must be the files' bytes in every view that counts them.
final class ViewsAgreeTests: XCTestCase {
    func testEveryViewGivesTheSameCountsAndBytes() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let sizes = [300_000, 1_200_000, 40_000]
        let names = try Fixtures.makeFiles(in: servers, folder: "views-agree", sizes: sizes)
        try fixture.drop("jobs.json", jobs: names.enumerated().map { index, file in
            ["id": "ok-\(index)", "url": servers.http.absoluteString + "/" + file, "dest": "out/\(index).bin"]
        } + [["id": "missing", "url": servers.http.absoluteString + "/views-agree/none.bin", "dest": "out/none.bin"]])
        let port = try ControlAPIClient.freePort()
        let run = try fixture.start(["--watch", "--listen", "127.0.0.1:\(port)", "--json", "--jobs", "2"])
        defer { if run.process.isRunning { run.process.terminate() } }
        var api = ControlAPIClient(base: "http://127.0.0.1:\(port)")
        try api.waitUntilServing()
        api.token = try String(contentsOfFile: fixture.queue + "/.transferd/api.token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        for id in ["ok-0", "ok-1", "ok-2"] { try api.waitForState(id, ["done"]) }
        try api.waitForState("missing", ["failed"])
        // Every job has ended: nothing the views read moves from here.
        let summary = try api.request("GET", "/v1/summary").json
        let metrics = try api.request("GET", "/metrics", token: .some(nil)).body
        let statusText = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        let statusJSON = try TransferdProcess.run(["status", "--queue", fixture.queue, "--json"], directory: fixture.root)
        kill(run.process.processIdentifier, SIGINT)
        let ended = run.wait()
        XCTAssertEqual(ended.status, 130, ended.stderr)
        let events = ended.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let final = try XCTUnwrap(events.last { $0["event"] as? String == "summary" }, ended.stdout)
        // Each download said when its bytes were all in, before it was done.
        let completing = events.filter { $0["event"] as? String == "completing" }.compactMap { $0["id"] as? String }
        XCTAssertEqual(Set(completing), ["ok-0", "ok-1", "ok-2"], ended.stdout)

        func metric(_ name: String, _ labels: String) -> Int? {
            metrics.split(separator: "\n").first { $0.hasPrefix(name + labels + " ") }.flatMap { Int($0.split(separator: " ").last!) }
        }
        let jobs = summary["jobs"] as? [String: Int] ?? [:]
        let rows = statusJSON.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        func statusCount(_ state: String) -> Int { rows.filter { $0["state"] as? String == state }.count }
        for (state, count) in [("done", 3), ("failed", 1)] {
            XCTAssertEqual(final[state] as? Int, count, "the summary event's \(state)")
            XCTAssertEqual(jobs[state], count, "/v1/summary's \(state)")
            XCTAssertEqual(metric("transferd_jobs", "{state=\"\(state)\"}"), count, "/metrics' \(state) jobs")
            XCTAssertEqual(metric("transferd_jobs_finished_total", "{state=\"\(state)\"}"), count, "/metrics' \(state) this run")
            XCTAssertEqual(statusCount(state), count, "status --json's \(state)")
        }
        XCTAssertTrue(statusText.stdout.hasPrefix("4 jobs: 3 done, 1 failed"), statusText.stdout)
        let totals = summary["run"] as? [String: Any] ?? [:]
        XCTAssertEqual(totals["done"] as? Int, 3, "/v1/summary's run totals")
        XCTAssertEqual(totals["failed"] as? Int, 1)
        // Bytes: what the run moved is the files' size, in each view that counts it.
        let total = sizes.reduce(0, +)
        XCTAssertEqual(final["bytes"] as? Int, total, "the summary event's bytes")
        XCTAssertEqual(metric("transferd_bytes_total", "{direction=\"download\"}"), total, "/metrics' bytes")
        XCTAssertEqual(totals["bytes_done"] as? Int, total, "/v1/summary's run bytes")
        XCTAssertEqual(rows.compactMap { $0["bytes_done"] as? Int }.reduce(0, +), total, "status --json's bytes")
    }
}
