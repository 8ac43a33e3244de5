import Foundation
import TestSupport
import TransferCore
import XCTest

/// Copies as a user makes them: `transferd copy` and an `s3-copy` job in the queue, on
/// moto and SeaweedFS.
final class S3CopyCommandTests: XCTestCase {
    /// A bucket with `data/a.bin`, `data/logs/b.bin` and `data/tmp/c.bin`: their bytes by name below `data/`.
    func seed(_ target: (name: String, configuration: S3Configuration, environment: [String: String])) throws
        -> (bucket: String, files: [String: Data]) {
        let bucket = "copy-\(UUID().uuidString.prefix(8).lowercased())"
        let client = S3Client(configuration: target.configuration, transport: CurlTransport())
        let directory = try scratchDirectory("seed-\(target.name)")
        var files: [String: Data] = [:]
        for (index, name) in ["a.bin", "logs/b.bin", "tmp/c.bin"].enumerated() {
            files[name] = Data((0..<(2000 * (index + 1))).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ index) })
        }
        let made = files
        try blocking {
            try await client.createBucket(bucket)
            for (index, name) in made.keys.sorted().enumerated() {
                let path = directory + "/\(index)"
                try made[name]!.write(to: URL(fileURLWithPath: path))
                _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(source: path, bucket: bucket, key: "data/" + name),
                                                state: FileUploadStateStore(source: path, bucket: bucket, key: "data/" + name,
                                                                            environment: ["HOME": directory])).run()
            }
        }
        return (bucket, files)
    }

    /// The size of `bucket/key`, or nil when there is no such object.
    func size(_ target: (name: String, configuration: S3Configuration, environment: [String: String]),
              bucket: String, key: String) throws -> Int? {
        let client = S3Client(configuration: target.configuration, transport: CurlTransport())
        let found = Locked<Int?>(nil)
        try blocking {
            let head = try await client.headObjectIfPresent(bucket: bucket, key: key)
            found.withLock { $0 = head.map { Int($0.size) } }
        }
        return found.current
    }

    func testCopyAPrefixThenAgainCopiesNothing() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, files) = try seed(target)
            let directory = try scratchDirectory("copy-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory
            let copied = try TransferdProcess.run(["copy", "s3://\(bucket)/data/", "s3://\(bucket)/backup/", "--exclude", "tmp/*"],
                                                  directory: directory, environment: environment)
            XCTAssertEqual(copied.status, 0, "\(target.name): \(copied.stderr)")
            XCTAssertTrue(copied.stderr.contains("2 objects copied to s3://\(bucket)/backup/"), copied.stderr)
            for name in ["a.bin", "logs/b.bin"] {
                XCTAssertEqual(try size(target, bucket: bucket, key: "backup/" + name), files[name]?.count,
                               "\(target.name): \(name)")
            }
            XCTAssertNil(try size(target, bucket: bucket, key: "backup/tmp/c.bin"), "\(target.name): excluded")

            let again = try TransferdProcess.run(["copy", "s3://\(bucket)/data/", "s3://\(bucket)/backup/", "--exclude", "tmp/*",
                                                  "--skip-unchanged"], directory: directory, environment: environment)
            XCTAssertEqual(again.status, 0, "\(target.name): \(again.stderr)")
            XCTAssertTrue(again.stderr.contains("0 objects copied") && again.stderr.contains("2 unchanged"), again.stderr)

            let one = try TransferdProcess.run(["copy", "s3://\(bucket)/data/a.bin", "s3://\(bucket)/single/"],
                                               directory: directory, environment: environment)
            XCTAssertEqual(one.status, 0, "\(target.name): \(one.stderr)")
            XCTAssertTrue(one.stderr.contains("s3://\(bucket)/single/a.bin") && one.stderr.contains("verified, the source's own"), one.stderr)
        }
    }

    /// `transferd copy https://… s3://…/`: streamed, the object named after the URL's file.
    func testCopyFromAWebServerIsStreamed() throws {
        let servers = try TestServers.current()
        for target in try UploadServers.current().s3Targets {
            let bucket = "web-\(UUID().uuidString.prefix(8).lowercased())"
            let client = S3Client(configuration: target.configuration, transport: CurlTransport())
            try blocking { try await client.createBucket(bucket) }
            let directory = try scratchDirectory("web-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory
            let copied = try TransferdProcess.run(["copy", "\(servers.http.absoluteString)/64m.bin", "s3://\(bucket)/in/", "--parts", "2"],
                                                  directory: directory, environment: environment)
            XCTAssertEqual(copied.status, 0, "\(target.name): \(copied.stderr)")
            XCTAssertTrue(copied.stderr.contains("s3://\(bucket)/in/64m.bin 64.0 MiB streamed in 8 parts"), copied.stderr)
            XCTAssertEqual(try size(target, bucket: bucket, key: "in/64m.bin"), 64 << 20, target.name)
        }
    }

    /// `--dry-run` changes nothing; `--delete` removes what the source lacks (not what the filters
    /// leave out), refuses to remove everything without `--force`; the same for a folder upload.
    func testDryRunAndDelete() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, _) = try seed(target)
            let directory = try scratchDirectory("sync-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory
            func transferd(_ arguments: [String]) throws -> TransferdProcess.Result {
                try TransferdProcess.run(arguments, directory: directory, environment: environment)
            }
            XCTAssertEqual(try transferd(["copy", "s3://\(bucket)/data/", "s3://\(bucket)/mirror/"]).status, 0)
            XCTAssertEqual(try transferd(["copy", "s3://\(bucket)/data/a.bin", "s3://\(bucket)/mirror/stale.bin"]).status, 0)
            XCTAssertEqual(try transferd(["copy", "s3://\(bucket)/data/a.bin", "s3://\(bucket)/mirror/tmp/kept.bin"]).status, 0)

            let dry = try transferd(["copy", "s3://\(bucket)/data/", "s3://\(bucket)/mirror/", "--skip-unchanged", "--delete",
                                     "--exclude", "tmp/*", "--dry-run"])
            XCTAssertEqual(dry.status, 0, dry.stderr)
            XCTAssertTrue(dry.stdout.contains("would delete  stale.bin") && dry.stdout.contains("unchanged     a.bin"), dry.stdout)
            XCTAssertTrue(dry.stdout.contains("dry run: 0 to copy (0 B), 2 unchanged, 1 to delete"), dry.stdout)
            XCTAssertNotNil(try size(target, bucket: bucket, key: "mirror/stale.bin"), "\(target.name): a dry run deletes nothing")

            let synced = try transferd(["copy", "s3://\(bucket)/data/", "s3://\(bucket)/mirror/", "--skip-unchanged", "--delete",
                                        "--exclude", "tmp/*"])
            XCTAssertEqual(synced.status, 0, synced.stderr)
            XCTAssertTrue(synced.stderr.contains("1 deleted"), synced.stderr)
            XCTAssertNil(try size(target, bucket: bucket, key: "mirror/stale.bin"), target.name)
            XCTAssertNotNil(try size(target, bucket: bucket, key: "mirror/tmp/kept.bin"), "\(target.name): excluded, so kept")

            let all = try transferd(["copy", "s3://\(bucket)/empty/", "s3://\(bucket)/mirror/", "--delete"])
            XCTAssertEqual(all.status, 2, all.stderr)
            XCTAssertTrue(all.stderr.contains("would remove all 4") && all.stderr.contains("--force"), all.stderr)
            XCTAssertNotNil(try size(target, bucket: bucket, key: "mirror/a.bin"), target.name)
            let forced = try transferd(["copy", "s3://\(bucket)/empty/", "s3://\(bucket)/mirror/", "--delete", "--force"])
            XCTAssertEqual(forced.status, 0, forced.stderr)
            XCTAssertNil(try size(target, bucket: bucket, key: "mirror/a.bin"), target.name)

            // A folder to a prefix: the object the folder no longer holds goes.
            let folder = directory + "/folder"
            try FileManager.default.createDirectory(atPath: folder + "/sub", withIntermediateDirectories: true)
            try Data("one".utf8).write(to: URL(fileURLWithPath: folder + "/one.txt"))
            try Data("two".utf8).write(to: URL(fileURLWithPath: folder + "/sub/two.txt"))
            XCTAssertEqual(try transferd(["put", folder, "s3://\(bucket)/up/"]).status, 0)
            try FileManager.default.removeItem(atPath: folder + "/sub/two.txt")
            try Data("three".utf8).write(to: URL(fileURLWithPath: folder + "/three.txt"))
            let put = try transferd(["put", folder, "s3://\(bucket)/up/", "--skip-unchanged", "--delete"])
            XCTAssertEqual(put.status, 0, put.stderr)
            XCTAssertTrue(put.stderr.contains("1 file sent") && put.stderr.contains("1 deleted"), put.stderr)
            XCTAssertNil(try size(target, bucket: bucket, key: "up/sub/two.txt"), target.name)
            XCTAssertEqual(try size(target, bucket: bucket, key: "up/three.txt"), 5, target.name)

            // A partial upload (a queue's own files left out) deletes nothing.
            try FileManager.default.removeItem(atPath: folder + "/three.txt")
            try FileManager.default.createDirectory(atPath: folder + "/q/.transferd", withIntermediateDirectories: true)
            try Data("db".utf8).write(to: URL(fileURLWithPath: folder + "/q/.transferd/state.db"))
            let partial = try transferd(["put", folder, "s3://\(bucket)/up/", "--skip-unchanged", "--delete"])
            XCTAssertEqual(partial.status, 1, partial.stderr)
            XCTAssertEqual(try size(target, bucket: bucket, key: "up/three.txt"), 5, "\(target.name): a partial upload deletes nothing")
        }
    }

    /// `get PREFIX/ -o DIR --delete`: local files the prefix does not hold go once every key was
    /// saved; excluded ones, links and transferd's partial files stay; `--dry-run` changes nothing.
    /// "delete" on queue jobs: a prefix download, a prefix copy and a folder upload each remove what
    /// the source lacks once everything is copied; a delete past "max_delete" fails the job with
    /// nothing changed.
    func testQueueJobsSyncWithDelete() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, _) = try seed(target)
            let fixture = try QueueFixture("queue-sync-\(target.name)")
            let manager = FileManager.default
            try manager.createDirectory(atPath: fixture.root + "/mirror", withIntermediateDirectories: true)
            // Each destination holds one entry the source lacks and one it has: half of it goes.
            try Data("old".utf8).write(to: URL(fileURLWithPath: fixture.root + "/mirror/stale.bin"))
            try Data("old".utf8).write(to: URL(fileURLWithPath: fixture.root + "/mirror/a.bin"))
            try manager.createDirectory(atPath: fixture.root + "/site", withIntermediateDirectories: true)
            try Data("page".utf8).write(to: URL(fileURLWithPath: fixture.root + "/site/index.html"))
            let client = S3Client(configuration: target.configuration, transport: CurlTransport())
            try blocking {
                for key in ["backup/gone.bin", "backup/a.bin", "www/old.html"] {
                    _ = try await client.send("PutObject", method: "PUT", bucket: bucket, key: key, body: .data(Data("x".utf8)))
                }
            }
            try fixture.drop("sync.json", jobs: [
                ["id": "down", "url": "s3://\(bucket)/data/", "dest": "mirror/", "exclude": ["tmp/*"], "delete": true,
                 "overwrite": "overwrite"],
                ["id": "copy", "type": "s3-copy", "source": "s3://\(bucket)/data/", "url": "s3://\(bucket)/backup/",
                 "delete": true, "max_delete": 100],
                ["id": "up", "type": "s3-upload", "source": "site", "url": "s3://\(bucket)/www/", "delete": true, "force": true],
            ])
            let run = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(run.status, 0, "\(target.name): \(run.stdout) \(run.stderr)")
            XCTAssertFalse(manager.fileExists(atPath: fixture.root + "/mirror/stale.bin"), target.name)
            XCTAssertTrue(manager.fileExists(atPath: fixture.root + "/mirror/logs/b.bin"), target.name)
            XCTAssertNil(try size(target, bucket: bucket, key: "backup/gone.bin"), target.name)
            XCTAssertNotNil(try size(target, bucket: bucket, key: "backup/a.bin"), target.name)
            XCTAssertNil(try size(target, bucket: bucket, key: "www/old.html"), target.name)
            XCTAssertEqual(try size(target, bucket: bucket, key: "www/index.html"), 4, target.name)

            // Everything the destination holds would go: refused, the job fails, nothing is deleted.
            try fixture.drop("all.json", jobs: [["id": "all", "url": "s3://\(bucket)/nothing/", "dest": "mirror/", "delete": true]])
            let refused = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(refused.status, 1, "\(target.name): \(refused.stderr)")
            let failed = try fixture.store().job("all")
            XCTAssertEqual(failed?.state, .failed, target.name)
            XCTAssertTrue((failed?.lastError ?? "").contains("would remove all"), "\(target.name): \(String(describing: failed?.lastError))")
            XCTAssertTrue(manager.fileExists(atPath: fixture.root + "/mirror/a.bin"), target.name)
        }
    }

    func testGetAPrefixWithDeleteAndDryRun() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, _) = try seed(target)
            let directory = try scratchDirectory("get-sync-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory
            let out = directory + "/out"
            try FileManager.default.createDirectory(atPath: out + "/tmp", withIntermediateDirectories: true)
            for name in ["stale.txt", "a.bin", "tmp/keep.txt", "big.iso.transferd-part"] {
                try Data("x".utf8).write(to: URL(fileURLWithPath: out + "/" + name))
            }
            XCTAssertEqual(symlink("/etc/hostname", out + "/link"), 0)
            func get(_ extra: [String]) throws -> TransferdProcess.Result {
                try TransferdProcess.run(["get", "s3://\(bucket)/data/", "-o", out, "--exclude", "tmp/*"] + extra,
                                         directory: directory, environment: environment)
            }
            let dry = try get(["--delete", "--dry-run"])
            XCTAssertEqual(dry.status, 0, dry.stderr)
            XCTAssertTrue(dry.stdout.contains("would copy    a.bin") && dry.stdout.contains("would delete  stale.txt"), dry.stdout)
            XCTAssertTrue(dry.stdout.contains("2 to copy") && dry.stdout.contains("1 to delete"), dry.stdout)
            XCTAssertTrue(FileManager.default.fileExists(atPath: out + "/stale.txt"), "a dry run deletes nothing")
            XCTAssertEqual(FileManager.default.contents(atPath: out + "/a.bin"), Data("x".utf8), "a dry run saves nothing")

            // a.bin is another file than the object: replaced (--overwrite), then stale.txt deleted, 1 of 2.
            let synced = try get(["--delete", "--overwrite"])
            XCTAssertEqual(synced.status, 0, synced.stderr)
            XCTAssertTrue(synced.stderr.contains("1 file deleted"), synced.stderr)
            XCTAssertFalse(FileManager.default.fileExists(atPath: out + "/stale.txt"), target.name)
            for kept in ["tmp/keep.txt", "big.iso.transferd-part", "a.bin", "logs/b.bin"] {
                XCTAssertTrue(FileManager.default.fileExists(atPath: out + "/" + kept), "\(target.name): \(kept)")
            }
            var info = stat()
            XCTAssertEqual(lstat(out + "/link", &info), 0, "a link is never deleted")

            let all = try TransferdProcess.run(["get", "s3://\(bucket)/nothing/", "-o", out, "--delete"], directory: directory,
                                               environment: environment)
            XCTAssertEqual(all.status, 2, all.stderr)
            XCTAssertTrue(all.stderr.contains("would remove all"), all.stderr)
            let dryAll = try TransferdProcess.run(["get", "s3://\(bucket)/nothing/", "-o", out, "--delete", "--dry-run"],
                                                  directory: directory, environment: environment)
            XCTAssertEqual(dryAll.status, 0, dryAll.stderr)
            XCTAssertTrue(dryAll.stdout.contains("would delete  a.bin") && dryAll.stdout.contains("without --dry-run: --delete would remove all"),
                          "a dry run lists what a refused delete would take: \(dryAll.stdout)")
            XCTAssertTrue(FileManager.default.fileExists(atPath: out + "/a.bin"), target.name)
        }
    }

    /// What cannot be copied is refused before anything is sent, with the reason (exit 2).
    func testCopiesThatCannotBeMadeAreRefusedWithTheReason() throws {
        let target = try UploadServers.current().s3Targets[0]
        let directory = try scratchDirectory()
        let cases: [([String], String)] = [
            (["copy", "local.bin", "s3://b/x"], "is not an s3:// or http(s):// URL"),
            (["copy", "s3://b/x", "/tmp/x"], "copy writes to S3"),
            (["copy", "s3://b/a/", "s3://b/a/deeper/"], "overlap"),
            (["copy", "s3://b/k", "s3://b/k"], "is the source itself"),
            (["copy", "s3://b/k", "s3://b/other", "--include", "*.bin"], "--include is for a prefix copy"),
            (["copy", "s3://b/k"], "need a source and a destination"),
            (["copy", "s3://b/k", "s3://b/k2", "--delete"], "--delete is for a bulk copy"),
            (["copy", "s3://b/a/", "s3://b/c/", "--force"], "--force goes with --delete"),
        ]
        for (arguments, expected) in cases {
            let result = try TransferdProcess.run(arguments, directory: directory, environment: target.environment)
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(expected), "\(arguments): \(result.stderr)")
        }
        let missing = try TransferdProcess.run(["copy", "s3://no-such-bucket-\(UUID().uuidString.prefix(6).lowercased())/k", "s3://b/k2"],
                                               directory: directory, environment: target.environment)
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("no such object"), missing.stderr)
    }

    /// An `s3-copy` job runs in the queue like any other, and lands in done/.
    func testACopyJobInTheQueue() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, files) = try seed(target)
            let fixture = try QueueFixture("queue-\(target.name)")
            try fixture.drop("copies.json", jobs: [
                ["id": "all", "type": "s3-copy", "url": "s3://\(bucket)/mirror/", "source": "s3://\(bucket)/data/", "include": ["*.bin"],
                 "exclude": ["tmp/*"]],
                ["id": "one", "type": "s3-copy", "url": "s3://\(bucket)/single.bin", "source": "s3://\(bucket)/data/logs/b.bin"],
                ["id": "web", "type": "s3-copy", "url": "s3://\(bucket)/web/", "source": "\(try TestServers.current().http.absoluteString)/64m.bin",
                 "part_size": "16M"],
            ])
            let run = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(run.status, 0, "\(target.name): \(run.stderr)")
            XCTAssertEqual(try fixture.store().counts(), [.done: 3], target.name)
            XCTAssertEqual(try size(target, bucket: bucket, key: "web/64m.bin"), 64 << 20, "\(target.name): streamed from nginx")
            XCTAssertEqual(try fixture.store().job("all")?.bytesDone, Int64(files["a.bin"]!.count + files["logs/b.bin"]!.count), target.name)
            XCTAssertNotNil(try size(target, bucket: bucket, key: "mirror/logs/b.bin"), target.name)
            XCTAssertNil(try size(target, bucket: bucket, key: "mirror/tmp/c.bin"), target.name)
            XCTAssertEqual(try size(target, bucket: bucket, key: "single.bin"), files["logs/b.bin"]?.count, target.name)
            XCTAssertEqual(try fixture.results("done", "copies.json").count, 3, target.name)
        }
    }
}
