import Foundation
@testable import TransferCore
import TestSupport
import XCTest

/// What transferd reads into memory from a server (S3's XML, an upload's answer, the
/// control API's answers) stops at a cap, on both backends: the fault server's endless
/// answers end in `ResponseTooLarge` naming the redacted URL, the cap and what to
/// check, at once, not in an exchange that reads on without end.
final class BoundedReadTests: XCTestCase {
    /// The fault server's endless answers here end after 64 MiB (`drop_every`), 8 times the largest
    /// cap: the caller must stop at its cap long before, and FoundationNetworking, which reads a
    /// stopped answer on until its cancellation gets its turn (docs/backends.md), is not kept
    /// reading for the rest of the run, with every later urlsession exchange of the process behind it.
    static let endlessEnd = ["drop_every": String(64 << 20)]

    /// What `work` threw. Past `seconds` it is cancelled and the test fails: an answer read
    /// on without end (as before the cap) must fail the test, not hang it. 30 s: the cap stops
    /// an exchange at once, but FoundationNetworking reads an earlier, stopped endless answer
    /// on for a while on its one work queue, which a later urlsession exchange waits behind
    /// (once 10 s were not enough in a run of the whole suite).
    func thrown(within seconds: TimeInterval, _ label: String, _ work: @escaping @Sendable () async throws -> Void) async -> Error? {
        let task = Task { try await work() }
        let watchdog = Task {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            task.cancel()
        }
        defer { watchdog.cancel() }
        let started = Date()
        do {
            try await task.value
            return nil
        } catch {
            if Date().timeIntervalSince(started) >= seconds {
                XCTFail("\(label): still reading after \(seconds) s (then cancelled: \(error))")
            }
            return error
        }
    }

    /// `BoundedRead.fetch` blocks its thread: it runs on a thread of its own here, given up on
    /// (and the test failed) after `seconds`.
    func fetch(_ request: TransferRequest, limit: Int, transport: Transport, within seconds: TimeInterval = 30,
               _ label: String) -> Result<(status: Int, body: Data), Error>? {
        let result = Locked<Result<(status: Int, body: Data), Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let answer = Result { try BoundedRead.fetch(request, limit: limit, advice: "check the address", transport: transport) }
            result.withLock { $0 = answer }
            done.signal()
        }
        guard done.wait(timeout: .now() + seconds) == .success else {
            XCTFail("\(label): still reading after \(seconds) s")
            return nil
        }
        return result.current
    }

    func s3Client(_ servers: TestServers, _ transport: Transport) -> S3Client {
        S3Client(configuration: S3Configuration(endpoint: servers.fault, region: "us-east-1",
                                                credentials: AWSCredentials(accessKeyID: "AKIDBOUNDED", secretAccessKey: "s3cr3t-bounded"),
                                                pathStyle: true),
                 transport: transport, retry: RetryPolicy(maxAttempts: 2, baseDelay: 0.05, maxDelay: 0.1))
    }

    func testAnS3AnswerWithoutEndStopsAtItsLimitWithTheURLAndTheFix() async throws {
        let servers = try TestServers.current()
        var keys: [String] = []
        for (name, transport) in Backends.all {
            for endless in ["endless", "endless_chunked"] {
                let key = UUID().uuidString
                keys.append(key)
                let client = s3Client(servers, transport)
                let error = await thrown(within: 30, "\(name) \(endless)") {
                    _ = try await client.send("ListObjectsV2", method: "GET", bucket: "bucket", key: "",
                                              query: "list-type=2&\(endless)=1&drop_every=\(64 << 20)&key=\(key)", responseLimit: 64 << 10)
                }
                let text = error.map { "\($0)" } ?? "nothing thrown"
                XCTAssertTrue(error is ResponseTooLarge, "\(name) \(endless): \(text)")
                XCTAssertTrue(text.contains("the answer from \(servers.fault.absoluteString)/bucket/?list-type=2")
                              && text.contains("longer than 64 KiB (65536 bytes)")
                              && text.contains("check that \(servers.fault.absoluteString) is an S3 endpoint (--endpoint"),
                              "\(name) \(endless): \(text)")
                XCTAssertFalse(text.contains("s3cr3t-bounded"), text)
            }
        }
        // Not asked again: the next answer would be as long. (Counted at the end: FoundationNetworking
        // reads a stopped endless answer on for a while, which holds up the URLSession that `stats` uses.)
        for key in keys { XCTAssertEqual(try servers.stats(key: key).requests, 1) }
    }

    func testAnS3AnswerToAPostWithoutEndStopsAtItsLimit() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let key = UUID().uuidString
            let client = s3Client(servers, transport)
            let complete = Data("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e\"</ETag></Part></CompleteMultipartUpload>".utf8)
            let error = await thrown(within: 30, name) {
                // As CompleteMultipartUpload sends it: a POST with an XML body, whose answer is read into memory.
                _ = try await client.send("CompleteMultipartUpload", method: "POST", bucket: "_echo", key: "object",
                                          query: "endless=1&drop_every=\(64 << 20)&key=\(key)", body: .data(complete))
            }
            let text = error.map { "\($0)" } ?? "nothing thrown"
            XCTAssertTrue(error is ResponseTooLarge && text.contains("longer than 1 MiB (1048576 bytes)")
                          && text.contains("/_echo/object?endless=1"), "\(name): \(text)")
        }
    }

    func testAnUploadAnsweredWithoutEndStopsAtTheCap() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("_echo", ["endless": "1"].merging(Self.endlessEnd) { $1 })
            let options = UploadOptions(url: url, method: "POST", body: .file(path: servers.path("1m.bin")),
                                        retry: RetryPolicy(maxAttempts: 2, baseDelay: 0.05, maxDelay: 0.1))
            let retries = Locked(0)
            let error = await thrown(within: 30, name) {
                _ = try await UploadEngine(transport: transport, options: options) { event in
                    if case .retrying = event { retries.withLock { $0 += 1 } }
                }.run()
            }
            let text = error.map { "\($0)" } ?? "nothing thrown"
            XCTAssertTrue(error is ResponseTooLarge, "\(name): \(text)")
            XCTAssertTrue(text.contains("the answer from \(servers.fault.absoluteString)/_echo?drop_every=67108864&endless=1")
                          && text.contains("longer than 4 MiB (4194304 bytes)") && text.contains("the upload may have arrived"),
                          "\(name): \(text)")
            XCTAssertEqual(retries.current, 0, "\(name): not sent again, the next answer would be as long")
        }
    }

    func testAnUploadAnswerWithinTheCapIsKeptWhole() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("_echo")
            let result = try await UploadEngine(transport: transport, options: UploadOptions(
                url: url, method: "POST", body: .file(path: servers.path("1m.bin")))).run()
            XCTAssertEqual(result.status, 200, name)
            let echo = try JSONSerialization.jsonObject(with: result.responseBody) as? [String: Any]
            XCTAssertEqual(echo?["body_length"] as? Int, 1 << 20, name)
        }
    }

    func testAControlAPIAnswerWithoutEndFailsAtTheCapNamingTheRedactedURL() throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            var (url, _) = servers.fault("any", ["endless": "1"].merging(Self.endlessEnd) { $1 })
            url = URL(string: url.absoluteString + "&token=t0ken-in-query")!
            guard let answer = fetch(TransferRequest(url: url), limit: 1 << 20, transport: transport, name) else { continue }
            guard case .failure(let error) = answer else { XCTFail("\(name): an endless answer was taken"); continue }
            let text = "\(error)"
            XCTAssertTrue(error is ResponseTooLarge, "\(name): \(text)")
            XCTAssertTrue(text.contains("the answer from \(servers.fault.absoluteString)/any?drop_every=67108864&endless=1")
                          && text.contains("longer than 1 MiB (1048576 bytes)") && text.hasSuffix("; check the address"),
                          "\(name): \(text)")
            XCTAssertFalse(text.contains("t0ken-in-query"), text)
        }
    }

    func testAnAnswerOfExactlyTheCapIsReadWholeAndOneByteMoreIsNot() throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin")
            let whole = try fetch(TransferRequest(url: url), limit: 1 << 20, transport: transport, name)?.get()
            XCTAssertEqual(whole?.status, 200, name)
            XCTAssertEqual(whole?.body.count, 1 << 20, name)
            let over = fetch(TransferRequest(url: url), limit: (1 << 20) - 1, transport: transport, name)
            guard case .failure(let error)? = over else { XCTFail("\(name): 1 MiB taken under a cap of 1 MiB - 1"); continue }
            XCTAssertTrue("\(error)".contains("longer than 1048575 bytes,"), "\(name): \(error)")
        }
    }
}
