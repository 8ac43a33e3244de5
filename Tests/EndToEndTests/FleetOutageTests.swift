import Foundation
import TestSupport
import TransferCore
import XCTest

/// Workers on a PostgreSQL store whose connections are cut (`CutProxy`): every connection
/// closed at once and new ones refused, as a restart of the server or an outage of the network
/// does to its clients, then accepted again.
final class FleetOutageTests: XCTestCase {
    /// A fresh PostgreSQL store behind a cut proxy, and a queue of `count` downloads of 3 MiB at
    /// 1 MB/s (nginx sends the first second's MiB at once, the rest in about 2 s).
    private func outageQueue(folder: String, count: Int) throws
        -> (servers: TestServers, names: [String], proxy: CutProxy, fixture: QueueFixture,
            environment: [String: String], observer: PostgresQueueStore) {
        let servers = try TestServers.current()
        let store = try TestStores.freshPostgresDatabase()
        let proxy = try CutProxy(store: store)
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: folder, sizes: Array(repeating: 3 << 20, count: count))
        try fixture.drop("jobs.json", jobs: names.enumerated().map { index, name in
            ["id": "j\(index)", "url": servers.http.absoluteString + "/crawl/" + name, "dest": "out/j\(index).bin"]
        })
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_STORE"] = proxy.url
        return (servers, names, proxy, fixture, environment, try PostgresQueueStore(url: store, worker: "observer"))
    }

    /// Two workers, 40 downloads (`outageQueue`), the store's connections cut for `outage` seconds
    /// once the first jobs are done: both workers wait, reconnect and finish every job.
    private func runThroughAnOutage(of outage: TimeInterval, lease: Int) throws {
        let (servers, names, proxy, fixture, environment, observer) = try outageQueue(folder: "outage", count: 40)
        let workers = try ["A", "B"].map { name in
            try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "3", "--lease", String(lease), "--worker", name, "--quiet"],
                                 directory: fixture.root, environment: environment)
        }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, (try observer.counts()[.done] ?? 0) < 4 { usleep(100_000) }
        XCTAssertGreaterThanOrEqual(try observer.counts()[.done] ?? 0, 4, "the run should be under way")
        proxy.cut()
        usleep(UInt32(outage * 1_000_000))
        proxy.restore()
        for (name, worker) in zip(["A", "B"], workers) {
            let ended = worker.wait()
            XCTAssertEqual(ended.status, 0, "worker \(name): \(ended.stderr)")
        }
        let jobs = try observer.jobs()
        XCTAssertEqual(jobs.filter { $0.state == .done }.count, 40, "\(jobs.filter { $0.state != .done }.map { ($0.id, $0.state) })")
        for (index, name) in names.enumerated() {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/out/j\(index).bin"), try servers.sha256(of: name), "j\(index)")
        }
    }

    /// As `pg_ctl restart -m fast` does in about 0.3 s. Before, every worker exited 4 at once.
    func testAFastRestartOfTheDatabaseStopsNoWorker() throws {
        try runThroughAnOutage(of: 0.5, lease: 30)
    }

    /// A minute without the database, longer than the lease: each worker waits, then renews
    /// what it still holds or drops what another took, and the jobs end done once each.
    func testAMinuteWithoutTheDatabaseUnderLoad() throws {
        try runThroughAnOutage(of: 60, lease: 10)
    }

    /// Past `--store-outage` a worker stops, saying why and what it had done.
    func testAWorkerGivesUpAfterItsOutageLimitWithASummary() throws {
        let (_, _, proxy, fixture, environment, observer) = try outageQueue(folder: "outage-limit", count: 12)
        let worker = try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "2", "--store-outage", "3", "--worker", "A"],
                                          directory: fixture.root, environment: environment)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, (try observer.counts()[.done] ?? 0) < 2 { usleep(100_000) }
        proxy.cut()
        let started = Date()
        let ended = worker.wait()
        let waited = Date().timeIntervalSince(started)
        proxy.restore()
        XCTAssertEqual(ended.status, 4, ended.stderr + ended.stdout)
        XCTAssertGreaterThanOrEqual(waited, 3, "it waited out --store-outage")
        XCTAssertLessThan(waited, 30)
        XCTAssertTrue(ended.stderr.contains("unreachable for"), ended.stderr)
        XCTAssertTrue(ended.stderr.contains("--store-outage"), ended.stderr)
        XCTAssertTrue(ended.stderr.contains("this run had finished"), ended.stderr)
        XCTAssertFalse(ended.stderr.contains(try XCTUnwrap(URLComponents(string: proxy.url)?.password)), "no password shown")
    }
}
