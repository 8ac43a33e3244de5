import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd put` as a user runs it, and upload jobs in the queue.
final class PutCommandTests: XCTestCase {
    /// kill -9 in the middle of a multipart upload, then the same command:
    /// only the missing parts are sent, the object is correct, no upload is
    /// left open. On moto and on SeaweedFS.
    func testKillNineMidUploadThenOnlyMissingPartsAreSent() throws {
        let servers = try TestServers.current()
        for target in try UploadServers.current().s3Targets {
            let directory = try scratchDirectory("kill-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory
            let source = directory + "/big.bin"
            try FileManager.default.copyItem(atPath: servers.path("1g.bin"), toPath: source)
            let bucket = "resume-\(UUID().uuidString.prefix(8).lowercased())"
            let client = S3Client(configuration: target.configuration, transport: CurlTransport())
            try blocking { try await client.createBucket(bucket) }

            let arguments = ["put", source, "s3://\(bucket)/big.bin", "--part-size", "8M", "--parts", "2"]
            let state = FileUploadStateStore(source: source, bucket: bucket, key: "big.bin", environment: ["HOME": directory])
            let first = try TransferdProcess(arguments, directory: directory, environment: environment)
            var recorded = 0
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                if let json = try state.load(),
                   let checkpoint = try? JSONDecoder().decode(S3UploadCheckpoint.self, from: Data(json.utf8)) {
                    recorded = checkpoint.parts.count
                    if recorded >= 20 { break }
                }
                usleep(20_000)
            }
            kill(first.process.processIdentifier, SIGKILL)
            _ = first.wait()
            let checkpoint = try XCTUnwrap(try state.load().flatMap { try? JSONDecoder().decode(S3UploadCheckpoint.self, from: Data($0.utf8)) })
            recorded = checkpoint.parts.count
            XCTAssertGreaterThanOrEqual(recorded, 20, target.name)
            XCTAssertLessThan(recorded, 128, target.name)

            let log = directory + "/second.log"
            let second = try TransferdProcess.run(arguments + ["--log-file", log], directory: directory, environment: environment)
            XCTAssertEqual(second.status, 0, "\(target.name): \(second.stderr)")
            let operations = try S3Operation.fromLog(log)
            XCTAssertEqual(operations.filter { $0 == "UploadPart" }.count, 128 - recorded, "\(target.name): only the missing parts")
            XCTAssertEqual(operations.filter { $0 == "CreateMultipartUpload" }.count, 0, "\(target.name): the same upload continued")
            XCTAssertTrue(operations.contains("ListParts"), "\(target.name): recorded parts were reconciled with the server")
            XCTAssertTrue(second.stderr.contains("resumed: \(128 - recorded) of 128 parts"), second.stderr)

            try blocking {
                let head = try await client.headObject(bucket: bucket, key: "big.bin")
                XCTAssertEqual(head.size, 1 << 30, target.name)
                let uploads = try await client.send("ListMultipartUploads", method: "GET", bucket: bucket, key: "", query: "uploads=")
                XCTAssertFalse(uploads.body.contains("<UploadId>"), "\(target.name): no orphaned upload: \(uploads.body.prefix(500))")
                let (url, headers) = try client.signedGetHeaders(bucket: bucket, key: "big.bin")
                let back = directory + "/back.bin"
                _ = try await DownloadEngine(transport: CurlTransport(), options: DownloadOptions(url: url, destination: back, headers: headers)).run()
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: back), try servers.sha256(of: "1g.bin"), target.name)
            }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    /// A 300 MiB form (two fields, two files) reaches the parser intact while
    /// the client's peak RSS stays small.
    func testLargeFormUploadsInConstantMemory() throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        let directory = try scratchDirectory()
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        let second = directory + "/second.bin"
        _ = FileManager.default.createFile(atPath: second, contents: nil)
        let writer = try FileHandle(forWritingTo: URL(fileURLWithPath: second))
        for _ in 0..<236 { writer.write(random.readData(ofLength: 1 << 20)) }
        try writer.close()
        let key = "big-\(UUID().uuidString.prefix(8))"
        let time = Process()
        time.executableURL = URL(fileURLWithPath: "/usr/bin/time")
        time.arguments = ["-f", "%M", "-o", directory + "/rss", try TransferdProcess.binary(), "put", servers.path("64m.bin"),
                          peers.form.appendingPathComponent("form/\(key)").absoluteString,
                          "--form", "kind=backup", "--form", "owner=ops", "--form", "extra=@\(second)", "-q"]
        try time.run()
        time.waitUntilExit()
        XCTAssertEqual(time.terminationStatus, 0)
        let peakKiB = Int(try String(contentsOfFile: directory + "/rss", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").last ?? "") ?? 0
        XCTAssertLessThan(peakKiB, 64 * 1024, "peak RSS \(peakKiB) KiB for a 300 MiB body")
        print("form upload of 300 MiB: peak RSS \(peakKiB / 1024) MiB")

        let last = try Data(contentsOf: URL(string: peers.form.absoluteString + "/_last/\(key)")!)
        let received = try JSONSerialization.jsonObject(with: last) as? [String: Any] ?? [:]
        XCTAssertEqual(received["fields"] as? [String: String], ["kind": "backup", "owner": "ops"])
        let files = received["files"] as? [[String: Any]] ?? []
        XCTAssertEqual(files.first { $0["field"] as? String == "file" }?["sha256"] as? String, try servers.sha256(of: "64m.bin"))
        XCTAssertEqual(files.first { $0["field"] as? String == "extra" }?["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: second))
    }

    func testUploadJobsRunInTheQueue() throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for target in peers.s3Targets {
            let fixture = try QueueFixture()
            try FileManager.default.createDirectory(atPath: fixture.root + "/data", withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: servers.path("64m.bin"), toPath: fixture.root + "/data/64m.bin")
            let bucket = "queue-\(UUID().uuidString.prefix(8).lowercased())"
            let client = S3Client(configuration: target.configuration, transport: CurlTransport())
            try blocking { try await client.createBucket(bucket) }
            let key = "queue-\(UUID().uuidString.prefix(8))"
            try fixture.drop("uploads.json", jobs: [
                ["id": "put", "type": "put", "url": servers.http.appendingPathComponent("upload/queue/\(key).bin").absoluteString,
                 "source": "data/64m.bin"],
                ["id": "form", "type": "form", "url": peers.form.appendingPathComponent("form/\(key)").absoluteString,
                 "fields": ["a": "b"], "files": [["field": "f", "path": "data/64m.bin"]]],
                ["id": "s3", "type": "s3-upload", "url": "s3://\(bucket)/from-queue.bin", "source": "data/64m.bin",
                 "part_size": "8M", "parts_in_flight": 3],
            ])
            let result = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(result.status, 0, "\(target.name): \(result.stderr)")
            XCTAssertEqual(try fixture.store().counts(), [.done: 3], target.name)
            let stored = (servers.www as NSString).deletingLastPathComponent + "/uploads/queue/\(key).bin"
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: stored), try servers.sha256(of: "64m.bin"), target.name)
            try blocking {
                let head = try await client.headObject(bucket: bucket, key: "from-queue.bin")
                XCTAssertEqual(head.size, 64 << 20, target.name)
                XCTAssertTrue(head.etag.hasSuffix("-8\""), "\(target.name): \(head.etag)")
            }

            // The same credentials serve downloads: an s3:// source in a download job.
            try fixture.drop("back.json", jobs: [["id": "s3-back", "url": "s3://\(bucket)/from-queue.bin", "dest": "back/"]])
            let back = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(back.status, 0, "\(target.name): \(back.stderr)")
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/back/from-queue.bin"), try servers.sha256(of: "64m.bin"),
                           target.name)
            let get = try TransferdProcess.run(["get", "s3://\(bucket)/from-queue.bin", "-o", "got.bin", "-c", "4"],
                                               directory: fixture.root, environment: target.environment)
            XCTAssertEqual(get.status, 0, "\(target.name): \(get.stderr)")
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/got.bin"), try servers.sha256(of: "64m.bin"), target.name)
        }
    }

    func testADirectoryUploadsAsOneObjectPerFileUnderThePrefix() throws {
        let servers = try TestServers.current()
        for target in try UploadServers.current().s3Targets {
            let fixture = try QueueFixture()
            let tree = fixture.root + "/site"
            try FileManager.default.createDirectory(atPath: tree + "/assets/img", withIntermediateDirectories: true)
            try Data("<h1>hi</h1>".utf8).write(to: URL(fileURLWithPath: tree + "/index.html"))
            try FileManager.default.copyItem(atPath: servers.path("1m.bin"), toPath: tree + "/assets/img/logo one.png")
            try FileManager.default.copyItem(atPath: servers.path("64m.bin"), toPath: tree + "/assets/big.bin")
            let bucket = "tree-\(UUID().uuidString.prefix(8).lowercased())"
            let client = S3Client(configuration: target.configuration, transport: CurlTransport())
            try blocking { try await client.createBucket(bucket) }
            try fixture.drop("tree.json", jobs: [["id": "tree", "type": "s3-upload", "url": "s3://\(bucket)/www/", "source": "site"]])
            let result = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(result.status, 0, "\(target.name): \(result.stderr)")
            try blocking {
                let expected: [(String, Int64)] = [("www/index.html", 11), ("www/assets/img/logo one.png", 1 << 20),
                                                   ("www/assets/big.bin", 64 << 20)]
                for (key, size) in expected {
                    let head = try await client.headObject(bucket: bucket, key: key)
                    XCTAssertEqual(head.size, size, "\(target.name): \(key)")
                }
                let big = try await client.headObject(bucket: bucket, key: "www/assets/big.bin")
                XCTAssertTrue(big.etag.hasSuffix("-8\""), "\(target.name): the big file went up in parts: \(big.etag)")
            }
            XCTAssertEqual(try fixture.store().job("tree")?.bytesTotal, 11 + (1 << 20) + (64 << 20), target.name)
        }
    }

    func testAddWritesAnUploadJob() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        try FileManager.default.copyItem(atPath: servers.path("1m.bin"), toPath: fixture.root + "/report.bin")
        let target = servers.http.appendingPathComponent("upload/added/\(UUID().uuidString).bin")
        let added = try TransferdProcess.run(["add", "--upload", "report.bin", target.absoluteString, "--queue", fixture.queue],
                                             directory: fixture.root)
        XCTAssertEqual(added.status, 0, added.stderr)
        let result = try fixture.run()
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try fixture.store().jobs().map(\.spec.kind), [.put])
        let stored = (servers.www as NSString).deletingLastPathComponent + "/uploads/added/" + target.lastPathComponent
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: stored), try servers.sha256(of: "1m.bin"))
    }

    /// `--limit-rate` caps what an upload sends: `put` to nginx and to S3, and
    /// a queue run's cap on an upload job (curl backend); the urlsession
    /// backend, which cannot, refuses it up front and says so.
    func testLimitRateCapsUploads() throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        let directory = try scratchDirectory()
        try FileManager.default.copyItem(atPath: servers.path("1m.bin"), toPath: directory + "/one.bin")
        // 1 MiB at 256 KiB/s takes 4 s; anything under 2.5 s means the cap was not applied.
        let target = servers.http.appendingPathComponent("upload/limited/\(UUID().uuidString).bin").absoluteString
        var started = Date()
        let plain = try TransferdProcess.run(["put", "one.bin", target, "--limit-rate", "256K"], directory: directory)
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 2.5, "put --limit-rate 256K sent 1 MiB too fast")

        let bucket = "limited-\(UUID().uuidString.prefix(8).lowercased())"
        let client = S3Client(configuration: peers.configuration, transport: CurlTransport())
        try blocking { try await client.createBucket(bucket) }
        started = Date()
        let s3 = try TransferdProcess.run(["put", "one.bin", "s3://\(bucket)/one.bin", "--limit-rate", "256K"],
                                          directory: directory, environment: peers.environment)
        XCTAssertEqual(s3.status, 0, s3.stderr)
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 2.5, "put s3:// --limit-rate 256K sent 1 MiB too fast")

        let refused = try TransferdProcess.run(["put", "one.bin", target, "--limit-rate", "256K", "--transport", "urlsession"],
                                               directory: directory)
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("urlsession backend cannot cap an upload"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--transport curl"), refused.stderr)

        let fixture = try QueueFixture()
        try FileManager.default.copyItem(atPath: servers.path("1m.bin"), toPath: fixture.root + "/one.bin")
        try fixture.drop("up.json", jobs: [["id": "up", "type": "s3-upload", "url": "s3://\(bucket)/queued.bin", "source": "one.bin"]])
        started = Date()
        let run = try TransferdProcess.run(["run", "--queue", fixture.queue, "--limit-rate", "256K"], directory: fixture.root,
                                           environment: peers.environment)
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 2.5, "run --limit-rate 256K let an upload through uncapped")
        XCTAssertEqual(try fixture.store().counts(), [.done: 1])
    }

    /// A file of `megabytes` MiB of random bytes.
    func randomFile(_ path: String, megabytes: Int) throws {
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let writer = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        for _ in 0..<megabytes { writer.write(random.readData(ofLength: 1 << 20)) }
        try writer.close()
        try random.close()
    }

    /// kill -9 in the middle of a tus PATCH (the fault server reads it at 2 MB/s), then the
    /// same command: it HEADs the recorded upload and sends from the server's offset. The bytes
    /// the server received in all, minus the file's size, are the bytes resent: none without a
    /// checksum (the server keeps what arrived of the cut chunk); with `Upload-Checksum` the
    /// server cannot keep a chunk it could not check, so at most that chunk is sent again.
    /// On both backends.
    func testTusKillNineMidUploadResendsNothingTheServerConfirmed() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let source = directory + "/big.bin"
        try randomFile(source, megabytes: 16)
        let size = 16 << 20
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory
        environment["XDG_STATE_HOME"] = nil
        for backend in ["curl", "urlsession"] {
            for checksum in [false, true] {
                let label = "\(backend)\(checksum ? ", sha1" : "")"
                let key = "tus-kill-\(backend)-\(checksum)-\(UUID().uuidString.prefix(8))"
                try servers.setTusFaults(key: key, ["rate": "2000000"])
                let url = servers.tus(key: key, checksum ? ["checksum": "1"] : [:]).absoluteString
                let arguments = ["put", "--tus", source, url, "--transport", backend]
                let first = try TransferdProcess(arguments, directory: directory, environment: environment)
                let deadline = Date().addingTimeInterval(30)
                while (try servers.tusStats(key: key)["received"] as? Int ?? 0) < 3_000_000, Date() < deadline { usleep(20_000) }
                kill(first.process.processIdentifier, SIGKILL)
                _ = first.wait()
                let atKill = try servers.tusStats(key: key)["received"] as? Int ?? 0
                XCTAssertLessThan(atKill, size, "\(label): killed before the end")
                try servers.setTusFaults(key: key, ["rate": ""])

                let second = try TransferdProcess.run(arguments, directory: directory, environment: environment)
                XCTAssertEqual(second.status, 0, "\(label): \(second.stderr)")
                XCTAssertTrue(second.stderr.contains("resumed at byte"), "\(label): \(second.stderr)")
                let stats = try servers.tusStats(key: key)
                let resent = (stats["received"] as? Int ?? 0) - size
                print("tus put, kill -9 at \(atKill) bytes received (\(label)): bytes resent after the kill: \(resent)")
                XCTAssertEqual(stats["creations"] as? Int, 1, "\(label): the same upload continued")
                XCTAssertEqual(stats["offset"] as? Int, size, label)
                XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: source), label)
                if checksum {
                    XCTAssertEqual(stats["checksums"] as? Int, stats["patches"] as? Int, "\(label): every PATCH was checked")
                    XCTAssertLessThanOrEqual(resent, 8 << 20, "\(label): at most the chunk the server could not check")
                } else {
                    XCTAssertEqual(resent, 0, "\(label): nothing the server holds is sent again")
                }
                let state = FileUploadStateStore(source: source, bucket: "tus", key: url, environment: ["HOME": directory])
                XCTAssertNil(try state.load(), "\(label): the record is gone once complete")
            }
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A tus job in the queue, against tuspyserver, killed with kill -9 while it runs
    /// (`--limit-rate` slows it), then run again: the job ends done with the same upload
    /// (one upload on the server), continued from the server's offset, the bytes intact.
    func testTusJobInTheQueueResumesAfterKillNine() throws {
        let peers = try UploadServers.current()
        let fixture = try QueueFixture()
        let source = fixture.root + "/data.bin"
        try randomFile(source, megabytes: 8)
        let before = Set(try FileManager.default.contentsOfDirectory(atPath: peers.tusRoot))
        try fixture.drop("tus.json", jobs: [["id": "up", "type": "tus", "url": peers.tus.absoluteString, "source": "data.bin",
                                             "chunk_size": "1M"]])
        let first = try fixture.start(["--limit-rate", "2M"])
        var upload: String?
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let added = Set(try FileManager.default.contentsOfDirectory(atPath: peers.tusRoot)).subtracting(before)
            if let name = added.first(where: { !$0.hasSuffix(".info") && !$0.hasPrefix(".") }) {
                upload = name
                let stored = (try? FileManager.default.attributesOfItem(atPath: peers.tusRoot + "/" + name)[.size] as? NSNumber)??.intValue ?? 0
                if stored >= 3 << 20 { break }
            }
            usleep(20_000)
        }
        kill(first.process.processIdentifier, SIGKILL)
        _ = first.wait()
        let name = try XCTUnwrap(upload)
        let atKill = (try FileManager.default.attributesOfItem(atPath: peers.tusRoot + "/" + name)[.size] as? NSNumber)?.intValue ?? 0
        XCTAssertLessThan(atKill, 8 << 20, "killed before the end")

        let second = try fixture.run()
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(try fixture.store().counts(), [.done: 1])
        let added = Set(try FileManager.default.contentsOfDirectory(atPath: peers.tusRoot)).subtracting(before)
        XCTAssertEqual(added.filter { !$0.hasSuffix(".info") && !$0.hasPrefix(".") }, [name], "one upload, continued")
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: peers.tusRoot + "/" + name), try SHA256Hasher.hex(ofFileAt: source))
        print("tus job in the queue: kill -9 with \(atKill) bytes stored at tuspyserver, then completed by the same upload")
    }

    /// `transferd cancel` on a running tus job: the run stops it and DELETEs the upload on
    /// the server (termination), and the job ends cancelled.
    func testCancellingARunningTusJobTerminatesTheUpload() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        try randomFile(fixture.root + "/data.bin", megabytes: 4)
        let key = "tus-cancel-\(UUID().uuidString.prefix(8))"
        try servers.setTusFaults(key: key, ["rate": "500000"])
        try fixture.drop("tus.json", jobs: [["id": "up", "type": "tus", "url": servers.tus(key: key).absoluteString,
                                             "source": "data.bin", "chunk_size": "1M"]])
        let run = try fixture.start()
        let deadline = Date().addingTimeInterval(30)
        while (try servers.tusStats(key: key)["received"] as? Int ?? 0) < 1_200_000, Date() < deadline { usleep(20_000) }
        let cancel = try TransferdProcess.run(["cancel", "up", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        _ = run.wait()
        XCTAssertEqual(try fixture.store().job("up")?.state, .cancelled)
        let stats = try servers.tusStats(key: key)
        XCTAssertEqual(stats["deleted"] as? Int, 1, "the upload was terminated: \(stats)")
        XCTAssertLessThan(stats["offset"] as? Int ?? Int.max, 4 << 20, "cancelled before the end")
    }

    /// `transferd cancel` on a running s3-upload job aborts its multipart upload: the abort runs
    /// from a task of its own (in the cancelled one, the transport refused to send it).
    func testCancellingARunningS3UploadAbortsItsMultipartUpload() throws {
        let servers = try UploadServers.current()
        let target = servers.s3Targets[0]
        let fixture = try QueueFixture()
        try randomFile(fixture.root + "/data.bin", megabytes: 24)
        let bucket = "cancel-\(UUID().uuidString.prefix(8).lowercased())"
        let client = S3Client(configuration: target.configuration, transport: CurlTransport())
        try blocking { try await client.createBucket(bucket) }
        try fixture.drop("up.json", jobs: [["id": "up", "type": "s3-upload", "url": "s3://\(bucket)/data.bin", "source": "data.bin",
                                            "part_size": "5M", "parts_in_flight": 1, "limit_rate": "4M"]])
        let run = try TransferdProcess(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
        let open = Locked<[String]>([])
        let deadline = Date().addingTimeInterval(30)
        while open.current.isEmpty, Date() < deadline {
            usleep(100_000)
            try blocking { let ids = try await client.openUploads(bucket: bucket, key: "data.bin"); open.withLock { $0 = ids } }
        }
        XCTAssertEqual(open.current.count, 1, "the upload is under way")
        usleep(1_500_000)
        let cancel = try TransferdProcess.run(["cancel", "up", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        _ = run.wait()
        XCTAssertEqual(try fixture.store().job("up")?.state, .cancelled)
        try blocking { let ids = try await client.openUploads(bucket: bucket, key: "data.bin"); open.withLock { $0 = ids } }
        XCTAssertEqual(open.current, [], "the multipart upload was aborted")
    }
}
