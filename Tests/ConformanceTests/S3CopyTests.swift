import Foundation
import TestSupport
import TransferCore
import XCTest

/// Server-side copies (`S3ObjectCopy`, `S3PrefixCopy`) on moto and SeaweedFS, on both
/// backends: what reaches the server is counted on the client's side, and every copy
/// is read back and compared with the bytes it was made from.
final class S3CopyTests: XCTestCase {
    let quickRetry = RetryPolicy(maxAttempts: 4, baseDelay: 0.05, maxDelay: 0.5)

    /// A local file of `size` bytes whose content depends on `seed`.
    func file(_ size: Int, seed: UInt8, in directory: String) throws -> String {
        let path = directory + "/source-\(seed).bin"
        var bytes = [UInt8](repeating: 0, count: size)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 31 &+ Int(seed) &+ index >> 12) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// `path` uploaded to `bucket/key` in parts of `partSize`, with these headers (metadata, type).
    func uploadInParts(_ client: S3Client, path: String, bucket: String, key: String, partSize: Int64,
                       headers: HTTPHeaders) async throws {
        let size = Int64(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0)
        let id = try await client.createMultipartUpload(bucket: bucket, key: key, headers: headers)
        var parts: [(number: Int, etag: String, crc32: String?)] = []
        var offset: Int64 = 0
        while offset < size {
            let length = min(partSize, size - offset)
            let md5 = try FileDigests.compute(path: path, offset: offset, length: length, sha256: false).md5
            let sent = try await client.uploadPart(bucket: bucket, key: key, uploadID: id, number: parts.count + 1, path: path,
                                                   offset: offset, length: length, md5: md5)
            parts.append((parts.count + 1, sent.etag, nil))
            offset += length
        }
        _ = try await client.completeMultipartUpload(bucket: bucket, key: key, uploadID: id, parts: parts)
    }

    /// The SHA-256 of `bucket/key` as read back through the download engine.
    func readBack(_ client: S3Client, transport: Transport, bucket: String, key: String) async throws -> String {
        let source = try client.downloadSource(bucket: bucket, key: key)
        var options = DownloadOptions(url: source.url, destination: try scratchDirectory("back") + "/back.bin", retry: quickRetry)
        source.configure(&options)
        let result = try await DownloadEngine(transport: transport, options: options).run()
        defer { try? FileManager.default.removeItem(atPath: result.path) }
        return try SHA256Hasher.hex(ofFileAt: result.path)
    }

    func state(_ label: String) throws -> FileUploadStateStore {
        FileUploadStateStore(source: "copy", bucket: "b", key: "k", environment: ["HOME": try scratchDirectory(label)])
    }

    /// A multipart source (three parts, metadata, a Content-Type) is copied part for part
    /// by the server: no byte goes through the client, the copy has every header and
    /// metadata item, its bytes are the source's, and on moto its ETag is the source's.
    func testAMultipartSourceIsCopiedPartForPartWithItsMetadata() async throws {
        let directory = try scratchDirectory()
        let path = try file((12 << 20) + 333, seed: 1, in: directory)
        for (label, server, configuration, transport) in try s3Pairs() {
            let recorder = RecordingTransport(wrapping: transport)
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("copy-parts", label)
            try await client.createBucket(bucket)
            try await uploadInParts(client, path: path, bucket: bucket, key: "from/data.bin", partSize: 5 << 20,
                                    headers: ["Content-Type": "application/x-test", "Cache-Control": "max-age=60",
                                              "x-amz-meta-colour": "blue", "x-amz-tagging": "team=red%20one&tier=cold"])
            let source = try await client.headObject(bucket: bucket, key: "from/data.bin")
            let mark = recorder.mark
            let result = try await S3ObjectCopy(client: client, options: S3CopyOptions(
                source: S3Location(bucket: bucket, key: "from/data.bin"), bucket: bucket, key: "to/data.bin"),
                state: try state(label)).run()
            let operations = recorder.operations(since: mark)
            XCTAssertEqual(operations.filter { $0 == "UploadPartCopy" }.count, 3, "\(label): \(operations)")
            XCTAssertFalse(operations.contains("UploadPart") || operations.contains("GetObject") || operations.contains("PutObject"),
                           "\(label): no byte through the client: \(operations)")
            XCTAssertEqual(result.parts, 3, label)
            XCTAssertEqual(result.size, (12 << 20) + 333, label)
            if server == "moto" {
                XCTAssertEqual(result.verdict, .sameETag, label)
                XCTAssertEqual(result.etag, source.etag, label)
            }
            let head = try await client.send("HeadObject", method: "HEAD", bucket: bucket, key: "to/data.bin")
            XCTAssertEqual(head.headers["Content-Type"], "application/x-test", label)
            XCTAssertEqual(head.headers["Cache-Control"], "max-age=60", label)
            XCTAssertEqual(head.headers["x-amz-meta-colour"], "blue", label)
            // A copy in parts starts without tags: the source's were asked for and sent again.
            XCTAssertTrue(operations.contains("GetObjectTagging"), "\(label): \(operations)")
            let tags = try await client.objectTagging(bucket: bucket, key: "to/data.bin")
            XCTAssertEqual(Set(tags.map { "\($0.key)=\($0.value)" }), ["team=red one", "tier=cold"], label)
            let read = try await readBack(client, transport: transport, bucket: bucket, key: "to/data.bin")
            XCTAssertEqual(read, try SHA256Hasher.hex(ofFileAt: path), label)
        }
    }

    /// A single-part object is one CopyObject, whose copy keeps the source's MD5 ETag.
    func testASinglePartObjectIsOneCopyObjectWithTheSourcesETag() async throws {
        let directory = try scratchDirectory()
        let path = try file(300_000, seed: 2, in: directory)
        for (label, _, configuration, transport) in try s3Pairs() {
            let recorder = RecordingTransport(wrapping: transport)
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("copy-whole", label)
            try await client.createBucket(bucket)
            try await uploadInParts(client, path: path, bucket: bucket, key: "a.bin", partSize: 5 << 20,
                                    headers: ["Content-Type": "text/plain"])
            // One part in a multipart upload is still a multipart object: put it whole instead.
            let md5 = try FileDigests.compute(path: path, offset: 0, length: 300_000, sha256: false).md5
            _ = try await client.putObject(bucket: bucket, key: "a.bin", path: path, length: 300_000, md5: md5, contentType: "text/plain")
            let mark = recorder.mark
            let result = try await S3ObjectCopy(client: client, options: S3CopyOptions(
                source: S3Location(bucket: bucket, key: "a.bin"), bucket: bucket, key: "b.bin"), state: try state(label)).run()
            XCTAssertEqual(recorder.operations(since: mark).filter { $0 == "CopyObject" }.count, 1, label)
            XCTAssertEqual(result.verdict, .sameETag, label)
            XCTAssertEqual(S3MultipartUpload.unquote(result.etag), md5.hexString, label)
            let head = try await client.send("HeadObject", method: "HEAD", bucket: bucket, key: "b.bin")
            XCTAssertEqual(head.headers["Content-Type"], "text/plain", label)
        }
    }

    /// A copy interrupted after two of its three parts continues from its checkpoint: the
    /// next run lists the parts and copies only the third.
    func testAnInterruptedCopyCopiesOnlyTheMissingPartsNextTime() async throws {
        let directory = try scratchDirectory()
        let path = try file((12 << 20) + 5, seed: 3, in: directory)
        for (label, _, configuration, transport) in try s3Pairs() {
            let recorder = RecordingTransport(wrapping: transport)
            let seeding = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("copy-resume", label)
            try await seeding.createBucket(bucket)
            try await uploadInParts(seeding, path: path, bucket: bucket, key: "src.bin", partSize: 5 << 20, headers: [:])
            let interrupting = FaultInjectingTransport(wrapping: recorder, rules: [
                ({ $0.url.query?.contains("partNumber=3&") == true }, .before({ throw CancellationError() }), 1),
            ])
            let state = try state(label)
            var options = S3CopyOptions(source: S3Location(bucket: bucket, key: "src.bin"), bucket: bucket, key: "dst.bin")
            options.partsInFlight = 1
            do {
                _ = try await S3ObjectCopy(client: S3Client(configuration: configuration, transport: interrupting, retry: quickRetry),
                                           options: options, state: state).run()
                XCTFail("\(label): the copy was interrupted")
            } catch is CancellationError {}
            XCTAssertNotNil(try state.load(), "\(label): the checkpoint is kept")
            let mark = recorder.mark
            let result = try await S3ObjectCopy(client: seeding, options: options, state: state).run()
            let operations = recorder.operations(since: mark)
            XCTAssertTrue(result.resumed, label)
            XCTAssertEqual(result.partsCopied, 1, label)
            XCTAssertEqual(operations.filter { $0 == "UploadPartCopy" }.count, 1, "\(label): \(operations)")
            XCTAssertEqual(operations.filter { $0 == "CreateMultipartUpload" }.count, 0, "\(label): \(operations)")
            XCTAssertNil(try state.load(), "\(label): no checkpoint once complete")
            let read = try await readBack(seeding, transport: transport, bucket: bucket, key: "dst.bin")
            XCTAssertEqual(read, try SHA256Hasher.hex(ofFileAt: path), label)
        }
    }

    /// The source is replaced while its parts are being copied. SeaweedFS refuses the next part
    /// (`x-amz-copy-source-if-match`), moto copies it anyway and the second look before joining
    /// catches it: either way the copy starts again and ends holding the new source whole,
    /// never parts of two versions, and no multipart upload is left open.
    func testASourceReplacedDuringTheCopyIsCopiedAgainWhole() async throws {
        let directory = try scratchDirectory()
        // The same size: only the ETag tells the versions apart (moto copies the next parts from the new one).
        let old = try file((12 << 20) + 7, seed: 4, in: directory)
        let new = try file((12 << 20) + 7, seed: 5, in: directory)
        for (label, _, configuration, transport) in try s3Pairs() {
            let client = S3Client(configuration: configuration, transport: transport, retry: quickRetry)
            let bucket = bucket("copy-changed", label)
            try await client.createBucket(bucket)
            try await uploadInParts(client, path: old, bucket: bucket, key: "src.bin", partSize: 5 << 20, headers: [:])
            let newMD5 = try FileDigests.compute(path: new, offset: 0, length: (12 << 20) + 7, sha256: false).md5
            let replacing = FaultInjectingTransport(wrapping: transport, rules: [
                ({ $0.url.query?.contains("partNumber=2&") == true && $0.headers.contains("x-amz-copy-source") },
                 .before({ _ = try await client.putObject(bucket: bucket, key: "src.bin", path: new, length: (12 << 20) + 7,
                                                          md5: newMD5, contentType: "application/octet-stream") }), 1),
            ])
            var options = S3CopyOptions(source: S3Location(bucket: bucket, key: "src.bin"), bucket: bucket, key: "dst.bin")
            options.partsInFlight = 1
            let result = try await S3ObjectCopy(client: S3Client(configuration: configuration, transport: replacing, retry: quickRetry),
                                                options: options, state: try state(label)).run()
            XCTAssertEqual(result.size, (12 << 20) + 7, label)
            XCTAssertEqual(result.parts, 1, "\(label): the new source (one PUT), copied with CopyObject")
            XCTAssertEqual(result.verdict, .sameETag, label)
            let read = try await readBack(client, transport: transport, bucket: bucket, key: "dst.bin")
            XCTAssertEqual(read, try SHA256Hasher.hex(ofFileAt: new), label)
            let open = try await client.openUploads(bucket: bucket, key: "dst.bin")
            XCTAssertEqual(open, [], "\(label): the first copy's upload is aborted")
        }
    }

    /// CopyObject answered 200 with a passing error document is sent again, not taken as done.
    func testACopyAnswered200WithAPassingErrorIsSentAgain() async throws {
        let directory = try scratchDirectory()
        let path = try file(100_000, seed: 6, in: directory)
        for (label, _, configuration, transport) in try s3Pairs() where transport.name == "curl" {
            let client = S3Client(configuration: configuration, transport: transport, retry: quickRetry)
            let bucket = bucket("copy-200", label)
            try await client.createBucket(bucket)
            let md5 = try FileDigests.compute(path: path, offset: 0, length: 100_000, sha256: false).md5
            _ = try await client.putObject(bucket: bucket, key: "a.bin", path: path, length: 100_000, md5: md5, contentType: "text/plain")
            let faulty = FaultInjectingTransport(wrapping: transport, rules: [
                ({ $0.headers.contains("x-amz-copy-source") }, .status(200, code: "InternalError"), 1),
            ])
            let result = try await S3ObjectCopy(client: S3Client(configuration: configuration, transport: faulty, retry: quickRetry),
                                                options: S3CopyOptions(source: S3Location(bucket: bucket, key: "a.bin"),
                                                                       bucket: bucket, key: "b.bin"), state: try state(label)).run()
            XCTAssertEqual(faulty.seen.withLock { $0[0] }, 2, "\(label): sent again once")
            XCTAssertEqual(result.verdict, .sameETag, label)
        }
    }

    /// A prefix copy takes its globs, and a second one with skip-unchanged copies nothing.
    func testAPrefixCopyTakesItsGlobsAndThenFindsEverythingUnchanged() async throws {
        let directory = try scratchDirectory()
        for (label, _, configuration, transport) in try s3Pairs() {
            let recorder = RecordingTransport(wrapping: transport)
            let client = S3Client(configuration: configuration, transport: recorder, retry: quickRetry)
            let bucket = bucket("copy-prefix", label)
            try await client.createBucket(bucket)
            for (index, name) in ["a.bin", "logs/b.bin", "tmp/c.bin"].enumerated() {
                let path = try file(1000 * (index + 1), seed: UInt8(10 + index), in: directory)
                let md5 = try FileDigests.compute(path: path, offset: 0, length: Int64(1000 * (index + 1)), sha256: false).md5
                _ = try await client.putObject(bucket: bucket, key: "data/" + name, path: path, length: Int64(1000 * (index + 1)),
                                               md5: md5, contentType: "application/octet-stream")
            }
            func copy(skipUnchanged: Bool) async throws -> S3PrefixCopy.Result {
                try await S3PrefixCopy(client: client, source: S3Location(bucket: bucket, key: "data/"), bucket: bucket,
                                       prefix: "backup", filter: S3PrefixPlan.Filter(exclude: ["tmp/*"]),
                                       skipUnchanged: skipUnchanged, store: try state(label)).run()
            }
            let start = recorder.mark
            let first = try await copy(skipUnchanged: false)
            // One request per object: its size and MD5 come from the listing, and the copy's ETag, the
            // source's MD5, proves it without a HEAD on either side.
            XCTAssertEqual(recorder.operations(since: start), ["ListObjectsV2", "CopyObject", "CopyObject"], label)
            XCTAssertEqual(first.objects, 2, label)
            XCTAssertEqual(first.bytes, 3000, label)
            var keys: [String] = []
            try await client.forEachListedPage(bucket: bucket, prefix: "backup/") { keys += $0.map(\.key) }
            XCTAssertEqual(keys, ["backup/a.bin", "backup/logs/b.bin"], label)
            let mark = recorder.mark
            let second = try await copy(skipUnchanged: true)
            XCTAssertEqual(second.unchanged, 2, label)
            XCTAssertEqual(recorder.operations(since: mark).filter { $0 == "CopyObject" }, [], label)
        }
    }
}
