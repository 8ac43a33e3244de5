import Foundation
import TestSupport
import TransferCore
import XCTest

/// Several `transferd run --store postgres://…` processes working one queue,
/// with workers killed (-9) and frozen (SIGSTOP past their lease) on the way.
final class FleetTests: XCTestCase {
    /// Downloads through nginx's rate-limited location (16 MB/s per connection), so the
    /// run lasts long enough to kill and freeze workers in the middle of it.
    func testAFleetFinishesEveryJobOnceThroughKillsAndAFrozenWorker() async throws {
        let servers = try TestServers.current()
        let store = try TestStores.freshPostgresDatabase()
        let fixture = try QueueFixture()
        let count = 12
        let names = try Fixtures.makeFiles(in: servers, folder: "fleet", sizes: Array(repeating: 48 << 20, count: count))
        try fixture.drop("fleet.json", jobs: names.enumerated().map { index, name in
            ["id": "f\(index)", "url": servers.http.absoluteString + "/slow/" + name, "dest": "out/f\(index).bin"]
        })
        let logStart = try nginxLogSize(servers)
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_STORE"] = store
        func worker(_ name: String) throws -> TransferdProcess {
            try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "2", "--lease", "2", "--worker", name, "--quiet"],
                                 directory: fixture.root, environment: environment)
        }
        let shared = try PostgresQueueStore(url: store, worker: "observer")
        var workers = [try worker("a"), try worker("b"), try worker("c")]
        let started = Date()

        // Worker a dies (kill -9) with jobs in flight; its jobs wait out the lease and move on.
        try await waitUntil(timeout: 30) { try shared.jobs(in: .running).contains { $0.worker == "a" && $0.bytesDone > 0 } }
        kill(workers[0].process.processIdentifier, SIGKILL)
        _ = workers[0].wait()
        // Worker b freezes past its lease, then goes on: it must not record or rename what moved on.
        try await waitUntil(timeout: 30) { try shared.jobs(in: .running).contains { $0.worker == "b" && $0.bytesDone > 0 } }
        let frozenJobs = Set(try shared.jobs(in: .running).filter { $0.worker == "b" }.map(\.id))
        kill(workers[1].process.processIdentifier, SIGSTOP)
        // A new worker joins, with room to take over what the frozen one holds.
        workers.append(try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "4", "--lease", "2", "--worker", "d", "--quiet"],
                                            directory: fixture.root, environment: environment))
        var moved: Set<String> = []
        try await waitUntil(timeout: 30) {
            moved = Set(try shared.jobs().filter { frozenJobs.contains($0.id) && $0.worker != nil && $0.worker != "b" }.map(\.id))
            return !moved.isEmpty
        }
        kill(workers[1].process.processIdentifier, SIGCONT)
        XCTAssertFalse(moved.isEmpty, "a job of the frozen worker moved to another while it was stopped")

        var results: [String: TransferdProcess.Result] = [:]
        for (name, process) in zip(["b", "c", "d"], workers.dropFirst()) { results[name] = process.wait() }
        let elapsed = Date().timeIntervalSince(started)
        for (name, result) in results {
            XCTAssertEqual(result.status, 0, "worker \(name): \(result.stderr)")
        }
        let jobs = try shared.jobs()
        XCTAssertEqual(jobs.filter { $0.state == .done }.count, count, "\(jobs.map { ($0.id, $0.state.rawValue, $0.lastError ?? "") })")
        for index in 0..<count {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/out/f\(index).bin"), try servers.sha256(of: names[index]),
                           "f\(index)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.root + "/out/f\(index).bin.transferd-part"))
        }
        let served = try nginxBytesServed(servers, pathPrefix: "/slow/fleet/", since: logStart)
        let data = Int64(count * (48 << 20))
        print("fleet: \(count) jobs of 48 MiB in \(String(format: "%.1f", elapsed)) s; nginx sent \(served) bytes for \(data) "
              + "(\(String(format: "%.3f", Double(served) / Double(data)))x)")
        // The killed worker's jobs resume from their last checkpoint (every 256 KiB); the frozen
        // one's from the checkpoint of before the freeze. nginx also counts what sat in the socket
        // buffers of the killed and frozen connections (several MiB each on loopback): measured
        // 1.010-1.072x; the bound leaves room for that.
        XCTAssertLessThanOrEqual(Double(served), Double(data) * 1.15, "re-fetched too much: \(served) bytes for \(data)")
        XCTAssertEqual(try shared.workers().map(\.name).filter { $0 != "a" }, [], "the workers that ended left the list")
    }

    func testStatusShowsTheWorkersAndWhoHoldsEachJob() async throws {
        let servers = try TestServers.current()
        let store = try TestStores.freshPostgresDatabase()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "fleet-status", sizes: [32 << 20])
        try fixture.drop("one.json", jobs: [["id": "slow-one", "url": servers.http.absoluteString + "/slow/" + names[0],
                                            "dest": "out/one.bin"]])
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_STORE"] = store
        let run = try TransferdProcess(["run", "--queue", fixture.queue, "--worker", "status-worker", "--quiet"],
                                       directory: fixture.root, environment: environment)
        let shared = try PostgresQueueStore(url: store, worker: "observer")
        try await waitUntil(timeout: 30) { try shared.job("slow-one")?.state == .running }
        let status = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root, environment: environment)
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("(worker status-worker)"), status.stdout)
        XCTAssertTrue(status.stdout.contains("1 worker:"), status.stdout)
        let password = URLComponents(string: store)?.password ?? "no password"
        XCTAssertFalse(status.stdout.contains(password) || status.stderr.contains(password), "the password is never shown")
        // A wrong password and an unparsable URL: clear errors that never show the password.
        guard var wrong = URLComponents(string: store) else { return XCTFail("bad store URL") }
        wrong.password = "wrong-password-0815"
        let refused = try TransferdProcess.run(["status", "--queue", fixture.queue, "--store", wrong.string!], directory: fixture.root)
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("password authentication failed"), refused.stderr)
        XCTAssertFalse(refused.stderr.contains("wrong-password-0815"), refused.stderr)
        let garbled = "postgres://transferd:garbled-secret-4711@[::1/transfers"
        let unparsable = try TransferdProcess.run(["status", "--queue", fixture.queue, "--store", garbled], directory: fixture.root)
        XCTAssertNotEqual(unparsable.status, 0)
        XCTAssertTrue(unparsable.stderr.contains("not a valid PostgreSQL connection URL"), unparsable.stderr)
        XCTAssertFalse(unparsable.stderr.contains("garbled-secret-4711"), unparsable.stderr)
        let result = run.wait()
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    /// PgBouncer in transaction mode, as operators put it in front of PostgreSQL: each
    /// transaction may run on another server session (round robin over three here), so no named
    /// statement or session setting may be relied on, and none may be left for other clients.
    /// Two workers and a status through it: every job done once.
    func testTheFleetWorksThroughPgBouncerInTransactionMode() throws {
        let servers = try TestServers.current()
        guard let bouncer = ProcessInfo.processInfo.environment["TRANSFERD_TEST_PGBOUNCER"], !bouncer.isEmpty else {
            return XCTFail("TRANSFERD_TEST_PGBOUNCER is not set: scripts/servers starts PgBouncer (scripts/setup installs it)")
        }
        let direct = try TestStores.freshPostgresDatabase()
        guard var through = URLComponents(string: bouncer), let name = URLComponents(string: direct)?.path else {
            return XCTFail("bad store URLs")
        }
        through.path = name
        let store = through.string!
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "fleet-bouncer", sizes: Array(repeating: 20_000, count: 40))
        try fixture.drop("jobs.json", jobs: names.enumerated().map { index, file in
            ["id": "j\(index)", "url": servers.http.absoluteString + "/" + file, "dest": "out/\(index).bin"]
        })
        let ingest = try TransferdProcess.run(["ingest", "--queue", fixture.queue, "--store", store], directory: fixture.root)
        XCTAssertEqual(ingest.status, 0, ingest.stderr)
        // A status first: a read-only session's setting must not stay behind for the workers.
        let before = try TransferdProcess.run(["status", "--queue", fixture.queue, "--store", store], directory: fixture.root)
        XCTAssertEqual(before.status, 0, before.stderr)
        let workers = try (0..<2).map { index in
            try TransferdProcess(["run", "--queue", fixture.queue, "--store", store, "--worker", "bouncer-\(index)", "--jobs", "4",
                                  "--quiet"], directory: fixture.root)
        }
        for (index, worker) in workers.enumerated() {
            let result = worker.wait()
            XCTAssertEqual(result.status, 0, "worker \(index): \(result.stderr)")
        }
        let status = try TransferdProcess.run(["status", "--queue", fixture.queue, "--store", store], directory: fixture.root)
        XCTAssertTrue(status.stdout.hasPrefix("40 jobs: 40 done"), status.stdout + status.stderr)
        // Each job was claimed once: as many finished rows as jobs, straight in the database.
        let rows = try TestStores.query(direct, "SELECT count(*), sum(CASE WHEN state = 'done' THEN 1 ELSE 0 END) FROM transferd_jobs")
        XCTAssertEqual(rows.first?.first ?? nil, "40")
        for index in 0..<40 {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: "\(fixture.root)/out/\(index).bin")).count, 20_000)
        }
    }

}
