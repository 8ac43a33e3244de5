import Foundation
import TestSupport
import TransferCore
import XCTest

/// A worker frozen past its lease (SIGSTOP, a paused VM) while another takes its job over.
final class FleetFreezeTests: XCTestCase {
    /// Worker A is frozen mid-download; the file changes on the server; worker B takes the job
    /// over and starts it again from byte 0. A is woken once B has written well past where A
    /// stopped: its old bytes, still in its socket, go through its open descriptor. Before, that
    /// descriptor was on the file B was writing, so the finished file mixed both versions under
    /// a `done` row; now B writes a new file (`PartFile.replaced`) and A's bytes land in the old one.
    func testAFrozenWorkersLateWritesNeverReachTheFileItsSuccessorFinishes() throws {
        let servers = try TestServers.current()
        let store = try TestStores.freshPostgresDatabase()
        let fixture = try QueueFixture()
        let size = 12 << 20
        let name = try Fixtures.makeFiles(in: servers, folder: "freeze-\(UUID().uuidString.prefix(8))", sizes: [size])[0]
        // nginx sends /crawl/ at 1 MB/s: A is caught early, B's progress can be waited for.
        try fixture.drop("one.json", jobs: [["id": "f", "url": servers.http.absoluteString + "/crawl/" + name, "dest": "f.bin"]])
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_STORE"] = store
        let shared = try PostgresQueueStore(url: store, worker: "observer")
        func progress(of worker: String) throws -> Int64? {
            try shared.jobs(in: .running).first { $0.id == "f" && $0.worker == worker }?.bytesDone
        }
        func waitFor(_ what: String, seconds: TimeInterval = 30, _ condition: () throws -> Bool) throws {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if try condition() { return }
                usleep(100_000)
            }
            XCTFail("timed out waiting for \(what)")
        }

        let a = try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "1", "--lease", "2", "--worker", "A", "--quiet"],
                                     directory: fixture.root, environment: environment)
        try waitFor("A to write 2 MiB") { (try progress(of: "A") ?? 0) >= 2 << 20 }
        kill(a.process.processIdentifier, SIGSTOP)
        // A new version, put in place by rename: nginx keeps sending A's connection the old one.
        let path = servers.path(name)
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        try random.readData(ofLength: size).write(to: URL(fileURLWithPath: path + ".new"))
        try random.close()
        XCTAssertEqual(rename(path + ".new", path), 0)
        let expected = try SHA256Hasher.hex(ofFileAt: path)

        let b = try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "1", "--lease", "2", "--worker", "B", "--quiet"],
                                     directory: fixture.root, environment: environment)
        try waitFor("B to take the job over and write 6 MiB") { (try progress(of: "B") ?? 0) >= 6 << 20 }
        kill(a.process.processIdentifier, SIGCONT)
        let endedB = b.wait()
        let endedA = a.wait()
        XCTAssertEqual(endedB.status, 0, endedB.stderr)
        XCTAssertEqual(endedA.status, 0, "A drops the job it lost and ends: \(endedA.stderr)")
        let job = try XCTUnwrap(try shared.job("f"))
        XCTAssertEqual(job.state, .done, job.lastError ?? "")
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/f.bin"), expected,
                       "the finished file is the new version, with none of the frozen worker's old bytes")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fixture.root).filter { $0.hasPrefix("f.bin") }, ["f.bin"])
    }
}
