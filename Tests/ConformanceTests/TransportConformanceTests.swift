import Foundation
import TransferCore
import TestSupport
import XCTest

/// One HTTP exchange at a time, every case on both backends.
final class TransportConformanceTests: XCTestCase {
    func request(_ url: URL, method: String = "GET", headers: HTTPHeaders = [:], body: RequestBody = .none,
                 maxRedirects: Int = 10, tls: TLSOptions = TLSOptions(), idleTimeout: TimeInterval = 10) -> TransferRequest {
        TransferRequest(method: method, url: url, headers: headers, body: body, connectTimeout: 5,
                        idleTimeout: idleTimeout, maxRedirects: maxRedirects, tls: tls)
    }

    func testHeadArrivesBeforeBodyWithStatusAndHeaders() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let sink = CollectingSink()
            let outcome = try await transport.execute(request(servers.http.appendingPathComponent("1m.bin")), sink: sink)
            XCTAssertEqual(outcome.head.status, 200, name)
            XCTAssertEqual(outcome.head.headers["content-length"], "1048576", name)
            XCTAssertNotNil(outcome.head.headers["ETag"], name)
            XCTAssertFalse(sink.bodyBeforeHead, name)
            XCTAssertEqual(sink.body.count, 1 << 20, name)
            XCTAssertEqual(outcome.bytesReceived, 1 << 20, name)
        }
    }

    func testRangeRequestGivesPartialContent() async throws {
        let servers = try TestServers.current()
        let whole = try Data(contentsOf: URL(fileURLWithPath: servers.path("1m.bin")))
        for (name, transport) in Backends.all {
            let sink = CollectingSink()
            let outcome = try await transport.execute(
                request(servers.http.appendingPathComponent("1m.bin"), headers: ["Range": "bytes=1000-1999"]), sink: sink)
            XCTAssertEqual(outcome.head.status, 206, name)
            XCTAssertEqual(outcome.head.headers["Content-Range"], "bytes 1000-1999/1048576", name)
            XCTAssertEqual(sink.body, whole.subdata(in: 1000..<2000), name)
        }
    }

    func testHeadersReachTheServer() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let sink = CollectingSink()
            _ = try await transport.execute(request(servers.fault.appendingPathComponent("_echo"),
                                                    headers: ["X-Transferd-Test": "hello \(name)"]), sink: sink)
            let echo = String(decoding: sink.body, as: UTF8.self)
            XCTAssertTrue(echo.contains("hello \(name)"), "\(name): \(echo)")
        }
    }

    func testRedirectsAreFollowedUpToTheLimit() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["redirect": "3"])
            let sink = CollectingSink()
            let outcome = try await transport.execute(request(url, maxRedirects: 5), sink: sink)
            XCTAssertEqual(outcome.head.status, 200, name)
            XCTAssertEqual(sink.body.count, 1 << 20, name)
            XCTAssertTrue(outcome.head.url.absoluteString.contains("redirect=0"), "\(name): \(outcome.head.url)")

            let (tooFar, _) = servers.fault("1m.bin", ["redirect": "3"])
            do {
                _ = try await transport.execute(request(tooFar, maxRedirects: 2), sink: CollectingSink())
                XCTFail("\(name): 3 redirects with a limit of 2 must fail")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, .tooManyRedirects, "\(name): \(error)")
            }
        }
    }

    func testErrorStatusIsAnExchangeNotAnError() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let sink = CollectingSink()
            let outcome = try await transport.execute(request(servers.http.appendingPathComponent("nope.bin")), sink: sink)
            XCTAssertEqual(outcome.head.status, 404, name)
        }
    }

    func testRefusedConnectionIsClassified() async throws {
        for (name, transport) in Backends.all {
            // Port 9 (discard) is closed on loopback here.
            do {
                _ = try await transport.execute(request(URL(string: "http://127.0.0.1:9/x")!), sink: CollectingSink())
                XCTFail("\(name): nothing listens on port 9")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, .connect, "\(name): \(error)")
            }
        }
    }

    func testShortBodyIsTruncated() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["short_by": "5000"])
            do {
                _ = try await transport.execute(request(url), sink: CollectingSink())
                XCTFail("\(name): a short body must fail")
            } catch let error as TransportError {
                XCTAssertTrue([.truncated, .reset].contains(error.kind), "\(name): \(error)")
            }
        }
    }

    func testIdleTimeout() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["stall_after": "1000", "stall_seconds": "10"])
            let started = Date()
            do {
                _ = try await transport.execute(request(url, idleTimeout: 1), sink: CollectingSink())
                XCTFail("\(name): a stalled body must time out")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, .timeout, "\(name): \(error)")
            }
            XCTAssertLessThan(Date().timeIntervalSince(started), 6, name)
        }
    }

    func testCancellationStopsTheExchange() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("64m.bin", ["rate": "1000000"])
            // Made here, not in the task: the task must not capture the test case.
            let slow = request(url)
            let task = Task { try await transport.execute(slow, sink: CollectingSink()) }
            try await Task.sleep(nanoseconds: 300_000_000)
            let started = Date()
            task.cancel()
            do {
                _ = try await task.value
                XCTFail("\(name): must be cancelled")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, .cancelled, "\(name)")
            } catch is CancellationError {
            }
            XCTAssertLessThan(Date().timeIntervalSince(started), 2, name)
        }
    }

    func testFileRegionUploadArrivesExactly() async throws {
        let servers = try TestServers.current()
        let source = servers.path("1m.bin")
        let whole = try Data(contentsOf: URL(fileURLWithPath: source))
        for (name, transport) in Backends.all {
            let target = servers.http.appendingPathComponent("upload/\(name)/region.bin")
            let outcome = try await transport.execute(
                request(target, method: "PUT", body: .file(path: source, offset: 4096, length: 100_000)), sink: CollectingSink())
            XCTAssertTrue([200, 201, 204].contains(outcome.head.status), "\(name): \(outcome.head.status)")
            let stored = CollectingSink()
            _ = try await transport.execute(request(target), sink: stored)
            XCTAssertEqual(stored.body, whole.subdata(in: 4096..<104_096), name)
        }
    }

    // MARK: TLS

    func testTLSWithCustomCAAndPins() async throws {
        let servers = try TestServers.current()
        let url = servers.https.appendingPathComponent("1m.bin")
        let curl = CurlTransport()

        var outcome = try await curl.execute(request(url, tls: TLSOptions(caBundlePath: servers.caBundle)), sink: CollectingSink())
        XCTAssertEqual(outcome.head.status, 200)

        outcome = try await curl.execute(request(url, tls: TLSOptions(caBundlePath: servers.caBundle,
                                                                       pinnedPublicKey: servers.spkiPin)), sink: CollectingSink())
        XCTAssertEqual(outcome.head.status, 200, "right pin")

        outcome = try await curl.execute(request(url, tls: TLSOptions(insecure: true)), sink: CollectingSink())
        XCTAssertEqual(outcome.head.status, 200, "insecure skips verification")

        let wrongPin = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        for tls in [TLSOptions(), TLSOptions(caBundlePath: servers.caBundle, pinnedPublicKey: wrongPin)] {
            do {
                _ = try await curl.execute(request(url, tls: tls), sink: CollectingSink())
                XCTFail("must fail: \(tls)")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, .tls, "\(error)")
            }
        }
    }

    func testURLSessionDeclaresWhatTLSItCannotDo() async throws {
        let servers = try TestServers.current()
        let url = servers.https.appendingPathComponent("1m.bin")
        let session = URLSessionTransport()
        XCTAssertFalse(session.capabilities.contains(.customCA))
        XCTAssertFalse(session.capabilities.contains(.publicKeyPinning))
        for tls in [TLSOptions(caBundlePath: servers.caBundle), TLSOptions(insecure: true),
                    TLSOptions(pinnedPublicKey: servers.spkiPin)] {
            do {
                _ = try await session.execute(request(url, tls: tls), sink: CollectingSink())
                XCTFail("must refuse \(tls)")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, .unsupported)
                XCTAssertTrue(error.message.contains("--transport curl"), error.message)
            }
        }
        // Without options it verifies against the system store, which does not know the test CA.
        do {
            _ = try await session.execute(request(url), sink: CollectingSink())
            XCTFail("the test CA is not trusted by the system")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .tls, "\(error)")
        }
    }
}
