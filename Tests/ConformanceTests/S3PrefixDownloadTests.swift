import Foundation
import TestSupport
import TransferCore
import XCTest

/// `get s3://bucket/prefix/`: every object below a prefix into a folder, page
/// by page, on moto and SeaweedFS and on both backends.
final class S3PrefixDownloadTests: XCTestCase {
    let quickRetry = RetryPolicy(maxAttempts: 2, baseDelay: 0.05, maxDelay: 0.2)

    /// Seven objects under `data/` (one of them in parts), one beside it, and a
    /// folder marker; returns the bucket and the keys below `data/` with their bytes.
    func seed(_ client: S3Client, label: String) async throws -> (bucket: String, files: [String: Data]) {
        let bucket = "prefix-\(label)-\(UUID().uuidString.prefix(6).lowercased())"
        try await client.createBucket(bucket)
        let directory = try scratchDirectory("seed-\(label)")
        var files: [String: Data] = [:]
        let names = ["a.bin", "b.txt", "sub/c.bin", "sub/deeper/d.bin", "sp ace+plus é.txt", "tmp/skip.bin", "big.bin"]
        for (index, name) in names.enumerated() {
            let size = name == "big.bin" ? (11 << 20) : 1000 * (index + 1)
            let data = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
            let path = directory + "/\(index).bin"
            try data.write(to: URL(fileURLWithPath: path))
            _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                source: path, bucket: bucket, key: "data/" + name, partSize: 5 << 20),
                state: FileUploadStateStore(source: path, bucket: bucket, key: "data/" + name,
                                            environment: ["HOME": directory])).run()
            files[name] = data
        }
        let other = directory + "/other.bin"
        try Data("beside".utf8).write(to: URL(fileURLWithPath: other))
        _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(source: other, bucket: bucket, key: "database.bin"),
                                        state: FileUploadStateStore(source: other, bucket: bucket, key: "database.bin",
                                                                    environment: ["HOME": directory])).run()
        return (bucket, files)
    }

    func testAPrefixArrivesWholeAcrossPagesAndAResumedRunSkipsWhatIsDone() async throws {
        let peers = try UploadServers.current()
        for (server, configuration) in peers.s3Servers {
            for (backend, transport) in Backends.all {
                let label = "\(server)-\(backend)"
                let recorder = RecordingTransport(wrapping: transport)
                let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
                let (bucket, files) = try await seed(client, label: label)
                let folder = try scratchDirectory("out-\(label)") + "/mirror"
                let state = FileUploadStateStore.prefixDownload(folder: folder, bucket: bucket, prefix: "data/",
                                                                environment: ["HOME": try scratchDirectory("state-\(label)")])
                var options = S3PrefixDownloadOptions(bucket: bucket, prefix: "data/", destination: folder)
                options.pageSize = 2
                options.filesInFlight = 1
                options.retry = quickRetry

                // Stopped once three objects are saved (files are made durable in
                // batches, at the latest at each page's end: the stop lands in page 3).
                let saved = LockedBox(0)
                var mark = recorder.mark
                let first = S3PrefixDownload(client: client, transport: recorder, options: options, store: state) { event in
                    if case .saved = event { saved.withLock { $0 += 1 } }
                }
                let task = Task { try await first.run() }
                let stopper = Task {
                    while saved.withLock({ $0 }) < 3 { try await Task.sleep(nanoseconds: 1_000_000) }
                    task.cancel()
                }
                do {
                    _ = try await task.value
                    XCTFail("\(label): the run was not stopped")
                } catch is CancellationError {}
                stopper.cancel()
                let savedFirst = saved.withLock { $0 }
                let listedFirst = recorder.operations(since: mark).filter { $0 == "ListObjectsV2" }.count
                XCTAssertGreaterThanOrEqual(savedFirst, 3, label)
                XCTAssertLessThan(savedFirst, 7, label)

                mark = recorder.mark
                let result = try await S3PrefixDownload(client: client, transport: recorder, options: options, store: state).run()
                let operations = recorder.operations(since: mark)
                XCTAssertEqual(result.files, 7 - savedFirst, label)
                XCTAssertEqual(operations.filter { $0 == "GetObject" }.count, 7 - savedFirst, "\(label): nothing fetched twice")
                let listedAgain = operations.filter { $0 == "ListObjectsV2" }.count
                XCTAssertGreaterThanOrEqual(listedAgain, 1, label)
                XCTAssertLessThanOrEqual(listedFirst + listedAgain, 5,
                                         "\(label): 4 pages, and only the page the stop landed in listed twice")
                for (name, data) in files {
                    XCTAssertEqual(FileManager.default.contents(atPath: folder + "/" + name), data, "\(label): \(name)")
                }
                XCTAssertFalse(FileManager.default.fileExists(atPath: folder + "/database.bin"), "\(label): a key beside the prefix")
                XCTAssertNil(try state.load(), "\(label): no checkpoint left once done")

                // Again with skip: nothing is fetched, everything is unchanged.
                options.overwrite = .skipIfIdentical
                options.pageSize = 1000
                mark = recorder.mark
                let again = try await S3PrefixDownload(client: client, transport: recorder, options: options, store: state).run()
                XCTAssertEqual(again.unchanged, 7, label)
                XCTAssertEqual(again.files, 0, label)
                XCTAssertEqual(recorder.operations(since: mark), ["ListObjectsV2"], "\(label): one listing, no object bytes")
            }
        }
    }

    /// One object that cannot be fetched fails the run, the others are saved;
    /// the next run fetches only that one, without listing again.
    func testOnlyTheFailedObjectsAreRetriedWithoutListingAgain() async throws {
        let peers = try UploadServers.current()
        for (server, configuration) in peers.s3Servers {
            let label = "\(server)-curl"
            let recorder = RecordingTransport(wrapping: CurlTransport())
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let (bucket, files) = try await seed(client, label: label)
            let broken = FaultInjectingTransport(wrapping: recorder, rules: [
                ({ $0.method == "GET" && $0.url.path.hasSuffix("/data/sub/c.bin") }, .status(500, code: "InternalError"), 100),
            ])
            let folder = try scratchDirectory("out-\(label)")
            let state = FileUploadStateStore.prefixDownload(folder: folder, bucket: bucket, prefix: "data/",
                                                            environment: ["HOME": try scratchDirectory("state-\(label)")])
            var options = S3PrefixDownloadOptions(bucket: bucket, prefix: "data/", destination: folder)
            options.retry = quickRetry
            do {
                _ = try await S3PrefixDownload(client: client, transport: broken, options: options, store: state).run()
                XCTFail("\(label): a failed object must fail the run")
            } catch let error as S3PrefixError {
                XCTAssertEqual(error.failed.map(\.key), ["data/sub/c.bin"], label)
                XCTAssertEqual(error.saved, 6, label)
                XCTAssertTrue(error.description.contains("500"), error.description)
            }
            let mark = recorder.mark
            let result = try await S3PrefixDownload(client: client, transport: recorder, options: options, store: state).run()
            XCTAssertEqual(result.files, 1, label)
            XCTAssertEqual(recorder.operations(since: mark), ["GetObject"], "\(label): the failed object alone, no listing")
            XCTAssertEqual(FileManager.default.contents(atPath: folder + "/sub/c.bin"), files["sub/c.bin"], label)
        }
    }
}

extension S3PrefixDownloadTests {
    /// An empty object is a normal file: S3 servers answer its first range with 416 (SeaweedFS
    /// with `Content-Range: bytes */0`, moto without), which `-c 8` once took for a change
    /// four times over.
    func testAnEmptyObjectArrivesWithEightConnections() async throws {
        let peers = try UploadServers.current()
        for (server, configuration) in peers.s3Servers {
            for (backend, transport) in Backends.all {
                let label = "empty-\(server)-\(backend)"
                let client = S3Client(configuration: configuration, transport: transport, retry: quickRetry)
                let bucket = "prefix-\(label)-\(UUID().uuidString.prefix(6).lowercased())"
                try await client.createBucket(bucket)
                let directory = try scratchDirectory("seed-\(label)")
                for (name, size) in [("empty.bin", 0), ("small.bin", 3000)] {
                    let path = directory + "/" + name
                    try Data(repeating: 7, count: size).write(to: URL(fileURLWithPath: path))
                    _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(source: path, bucket: bucket, key: "data/" + name),
                                                    state: FileUploadStateStore(source: path, bucket: bucket, key: "data/" + name,
                                                                                environment: ["HOME": directory])).run()
                }
                let folder = try scratchDirectory("out-\(label)") + "/mirror"
                var options = S3PrefixDownloadOptions(bucket: bucket, prefix: "data/", destination: folder)
                options.connections = 8
                options.retry = quickRetry
                let state = FileUploadStateStore.prefixDownload(folder: folder, bucket: bucket, prefix: "data/",
                                                                environment: ["HOME": try scratchDirectory("state-\(label)")])
                _ = try await S3PrefixDownload(client: client, transport: transport, options: options, store: state).run()
                XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/empty.bin")), Data(), label)
                XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/small.bin")).count, 3000, label)
            }
        }
    }
}
