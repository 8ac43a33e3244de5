import Foundation
import TestSupport
import TransferCore
import XCTest

/// Copies streamed through memory (`StreamedCopy`): from an http(s) URL (nginx, the fault
/// server) or an S3 object on another endpoint, to moto and SeaweedFS, on both backends.
/// What the source served is counted by the fault server; every copy is read back.
final class StreamedCopyTests: XCTestCase {
    let quickRetry = RetryPolicy(maxAttempts: 4, baseDelay: 0.05, maxDelay: 0.5)

    func state(_ label: String) throws -> FileUploadStateStore {
        FileUploadStateStore(source: "streamed", bucket: "b", key: "k", environment: ["HOME": try scratchDirectory(label)])
    }

    func readBack(_ client: S3Client, transport: Transport, bucket: String, key: String) async throws -> String {
        let source = try client.downloadSource(bucket: bucket, key: key)
        var options = DownloadOptions(url: source.url, destination: try scratchDirectory("back") + "/back.bin", retry: quickRetry)
        source.configure(&options)
        let result = try await DownloadEngine(transport: transport, options: options).run()
        defer { try? FileManager.default.removeItem(atPath: result.path) }
        return try SHA256Hasher.hex(ofFileAt: result.path)
    }

    /// 64 MiB from nginx in 8 MiB parts: eight ranged GETs and eight UploadParts, the
    /// object byte for byte the file, and the source read once (plus the first byte's probe).
    func testAFileFromAWebServerArrivesWholeReadOnce() async throws {
        let servers = try TestServers.current()
        for (label, _, configuration, transport) in try s3Pairs() {
            let recorder = RecordingTransport(wrapping: transport)
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("stream", label)
            try await client.createBucket(bucket)
            let key = "stream-\(UUID().uuidString.prefix(8))"
            servers.reset(key: key)
            let source = StreamSource(url: URL(string: "\(servers.fault.absoluteString)/64m.bin?key=\(key)")!)
            let result = try await StreamedCopy(client: client, transport: transport, retry: quickRetry,
                                                options: StreamedCopyOptions(source: source, bucket: bucket, key: "web.bin",
                                                                             partSize: 8 << 20, partsInFlight: 3),
                                                state: try state(label)).run()
            XCTAssertEqual(result.parts, 8, label)
            XCTAssertEqual(recorder.operations().filter { $0 == "UploadPart" }.count, 8, label)
            XCTAssertEqual(try servers.stats(key: key).bytes_sent, (64 << 20) + 1, "\(label): every byte read once, and the probe's")
            let read = try await readBack(client, transport: transport, bucket: bucket, key: "web.bin")
            XCTAssertEqual(read, try servers.sha256(of: "64m.bin"), label)
        }
    }

    /// Interrupted after two of eight parts, the next run sends the other six and fetches
    /// only their ranges: no byte the server confirmed is read or sent again.
    func testAnInterruptedCopyFetchesAndSendsOnlyTheMissingParts() async throws {
        let servers = try TestServers.current()
        for (label, _, configuration, transport) in try s3Pairs() {
            let recorder = RecordingTransport(wrapping: transport)
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("stream-resume", label)
            try await client.createBucket(bucket)
            let key = "resume-\(UUID().uuidString.prefix(8))"
            servers.reset(key: key)
            let source = StreamSource(url: URL(string: "\(servers.fault.absoluteString)/64m.bin?key=\(key)")!)
            let options = StreamedCopyOptions(source: source, bucket: bucket, key: "web.bin", partSize: 8 << 20, partsInFlight: 1)
            let interrupting = FaultInjectingTransport(wrapping: recorder, rules: [
                ({ $0.url.query?.contains("partNumber=3&") == true }, .before({ throw CancellationError() }), 1),
            ])
            let state = try state(label)
            do {
                _ = try await StreamedCopy(client: S3Client(configuration: configuration, transport: interrupting, retry: quickRetry),
                                           transport: transport, retry: quickRetry, options: options, state: state).run()
                XCTFail("\(label): interrupted")
            } catch is CancellationError {}
            let before = try servers.stats(key: key).bytes_sent
            let mark = recorder.mark
            let result = try await StreamedCopy(client: client, transport: transport, retry: quickRetry, options: options,
                                                state: state).run()
            XCTAssertTrue(result.resumed, label)
            XCTAssertEqual(result.partsSent, 6, label)
            XCTAssertEqual(recorder.operations(since: mark).filter { $0 == "UploadPart" }.count, 6, label)
            XCTAssertEqual(try servers.stats(key: key).bytes_sent - before, 6 * (8 << 20) + 1,
                           "\(label): the six missing parts' ranges and the probe, nothing more")
            let read = try await readBack(client, transport: transport, bucket: bucket, key: "web.bin")
            XCTAssertEqual(read, try servers.sha256(of: "64m.bin"), label)
        }
    }

    /// The file changes on the server after two parts: the next part's answer names another
    /// version, so the copy starts again and the object is the new file whole.
    func testASourceThatChangesMidCopyIsCopiedAgainWhole() async throws {
        let servers = try TestServers.current()
        for (label, _, configuration, transport) in try s3Pairs() {
            let client = S3Client(configuration: configuration, transport: transport, retry: quickRetry)
            let bucket = bucket("stream-change", label)
            try await client.createBucket(bucket)
            let key = "change-\(UUID().uuidString.prefix(8))"
            servers.reset(key: key)
            let source = StreamSource(url: URL(string: "\(servers.fault.absoluteString)/64m.bin?key=\(key)&change_after=\((16 << 20) + 1)&alt=1m.bin")!)
            let result = try await StreamedCopy(client: client, transport: transport, retry: quickRetry,
                                                options: StreamedCopyOptions(source: source, bucket: bucket, key: "web.bin",
                                                                             partSize: 8 << 20, partsInFlight: 1),
                                                state: try state(label)).run()
            XCTAssertEqual(result.size, 1 << 20, label)
            let read = try await readBack(client, transport: transport, bucket: bucket, key: "web.bin")
            XCTAssertEqual(read, try servers.sha256(of: "1m.bin"), label)
            let open = try await client.openUploads(bucket: bucket, key: "web.bin")
            XCTAssertEqual(open, [], "\(label): the first upload is aborted")
        }
    }

    /// Sources that cannot be read in ranges are refused before any upload is created, with the reason.
    func testASourceWithoutRangesIsRefusedWithTheReason() async throws {
        let servers = try TestServers.current()
        for (label, _, configuration, transport) in try s3Pairs() where transport.name == "curl" {
            let recorder = RecordingTransport(wrapping: transport)
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("stream-norange", label)
            try await client.createBucket(bucket)
            for query in ["range_bare=1", "status=404", "no_validators=1"] {
                let source = StreamSource(url: URL(string: "\(servers.fault.absoluteString)/64m.bin?\(query)")!)
                do {
                    _ = try await StreamedCopy(client: client, transport: transport, retry: quickRetry,
                                               options: StreamedCopyOptions(source: source, bucket: bucket, key: "x.bin"),
                                               state: try state(label)).run()
                    XCTFail("\(label) \(query): no copy")
                } catch let error as StreamedCopyError {
                    let expected = ["status=404": "HTTP 404", "no_validators=1": "neither a strong ETag nor a Last-Modified",
                                    "range_bare=1": "in ranges"][query] ?? "?"
                    XCTAssertTrue(String(describing: error).contains(expected), "\(query): \(error)")
                }
            }
            XCTAssertEqual(recorder.operations().filter { $0 != "CreateBucket" }, [], "\(label): nothing created")
        }
    }

    /// An object on one S3 server copied to another (moto to SeaweedFS and back), signed on each side.
    func testAnObjectOnAnotherEndpointIsStreamedAcross() async throws {
        let servers = try UploadServers.current()
        let targets = servers.s3Servers
        guard targets.count == 2 else { throw XCTSkip("needs SeaweedFS beside moto") }
        let path = try TestServers.current().path("64m.bin")
        for (from, to) in [(targets[0], targets[1]), (targets[1], targets[0])] {
            let label = "\(from.name)->\(to.name)"
            let transport = CurlTransport()
            let source = S3Client(configuration: from.configuration, transport: transport, retry: quickRetry)
            let destination = S3Client(configuration: to.configuration, transport: transport, retry: quickRetry)
            let bucket = bucket("across", label.replacingOccurrences(of: ">", with: ""))
            try await source.createBucket(bucket)
            try await destination.createBucket(bucket)
            _ = try await S3MultipartUpload(client: source, options: S3UploadOptions(source: path, bucket: bucket, key: "a.bin"),
                                            state: try state(label)).run()
            let tagging = "<Tagging><TagSet><Tag><Key>team</Key><Value>red one</Value></Tag></TagSet></Tagging>"
            _ = try await source.send("PutObjectTagging", method: "PUT", bucket: bucket, key: "a.bin", query: "tagging=",
                                      body: .data(Data(tagging.utf8)))
            let result = try await StreamedCopy(client: destination, transport: transport, retry: quickRetry,
                                                options: StreamedCopyOptions(source: try StreamSource(s3: source, bucket: bucket, key: "a.bin"),
                                                                             bucket: bucket, key: "b.bin", partSize: 16 << 20),
                                                state: try state(label)).run()
            XCTAssertEqual(result.parts, 4, label)
            let tags = try await destination.objectTagging(bucket: bucket, key: "b.bin")
            XCTAssertEqual(tags, [S3Tag(key: "team", value: "red one")], "\(label): the tags went across")
            let read = try await readBack(destination, transport: transport, bucket: bucket, key: "b.bin")
            XCTAssertEqual(read, try SHA256Hasher.hex(ofFileAt: path), label)
        }
    }

    /// A whole prefix on one server copied to another, each object streamed through memory.
    func testAPrefixOnAnotherEndpointIsStreamedAcross() async throws {
        let targets = try UploadServers.current().s3Servers
        guard targets.count == 2 else { throw XCTSkip("needs SeaweedFS beside moto") }
        let transport = CurlTransport()
        let source = S3Client(configuration: targets[0].configuration, transport: transport, retry: quickRetry)
        let destination = S3Client(configuration: targets[1].configuration, transport: transport, retry: quickRetry)
        let bucket = bucket("across-prefix", "moto-seaweedfs")
        try await source.createBucket(bucket)
        try await destination.createBucket(bucket)
        let directory = try scratchDirectory()
        var sums: [String: String] = [:]
        for (index, name) in ["a.bin", "dir/b.bin", "skip.tmp"].enumerated() {
            let path = directory + "/\(index)"
            try Data((0..<(100_000 * (index + 1))).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) }).write(to: URL(fileURLWithPath: path))
            sums[name] = try SHA256Hasher.hex(ofFileAt: path)
            _ = try await S3MultipartUpload(client: source, options: S3UploadOptions(source: path, bucket: bucket, key: "src/" + name),
                                            state: try state("seed-\(index)")).run()
        }
        let result = try await S3PrefixCopy(client: destination, from: source, source: S3Location(bucket: bucket, key: "src/"),
                                            bucket: bucket, prefix: "src/", filter: S3PrefixPlan.Filter(exclude: ["*.tmp"]),
                                            store: try state("across")).run()
        XCTAssertEqual(result.objects, 2)
        for name in ["a.bin", "dir/b.bin"] {
            let read = try await readBack(destination, transport: transport, bucket: bucket, key: "src/" + name)
            XCTAssertEqual(read, sums[name], name)
        }
        let skipped = try await destination.headObjectIfPresent(bucket: bucket, key: "src/skip.tmp")
        XCTAssertNil(skipped, "excluded")
    }

    /// A source that ignores ranges is read once, start to end, cut into parts as it arrives, with
    /// curl (which can hold the reading back); the urlsession backend says it cannot, and why.
    /// One that does not say its length (an endless body cut by the server) goes the same way.
    func testASourceWithoutRangesIsReadOnceInParts() async throws {
        let servers = try TestServers.current()
        for (label, _, configuration, transport) in try s3Pairs() {
            let client = S3Client(configuration: configuration, transport: transport, retry: quickRetry)
            let bucket = bucket("stream-whole", label)
            try await client.createBucket(bucket)
            var options = StreamedCopyOptions(source: StreamSource(url: URL(string: "\(servers.fault.absoluteString)/64m.bin?ignore_range=1")!),
                                              bucket: bucket, key: "whole.bin", partSize: 8 << 20, partsInFlight: 2)
            let backend = transport.name
            options.sequentialTransport = { backend == "urlsession" ? URLSessionTransport() as Transport : CurlTransport(loops: 1) }
            let copy = StreamedCopy(client: client, transport: transport, retry: quickRetry, options: options, state: try state(label))
            if backend == "urlsession" {
                do {
                    _ = try await copy.run()
                    XCTFail("\(label): the urlsession backend cannot hold the reading back")
                } catch let error as StreamedCopyError {
                    XCTAssertTrue(String(describing: error).contains("use --transport curl"), "\(label): \(error)")
                }
                continue
            }
            let result = try await copy.run()
            XCTAssertEqual(result.parts, 8, label)
            let read = try await readBack(client, transport: transport, bucket: bucket, key: "whole.bin")
            XCTAssertEqual(read, try servers.sha256(of: "64m.bin"), label)

            var endless = StreamedCopyOptions(source: StreamSource(url: URL(string: "\(servers.fault.absoluteString)/x?endless=1&drop_every=20000000")!),
                                              bucket: bucket, key: "endless.bin", partSize: 5 << 20, partsInFlight: 2)
            endless.sequentialTransport = { CurlTransport(loops: 1) }
            let cut = try await StreamedCopy(client: client, transport: transport, retry: quickRetry, options: endless,
                                             state: try state(label + "-endless")).run()
            XCTAssertEqual(cut.size, 20_000_000, "\(label): what the server sent, all of it")
            XCTAssertEqual(cut.parts, 4, label)
        }
    }
}
