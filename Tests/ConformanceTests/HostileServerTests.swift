import Foundation
@testable import TransferCore
import TestSupport
import XCTest

/// The hostile-server matrix: servers that lie, stall, redirect where they
/// should not or send what was not asked for. Every case runs on both
/// backends; a fault a backend cannot handle must end in a clear error, never
/// in a saved file whose bytes were not checked.
final class HostileServerTests: XCTestCase {
    let quickRetry = RetryPolicy(maxAttempts: 3, baseDelay: 0.05, maxDelay: 0.2)

    func options(_ url: URL, transport: String, connections: Int = 1, headers: HTTPHeaders = [:], idleTimeout: TimeInterval = 10,
                 function: String = #function) throws -> DownloadOptions {
        let destination = (try scratchDirectory(function + transport) as NSString).appendingPathComponent("out.bin")
        return DownloadOptions(url: url, destination: destination, headers: headers, connections: connections,
                               retry: quickRetry, idleTimeout: idleTimeout)
    }

    func failure(of options: DownloadOptions, with transport: Transport) async -> Error? {
        do {
            _ = try await DownloadEngine(transport: transport, options: options).run()
            return nil
        } catch {
            return error
        }
    }

    /// Runs a download and keeps its events.
    func run(_ options: DownloadOptions, with transport: Transport) async throws -> (DownloadResult, [DownloadEvent]) {
        let events = Locked<[DownloadEvent]>([])
        let result = try await DownloadEngine(transport: transport, options: options) { event in
            events.withLock { $0.append(event) }
        }.run()
        return (result, events.current)
    }

    /// Starts a download and stops it, as Ctrl-C or a queue's shutdown does, once the fault
    /// server has sent `bytes` for `key` (and a moment later, for them to be written).
    func stop(_ options: DownloadOptions, with transport: Transport, afterServerSent bytes: Int64, key: String,
              servers: TestServers) async throws {
        let running = Task { try await DownloadEngine(transport: transport, options: options).run() }
        try await waitUntil { try servers.stats(key: key).bytes_sent >= bytes }
        try await Task.sleep(nanoseconds: 300_000_000)
        running.cancel()
        _ = try? await running.value
    }

    // MARK: Retry storms

    func testAShortBodyWithoutRangesFailsAfterTheRetryBudget() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            // 200, Content-Length 1 MiB, half of it, close; no ranges, no validators: forever.
            let (url, key) = servers.fault("1m.bin", ["ignore_range": "1", "no_validators": "1", "short_by": String(512 << 10),
                                                      "short_count": "100000"])
            let options = try options(url, transport: name)
            let error = await failure(of: options, with: transport)
            XCTAssertNotNil(error, "\(name): a body that never completes cannot be a success")
            XCTAssertTrue("\(error!)".contains("gave up after 3 attempts"), "\(name): \(error!)")
            let requests = try servers.stats(key: key).requests
            XCTAssertLessThanOrEqual(requests, 3, "\(name): the same half fetched again is no progress (\(requests) requests)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: options.destination), name)
        }
    }

    func testAServerThatStallsAfterTenBytesFailsAfterTheRetryBudget() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("1m.bin", ["ignore_range": "1", "no_validators": "1", "stall_after": "10",
                                                      "stall_seconds": "30", "stall_count": "100000"])
            let started = Date()
            let error = await failure(of: try options(url, transport: name, idleTimeout: 1), with: transport)
            XCTAssertNotNil(error, name)
            XCTAssertLessThanOrEqual(try servers.stats(key: key).requests, 3, name)
            XCTAssertLessThan(Date().timeIntervalSince(started), 20, "\(name): gave up in time")
        }
    }

    func testAnAnswerThatCanNeverSucceedIsNotRetried() async throws {
        // 501 and 505 say the server cannot do it, however often asked (501 was tried five times).
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            for status in ["501", "505"] {
                let (url, key) = servers.fault("1m.bin", ["status": status])
                let options = try options(url, transport: name, function: "\(#function)\(status)")
                let error = await failure(of: options, with: transport)
                XCTAssertTrue("\(error.map { "\($0)" } ?? "none")".contains("HTTP \(status)"), "\(name): \(String(describing: error))")
                XCTAssertEqual(try servers.stats(key: key).requests, 1, "\(name): \(status) asked once")
            }
        }
    }

    func testSpaceReservedOnAPromiseIsGivenBackWhenTheTransferFails() async throws {
        // A server promises 12 MiB and sends 1 MiB: the 12 MiB reserved on its word stayed
        // allocated after the failure, on a 16 MiB disk that left no room for the next job.
        guard let disk = ProcessInfo.processInfo.environment["TRANSFERD_TEST_SMALL_DISK"] else {
            return XCTFail("TRANSFERD_TEST_SMALL_DISK is not set: scripts/test mounts a 16 MiB tmpfs for this test")
        }
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let folder = disk + "/reserve-\(name)-\(UUID().uuidString.prefix(6))"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: folder) }
            // 12 MiB promised, 512 KiB sent, then silence: the run is stopped there (as Ctrl-C or a
            // queue's shutdown stops it).
            let (url, key) = servers.fault("1m.bin", ["length_lie": String(12 << 20), "stall_after": String(512 << 10),
                                                      "stall_seconds": "30"])
            let options = DownloadOptions(url: url, destination: folder + "/out.bin", retry: quickRetry, idleTimeout: 10)
            try await stop(options, with: transport, afterServerSent: 512 << 10, key: key, servers: servers)
            var info = stat()
            XCTAssertEqual(stat(options.partPath, &info), 0, "\(name): the partial file is kept")
            let allocated = Int64(info.st_blocks) * 512
            XCTAssertLessThanOrEqual(allocated, (Int64(info.st_size) + 4095) / 4096 * 4096,
                                     "\(name): \(allocated) bytes held for a \(info.st_size)-byte partial file")
            // A promise larger than the disk is refused before anything is reserved.
            let (huge, _) = servers.fault("1m.bin", ["length_lie": String(64 << 20)])
            let second = DownloadOptions(url: huge, destination: folder + "/huge.bin", retry: quickRetry, idleTimeout: 10)
            let refused = await failure(of: second, with: transport)
            XCTAssertTrue("\(refused.map { "\($0)" } ?? "none")".contains("No space left"), "\(name): \(String(describing: refused))")

            // Four connections stopped early: the space between their bytes is given back too.
            let file = "reserve-\(UUID().uuidString).bin"
            try Data(count: 12 << 20).write(to: URL(fileURLWithPath: servers.path(file)))
            defer { try? FileManager.default.removeItem(atPath: servers.path(file)) }
            let (segmented, segmentedKey) = servers.fault(file, ["rate": "1000000"])
            var four = DownloadOptions(url: segmented, destination: folder + "/four.bin", connections: 4, retry: quickRetry,
                                       idleTimeout: 10)
            four.minSegmentSize = 256 << 10
            try await stop(four, with: transport, afterServerSent: 1 << 20, key: segmentedKey, servers: servers)
            let sent = try servers.stats(key: segmentedKey).bytes_sent
            XCTAssertEqual(stat(four.partPath, &info), 0, "\(name): the partial file is kept")
            XCTAssertLessThanOrEqual(Int64(info.st_blocks) * 512, sent + (256 << 10),
                                     "\(name): \(Int64(info.st_blocks) * 512) bytes held after \(sent) were sent")
        }
    }

    func testAnAnswerOfAnotherVersionThanListedIsAChangeAndRecordedAsReceived() async throws {
        // A listing said ETag "listed"; the server (ignoring If-Match) answers with its own. The
        // bytes were saved and recorded under the listing's ETag, so --skip-unchanged kept them.
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            for connections in [1, 4] {
                let (url, _) = servers.fault("64m.bin")
                var options = try options(url, transport: name, connections: connections, function: "\(#function)\(connections)")
                options.expectedValidators = ResponseValidators(etag: "\"listed\"")
                let (result, events) = try await run(options, with: transport)
                let served = try await DownloadEngine(transport: transport, options: options).request(method: "HEAD", headers: [:])
                XCTAssertEqual(result.validators.etag, served.headers["ETag"], "\(name) ×\(connections): what arrived is recorded")
                XCTAssertNotEqual(result.validators.etag, "\"listed\"", "\(name) ×\(connections)")
                XCTAssertTrue(events.contains { event in
                    if case .restarted(let reason) = event { return reason.contains("\"listed\"") }
                    return false
                }, "\(name) ×\(connections): the disagreement is a change, and says so")
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m.bin"), name)
            }
        }
    }

    func testATrickleIsAbandonedUnderTheSpeedFloor() async throws {
        // 20 bytes a second: never silent, so the idle timeout never fires (400 s and counting
        // before). Under a floor of 1 KiB/s for 2 s each attempt is abandoned, and the trickle is
        // no progress: the retry budget ends it.
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("1m.bin", ["rate": "20"])
            var options = try options(url, transport: name)
            options.lowSpeed = LowSpeedLimit(bytesPerSecond: 1024, seconds: 2)
            let started = Date()
            let error = await failure(of: options, with: transport)
            XCTAssertTrue("\(error.map { "\($0)" } ?? "none")".contains("slower than 1024 bytes/s for 2 s"), "\(name): \(String(describing: error))")
            XCTAssertTrue("\(error.map { "\($0)" } ?? "none")".contains("gave up after 3 attempts"), "\(name): \(String(describing: error))")
            XCTAssertEqual(try servers.stats(key: key).requests, 3, name)
            XCTAssertLessThan(Date().timeIntervalSince(started), 30, "\(name): abandoned in time")
        }
    }

    func testAHugeResponseHeaderIsNamedForWhatItIs() async throws {
        // 200 KB of header: libcurl reports it as "Out of memory", which sent users looking at
        // their machine. Whatever the backend does with it, nothing is saved and the error is clear.
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["big_header": "200000"])
            let options = try options(url, transport: name)
            if let error = await failure(of: options, with: transport) {
                XCTAssertFalse("\(error)".lowercased().contains("out of memory"), "\(name): \(error)")
                XCTAssertTrue("\(error)".contains("response headers are larger"), "\(name): \(error)")
                XCTAssertFalse(FileManager.default.fileExists(atPath: options.destination), name)
            } else {
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "1m.bin"), name)
            }
        }
    }

    func testAnIPv6LiteralHostIsReachedOrDeclaredUnsupported() async throws {
        // FoundationNetworking refuses http://[::1]/ (NSURLErrorBadURL), also after a redirect: it
        // was retried five times as "error -1000". Port 1 on ::1 has no server: curl tries it.
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let direct = try options(URL(string: "http://[::1]:1/x.bin")!, transport: name, function: "\(#function)direct")
            let (redirect, key) = servers.fault("1m.bin", ["redirect_to": "http://[::1]:1/x.bin"])
            let redirected = try options(redirect, transport: name, function: "\(#function)redirect")
            for options in [direct, redirected] {
                let error = "\(await failure(of: options, with: transport).map { "\($0)" } ?? "none")"
                if transport.capabilities.contains(.ipv6LiteralHosts) {
                    XCTAssertTrue(error.contains("could not connect"), "\(name): \(error)")
                } else {
                    XCTAssertTrue(error.contains("IPv6 literal") && error.contains("--transport curl"), "\(name): \(error)")
                }
            }
            if !transport.capabilities.contains(.ipv6LiteralHosts) {
                XCTAssertEqual(try servers.stats(key: key).requests, 1, "\(name): not retried")
            }
        }
    }

    // MARK: Bodies that are not what was asked for

    func testA200WithOnlyTheAskedRangeIsNeverSavedAsTheWholeFile() async throws {
        // Each range answered 200 with just the range's bytes and no Content-Range: a body that
        // may be the range or the whole file. `-c 4` once saved the first 4 MiB as the file.
        let servers = try TestServers.current()
        let expected = try servers.sha256(of: "64m.bin")
        for (name, transport) in Backends.all {
            for connections in [1, 4] {
                let (url, _) = servers.fault("64m.bin", ["range_bare": "1"])
                let options = try options(url, transport: name, connections: connections, function: "\(#function)\(connections)")
                let result = try await DownloadEngine(transport: transport, options: options).run()
                XCTAssertEqual(result.size, 64 << 20, "\(name) ×\(connections)")
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), expected, "\(name) ×\(connections)")
            }
        }
    }

    func testAResumeAnswered200WithOnlyTheRestIsNeverSavedAsTheWholeFile() async throws {
        // The first answer is cut 20 MiB short; the resume's range from 44 MiB is answered 200 with
        // the last 20 MiB and nothing else: not a 20 MiB file.
        let servers = try TestServers.current()
        let expected = try servers.sha256(of: "64m.bin")
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("64m.bin", ["range_bare": "1", "short_by": String(20 << 20)])
            let options = try options(url, transport: name)
            let result = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertEqual(result.size, 64 << 20, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), expected, name)
        }
    }

    func testAnEmptyFileIsANormalFile() async throws {
        // The fault server answers a range of an empty file 416 with `Content-Range: bytes */0`,
        // as S3 servers do: a length, not a change ("changed 4 times" before).
        let servers = try TestServers.current()
        let file = "empty-\(UUID().uuidString).bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: servers.path(file), contents: Data()))
        defer { try? FileManager.default.removeItem(atPath: servers.path(file)) }
        for (name, transport) in Backends.all {
            for connections in [1, 2, 8] {
                let (url, key) = servers.fault(file)
                let options = try options(url, transport: name, connections: connections, function: "\(#function)\(connections)")
                let result = try await DownloadEngine(transport: transport, options: options).run()
                XCTAssertEqual(result.size, 0, "\(name) ×\(connections)")
                XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: options.destination)), Data(), "\(name) ×\(connections)")
                XCTAssertEqual(result.restarts, 0, "\(name) ×\(connections)")
                XCTAssertLessThanOrEqual(try servers.stats(key: key).requests, 1, "\(name) ×\(connections): one request")
            }
        }
    }

    func testANotFoundLeavesNoPartialFileBehind() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("missing-\(UUID().uuidString).bin")
            let options = try options(url, transport: name)
            let error = await failure(of: options, with: transport)
            XCTAssertTrue("\(error.map { "\($0)" } ?? "no error")".contains("404"), "\(name): \(String(describing: error))")
            XCTAssertFalse(FileManager.default.fileExists(atPath: options.partPath), name)
            XCTAssertFalse(FileManager.default.fileExists(atPath: options.statePath), name)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: (options.destination as NSString).deletingLastPathComponent),
                           [], "\(name): nothing left in the folder")
        }
    }

    func testAResumeAnsweredWithTheWholeFileDoesNotSayResuming() async throws {
        // A run stopped after 1 MiB; by the next run the file has changed, so the resume's
        // If-Range fails and the server sends the whole new file (200). The run starts from
        // nothing: it must not say it resumes at 1 MiB. With four connections too: each range
        // asked of the changed file is answered with the whole of it.
        let servers = try TestServers.current()
        for (backend, transport) in Backends.all {
          for connections in [1, 4] {
            let name = "\(backend), \(connections) connection\(connections == 1 ? "" : "s")"
            // A path of its own (a link to 64m.bin), whose faults change between the two runs.
            let path = "resume-\(UUID().uuidString).bin"
            try FileManager.default.linkItem(atPath: servers.path("64m.bin"), toPath: servers.path(path))
            defer { try? FileManager.default.removeItem(atPath: servers.path(path)) }
            let (url, key) = servers.fault(path)
            defer { servers.reset(key: key) }
            // The first run is slow (2 MB/s a connection), so that it is stopped part way.
            try servers.preset("/" + path, ["rate": "2000000"], key: key)
            var options = try options(url, transport: backend, connections: connections, function: #function + name)
            options.minSegmentSize = 256 << 10
            // Stopped once its ranges were asked for (the first exchange, then one per connection).
            let running = Task { [options] in try await DownloadEngine(transport: transport, options: options).run() }
            try await waitUntil {
                let stats = try servers.stats(key: key)
                return stats.bytes_sent >= 1 << 20 && stats.requests >= (connections == 1 ? 1 : 1 + connections)
            }
            try await Task.sleep(nanoseconds: 300_000_000)
            running.cancel()
            _ = try? await running.value
            // Changed: every request, ranged or not, is answered with the whole new file.
            try servers.preset("/" + path, ["change_after": "0", "alt": "64m-v2.bin"], key: key)
            let kept = (try FileManager.default.attributesOfItem(atPath: options.partPath)[.size] as? NSNumber)?.int64Value ?? 0
            XCTAssertGreaterThan(kept, 0, "\(name): the stopped run kept its bytes")
            let (_, events) = try await run(options, with: transport)
            let starts = events.compactMap { event -> Int64? in
                if case .started(_, let resumedFrom, _) = event { return resumedFrom }
                return nil
            }
            XCTAssertEqual(starts, [0], "\(name): started once, from 0")
            XCTAssertTrue(events.contains { if case .restarted = $0 { return true } else { return false } },
                          "\(name): the bytes thrown away are reported")
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m-v2.bin"), name)
          }
        }
    }

    func testAFileThatChangesUnderEveryRequestFailsSayingWhatChanged() async throws {
        // Every answer names another version: each range of a segmented download finds the
        // file changed and starts it over. After the restarts allowed the download fails, saying
        // how often and what changed last; nothing is saved as the file.
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["new_version_each": "1"])
            var options = try options(url, transport: name, connections: 4)
            options.minSegmentSize = 128 << 10
            let error = "\(await failure(of: options, with: transport).map { "\($0)" } ?? "none")"
            XCTAssertTrue(error.contains("started over \(DownloadEngine.maxRestarts + 1) times during the download"), "\(name): \(error)")
            XCTAssertTrue(error.contains("(last: the remote file changed (ETag"), "\(name): \(error)")
            XCTAssertTrue(error.contains(", now \""), "\(name): \(error)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: options.destination), name)
        }
    }

    func testAGzipBodyDespiteIdentityIsSavedAsSentOrRefused() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["gzip": "1"])
            let options = try options(url, transport: name)
            do {
                let result = try await DownloadEngine(transport: transport, options: options).run()
                XCTAssertTrue(transport.capabilities.contains(.encodedBodyAsSent), "\(name) saved a body it could not check")
                let saved = try Data(contentsOf: URL(fileURLWithPath: options.destination))
                XCTAssertEqual(Array(saved.prefix(2)), [0x1F, 0x8B], "\(name): the gzip stream as the server sent it")
                XCTAssertEqual(Int64(saved.count), result.size, name)
            } catch {
                XCTAssertFalse(transport.capabilities.contains(.encodedBodyAsSent), "\(name): \(error)")
                XCTAssertTrue("\(error)".contains("Content-Encoding: gzip"), "\(name): \(error)")
                XCTAssertTrue("\(error)".contains("--transport curl"), "\(name): \(error)")
                XCTAssertFalse(FileManager.default.fileExists(atPath: options.destination), name)
            }
        }
    }

    func testA200WithTheAskedRangeIsTakenAsThatRangeOnly() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("64m.bin", ["range_lie": "1"])
            let options = try options(url, transport: name, connections: 4)
            let result = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertEqual(result.size, 64 << 20, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m.bin"), name)
        }
    }

    func testALengthThatIsNeverDeliveredIsNeverASuccess() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["length_lie": String((1 << 20) + 1000)])
            let options = try options(url, transport: name)
            let error = await failure(of: options, with: transport)
            XCTAssertNotNil(error, "\(name): 1 MiB announced as 1 MiB + 1000 was saved")
            XCTAssertFalse(FileManager.default.fileExists(atPath: options.destination), name)
        }
    }

    func testAnEndlessBodyStopsWhenCancelled() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            // 32 MB/s, ending after 64 MiB (2 s, long after the cancel): FoundationNetworking reads a
            // stopped answer on (docs/backends.md), and an answer without end would hold up every
            // later urlsession exchange of the test process.
            let (url, _) = servers.fault("1m.bin", ["endless": "1", "rate": "32000000", "drop_every": String(64 << 20)])
            let options = try options(url, transport: name)
            let task = Task { try await DownloadEngine(transport: transport, options: options).run() }
            try await Task.sleep(nanoseconds: 500_000_000)
            task.cancel()
            let started = Date()
            do {
                _ = try await task.value
                XCTFail("\(name): an endless body ended")
            } catch {}
            // A liveness bound, not a speed check: it must stop, not run on. (urlsession once
            // waited for FoundationNetworking to confirm the cancellation, which a fast endless
            // stream delayed by 1 to 21 s; a stop now answers at once.)
            XCTAssertLessThan(Date().timeIntervalSince(started), 5, name)
        }
    }

    func testAResponseHeaderWithABareCROrNULIsHandled() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            for fault in ["header_crlf", "header_nul"] {
                let (url, _) = servers.fault("1m.bin", [fault: "1"])
                let options = try options(url, transport: name, function: fault)
                // Either outcome is acceptable; a crash or a wrong file is not.
                if (try? await DownloadEngine(transport: transport, options: options).run()) != nil {
                    XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "1m.bin"), "\(name) \(fault)")
                }
            }
        }
    }

    // MARK: Redirects and headers

    func testARedirectToFTPIsRefused() async throws {
        let servers = try TestServers.current()
        let ftp = try XCTUnwrap(servers.ftp, "the fault server's FTP responder (TRANSFERD_TEST_FTP)")
        let before = try servers.stats(key: "ftp").requests
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["redirect_to": ftp.appendingPathComponent("secret.txt").absoluteString])
            let options = try options(url, transport: name)
            let error = await failure(of: options, with: transport)
            XCTAssertNotNil(error, name)
            let text = "\(error!)"
            XCTAssertTrue(text.contains("ftp://"), "\(name): \(text)")
            XCTAssertFalse(text.contains("FTP-SECRET-CONTENT"), "\(name): \(text)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: options.destination), name)
        }
        XCTAssertEqual(try servers.stats(key: "ftp").requests, before, "no backend connected to the FTP server")
    }

    func testCredentialsDoNotFollowARedirectToAnotherHost() async throws {
        let servers = try TestServers.current()
        Redaction.registerSecret("env-secret-value-42")
        let headers: HTTPHeaders = ["Authorization": "Bearer abc", "Cookie": "session=1", "X-Api-Key": "k1",
                                    "X-Auth-Token": "t1", "X-From-Env": "env-secret-value-42", "X-Plain": "visible"]
        let port = servers.fault.port!
        for (name, transport) in Backends.all {
            for (host, keeps) in [("localhost", false), ("127.0.0.1", true)] {
                let target = "http://\(host):\(port)/_echo"
                let (url, _) = servers.fault("1m.bin", ["redirect_to": target])
                let options = try options(url, transport: name, headers: headers, function: host)
                _ = try await DownloadEngine(transport: transport, options: options).run()
                let echo = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: options.destination))) as? [String: Any]
                let received = try XCTUnwrap(echo?["headers"] as? [String: String], "\(name) \(host)")
                XCTAssertEqual(received["x-plain"], "visible", "\(name) \(host)")
                for secret in ["authorization", "cookie", "x-api-key", "x-auth-token", "x-from-env"] {
                    XCTAssertEqual(received[secret] != nil, keeps, "\(name): \(secret) to \(host): \(received)")
                }
            }
        }
    }

    func testHeadersWithLineBreaksAreNeverSent() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("1m.bin")
            let options = try options(url, transport: name, headers: ["X-A": "v\r\nX-Injected: yes"])
            let error = await failure(of: options, with: transport)
            XCTAssertTrue("\(error.map { "\($0)" } ?? "none")".contains("carriage return"), "\(name): \(String(describing: error))")
            XCTAssertEqual(try servers.stats(key: key).requests, 0, name)
        }
    }

    // MARK: Uploads

    /// Appends to the file being uploaded just as the request goes out.
    final class GrowingSource: Transport, Sendable {
        let wrapped: Transport
        let path: String
        var name: String { wrapped.name }
        var capabilities: TransportCapabilities { wrapped.capabilities }
        init(_ wrapped: Transport, path: String) {
            self.wrapped = wrapped
            self.path = path
        }
        func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(repeating: 9, count: 4096))
            try handle.close()
            return try await wrapped.execute(request, sink: sink)
        }
    }

    func testAFileChangedWhileItIsUploadedFailsTheUpload() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let source = try scratchDirectory(#function + name) + "/growing.bin"
            try Data(repeating: 7, count: 1 << 20).write(to: URL(fileURLWithPath: source))
            let options = UploadOptions(url: servers.fault.appendingPathComponent("_echo"), method: "PUT", body: .file(path: source),
                                        retry: quickRetry)
            do {
                _ = try await UploadEngine(transport: GrowingSource(transport, path: source), options: options).run()
                XCTFail("\(name): a file that grew during the upload was reported sent")
            } catch {
                XCTAssertTrue("\(error)".contains("changed while it was being uploaded"), "\(name): \(error)")
            }
        }
    }
}
