import Foundation
import TransferCore
import TestSupport
import XCTest

/// One file from several mirrors (`DownloadOptions.mirrors`), every case on both backends, against
/// nginx: copies of the 64 MiB fixture under folders of their own, one behind nginx's 16 MB/s
/// location, and copies that lie (another size, other bytes of the same size, none at all).
final class MirrorDownloadTests: XCTestCase {
    let quickRetry = RetryPolicy(maxAttempts: 5, baseDelay: 0.05, maxDelay: 0.5)

    func options(_ url: URL, mirrors: [URL], label: String) throws -> DownloadOptions {
        let destination = (try scratchDirectory(label) as NSString).appendingPathComponent("out.bin")
        var options = DownloadOptions(url: url, destination: destination, retry: quickRetry, idleTimeout: 10)
        options.mirrors = mirrors
        return options
    }

    func testRangesAreSpreadOverTheMirrorsAndTheOnesThatDisagreeAreDropped() async throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let fast = servers.http.appendingPathComponent("\(folder)/good/64m.bin")
        let slow = servers.http.appendingPathComponent("crawl/\(folder)/good/64m.bin")
        let short = servers.http.appendingPathComponent("\(folder)/short/64m.bin")
        let missing = servers.http.appendingPathComponent("\(folder)/none/64m.bin")
        for (name, transport) in Backends.all {
            let dropped = Locked<[String: String]>([:])
            let options = try options(slow, mirrors: [fast, short, missing], label: #function + name)
            let result = try await DownloadEngine(transport: transport, options: options) { event in
                if case .mirrorDropped(let url, let reason) = event { dropped.withLock { $0[url] = reason } }
            }.run()
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m.bin"), name)
            XCTAssertEqual(dropped.current[short.absoluteString], "it serves 1000 bytes; the other mirrors say 67108864", name)
            XCTAssertEqual(dropped.current[missing.absoluteString], "HTTP 404", name)
            XCTAssertEqual(result.mirrors.map(\.url), [slow, fast, short, missing].map(\.absoluteString), name)
            XCTAssertEqual(result.mirrors.reduce(0) { $0 + $1.kept }, 64 << 20, "\(name): every byte has one source")
            XCTAssertEqual(result.mirrors[2].bytes + result.mirrors[3].bytes, 0, "\(name): no byte of a dropped mirror")
            // nginx without a limit outpaces its 1 MB/s location (per connection): it serves more.
            // nginx's limit_rate lets the start of each response through at full speed, so only curl's
            // requests of 4 MiB find the location slow (urlsession's, of 512 KiB, do not).
            if name == "curl" { XCTAssertGreaterThan(result.mirrors[1].kept, result.mirrors[0].kept, "\(name): \(result.mirrors)") }
            XCTAssertGreaterThan(result.mirrors[0].kept, 0, "\(name): the slower mirror took part")
            XCTAssertGreaterThan(result.mirrors[1].kept, 0, "\(name): the faster mirror took part")
        }
    }

    func testAMirrorServingOtherBytesIsFoundByTheChecksumAndTheFileIsRight() async throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let good = servers.http.appendingPathComponent("\(folder)/good/64m.bin")
        let bad = servers.http.appendingPathComponent("\(folder)/bad/64m.bin")
        let expected = try servers.sha256(of: "64m.bin")
        for (name, transport) in Backends.all {
            for order in [[good, bad], [bad, good]] {
                var options = try options(order[0], mirrors: [order[1]], label: #function + name)
                options.sha256 = expected
                let refetched = Locked<Int64>(0)
                let result = try await DownloadEngine(transport: transport, options: options) { event in
                    if case .refetching(let bytes, _) = event { refetched.withLock { $0 += bytes } }
                }.run()
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), expected, name)
                XCTAssertEqual(result.sha256, expected, name)
                let byURL = Dictionary(uniqueKeysWithValues: result.mirrors.map { ($0.url, $0) })
                // Whichever was asked again first, the lying mirror ends dropped and holds nothing.
                XCTAssertNotNil(byURL[bad.absoluteString]?.dropped, "\(name): \(result.mirrors)")
                XCTAssertEqual(byURL[bad.absoluteString]?.kept, 0, name)
                XCTAssertEqual(byURL[good.absoluteString]?.kept, 64 << 20, name)
                XCTAssertGreaterThan(refetched.current, 0, "\(name): the lying mirror's bytes were fetched again")
                try FileManager.default.removeItem(atPath: options.destination)
            }
        }
    }

    func testPieceHashesNameTheMirrorThatServedWrongBytes() async throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let good = servers.http.appendingPathComponent("\(folder)/good/64m.bin")
        let bad = servers.http.appendingPathComponent("\(folder)/bad/64m.bin")
        let document = try servers.metalink(for: "64m.bin", urls: [bad, good])
        let file = try XCTUnwrap(try Metalink.parse(Data(document.utf8), origin: "test.meta4").first)
        for (name, transport) in Backends.all {
            // The lying mirror first: untried, it takes the first requests, so some of its bytes are in the file.
            var options = try options(bad, mirrors: [good], label: #function + name)
            options.pieces = file.pieces
            options.expectedSize = file.size
            let refetched = Locked<Int64>(0)
            let result = try await DownloadEngine(transport: transport, options: options) { event in
                if case .refetching(let bytes, _) = event { refetched.withLock { $0 += bytes } }
            }.run()
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m.bin"), name)
            XCTAssertTrue(result.mirrors[0].dropped?.hasPrefix("piece ") == true, "\(name): \(result.mirrors)")
            XCTAssertTrue(result.mirrors[0].dropped?.hasSuffix("as it served it fails its sha-256 hash") == true, name)
            // What it served of pieces that pass (no changed byte in them) stays.
            XCTAssertEqual(result.mirrors[0].kept + result.mirrors[1].kept, 64 << 20, name)
            // Only the pieces it served were fetched again: whole pieces, fewer than all of them.
            XCTAssertGreaterThan(refetched.current, 0, name)
            XCTAssertEqual(refetched.current % (1 << 20), 0, name)
            XCTAssertLessThan(refetched.current, 64 << 20, name)
        }
    }

    func testAMirrorWhoseFileChangesMidwayIsDroppedBeforeItsBytesAreUsed() async throws {
        let servers = try TestServers.current()
        let good = servers.http.appendingPathComponent("64m.bin")
        let expected = try servers.sha256(of: "64m.bin")
        for (name, transport) in Backends.all {
            // The fault server's copy turns into 64m-v2.bin (same size, other bytes and validators)
            // after 8 MiB: later answers name another version and must never reach the file.
            let (changing, _) = servers.fault("64m.bin", ["change_after": String(8 << 20), "alt": "64m-v2.bin"])
            let options = try options(changing, mirrors: [good], label: #function + name)
            let dropped = Locked<[String: String]>([:])
            let result = try await DownloadEngine(transport: transport, options: options) { event in
                if case .mirrorDropped(let url, let reason) = event { dropped.withLock { $0[url] = reason } }
            }.run()
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), expected, "\(name): no checksum, no splice")
            let reason = try XCTUnwrap(dropped.current[Redaction.url(changing)], "\(name): \(dropped.current)")
            XCTAssertTrue(reason.hasPrefix("the remote file changed"), reason)
            XCTAssertEqual(result.mirrors.reduce(0) { $0 + $1.kept }, 64 << 20, name)
        }
    }

    func testSkipUnchangedWithMirrorsKeepsAnUnchangedFile() async throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let good = servers.http.appendingPathComponent("\(folder)/good/64m.bin")
        let slow = servers.http.appendingPathComponent("slow/\(folder)/good/64m.bin")
        for (name, transport) in Backends.all {
            var options = try options(good, mirrors: [slow], label: #function + name)
            _ = try await DownloadEngine(transport: transport, options: options).run()
            options.overwrite = .skipIfIdentical
            let again = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertTrue(again.skipped, name)
            XCTAssertEqual(again.bytesFetched, 0, name)
        }
    }

    func testAResumeKeepsEachMirrorsVersionAndDropsOneWhoseFileChanged() async throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let manager = FileManager.default
        // 64 MiB from the fault server at 8 MB/s a response, at two mirrors: long enough to stop
        // partway. (nginx's limit_rate lets each response's start through at full speed.)
        try manager.createDirectory(atPath: servers.path("\(folder)/other"), withIntermediateDirectories: true)
        try manager.copyItem(atPath: servers.path("64m.bin"), toPath: servers.path("\(folder)/other/64m.bin"))
        let expected = try servers.sha256(of: "64m.bin")
        let rate = ["rate": String(8_000_000)]
        let good = servers.fault("\(folder)/good/64m.bin", rate, key: "\(folder)-good").0
        let other = servers.fault("\(folder)/other/64m.bin", rate, key: "\(folder)-other").0
        for (name, transport) in Backends.all {
            let options = try options(good, mirrors: [other], label: #function + name)
            let engine = DownloadEngine(transport: transport, options: options)
            let running = Task { try await engine.run() }
            try await Task.sleep(nanoseconds: 600_000_000)
            running.cancel()
            let outcome = await running.result
            if case .success = outcome { XCTFail("\(name): finished before it was stopped") }
            let saved = try XCTUnwrap(try FileCheckpointStore(path: options.statePath).load(), name)
            XCTAssertEqual(saved.mirrors?.pins.count, 2, name)
            XCTAssertGreaterThan(saved.plan.bytesWritten, 0, name)
            // The second mirror's file gets another date: another version, as its validators say.
            // The first still serves the one it served.
            let otherPath = servers.path("\(folder)/other/64m.bin")
            try manager.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -3600)], ofItemAtPath: otherPath)
            // The next run also lists a mirror it never asked, serving other bytes of the same size:
            // without a checksum nothing could tell, so it serves none.
            let bad = servers.http.appendingPathComponent("\(folder)/bad/64m.bin")
            var resumed = options
            resumed.mirrors = [other, bad]
            let dropped = Locked<[String]>([])
            let result = try await DownloadEngine(transport: transport, options: resumed) { event in
                if case .mirrorDropped(let url, let reason) = event { dropped.withLock { $0.append("\(url): \(reason)") } }
            }.run()
            XCTAssertGreaterThan(result.resumedFrom, 0, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), expected, name)
            XCTAssertEqual(dropped.current.count, 2, "\(name): \(dropped.current)")
            XCTAssertTrue(dropped.current.contains { $0.hasPrefix("\(Redaction.url(other)): since the partial file was started, the remote file changed") },
                          "\(name): \(dropped.current)")
            XCTAssertTrue(dropped.current.contains { $0 == "\(bad.absoluteString): \(MirrorSet.unmatchable)" }, "\(name): \(dropped.current)")
            try manager.setAttributes([.modificationDate: Date()], ofItemAtPath: otherPath)
        }
    }
}
