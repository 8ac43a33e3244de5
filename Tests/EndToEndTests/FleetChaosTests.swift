import Foundation
import TestSupport
import TransferCore
import XCTest

/// Four workers on one PostgreSQL store run 400 jobs (downloads from nginx and
/// multipart uploads to SeaweedFS) while workers are killed with -9 at random
/// moments and restarted, and one is frozen past its lease and resumed.
final class FleetChaosTests: XCTestCase {
    private let downloads = 300
    private let uploads = 100
    private let downloadSize = 2 << 20
    private let uploadSize = 6 << 20
    private let partSize = 5 << 20

    func testFourWorkersFinishFourHundredJobsThroughKillsAndAFreeze() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        guard let seaweed = peers.seaweedConfiguration, var environment = peers.seaweedEnvironment else {
            return XCTFail("TRANSFERD_TEST_SEAWEED_S3 is not set: scripts/servers starts SeaweedFS for this test")
        }
        let store = try TestStores.freshPostgresDatabase()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "chaos", sizes: Array(repeating: downloadSize, count: downloads))
        let client = S3Client(configuration: seaweed, transport: CurlTransport())
        let bucket = "chaos-\(UUID().uuidString.prefix(8).lowercased())"
        try await client.createBucket(bucket)
        try FileManager.default.createDirectory(atPath: fixture.root + "/up", withIntermediateDirectories: true)
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        for index in 0..<uploads {
            try random.readData(ofLength: uploadSize).write(to: URL(fileURLWithPath: fixture.root + "/up/u\(index).bin"))
        }
        try random.close()
        var jobs: [[String: Any]] = []
        for (index, name) in names.enumerated() {
            // nginx sends /crawl/ at 1 MB/s per connection, so kills find downloads half done.
            jobs.append(["id": "d\(index)", "url": servers.http.absoluteString + "/crawl/" + name, "dest": "down/d\(index).bin"])
        }
        for index in 0..<uploads {
            // Held to 8 MB/s each, so kills find uploads between their parts.
            jobs.append(["id": "u\(index)", "type": "s3-upload", "url": "s3://\(bucket)/u\(index).bin", "source": "up/u\(index).bin",
                         "part_size": "5M", "parts_in_flight": 2, "limit_rate": "8M"])
        }
        try fixture.drop("chaos.json", jobs: jobs.shuffled())
        let logStart = try nginxLogSize(servers)
        environment["TRANSFERD_STORE"] = store
        let shared = try PostgresQueueStore(url: store, worker: "observer")

        var live: [String: TransferdProcess] = [:]
        var workerNames: [String: String] = [:]
        var ended: [(String, TransferdProcess.Result)] = []
        var generation = 0
        func start(_ slot: Int, sameName: Bool) throws {
            if !sameName { generation += 1 }
            let name = "w\(slot)-\(generation)"
            workerNames["\(slot)"] = name
            live["\(slot)"] = try TransferdProcess(["run", "--queue", fixture.queue, "--jobs", "4", "--lease", "2", "--worker", name, "--quiet"],
                                                  directory: fixture.root, environment: environment)
        }
        for slot in 0..<4 { try start(slot, sameName: true) }
        let started = Date()
        var kills = 0
        // Jobs held by a worker at the moment it was killed or frozen, by kind.
        var interrupted = (downloads: 0, uploads: 0)
        var froze = false
        var generator = SystemRandomNumberGenerator()
        while Date().timeIntervalSince(started) < 300 {
            try await Task.sleep(nanoseconds: UInt64.random(in: 700_000_000...2_000_000_000, using: &generator))
            let counts = try shared.counts()
            if (counts[.done] ?? 0) + (counts[.failed] ?? 0) + (counts[.cancelled] ?? 0) == jobs.count { break }
            let slot = Int.random(in: 0..<4, using: &generator)
            guard let process = live["\(slot)"] else { continue }
            let held = try shared.jobs(in: .running).filter { $0.worker == workerNames["\(slot)"] }
            interrupted.downloads += held.filter { $0.id.hasPrefix("d") }.count
            interrupted.uploads += held.filter { $0.id.hasPrefix("u") }.count
            if !froze && kills >= 3 {
                // Frozen past its lease (2 s): its jobs move to the others; woken, it must stop writing them.
                froze = true
                kill(process.process.processIdentifier, SIGSTOP)
                try await Task.sleep(nanoseconds: 3_500_000_000)
                kill(process.process.processIdentifier, SIGCONT)
                continue
            }
            kill(process.process.processIdentifier, SIGKILL)
            ended.append(("killed", process.wait()))
            kills += 1
            // Half come back under their old name (they take back their own jobs at once), half as new workers.
            try start(slot, sameName: Bool.random(using: &generator))
        }
        for (_, process) in live { ended.append(("live", process.wait())) }
        let elapsed = Date().timeIntervalSince(started)
        for (kind, result) in ended where kind == "live" {
            XCTAssertEqual(result.status, 0, result.stderr)
        }
        XCTAssertGreaterThanOrEqual(kills, 3, "the run ended before the chaos did")
        XCTAssertTrue(froze, "no worker was frozen")
        XCTAssertGreaterThan(interrupted.uploads, 0, "no kill or freeze found an upload in flight")
        XCTAssertGreaterThan(interrupted.downloads, 0, "no kill or freeze found a download in flight")

        let final = try shared.jobs()
        let notDone = final.filter { $0.state != .done }
        XCTAssertEqual(notDone.count, 0, "\(notDone.map { ($0.id, $0.state.rawValue, $0.lastError ?? "") })")
        for (index, name) in names.enumerated() {
            let path = fixture.root + "/down/d\(index).bin"
            XCTAssertEqual(try? SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: name), "d\(index)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".transferd-part"), "d\(index) left its partial file")
        }
        for index in 0..<uploads {
            let head = try await client.headObject(bucket: bucket, key: "u\(index).bin")
            XCTAssertTrue(try S3MultipartUpload.holds(fixture.root + "/up/u\(index).bin", size: head.size, etag: head.etag,
                                                      requestedPartSize: Int64(partSize)),
                          "u\(index): the object is not the file (\(head.size) bytes, ETag \(head.etag))")
        }
        let open = try await client.send("ListMultipartUploads", method: "GET", bucket: bucket, key: "", query: "uploads=")
        XCTAssertFalse(open.body.contains("<UploadId>"), "orphaned multipart uploads: \(open.body)")

        let served = try nginxBytesServed(servers, pathPrefix: "/crawl/chaos/", since: logStart)
        let data = Int64(downloads * downloadSize)
        print("chaos: \(jobs.count) jobs, \(kills) kills, 1 freeze, \(interrupted.downloads) downloads and "
              + "\(interrupted.uploads) uploads held by the worker killed or frozen, \(String(format: "%.1f", elapsed)) s; nginx sent \(served) bytes "
              + "for \(data) (\(String(format: "%.3f", Double(served) / Double(data)))x)")
        XCTAssertLessThanOrEqual(Double(served), Double(data) * 1.1, "re-fetched too much: \(served) bytes for \(data)")
    }
}
