import CSystem
import Foundation
import TransferCore
import TestSupport
import XCTest

/// Downloads through the engine, every case on both backends, against nginx
/// and the fault server.
final class DownloadConformanceTests: XCTestCase {
    /// Fast retries so fault cases finish quickly; the policy itself is unit-tested.
    let quickRetry = RetryPolicy(maxAttempts: 5, baseDelay: 0.05, maxDelay: 0.5)

    func download(_ url: URL, with transport: Transport, connections: Int = 1, sha256: String? = nil,
                  retry: RetryPolicy? = nil, tls: TLSOptions = TLSOptions(),
                  function: String = #function) async throws -> (String, DownloadResult) {
        let destination = (try scratchDirectory(function + transport.name) as NSString).appendingPathComponent("out.bin")
        let options = DownloadOptions(url: url, destination: destination, connections: connections, sha256: sha256,
                                      retry: retry ?? quickRetry, tls: tls, idleTimeout: 10)
        let result = try await DownloadEngine(transport: transport, options: options).run()
        return (destination, result)
    }

    /// Options downloading `url` to `out.bin` in a scratch folder of its own (`label`).
    func scratchOptions(_ url: URL, label: String) throws -> DownloadOptions {
        let destination = (try scratchDirectory(label) as NSString).appendingPathComponent("out.bin")
        return DownloadOptions(url: url, destination: destination, retry: quickRetry, idleTimeout: 10)
    }

    /// Saves, where `options` keeps its checkpoint, one for `url` (`size` bytes, one segment)
    /// claiming its first `written` bytes are in the partial file, which carries `tag`.
    func saveCheckpoint(for options: DownloadOptions, claiming written: Int64, of size: Int64, tag: String? = nil) throws {
        var claimed = SegmentPlan.single(totalSize: size)
        claimed.recordWritten(written, segment: 0)
        var checkpoint = DownloadCheckpoint(url: options.url.absoluteString, validators: ResponseValidators(), plan: claimed,
                                            rangesSupported: true)
        checkpoint.fileTag = tag
        try FileCheckpointStore(path: options.statePath).save(checkpoint)
    }

    func testOneGibibyteIsByteIdentical() async throws {
        try skipUnderSanitizer("1 GiB four times; the 64 MiB cases cover the same code")
        let servers = try TestServers.current()
        let expected = try servers.sha256(of: "1g.bin")
        for (name, transport) in Backends.all {
            for connections in [1, 4] {
                let (path, result) = try await download(servers.http.appendingPathComponent("1g.bin"), with: transport,
                                                        connections: connections)
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), expected, "\(name) ×\(connections)")
                XCTAssertEqual(result.size, 1 << 30, name)
                XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".transferd-part"), name)
                XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".transferd-part.state"), name)
                try FileManager.default.removeItem(atPath: path)
            }
        }
    }

    func testIdleConnectionsTakeOverASlowSegment() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            // The first two responses to pass 512 KiB stall for 3 s: the opening request, then one
            // of the four segment connections; the others finish and split its remainder.
            let (url, key) = servers.fault("64m.bin", ["stall_after": String(512 << 10), "stall_seconds": "3",
                                                       "stall_count": "2"])
            let (path, result) = try await download(url, with: transport, connections: 4)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: "64m.bin"), name)
            // The plan starts with 5 segments: the first 4 MiB, then the rest split in 4.
            XCTAssertGreaterThan(result.segments, 5, "\(name): the stalled segment was split")
            XCTAssertGreaterThanOrEqual(try servers.stats(key: key).requests, 6, name)
        }
    }

    func testACheckpointClaimingMoreThanThePartialFileHoldsIsNotTrusted() async throws {
        // The partial file was replaced by a shorter one (another tool, a restore): its checkpoint
        // still claims 8 MiB. Trusted, the next run would keep a hole of zeros; it starts over.
        let servers = try TestServers.current()
        let url = servers.http.appendingPathComponent("64m.bin")
        for (name, transport) in Backends.all {
            let options = try scratchOptions(url, label: #function + name)
            try saveCheckpoint(for: options, claiming: 8 << 20, of: try servers.size(of: "64m.bin"))
            XCTAssertTrue(FileManager.default.createFile(atPath: options.partPath, contents: Data(repeating: 1, count: 1 << 20)))
            let result = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertEqual(result.resumedFrom, 0, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m.bin"), name)
        }
    }

    func testACheckpointIsTrustedOnlyForTheFileItTagged() async throws {
        // A checkpoint names its partial file's tag (an extended attribute). Another file put at
        // NAME.part since, even of the very size the checkpoint claims, lacks it: started over.
        let servers = try TestServers.current()
        let url = servers.http.appendingPathComponent("64m.bin")
        let size = try servers.size(of: "64m.bin")
        let source = try XCTUnwrap(FileHandle(forReadingAtPath: servers.www + "/64m.bin"))
        let head = try XCTUnwrap(try source.read(upToCount: 1 << 20))
        try source.close()
        for (name, transport) in Backends.all {
            for tagged in [false, true] {
                let options = try scratchOptions(url, label: #function + name + "\(tagged)")
                try saveCheckpoint(for: options, claiming: 1 << 20, of: size, tag: "t1")
                // Untagged, the bytes are another file's (zeros here); tagged, the first MiB of the file.
                XCTAssertTrue(FileManager.default.createFile(atPath: options.partPath,
                                                             contents: tagged ? head : Data(count: 1 << 20)))
                if tagged { XCTAssertEqual(setxattr(options.partPath, "user.transferd.file", "t1", 2, 0), 0) }
                let result = try await DownloadEngine(transport: transport, options: options).run()
                XCTAssertEqual(result.resumedFrom, tagged ? 1 << 20 : 0, "\(name) tagged: \(tagged)")
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "64m.bin"), name)
                let found = getxattr(options.destination, "user.transferd.file", nil, 0)
                let reason = errno
                XCTAssertEqual(found, -1, "\(name): the tag is off the file in place")
                XCTAssertEqual(reason, ENODATA, name)
            }
        }
    }

    /// Records, at each save, whether the partial file carried the tag the checkpoint names.
    final class TagWatchingStore: CheckpointStore, Sendable {
        let partPath: String
        let initial: DownloadCheckpoint?
        let saves = Locked<[(tag: String?, fileTag: String?)]>([])
        init(partPath: String, initial: DownloadCheckpoint? = nil) {
            self.partPath = partPath
            self.initial = initial
        }
        func load() throws -> DownloadCheckpoint? { initial }
        func save(_ checkpoint: DownloadCheckpoint) throws {
            var buffer = [UInt8](repeating: 0, count: 64)
            let count = getxattr(partPath, "user.transferd.file", &buffer, buffer.count)
            let onFile = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : nil
            saves.withLock { $0.append((checkpoint.fileTag, onFile)) }
        }
        func remove() throws {}
    }

    func testANewPartialFileIsTaggedWhenMadeAndUntaggedInPlace() async throws {
        // A new partial file carries its tag from the start (a later run proves by it that the
        // file is transferd's, even when no checkpoint was saved), every checkpoint names it, and
        // it comes off once the file is in place (the queue's, at its later rename).
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            for deferRename in [false, true] {
                for (file, every) in [("1m.bin", Int64(64) << 20), ("64m.bin", Int64(1) << 20)] {
                    let label = "\(name) \(file) deferRename: \(deferRename)"
                    var options = try scratchOptions(servers.http.appendingPathComponent(file),
                                                     label: #function + name + file + "\(deferRename)")
                    options.checkpointBytes = every
                    options.checkpointInterval = 3600 // by bytes only: a slow host adds no checkpoint by time
                    options.deferRename = deferRename
                    let store = TagWatchingStore(partPath: options.partPath)
                    let result = try await DownloadEngine(transport: transport, options: options, store: store).run()
                    let saves = store.saves.current
                    if file == "1m.bin" {
                        XCTAssertEqual(saves.count, deferRename ? 0 : 1, "\(label): only a get's completion is saved")
                    } else {
                        XCTAssertGreaterThan(saves.count, 2, label)
                    }
                    for save in saves {
                        XCTAssertNotNil(save.tag, "\(label): a checkpoint names the file's tag")
                        XCTAssertEqual(save.tag, save.fileTag, "\(label): saved before the file carried its tag")
                    }
                    let path = deferRename ? options.partPath : options.destination
                    XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: file), label)
                    // A get takes the tag off once the file is in place; the queue, after its rename.
                    let tagged = deferRename
                    XCTAssertEqual(getxattr(path, "user.transferd.file", nil, 0) > 0, tagged, label)
                    XCTAssertEqual(result.completedPartPath, deferRename ? options.partPath : nil, label)
                }
            }
            // Resumed, its checkpoints keep naming the tag the file carries (the next resume checks it).
            var options = try scratchOptions(servers.http.appendingPathComponent("64m.bin"), label: #function + name + "resumed")
            options.checkpointBytes = 1 << 20
            options.checkpointInterval = 3600
            let source = try XCTUnwrap(FileHandle(forReadingAtPath: servers.www + "/64m.bin"))
            let head = try XCTUnwrap(try source.read(upToCount: 1 << 20))
            try source.close()
            XCTAssertTrue(FileManager.default.createFile(atPath: options.partPath, contents: head))
            XCTAssertEqual(setxattr(options.partPath, "user.transferd.file", "t1", 2, 0), 0)
            var claimed = SegmentPlan.single(totalSize: try servers.size(of: "64m.bin"))
            claimed.recordWritten(1 << 20, segment: 0)
            var saved = DownloadCheckpoint(url: options.url.absoluteString, validators: ResponseValidators(), plan: claimed,
                                           rangesSupported: true)
            saved.fileTag = "t1"
            let store = TagWatchingStore(partPath: options.partPath, initial: saved)
            let result = try await DownloadEngine(transport: transport, options: options, store: store).run()
            XCTAssertEqual(result.resumedFrom, 1 << 20, name)
            XCTAssertGreaterThan(store.saves.current.count, 2, name)
            for save in store.saves.current {
                XCTAssertEqual(save.tag, "t1", "\(name): a resumed download's checkpoint names its file's tag")
                XCTAssertEqual(save.fileTag, "t1", name)
            }
        }
    }

    func testAPartialFileAnotherProcessWritesIsLeftAlone() async throws {
        // Another process holds NAME.part (the same destination downloaded twice at once): the
        // download stops with the reason before it reads or changes anything of that file.
        let servers = try TestServers.current()
        let url = servers.http.appendingPathComponent("1m.bin")
        for (name, transport) in Backends.all {
            var options = try scratchOptions(url, label: #function + name)
            let destination = options.destination
            let partBytes = Data(repeating: 7, count: 300 << 10)
            let stateBytes = Data("the other writer's checkpoint".utf8)
            XCTAssertTrue(FileManager.default.createFile(atPath: options.partPath, contents: partBytes))
            XCTAssertTrue(FileManager.default.createFile(atPath: options.statePath, contents: stateBytes))
            // The other writer is a transferd: its partial file carries transferd's tag.
            XCTAssertEqual(setxattr(options.partPath, "user.transferd.file", "other", 5, 0), 0)
            let other = open(options.partPath, O_RDWR)
            XCTAssertGreaterThanOrEqual(other, 0)
            XCTAssertEqual(flock(other, LOCK_EX), 0)
            // A `get`'s engine (retrying in place) and the queue's alike; the queue then makes the
            // job wait (DownloadExecutor.deferral).
            for retryInPlace in [true, false] {
                options.retryInPlace = retryInPlace
                do {
                    _ = try await DownloadEngine(transport: transport, options: options).run()
                    XCTFail("\(name): downloaded while another process wrote the partial file")
                } catch DownloadError.partInUse(let path) {
                    XCTAssertEqual(path, options.partPath, name)
                    XCTAssertTrue(String(describing: DownloadError.partInUse(path: path)).contains("another transferd"), name)
                }
            }
            XCTAssertEqual(FileManager.default.contents(atPath: options.partPath), partBytes, name)
            XCTAssertEqual(FileManager.default.contents(atPath: options.statePath), stateBytes, name)
            XCTAssertFalse(FileManager.default.fileExists(atPath: destination), name)
            close(other)

            // Once the other writer is gone the same download runs (a record that is not one of
            // transferd's is a user's file and stops it). Handed to a caller that renames it later
            // (the queue), the complete file stays locked until the caller lets go of it.
            options.deferRename = true
            do {
                _ = try await DownloadEngine(transport: transport, options: options).run()
                XCTFail("\(name): a file at NAME.part.state that is no checkpoint was taken over")
            } catch DownloadError.foreignPartial(let path) {
                XCTAssertEqual(path, options.statePath, name)
            }
            XCTAssertEqual(FileManager.default.contents(atPath: options.statePath), stateBytes, name)
            try FileManager.default.removeItem(atPath: options.statePath)
            var result: DownloadResult? = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertEqual(result?.completedPartPath, options.partPath, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.partPath), try servers.sha256(of: "1m.bin"), name)
            let probe = open(options.partPath, O_RDWR)
            XCTAssertGreaterThanOrEqual(probe, 0)
            defer { close(probe) }
            XCTAssertNotEqual(flock(probe, LOCK_EX | LOCK_NB), 0, "\(name): the finished file is still locked for its rename")
            result = nil
            XCTAssertNil(result)
            XCTAssertEqual(flock(probe, LOCK_EX | LOCK_NB), 0, "\(name): released with the result")

            // A queue job its store handed over (the worker that lost it may still hold the file,
            // frozen) writes the file regardless: the lease, not the lock, says who writes.
            var takeover = DownloadOptions(url: url, destination: destination + ".taken", retry: quickRetry, idleTimeout: 10)
            takeover.takesOverBusyPart = true
            XCTAssertTrue(FileManager.default.createFile(atPath: takeover.partPath, contents: partBytes))
            XCTAssertEqual(setxattr(takeover.partPath, "user.transferd.file", "frozen", 6, 0), 0)
            let frozen = open(takeover.partPath, O_RDWR)
            XCTAssertEqual(flock(frozen, LOCK_EX), 0)
            defer { close(frozen) }
            _ = try await DownloadEngine(transport: transport, options: takeover).run()
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: takeover.destination), try servers.sha256(of: "1m.bin"), name)
        }
    }

    func testDroppedConnectionsResumeInsteadOfRestarting() async throws {
        let servers = try TestServers.current()
        let size = try servers.size(of: "64m.bin")
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("64m.bin", ["drop_every": String(8 << 20)])
            let (path, _) = try await download(url, with: transport)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: "64m.bin"), name)
            let stats = try servers.stats(key: key)
            XCTAssertGreaterThanOrEqual(stats.requests, 8, "\(name): the server dropped every 8 MiB")
            XCTAssertLessThan(Double(stats.bytes_sent), 1.2 * Double(size), "\(name): resumed, not restarted")
        }
    }

    func testChangedETagGivesTheNewContentWhole() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            for connections in [1, 4] {
                let (url, key) = servers.fault("64m.bin", ["drop_every": String(8 << 20), "change_after": String(16 << 20),
                                                           "alt": "64m-v2.bin"])
                let (path, _) = try await download(url, with: transport, connections: connections)
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: "64m-v2.bin"),
                               "\(name) ×\(connections): the new version, whole")
                XCTAssertGreaterThanOrEqual(try servers.stats(key: key).requests, 3, name)
            }
        }
    }

    func testServerIgnoringRangeGivesACorrectFile() async throws {
        let servers = try TestServers.current()
        let expected = try servers.sha256(of: "64m.bin")
        for (name, transport) in Backends.all {
            for connections in [1, 4] {
                // The first response is cut short; the retry asks for a range and gets the whole file.
                let (url, key) = servers.fault("64m.bin", ["ignore_range": "1", "short_by": String(20 << 20)])
                let (path, _) = try await download(url, with: transport, connections: connections)
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), expected, "\(name) ×\(connections): not spliced")
                XCTAssertTrue(try servers.stats(key: key).requests >= 2, name)
            }
        }
    }

    func testTruncatedBodyIsDetectedAndRetried() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("1m.bin", ["short_by": "1000", "short_count": "1"])
            let (path, _) = try await download(url, with: transport)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: "1m.bin"), name)
            XCTAssertEqual(try servers.stats(key: key).requests, 2, "\(name): one retry")
        }
    }

    func testNotFoundFailsAtOnceWithStatusAndURL() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("missing.bin")
            do {
                _ = try await download(url, with: transport)
                XCTFail("\(name): a 404 must fail")
            } catch let error as DownloadError {
                let message = error.description
                XCTAssertTrue(message.contains("404"), "\(name): \(message)")
                XCTAssertTrue(message.contains("/missing.bin"), "\(name): \(message)")
            }
            XCTAssertEqual(try servers.stats(key: key).requests, 1, "\(name): no retry for 404")
        }
    }

    func testForbiddenCarriesTheServersMessage() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, _) = servers.fault("1m.bin", ["status": "403"])
            do {
                _ = try await download(url, with: transport)
                XCTFail("\(name): a 403 must fail")
            } catch let error as DownloadError {
                XCTAssertTrue(error.description.contains("access denied by policy"), "\(name): \(error)")
            }
        }
    }

    func testServiceUnavailableThreeTimesThenSuccess() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("1m.bin", ["fail": "503", "fail_count": "3"])
            let (path, _) = try await download(url, with: transport)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: "1m.bin"), name)
            XCTAssertEqual(try servers.stats(key: key).requests, 4, name)
        }
    }

    func testRetryAfterIsHonoured() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            for header in ["retry_after", "retry_after_date"] {
                let (url, _) = servers.fault("1m.bin", ["fail": "429", "fail_count": "1", header: "2"])
                let started = Date()
                let (path, _) = try await download(url, with: transport)
                let waited = Date().timeIntervalSince(started)
                XCTAssertGreaterThanOrEqual(waited, 1.0, "\(name) \(header)")
                XCTAssertLessThan(waited, 4.5, "\(name) \(header)")
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), try servers.sha256(of: "1m.bin"), name)
            }
        }
    }

    func testPersistentFailureGivesUpAfterMaxAttempts() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            let (url, key) = servers.fault("1m.bin", ["fail": "500", "fail_count": "100"])
            do {
                _ = try await download(url, with: transport, retry: RetryPolicy(maxAttempts: 3, baseDelay: 0.01))
                XCTFail("\(name): must give up")
            } catch let error as DownloadError {
                XCTAssertTrue(error.description.contains("500"), "\(name): \(error)")
                XCTAssertTrue(error.description.contains("3 attempts"), "\(name): \(error)")
            }
            XCTAssertEqual(try servers.stats(key: key).requests, 3, name)
        }
    }

    func testWrongChecksumLeavesNoFile() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            do {
                _ = try await download(servers.http.appendingPathComponent("1m.bin"), with: transport,
                                       sha256: String(repeating: "0", count: 64))
                XCTFail("\(name): checksum must not match")
            } catch DownloadError.checksumMismatch(let path, _, let actual) {
                XCTAssertEqual(actual, try servers.sha256(of: "1m.bin"), name)
                XCTAssertFalse(FileManager.default.fileExists(atPath: path), name)
                XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".transferd-part"), name)
            }
        }
    }

    /// A checksum the server publishes (Repr-Digest, Content-Digest, the older Digest, S3's
    /// full-object x-amz-checksum-*) is checked when the file is complete: a right one passes,
    /// with one connection and four, and a wrong one fails the download and leaves no file.
    func testAChecksumTheServerPublishesIsChecked() async throws {
        let servers = try TestServers.current()
        let expected = try servers.sha256(of: "1m.bin")
        for (name, transport) in Backends.all {
            for (kinds, connections) in [("repr", 4), ("repr512", 1), ("content", 1), ("legacy", 1), ("amz-sha256", 4),
                                         ("amz-crc32c", 1), ("amz-composite", 1)] {
                let (url, _) = servers.fault("1m.bin", ["digest": kinds])
                let (path, result) = try await download(url, with: transport, connections: connections)
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), expected, "\(name) \(kinds)")
                if kinds == "repr" || kinds == "amz-sha256" {
                    XCTAssertEqual(result.sha256, expected, "\(name) \(kinds): a published SHA-256 that matched is the file's")
                }
                try FileManager.default.removeItem(atPath: path)
            }
            for (kinds, connections, header, algorithm) in [("repr", 4, "Repr-Digest", "sha-256"), ("repr512", 1, "Repr-Digest", "sha-512"),
                                                            ("content", 1, "Content-Digest", "sha-256"), ("legacy", 1, "Digest", "sha-256"),
                                                            ("amz-crc32c", 4, "x-amz-checksum-crc32c", "crc32c")] {
                let (url, _) = servers.fault("1m.bin", ["digest": kinds, "digest_wrong": "1"])
                do {
                    _ = try await download(url, with: transport, connections: connections)
                    XCTFail("\(name) \(kinds): a wrong published checksum must fail the download")
                } catch DownloadError.publishedChecksumMismatch(let path, let named, let from, _, _) {
                    XCTAssertEqual(named, algorithm, "\(name) \(kinds)")
                    XCTAssertEqual(from, header, "\(name) \(kinds)")
                    XCTAssertFalse(FileManager.default.fileExists(atPath: path), "\(name) \(kinds)")
                    XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".transferd-part"), "\(name) \(kinds)")
                }
            }
            // A job's own checksum decides alone: the server's wrong one is not asked.
            let (url, _) = servers.fault("1m.bin", ["digest": "repr", "digest_wrong": "1"])
            let (path, _) = try await download(url, with: transport, sha256: expected)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), expected, name)
        }
    }

    /// A SHA256SUMS list the job names gives the file's expected SHA-256: a right line passes
    /// (and is the result's SHA-256), a wrong one fails as a mismatch, a list without the file
    /// or that cannot be read stops the download before anything is fetched.
    func testAChecksumListGivesTheExpectedSHA256() async throws {
        let servers = try TestServers.current()
        let expected = try servers.sha256(of: "1m.bin")
        let folder = "sums-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: servers.www + "/" + folder, withIntermediateDirectories: true)
        let wrong = String(repeating: "0", count: 64)
        try "\(wrong)  other.bin\n\(expected) *1m.bin\n".write(toFile: servers.www + "/\(folder)/SHA256SUMS", atomically: true, encoding: .utf8)
        try "\(wrong)  1m.bin\n".write(toFile: servers.www + "/\(folder)/WRONG", atomically: true, encoding: .utf8)
        try "\(expected)  2m.bin\n".write(toFile: servers.www + "/\(folder)/ELSEWHERE", atomically: true, encoding: .utf8)
        let list = { (name: String) in servers.http.appendingPathComponent(folder).appendingPathComponent(name) }
        for (name, transport) in Backends.all {
            func download(list: URL, listedAs: String? = nil) async throws -> (String, DownloadResult) {
                let destination = (try scratchDirectory(name + UUID().uuidString) as NSString).appendingPathComponent("out.bin")
                var options = DownloadOptions(url: servers.http.appendingPathComponent("1m.bin"), destination: destination,
                                              retry: quickRetry, idleTimeout: 10)
                options.checksumsURL = list
                options.checksumsName = listedAs
                return (destination, try await DownloadEngine(transport: transport, options: options).run())
            }
            let (path, result) = try await download(list: list("SHA256SUMS"))
            XCTAssertEqual(result.sha256, expected, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: path), expected, name)
            _ = try await download(list: list("ELSEWHERE"), listedAs: "2m.bin")
            do {
                _ = try await download(list: list("WRONG"))
                XCTFail("\(name): a wrong listed value must fail")
            } catch DownloadError.checksumMismatch(let path, let listed, let actual) {
                XCTAssertEqual(listed, wrong, name)
                XCTAssertEqual(actual, expected, name)
                XCTAssertFalse(FileManager.default.fileExists(atPath: path), name)
            }
            do {
                _ = try await download(list: list("ELSEWHERE"))
                XCTFail("\(name): a list without the file must stop the download")
            } catch DownloadError.notInChecksumList(let listURL, let listed, let ambiguous) {
                XCTAssertEqual(listed, "1m.bin", name)
                XCTAssertFalse(ambiguous, name)
                XCTAssertTrue(listURL.hasSuffix("/ELSEWHERE"), listURL)
            }
            do {
                _ = try await download(list: list("MISSING"))
                XCTFail("\(name): a list that is not there must stop the download")
            } catch DownloadError.httpStatus(let status, _, _, _) {
                XCTAssertEqual(status, 404, name)
            }
        }
    }

    func testExistingDestinationIsRefusedOverwrittenOrSkipped() async throws {
        let servers = try TestServers.current()
        let url = servers.http.appendingPathComponent("1m.bin")
        for (name, transport) in Backends.all {
            let destination = (try scratchDirectory() as NSString).appendingPathComponent("keep.bin")
            try Data("precious".utf8).write(to: URL(fileURLWithPath: destination))
            do {
                _ = try await DownloadEngine(transport: transport, options: DownloadOptions(url: url, destination: destination)).run()
                XCTFail("\(name): must refuse")
            } catch DownloadError.destinationExists {}
            XCTAssertEqual(try String(contentsOfFile: destination, encoding: .utf8), "precious", name)

            let replaced = try await DownloadEngine(transport: transport,
                options: DownloadOptions(url: url, destination: destination, overwrite: .overwrite)).run()
            XCTAssertFalse(replaced.skipped)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: destination), try servers.sha256(of: "1m.bin"), name)

            let skipped = try await DownloadEngine(transport: transport,
                options: DownloadOptions(url: url, destination: destination, overwrite: .skipIfIdentical)).run()
            XCTAssertTrue(skipped.skipped, "\(name): same size and mtime as the remote")
        }
    }

    func testCheckpointLetsASecondEngineFinishWhatTheFirstStarted() async throws {
        let servers = try TestServers.current()
        let size = try servers.size(of: "64m.bin")
        for (name, transport) in Backends.all {
            // A slow server (16 MiB/s); the first engine is cancelled after about 24 MiB.
            let (url, key) = servers.fault("64m.bin", ["rate": String(16 << 20)])
            let destination = (try scratchDirectory(name) as NSString).appendingPathComponent("out.bin")
            let options = DownloadOptions(url: url, destination: destination, retry: quickRetry, idleTimeout: 60,
                                          checkpointInterval: 0.2)
            let first = Task { try await DownloadEngine(transport: transport, options: options).run() }
            try await waitUntil { (try? servers.stats(key: key).bytes_sent) ?? 0 >= 24 << 20 }
            first.cancel()
            _ = try? await first.value
            let checkpoint = try XCTUnwrap(try FileCheckpointStore(path: options.statePath).load(), name)
            let kept = checkpoint.plan.bytesWritten
            XCTAssertGreaterThan(kept, 16 << 20, "\(name): most of what arrived was checkpointed")

            try await Task.sleep(nanoseconds: 300_000_000)
            let sentBefore = try servers.stats(key: key).bytes_sent
            let result = try await DownloadEngine(transport: transport, options: options).run()
            XCTAssertEqual(result.resumedFrom, kept, name)
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: destination), try servers.sha256(of: "64m.bin"), name)
            let sentAfter = try servers.stats(key: key).bytes_sent
            XCTAssertEqual(sentAfter - sentBefore, size - kept, "\(name): only the missing bytes")
        }
    }

    /// A download's rate limit is its total over all its connections and requests: 1 MiB at
    /// 256 KiB/s with four connections takes about 4 s (the bucket's first 64 KiB are free).
    /// With libcurl's per-connection limit, four connections and the requests that idle ones took
    /// over went several times faster. A lower bound only: the cap's accuracy is bench/'s.
    func testARateLimitIsTheDownloadsTotalOverItsConnections() async throws {
        let servers = try TestServers.current()
        for (name, transport) in Backends.all {
            var options = try scratchOptions(servers.http.appendingPathComponent("1m.bin"), label: "rate-\(name)")
            options.connections = 4
            options.minSegmentSize = 128 << 10
            options.maxRate = 256 << 10
            let started = Date()
            do {
                _ = try await DownloadEngine(transport: transport, options: options).run()
                XCTAssertTrue(transport.capabilities.contains(.receiveRateLimit), "\(name) ran a limit it cannot keep")
                XCTAssertGreaterThan(Date().timeIntervalSince(started), 3.2, "\(name): 1 MiB at 256 KiB/s came too fast")
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: options.destination), try servers.sha256(of: "1m.bin"), name)
            } catch {
                // A backend without the capability says so at once, naming the one that has it.
                XCTAssertFalse(transport.capabilities.contains(.receiveRateLimit), "\(name): \(error)")
                XCTAssertTrue("\(error)".contains("--transport curl"), "\(name): \(error)")
            }
        }
    }
}
