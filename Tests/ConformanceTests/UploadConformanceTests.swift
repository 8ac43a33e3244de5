import Foundation
import TestSupport
import TransferCore
import XCTest

/// Uploads on both backends against nginx (PUT), a real multipart/form-data
/// parser, and moto's S3 server.
final class UploadConformanceTests: XCTestCase {
    let quickRetry = RetryPolicy(maxAttempts: 4, baseDelay: 0.05, maxDelay: 0.5)

    func testPutSendsTheFileByteForByte() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            // A fresh name each run: a second pass on the same servers (the sanitizer pass) creates, not replaces.
            let folder = "conformance/\(name)-\(UUID().uuidString.prefix(8))"
            let url = servers.http.appendingPathComponent("upload/\(folder)/64m.bin")
            let result = try await UploadEngine(transport: transport, options: UploadOptions(
                url: url, body: .file(path: servers.path("64m.bin")), checksum: .md5, retry: quickRetry)).run()
            XCTAssertEqual(result.status, 201, name)
            XCTAssertEqual(result.bytesSent, 64 << 20, name)
            let stored = (servers.www as NSString).deletingLastPathComponent + "/uploads/\(folder)/64m.bin"
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: stored), try servers.sha256(of: "64m.bin"), name)
        }
    }

    func testPutRetriesFromTheStartAfterAServerError() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("_echo", ["fail": "503", "fail_count": "2"])
            let result = try await UploadEngine(transport: transport, options: UploadOptions(
                url: url, method: "POST", body: .file(path: servers.path("1m.bin")), retry: quickRetry)).run()
            XCTAssertEqual(result.status, 200, name)
            XCTAssertEqual(result.attempts, 3, name)
            XCTAssertEqual(try servers.stats(key: key).requests, 3, name)
            let echo = String(decoding: result.responseBody, as: UTF8.self)
            XCTAssertTrue(echo.contains("1048576"), "\(name): the whole body arrived: \(echo.prefix(300))")
        }
    }

    func testFormArrivesIntactAtARealParser() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for (name, transport) in Backends.all {
            let form = MultipartForm(
                fields: [(name: "title", value: "quarterly \"report\""), (name: "note", value: "grüße\r\nline two")],
                files: [MultipartForm.File(field: "first", path: servers.path("1m.bin"), filename: "résumé \"v2\".bin"),
                        MultipartForm.File(field: "second", path: servers.path("64m.bin"), contentType: "application/x-test")])
            let key = "conformance-\(name)-\(UUID().uuidString.prefix(8))"
            let result = try await UploadEngine(transport: transport, options: UploadOptions(
                url: peers.form.appendingPathComponent("form/\(key)"), method: "POST", body: .form(form), retry: quickRetry)).run()
            XCTAssertEqual(result.status, 200, "\(name): \(String(decoding: result.responseBody, as: UTF8.self))")
            let received = try JSONSerialization.jsonObject(with: result.responseBody) as? [String: Any] ?? [:]
            let fields = received["fields"] as? [String: String] ?? [:]
            XCTAssertEqual(fields["title"], "quarterly \"report\"", name)
            XCTAssertEqual(fields["note"], "grüße\r\nline two", name)
            let files = received["files"] as? [[String: Any]] ?? []
            XCTAssertEqual(files.count, 2, name)
            let first = files.first { $0["field"] as? String == "first" } ?? [:]
            let second = files.first { $0["field"] as? String == "second" } ?? [:]
            XCTAssertEqual(first["filename"] as? String, "résumé \"v2\".bin", name)
            XCTAssertEqual(first["sha256"] as? String, try servers.sha256(of: "1m.bin"), name)
            XCTAssertEqual(second["filename"] as? String, "64m.bin", name)
            XCTAssertEqual(second["content_type"] as? String, "application/x-test", name)
            XCTAssertEqual(second["sha256"] as? String, try servers.sha256(of: "64m.bin"), name)
        }
    }

    func testS3MultipartUploadOfOneGibibyteIsByteIdentical() async throws {
        try skipUnderSanitizer("1 GiB through moto; the smaller multipart cases cover the same code")
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for (name, transport) in Backends.all {
            let client = S3Client(configuration: peers.configuration, transport: transport, retry: quickRetry)
            let bucket = "conformance-\(name)"
            try await client.createBucket(bucket)
            let logStart = try peers.logSize()
            let state = FileUploadStateStore(source: servers.path("1g.bin"), bucket: bucket, key: "big/1g.bin",
                                             environment: ["HOME": try scratchDirectory(name)])
            let result = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                source: servers.path("1g.bin"), bucket: bucket, key: "big/1g.bin", partSize: 16 << 20, partsInFlight: 4),
                state: state).run()
            XCTAssertEqual(result.parts, 64, name)
            XCTAssertTrue(result.etag.hasSuffix("-64\""), "\(name): \(result.etag)")
            let operations = try peers.operations(since: logStart)
            XCTAssertEqual(operations.filter { $0 == "UploadPart" }.count, 64, name)
            XCTAssertEqual(operations.filter { $0 == "CompleteMultipartUpload" }.count, 1, name)
            XCTAssertNil(try state.load(), "\(name): no resume state left once complete")

            // Read it back through the download engine with a signed GET.
            let (url, headers) = client.signedGetHeaders(bucket: bucket, key: "big/1g.bin")
            let back = (try scratchDirectory(name) as NSString).appendingPathComponent("back.bin")
            _ = try await DownloadEngine(transport: transport, options: DownloadOptions(
                url: url, destination: back, headers: headers, retry: quickRetry)).run()
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: back), try servers.sha256(of: "1g.bin"), name)
            try FileManager.default.removeItem(atPath: back)
        }
    }

    /// A dropped connection, a 500 and a 503 SlowDown on three parts: each
    /// of those parts is sent again, alone, and the object is complete.
    func testAFaultInOnePartRetriesThatPartAlone() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for (name, transport) in Backends.all {
            func part(_ number: Int) -> @Sendable (TransferRequest) -> Bool {
                { $0.method == "PUT" && ($0.url.query ?? "").contains("partNumber=\(number)&") }
            }
            let faulty = FaultInjectingTransport(wrapping: transport, rules: [
                (part(2), .connectionDropped, 1),
                (part(4), .status(500, code: "InternalError"), 1),
                (part(6), .status(503, code: "SlowDown"), 2),
            ])
            let client = S3Client(configuration: peers.configuration, transport: faulty, retry: quickRetry)
            let bucket = "faults-\(name)"
            try await client.createBucket(bucket)
            let logStart = try peers.logSize()
            let result = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                source: servers.path("64m.bin"), bucket: bucket, key: "faulty.bin", partSize: 8 << 20, partsInFlight: 3),
                state: FileUploadStateStore(source: servers.path("64m.bin"), bucket: bucket, key: "faulty.bin",
                                            environment: ["HOME": try scratchDirectory(name)])).run()
            XCTAssertEqual(result.parts, 8, name)
            XCTAssertEqual(faulty.seen.withLock { $0 }, [0: 2, 1: 2, 2: 3], "\(name): each faulty part was retried alone")
            let operations = try peers.operations(since: logStart)
            XCTAssertEqual(operations.filter { $0 == "UploadPart" }.count, 8, "\(name): every other part was sent once")
            XCTAssertEqual(operations.filter { $0 == "CreateMultipartUpload" }.count, 1, name)
            let head = try await client.headObject(bucket: bucket, key: "faulty.bin")
            XCTAssertEqual(head.size, 64 << 20, name)
        }
    }

    func testPermanentFailureAbortsTheUpload() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        let transport = CurlTransport()
        let faulty = FaultInjectingTransport(wrapping: transport, rules: [
            ({ $0.method == "PUT" && ($0.url.query ?? "").contains("partNumber=3&") }, .status(403, code: "AccessDenied"), 1),
        ])
        let client = S3Client(configuration: peers.configuration, transport: faulty, retry: quickRetry)
        try await client.createBucket("abort-check")
        let logStart = try peers.logSize()
        do {
            _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                source: servers.path("64m.bin"), bucket: "abort-check", key: "denied.bin", partSize: 8 << 20, partsInFlight: 2),
                state: FileUploadStateStore(source: servers.path("64m.bin"), bucket: "abort-check", key: "denied.bin",
                                            environment: ["HOME": try scratchDirectory()])).run()
            XCTFail("a 403 on a part must fail the upload")
        } catch let error as S3Error {
            XCTAssertTrue(error.description.contains("AccessDenied"), error.description)
        }
        let operations = try peers.operations(since: logStart)
        XCTAssertTrue(operations.contains("AbortMultipartUpload"), "no orphaned parts: \(operations)")
        let uploads = try await client.send("ListMultipartUploads", method: "GET", bucket: "abort-check", key: "", query: "uploads=")
        XCTAssertFalse(uploads.body.contains("<UploadId>"), uploads.body)
    }

    /// `s3://` sources: every request (including each range of a segmented
    /// download) is signed afresh, and the same credentials serve both directions.
    func testS3DownloadWithSignedRanges() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for (name, transport) in Backends.all {
            let client = S3Client(configuration: peers.configuration, transport: transport, retry: quickRetry)
            try await client.createBucket("download-\(name)")
            _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                source: servers.path("64m.bin"), bucket: "download-\(name)", key: "dir/64m.bin"),
                state: FileUploadStateStore(source: servers.path("64m.bin"), bucket: "download-\(name)", key: "dir/64m.bin",
                                            environment: ["HOME": try scratchDirectory(name)])).run()
            let logStart = try peers.logSize()
            let (url, signer) = client.downloadSource(bucket: "download-\(name)", key: "dir/64m.bin")
            var options = DownloadOptions(url: url, destination: (try scratchDirectory(name) as NSString).appendingPathComponent("64m.bin"),
                                          connections: 4, retry: quickRetry)
            options.signer = signer
            let result = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: result.path), try servers.sha256(of: "64m.bin"), name)
            let gets = try peers.operations(since: logStart).filter { $0 == "GetObject" }
            XCTAssertGreaterThanOrEqual(gets.count, 5, "\(name): the opening request plus four signed ranges")
        }
    }

    func testSmallObjectUsesOnePut() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for (name, transport) in Backends.all {
            let client = S3Client(configuration: peers.configuration, transport: transport, retry: quickRetry)
            try await client.createBucket("small-\(name)")
            let logStart = try peers.logSize()
            let result = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                source: servers.path("1m.bin"), bucket: "small-\(name)", key: "one.bin"),
                state: FileUploadStateStore(source: servers.path("1m.bin"), bucket: "small-\(name)", key: "one.bin",
                                            environment: ["HOME": try scratchDirectory(name)])).run()
            XCTAssertEqual(result.parts, 1, name)
            XCTAssertEqual(try peers.operations(since: logStart), ["PutObject"], name)
            let head = try await client.headObject(bucket: "small-\(name)", key: "one.bin")
            XCTAssertEqual(head.size, 1 << 20, name)
        }
    }

    func testWrongCredentialsGiveAClearErrorWithoutTheSecret() async throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        for (name, transport) in Backends.all {
            var configuration = peers.configuration
            configuration.credentials = AWSCredentials(accessKeyID: peers.credentials.accessKeyID, secretAccessKey: "not-the-secret-1234")
            let client = S3Client(configuration: configuration, transport: transport, retry: quickRetry)
            do {
                _ = try await S3MultipartUpload(client: client, options: S3UploadOptions(
                    source: servers.path("1m.bin"), bucket: "anything", key: "x.bin"),
                    state: FileUploadStateStore(source: "x", bucket: "anything", key: "x.bin",
                                                environment: ["HOME": try scratchDirectory(name)])).run()
                XCTFail("\(name): wrong credentials must fail")
            } catch let error as S3Error {
                let message = error.description
                XCTAssertTrue(message.contains(peers.s3.absoluteString), "\(name): names the endpoint: \(message)")
                XCTAssertTrue(message.contains("SignatureDoesNotMatch") || message.contains("InvalidAccessKeyId"), message)
                XCTAssertTrue(message.contains("AWS_SECRET_ACCESS_KEY"), "\(name): says what to check: \(message)")
                XCTAssertFalse(message.contains("not-the-secret-1234"), "\(name): never prints the secret")
            }
        }
    }
}
