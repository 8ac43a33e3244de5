import Foundation
import TestSupport
import TransferCore
import XCTest

/// Whole prefixes as a user gets them: `transferd get s3://bucket/prefix/ -o
/// DIR` and a prefix download job in the queue, on moto and SeaweedFS.
final class S3PrefixCommandTests: XCTestCase {
    /// Objects under `data/`: the names below the prefix and their bytes.
    func seed(_ target: (name: String, configuration: S3Configuration, environment: [String: String]),
              extraKeys: [String] = []) throws -> (bucket: String, files: [String: Data]) {
        let bucket = "cli-\(UUID().uuidString.prefix(8).lowercased())"
        let client = S3Client(configuration: target.configuration, transport: CurlTransport())
        let directory = try scratchDirectory("seed-\(target.name)")
        let names = ["one.bin", "two.csv", "logs/2026/a.bin", "tmp/scratch.bin", "big.bin"] + extraKeys
        var made: [String: Data] = [:]
        for (index, name) in names.enumerated() {
            let size = name == "big.bin" ? (6 << 20) : 300 * (index + 1)
            made[name] = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) })
        }
        let files = made
        try blocking {
            try await client.createBucket(bucket)
            for (index, name) in names.enumerated() {
                let path = directory + "/\(index)"
                try files[name]!.write(to: URL(fileURLWithPath: path))
                _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                    source: path, bucket: bucket, key: "data/" + name, partSize: 5 << 20),
                    state: FileUploadStateStore(source: path, bucket: bucket, key: "data/" + name, environment: ["HOME": directory])).run()
            }
        }
        return (bucket, files)
    }

    func testGetAPrefixIntoAFolderThenAgainMovesNothing() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, files) = try seed(target)
            let directory = try scratchDirectory("get-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory

            let missing = try TransferdProcess.run(["get", "s3://\(bucket)/data/"], directory: directory, environment: environment)
            XCTAssertEqual(missing.status, 2, missing.stderr)
            XCTAssertTrue(missing.stderr.contains("-o DIR"), missing.stderr)

            let got = try TransferdProcess.run(["get", "s3://\(bucket)/data/", "-o", "out", "--exclude", "tmp/*"],
                                               directory: directory, environment: environment)
            XCTAssertEqual(got.status, 0, "\(target.name): \(got.stderr)")
            XCTAssertTrue(got.stderr.contains("4 files saved"), got.stderr)
            for (name, data) in files where !name.hasPrefix("tmp/") {
                XCTAssertEqual(FileManager.default.contents(atPath: directory + "/out/" + name), data, "\(target.name): \(name)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/out/tmp"), "\(target.name): excluded")

            let log = directory + "/again.log"
            let again = try TransferdProcess.run(["get", "s3://\(bucket)/data/", "-o", "out", "--exclude", "tmp/*",
                                                  "--skip-unchanged", "--log-file", log],
                                                 directory: directory, environment: environment)
            XCTAssertEqual(again.status, 0, "\(target.name): \(again.stderr)")
            XCTAssertTrue(again.stderr.contains("0 files saved") && again.stderr.contains("4 unchanged"), again.stderr)
            XCTAssertEqual(try S3Operation.fromLog(log), ["ListObjectsV2"], "\(target.name): no object bytes moved")

            // A file changed locally is fetched again; the rest stay.
            try Data("changed".utf8).write(to: URL(fileURLWithPath: directory + "/out/one.bin"))
            let third = try TransferdProcess.run(["get", "s3://\(bucket)/data/", "-o", "out", "--include", "*.bin",
                                                  "--skip-unchanged"], directory: directory, environment: environment)
            XCTAssertEqual(third.status, 0, third.stderr)
            XCTAssertTrue(third.stderr.contains("2 files saved") && third.stderr.contains("2 unchanged"),
                          "\(target.name): one.bin changed, tmp/scratch.bin newly included: \(third.stderr)")
            XCTAssertEqual(FileManager.default.contents(atPath: directory + "/out/one.bin"), files["one.bin"])
        }
    }

    /// A key that would lead out of the folder is refused with a reason and
    /// nothing is written outside it (moto stores such keys as given).
    func testKeysThatWouldEscapeTheFolderAreRefused() throws {
        let peers = try UploadServers.current()
        let target = peers.s3Targets[0]
        let (bucket, _) = try seed(target, extraKeys: ["../escape.bin", "deep/../../escape2.bin"])
        let directory = try scratchDirectory()
        try FileManager.default.createDirectory(atPath: directory + "/inner", withIntermediateDirectories: true)
        let got = try TransferdProcess.run(["get", "s3://\(bucket)/data/", "-o", "out"], directory: directory + "/inner",
                                           environment: target.environment)
        // A copy that left keys out is no success: exit 1, and the keys are named.
        XCTAssertEqual(got.status, 1, got.stderr)
        XCTAssertTrue(got.stderr.contains("data/../escape.bin: not saved"), got.stderr)
        XCTAssertTrue(got.stderr.contains("2 refused"), got.stderr)
        XCTAssertTrue(got.stderr.contains("the copy is partial: 2 keys were not saved"), got.stderr)
        XCTAssertTrue(got.stderr.contains("deep/../../escape2.bin"), got.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/inner/escape.bin"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/escape.bin"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/escape2.bin"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory + "/inner/out/one.bin"))
    }

    /// A prefix job in `queue.d/`: one job for the whole prefix; a second job
    /// over the same folder with `"overwrite": "skip"` fetches nothing.
    func testAPrefixJobInTheQueue() throws {
        for target in try UploadServers.current().s3Targets {
            let (bucket, files) = try seed(target)
            let fixture = try QueueFixture("queue-\(target.name)")
            try fixture.drop("mirror.json", jobs: [["id": "mirror", "url": "s3://\(bucket)/data/", "dest": "mirror/",
                                                    "include": ["*.bin"], "exclude": ["tmp/*"]]])
            let run = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(run.status, 0, "\(target.name): \(run.stderr)")
            XCTAssertEqual(try fixture.store().counts(), [.done: 1], target.name)
            for name in ["one.bin", "logs/2026/a.bin", "big.bin"] {
                XCTAssertEqual(FileManager.default.contents(atPath: fixture.root + "/mirror/" + name), files[name], "\(target.name): \(name)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.root + "/mirror/two.csv"), "\(target.name): not included")
            XCTAssertEqual(try fixture.store().job("mirror")?.bytesDone,
                           Int64(files["one.bin"]!.count + files["logs/2026/a.bin"]!.count + files["big.bin"]!.count), target.name)

            try fixture.drop("again.json", jobs: [["id": "again", "url": "s3://\(bucket)/data/", "dest": "mirror/",
                                                   "include": ["*.bin"], "exclude": ["tmp/*"], "overwrite": "skip"]])
            let log = fixture.root + "/again.log"
            let again = try TransferdProcess.run(["run", "--queue", fixture.queue, "--log-file", log], directory: fixture.root,
                                                 environment: target.environment)
            XCTAssertEqual(again.status, 0, "\(target.name): \(again.stderr)")
            XCTAssertEqual(try fixture.store().counts(), [.done: 2], target.name)
            XCTAssertEqual(try S3Operation.fromLog(log), ["ListObjectsV2"], "\(target.name): nothing fetched again")
        }
    }

    /// `put --skip-unchanged`: a file the object already holds (one PUT, or in
    /// parts: the multipart ETag is recomputed from the file) and a folder the
    /// prefix already holds send nothing; a changed file is sent.
    func testPutSkipsWhatTheBucketAlreadyHolds() throws {
        for target in try UploadServers.current().s3Targets {
            let directory = try scratchDirectory("put-\(target.name)")
            var environment = target.environment
            environment["HOME"] = directory
            let bucket = "skip-\(UUID().uuidString.prefix(8).lowercased())"
            let client = S3Client(configuration: target.configuration, transport: CurlTransport())
            try blocking { try await client.createBucket(bucket) }
            let tree = directory + "/site"
            try FileManager.default.createDirectory(atPath: tree + "/img", withIntermediateDirectories: true)
            try Data(repeating: 1, count: 1000).write(to: URL(fileURLWithPath: tree + "/index.html"))
            try Data(repeating: 2, count: 2000).write(to: URL(fileURLWithPath: tree + "/img/a.png"))
            try Data(repeating: 3, count: 3000).write(to: URL(fileURLWithPath: tree + "/notes.tmp"))
            try Data((0..<(11 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) }).write(to: URL(fileURLWithPath: tree + "/big.bin"))

            func put(_ extra: [String]) throws -> (TransferdProcess.Result, [String]) {
                let log = directory + "/\(UUID().uuidString).log"
                let result = try TransferdProcess.run(["put"] + extra + ["--log-file", log], directory: directory,
                                                      environment: environment)
                return (result, try S3Operation.fromLog(log))
            }
            var (result, operations) = try put(["site", "s3://\(bucket)/www/", "--exclude", "*.tmp", "--part-size", "5M"])
            XCTAssertEqual(result.status, 0, "\(target.name): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("3 files sent"), result.stderr)
            XCTAssertFalse(operations.contains("ListObjectsV2"), "\(target.name): no listing without --skip-unchanged")

            (result, operations) = try put(["site", "s3://\(bucket)/www/", "--exclude", "*.tmp", "--part-size", "5M",
                                            "--skip-unchanged"])
            XCTAssertEqual(result.status, 0, "\(target.name): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("0 files sent") && result.stderr.contains("3 unchanged"), result.stderr)
            XCTAssertEqual(operations, ["ListObjectsV2"], "\(target.name): the multipart big.bin is recognised too")

            try Data(repeating: 9, count: 2000).write(to: URL(fileURLWithPath: tree + "/img/a.png"))
            (result, operations) = try put(["site", "s3://\(bucket)/www/", "--exclude", "*.tmp", "--part-size", "5M",
                                            "--skip-unchanged"])
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(operations, ["ListObjectsV2", "PutObject"], "\(target.name): only the changed file")

            // One file: HEAD, then nothing when it matches (in parts, with another part size than it was sent with).
            (result, operations) = try put(["site/big.bin", "s3://\(bucket)/www/big.bin", "--skip-unchanged"])
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertTrue(result.stderr.contains("already holds it"), result.stderr)
            XCTAssertEqual(operations, ["HeadObject"], target.name)
            (result, operations) = try put(["site/notes.tmp", "s3://\(bucket)/www/notes.tmp", "--skip-unchanged"])
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(operations, ["HeadObject", "PutObject"], "\(target.name): a missing object is sent")
        }
    }

    /// `put DIR s3://…/` of a folder that holds a queue (made by `transferd run`, with the files a
    /// served run and an unfinished download leave): nothing of the queue and no partial file is
    /// sent, not even when --include names them; the output says which files were left out.
    func testAFolderUploadLeavesOutTransferdsOwnFiles() throws {
        let servers = try TestServers.current()
        let target = try UploadServers.current().s3Targets[0]
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "own-files", sizes: [3000])
        try fixture.drop("jobs.json", jobs: [["id": "j", "url": servers.http.absoluteString + "/" + names[0], "dest": "out/j.bin"]])
        let run = try fixture.run(["--quiet"])
        XCTAssertEqual(run.status, 0, run.stderr)
        let manager = FileManager.default
        XCTAssertTrue(manager.createFile(atPath: fixture.queue + "/.transferd/api.token", contents: Data("0123456789abcdef0123456789abcdef\n".utf8)))
        XCTAssertTrue(manager.createFile(atPath: fixture.queue + "/.transferd/state.db-wal", contents: Data("wal".utf8)))
        XCTAssertTrue(manager.createFile(atPath: fixture.root + "/out/next.iso.part", contents: Data("partial".utf8)))
        XCTAssertTrue(manager.createFile(atPath: fixture.root + "/out/next.iso.part.state", contents: Data("{}".utf8)))
        XCTAssertTrue(manager.createFile(atPath: fixture.root + "/out/new.iso.transferd-part", contents: Data("partial".utf8)))
        XCTAssertTrue(manager.createFile(atPath: fixture.root + "/out/new.iso.transferd-part.state", contents: Data("{}".utf8)))
        // A user's NAME.part with no checkpoint beside it is the user's file, and sent.
        _ = manager.createFile(atPath: fixture.root + "/out/video.part", contents: Data("mine".utf8))
        // A user's folder that is only called queue.d is sent.
        try manager.createDirectory(atPath: fixture.root + "/notes/queue.d", withIntermediateDirectories: true)
        _ = manager.createFile(atPath: fixture.root + "/notes/queue.d/plan.json", contents: Data("{}".utf8))
        let own = ["out/next.iso.part", "out/next.iso.part.state", "out/new.iso.transferd-part",
                   "out/new.iso.transferd-part.state", "queue.d/.transferd/api.token",
                   "queue.d/.transferd/state.db", "queue.d/.transferd/state.db-wal", "queue.d/accepted/jobs.json"]

        let bucket = "own-\(UUID().uuidString.prefix(8).lowercased())"
        let client = S3Client(configuration: target.configuration, transport: CurlTransport())
        try blocking { try await client.createBucket(bucket) }
        var environment = target.environment
        environment["HOME"] = fixture.root
        func keys(_ prefix: String) throws -> [String] {
            let keys = LockedBox<[String]>([])
            try blocking {
                let listed = try await client.listObjects(bucket: bucket, prefix: prefix, cursor: nil).objects.map(\.key)
                keys.withLock { $0 = listed }
            }
            return keys.withLock { $0 }.sorted()
        }

        let put = try TransferdProcess.run(["put", fixture.root, "s3://\(bucket)/all/"], directory: fixture.root,
                                           environment: environment)
        // A partial copy: everything else is sent, and the exit code says it is not the whole.
        XCTAssertEqual(put.status, 1, put.stderr)
        XCTAssertEqual(try keys("all/"), ["all/notes/queue.d/plan.json", "all/out/j.bin", "all/out/video.part"])
        for path in own { XCTAssertTrue(put.stderr.contains("  " + path + "  ("), "\(path) is named:\n" + put.stderr) }
        // The count, then one line per file (the queue's run.lock, done/j.json and the like among them).
        let named = put.stderr.split(separator: "\n").filter { $0.hasPrefix("  ") && $0.hasSuffix(")") }
        XCTAssertGreaterThanOrEqual(named.count, own.count)
        XCTAssertTrue(put.stderr.contains("left out \(named.count) files transferd keeps for itself"), put.stderr)
        XCTAssertTrue(put.stderr.contains("in the transferd queue folder queue.d/"), put.stderr)
        XCTAssertFalse(put.stderr.contains("  notes/queue.d/plan.json"), put.stderr)

        let included = try TransferdProcess.run(["put", fixture.root, "s3://\(bucket)/json/", "--include", "*.json",
                                                 "--include", "*.token", "--include", "*.part*"],
                                                directory: fixture.root, environment: environment)
        XCTAssertEqual(included.status, 1, included.stderr)
        XCTAssertEqual(try keys("json/"), ["json/notes/queue.d/plan.json", "json/out/video.part"], "the globs do not bring them in")
        XCTAssertTrue(included.stderr.contains("queue.d/.transferd/api.token"), included.stderr)

        // Left out by the user's own globs, nothing is partial: exit 0, and still nothing of transferd's is sent.
        let excluded = try TransferdProcess.run(["put", fixture.root, "s3://\(bucket)/ex/", "--quiet", "--exclude", "queue.d/*",
                                                 "--exclude", "*.part*", "--exclude", "*.transferd-part*"],
                                                directory: fixture.root, environment: environment)
        XCTAssertEqual(excluded.status, 0, excluded.stderr)
        XCTAssertEqual(try keys("ex/"), ["ex/notes/queue.d/plan.json", "ex/out/j.bin"])

        // A queue job uploading a folder that holds partial downloads: the job fails as a partial
        // copy, and its result names the files left out and the fix; the rest is uploaded.
        try fixture.drop("up.json", jobs: [["id": "up", "type": "s3-upload", "url": "s3://\(bucket)/queued/", "source": "out"]])
        let queued = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: environment)
        XCTAssertEqual(queued.status, 1, queued.stderr)
        let result = "\(try fixture.results("failed", "up.json"))"
        XCTAssertTrue(result.contains("the copy is partial"), result)
        XCTAssertTrue(result.contains("new.iso.transferd-part"), result)
        XCTAssertTrue(result.contains("exclude"), result)
        XCTAssertEqual(try keys("queued/"), ["queued/j.bin", "queued/video.part"])
        // The queue's own root folder (".") is a folder like any other, queue and all left out.
        try fixture.drop("root.json", jobs: [["id": "root", "type": "s3-upload", "url": "s3://\(bucket)/root/", "source": "."]])
        let whole = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: environment)
        XCTAssertEqual(whole.status, 1, whole.stderr)
        let rootResult = "\(try fixture.results("failed", "root.json"))"
        XCTAssertTrue(rootResult.contains("the copy is partial"), rootResult)
        XCTAssertTrue(rootResult.contains("files are transferd"), rootResult)
        XCTAssertTrue(try keys("root/").contains("root/out/j.bin"))
        XCTAssertFalse(try keys("root/").contains { $0.contains("queue.d/.transferd") || $0.contains("transferd-part") })
    }

    /// A prefix job whose folder holds the queue: a key that would land in
    /// queue.d (a job file, the state database) is refused; the rest is saved.
    func testAKeyNeverLandsInTheQueueFolder() throws {
        let target = try UploadServers.current().s3Targets[0]
        let (bucket, files) = try seed(target, extraKeys: ["queue.d/evil.json", "queue.d/.transferd/state.db", "a.transferd-part",
                                                           "b.part"])
        let fixture = try QueueFixture()
        try fixture.drop("all.json", jobs: [["id": "all", "url": "s3://\(bucket)/data/", "dest": "."]])
        let run = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
        // Keys left out make a partial copy: the job fails (exit 1), and its result names them.
        XCTAssertEqual(run.status, 1, run.stderr)
        XCTAssertEqual(try fixture.store().counts(), [.failed: 1], "no job came from a key, and the one job is not done")
        let result = "\(try fixture.results("failed", "all.json"))"
        XCTAssertTrue(result.contains("the copy is partial: 3 keys were not saved"), result)
        XCTAssertTrue(result.contains("queue.d/evil.json"), result)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.queue + "/evil.json"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.queue + "/accepted/evil.json"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.root + "/a.transferd-part"))
        XCTAssertTrue(result.contains("a.transferd-part"), result)
        XCTAssertEqual(FileManager.default.contents(atPath: fixture.root + "/b.part"), files["b.part"], "an ordinary name now")
        XCTAssertEqual(FileManager.default.contents(atPath: fixture.root + "/one.bin"), files["one.bin"])
    }
}
