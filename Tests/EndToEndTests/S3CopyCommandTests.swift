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
            XCTAssertTrue(one.stderr.contains("s3://\(bucket)/single/a.bin") && one.stderr.contains("verified"), one.stderr)
        }
    }

    /// What cannot be copied is refused before anything is sent, with the reason (exit 2).
    func testCopiesThatCannotBeMadeAreRefusedWithTheReason() throws {
        let target = try UploadServers.current().s3Targets[0]
        let directory = try scratchDirectory()
        let cases: [([String], String)] = [
            (["copy", "local.bin", "s3://b/x"], "is not an s3:// URL"),
            (["copy", "s3://b/a/", "s3://b/a/deeper/"], "overlap"),
            (["copy", "s3://b/k", "s3://b/k"], "is the source itself"),
            (["copy", "s3://b/k", "s3://b/other", "--include", "*.bin"], "--include is for a prefix copy"),
            (["copy", "s3://b/k"], "need a source and a destination"),
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
            ])
            let run = try TransferdProcess.run(["run", "--queue", fixture.queue], directory: fixture.root, environment: target.environment)
            XCTAssertEqual(run.status, 0, "\(target.name): \(run.stderr)")
            XCTAssertEqual(try fixture.store().counts(), [.done: 2], target.name)
            XCTAssertEqual(try fixture.store().job("all")?.bytesDone, Int64(files["a.bin"]!.count + files["logs/b.bin"]!.count), target.name)
            XCTAssertNotNil(try size(target, bucket: bucket, key: "mirror/logs/b.bin"), target.name)
            XCTAssertNil(try size(target, bucket: bucket, key: "mirror/tmp/c.bin"), target.name)
            XCTAssertEqual(try size(target, bucket: bucket, key: "single.bin"), files["logs/b.bin"]?.count, target.name)
            XCTAssertEqual(try fixture.results("done", "copies.json").count, 2, target.name)
        }
    }
}
