import Foundation
import TestSupport
import TransferCore
import XCTest

/// A fleet whose store URL lists the primary and its standby with
/// `target_session_attrs=read-write`, as operators write it for failover: the workers use the
/// primary alone, and when the primary is gone and the standby promoted, they move to it and
/// finish every job there.
///
/// The standby is the one scripts/servers starts (`TRANSFERD_TEST_POSTGRES_STANDBY`, streaming
/// from the test server). The workers reach the primary through a `CutProxy`, so the failover
/// takes the primary away from them alone (other tests keep using it). It is a planned
/// switchover: the standby has replayed everything the primary wrote before it is promoted, as
/// a failover tool waits for; what asynchronous replication can lose in a crash is not tested.
final class FleetFailoverTests: XCTestCase {
    func testAFailoverMovesTheFleetToThePromotedStandby() throws {
        let environment = ProcessInfo.processInfo.environment
        let primaryAdmin = try TestStores.postgresURL()
        let standbyAdmin = try XCTUnwrap(environment["TRANSFERD_TEST_POSTGRES_STANDBY"],
                                         "scripts/servers sets TRANSFERD_TEST_POSTGRES_STANDBY")
        XCTAssertEqual(try TestStores.query(standbyAdmin, "SELECT pg_is_in_recovery()"), [["t"]],
                       "the standby was promoted by an earlier run of this test: restart the test servers")

        let store = try TestStores.freshPostgresDatabase()
        let components = try XCTUnwrap(URLComponents(string: store))
        let database = String(components.path.dropFirst())
        var standbyComponents = try XCTUnwrap(URLComponents(string: standbyAdmin))
        standbyComponents.path = "/" + database
        let standby = try XCTUnwrap(standbyComponents.string)
        try waitUntil("the standby has the new database", timeout: 30) {
            (try? TestStores.query(standbyAdmin, "SELECT 1 FROM pg_database WHERE datname = '\(database)'")) == [["1"]]
        }

        // The standby alone, asked for a read-write session: one sentence, nothing written.
        let folder = try scratchDirectory()
        var alone = standbyComponents
        alone.queryItems = [URLQueryItem(name: "target_session_attrs", value: "read-write")]
        let refused = try TransferdProcess.run(["status", "--store", try XCTUnwrap(alone.string)], directory: folder)
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("accepts writes (each one reachable is a read-only standby)"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("target_session_attrs=read-write"), refused.stderr)

        // The fleet's URL: the primary (through the proxy), then the standby.
        let proxy = try CutProxy(store: store)
        let credentials = "\(components.user ?? ""):\(components.password ?? "")"
        let fleet = "postgres://\(credentials)@127.0.0.1:\(proxy.port),127.0.0.1:\(standbyComponents.port ?? 0)/\(database)"
            + "?target_session_attrs=read-write"

        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let count = 40
        let names = try Fixtures.makeFiles(in: servers, folder: "failover", sizes: Array(repeating: 3 << 20, count: count))
        try fixture.drop("jobs.json", jobs: names.enumerated().map { index, name in
            ["id": "j\(index)", "url": servers.http.absoluteString + "/crawl/" + name, "dest": "out/j\(index).bin"]
        })
        var workerEnvironment = environment
        workerEnvironment["TRANSFERD_STORE"] = fleet
        let workers = try ["A", "B"].map { name in
            try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "3", "--lease", "5", "--worker", name, "--quiet"],
                                 directory: fixture.root, environment: workerEnvironment)
        }
        func done(_ url: String) -> Int {
            guard let rows = try? TestStores.query(url, "SELECT count(*) FROM transferd_jobs WHERE state = 'done'"),
                  let value = rows.first?.first ?? nil else { return 0 }
            return Int(value) ?? 0
        }
        try waitUntil("the first jobs are done", timeout: 60) { done(store) >= 4 }

        // The failover: the primary is gone for the fleet; once the standby has replayed all it
        // wrote, the standby is promoted.
        proxy.cut()
        let written = try XCTUnwrap(try TestStores.query(primaryAdmin, "SELECT pg_current_wal_lsn()").first?.first ?? nil)
        try waitUntil("the standby has replayed the primary's last write", timeout: 30) {
            (try? TestStores.query(standbyAdmin, "SELECT pg_last_wal_replay_lsn() >= '\(written)'::pg_lsn")) == [["t"]]
        }
        let doneAtFailover = done(store)
        XCTAssertEqual(try TestStores.query(standbyAdmin, "SELECT pg_promote()"), [["t"]])

        for (name, worker) in zip(["A", "B"], workers) {
            let ended = worker.wait()
            XCTAssertEqual(ended.status, 0, "worker \(name): \(ended.stderr)")
        }
        XCTAssertLessThan(doneAtFailover, count, "the failover came before the end of the queue")
        XCTAssertEqual(done(store), doneAtFailover, "nothing was written to the old primary after it was cut off")
        let states = try TestStores.query(standby, "SELECT id, state FROM transferd_jobs ORDER BY id")
        XCTAssertEqual(states.count, count)
        XCTAssertEqual(states.filter { $0[1] == "done" }.count, count, "\(states.filter { $0[1] != "done" })")
        for (index, name) in names.enumerated() {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/out/j\(index).bin"), try servers.sha256(of: name), "j\(index)")
        }
    }

    private func waitUntil(_ what: String, timeout: TimeInterval, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return }
            usleep(100_000)
        }
        throw TimedOut(description: "timed out after \(Int(timeout)) s waiting until \(what)")
    }

    private struct TimedOut: Error, CustomStringConvertible {
        let description: String
    }
}
