import Foundation
import TestSupport
import TransferCore
import XCTest

/// Resumable uploads by the IETF draft (draft-ietf-httpbis-resumable-upload-12, interop
/// version 8) on both backends, against the fault server's `/_ietf/` endpoint. The bytes the
/// server received in all, minus the file's size, are the bytes sent twice.
extension UploadConformanceTests {
    func resumableOptions(_ endpoint: URL, _ path: String) -> ResumableOptions {
        ResumableOptions(endpoint: endpoint, source: path, retry: quickRetry)
    }

    func resumableCheckpoints(_ state: RecordingUploadState) -> [ResumableCheckpoint] {
        state.saves.compactMap { try? JSONDecoder().decode(ResumableCheckpoint.self, from: Data($0.utf8)) }
    }

    /// The whole file: with curl in the creation itself (its address from the 104), with
    /// urlsession, which cannot see a 104, by an empty creation and one append.
    func testResumableUploadArrivesWhole() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(1_000_003)
        for (name, transport) in Backends.all {
            let key = "ietf-whole-\(name)-\(UUID().uuidString.prefix(8))"
            let state = RecordingUploadState()
            let result = try await ResumableUpload(transport: transport, options: resumableOptions(servers.ietf(key: key), path),
                                                   state: state).run()
            let stats = try servers.ietfStats(key: key)
            XCTAssertEqual(result.size, 1_000_003, name)
            XCTAssertEqual(result.bytesSent, 1_000_003, name)
            XCTAssertEqual(result.status, 200, name)
            XCTAssertNil(result.resumedAt, name)
            XCTAssertFalse(result.plainUpload, name)
            XCTAssertEqual(stats["creations"] as? Int, 1, name)
            XCTAssertEqual(stats["received"] as? Int, 1_000_003, "\(name): no byte twice")
            XCTAssertEqual(stats["complete"] as? Bool, true, name)
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)
            XCTAssertNil(try state.load(), "\(name): nothing left to resume once complete")
            let recorded = try XCTUnwrap(resumableCheckpoints(state).first, name)
            XCTAssertTrue(recorded.uploadURL.contains("/_ietf/uploads/r"), "\(name): \(recorded.uploadURL)")
            if name == "curl" {
                XCTAssertTrue(result.announcedByInterim, name)
                XCTAssertEqual(result.requests, 1, "\(name): the file went with the creation")
                XCTAssertEqual(stats["interim"] as? Int, 1, name)
                XCTAssertEqual(stats["appends"] as? Int, 0, name)
                XCTAssertEqual(stats["creation_received"] as? Int, 1_000_003, name)
            } else {
                XCTAssertFalse(result.announcedByInterim, name)
                XCTAssertEqual(result.requests, 2, "\(name): an empty creation, then one append")
                XCTAssertEqual(stats["empty_creations"] as? Int, 1, name)
                XCTAssertEqual(stats["appends"] as? Int, 1, name)
            }
        }
    }

    /// The capability difference is declared, not discovered: curl hands 1xx answers over,
    /// urlsession cannot, and its creation carries no byte of the file.
    func testResumableBackendWithoutInterimAnswersCreatesWithAnEmptyBody() async throws {
        XCTAssertTrue(CurlTransport().capabilities.contains(.interimResponses))
        XCTAssertFalse(URLSessionTransport().capabilities.contains(.interimResponses))
        XCTAssertTrue(TransportCapabilities.interimResponses.description.contains("104"))
        let servers = try TestServers.current()
        let path = try tusFile(300_000)
        let key = "ietf-empty-\(UUID().uuidString.prefix(8))"
        let result = try await ResumableUpload(transport: URLSessionTransport(), options: resumableOptions(servers.ietf(key: key), path),
                                               state: RecordingUploadState()).run()
        let stats = try servers.ietfStats(key: key)
        XCTAssertEqual(stats["empty_creations"] as? Int, 1)
        XCTAssertEqual(stats["creation_received"] as? Int, 0, "the creation carried no byte")
        XCTAssertEqual(stats["received"] as? Int, 300_000)
        XCTAssertFalse(result.announcedByInterim)
        XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path))
    }

    /// The server drops the connection once 600,000 bytes have arrived (keeping them, as the
    /// draft asks): the same run HEADs the upload resource and sends only the rest.
    func testResumableCutMidBodyResendsNothingTheServerHolds() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(2_000_000)
        for (name, transport) in Backends.all {
            let key = "ietf-cut-\(name)-\(UUID().uuidString.prefix(8))"
            let told = Locked<[String]>([])
            let result = try await ResumableUpload(transport: transport,
                                                   options: resumableOptions(servers.ietf(key: key, ["cut_after": "600000"]), path),
                                                   state: RecordingUploadState()) { event in
                if case .retrying(_, _, let reason) = event { told.withLock { $0.append(reason) } }
            }.run()
            let stats = try servers.ietfStats(key: key)
            let received = stats["received"] as? Int ?? -1
            print("resumable \(name): cut at 600000 bytes; bytes resent: \(received - 2_000_000)")
            XCTAssertEqual(stats["cuts"] as? Int, 1, name)
            XCTAssertEqual(received, 2_000_000, "\(name): bytes resent: \(received - 2_000_000)")
            XCTAssertEqual(stats["creations"] as? Int, 1, "\(name): the same upload continued")
            XCTAssertGreaterThanOrEqual(stats["heads"] as? Int ?? 0, 1, "\(name): the offset was asked")
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)
            // What this run handed to the socket: more than the server read (the kernel's buffers took some).
            XCTAssertGreaterThanOrEqual(result.bytesSent, 2_000_000, name)
            XCTAssertFalse(told.current.isEmpty, "\(name): the interruption was told")
        }
    }

    /// The server loses the upload mid-way (404 after): a new upload from byte 0, said so.
    /// An offset that goes backwards fails with the reason and the upload is forgotten.
    func testResumableServerThatLostTheUploadIsToldAndStartsOver() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(900_000)
        for (name, transport) in Backends.all {
            let key = "ietf-lost-\(name)-\(UUID().uuidString.prefix(8))"
            let state = RecordingUploadState()
            let told = Locked<[String]>([])
            let endpoint = servers.ietf(key: key, ["max_append": "262144", "lose_after": "300000"])
            let result = try await ResumableUpload(transport: transport, options: resumableOptions(endpoint, path), state: state) { event in
                if case .retrying(_, _, let reason) = event { told.withLock { $0.append(reason) } }
            }.run()
            let stats = try servers.ietfStats(key: key)
            XCTAssertEqual(stats["creations"] as? Int, 2, name)
            XCTAssertEqual(result.restarts.count, 1, name)
            XCTAssertTrue(result.restarts.first?.contains("no longer has the upload") == true, "\(name): \(result.restarts)")
            XCTAssertTrue(told.current.contains { $0.contains("a new upload is started") }, "\(name): \(told.current)")
            XCTAssertEqual(Set(resumableCheckpoints(state).map(\.uploadURL)).count, 2, name)
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)

            // Stopped with 524,288 bytes confirmed, then HEAD reports 300,000 fewer.
            let liar = "ietf-backwards-\(name)-\(UUID().uuidString.prefix(8))"
            let stopped = RecordingUploadState(failAfter: 3)
            let options = resumableOptions(servers.ietf(key: liar, ["max_append": "262144"]), path)
            do {
                _ = try await ResumableUpload(transport: transport, options: options, state: stopped).run()
                XCTFail("\(name): expected the stop")
            } catch is CancellationError {}
            XCTAssertEqual(resumableCheckpoints(stopped).last?.confirmed, 524_288, name)
            stopped.stopFailing()
            try servers.setIetfFaults(key: liar, ["head_offset_delta": "-300000"])
            do {
                _ = try await ResumableUpload(transport: transport, options: options, state: stopped).run()
                XCTFail("\(name): a server whose offset went backwards must not end in success")
            } catch let failure as ResumableFailure {
                let text = String(describing: failure)
                XCTAssertTrue(text.contains("below the 524288 bytes it had confirmed"), "\(name): \(text)")
                XCTAssertTrue(text.contains("/_ietf/uploads/"), "\(name): says where: \(text)")
                XCTAssertTrue(text.contains("starts a new one"), "\(name): says what next: \(text)")
            }
            XCTAssertNil(try stopped.load(), "\(name): the upload is forgotten, so the next run starts anew")

            // Forgotten between two runs: the next run says so and starts a new upload.
            let forgotten = "ietf-forgotten-\(name)-\(UUID().uuidString.prefix(8))"
            let again = RecordingUploadState(failAfter: 3)
            let forgottenOptions = resumableOptions(servers.ietf(key: forgotten, ["max_append": "262144"]), path)
            do {
                _ = try await ResumableUpload(transport: transport, options: forgottenOptions, state: again).run()
                XCTFail("\(name): expected the stop")
            } catch is CancellationError {}
            again.stopFailing()
            try servers.setIetfFaults(key: forgotten, ["forget": "1"])
            let second = try await ResumableUpload(transport: transport, options: forgottenOptions, state: again).run()
            XCTAssertTrue(second.restarts.first?.contains("(HTTP 404 to HEAD); a new upload is started") == true,
                          "\(name): \(second.restarts)")
            XCTAssertEqual(try servers.ietfStats(key: forgotten)["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)
        }
    }

    /// `Upload-Limit: max-append-size` splits the upload into requests no larger; `max-size`
    /// below the file refuses it before anything is created.
    func testResumableUploadLimitSplitsAppendsAndRefusesTooLargeFiles() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(1_000_000)
        for (name, transport) in Backends.all {
            let key = "ietf-limit-\(name)-\(UUID().uuidString.prefix(8))"
            let result = try await ResumableUpload(transport: transport,
                                                   options: resumableOptions(servers.ietf(key: key, ["max_append": "300000"]), path),
                                                   state: RecordingUploadState()).run()
            let stats = try servers.ietfStats(key: key)
            XCTAssertEqual(result.limits.maxAppendSize, 300_000, name)
            XCTAssertEqual(stats["too_large"] as? Int, 0, "\(name): no request above the limit")
            XCTAssertEqual(stats["received"] as? Int, 1_000_000, name)
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)
            // curl: 300,000 with the creation, then 300,000, 300,000 and 100,000; urlsession: an empty creation, then four.
            XCTAssertEqual(stats["appends"] as? Int, name == "curl" ? 3 : 4, name)
            XCTAssertEqual(result.requests, name == "curl" ? 4 : 5, name)

            let big = "ietf-max-\(name)-\(UUID().uuidString.prefix(8))"
            do {
                _ = try await ResumableUpload(transport: transport, options: resumableOptions(servers.ietf(key: big, ["max_size": "500000"]), path),
                                              state: RecordingUploadState()).run()
                XCTFail("\(name): a file past max-size must be refused")
            } catch let failure as ResumableFailure {
                XCTAssertEqual(failure.next, .nothingSent, name)
                XCTAssertTrue(failure.description.contains("max-size of 500000"), "\(name): \(failure)")
            }
            XCTAssertEqual(try servers.ietfStats(key: big)["creations"] as? Int, 0, "\(name): refused up front")
        }
    }

    /// Limits learned only from the 104 (OPTIONS says none): curl, whose creation carries the
    /// whole file, stops it as the 104 arrives with a smaller max-append-size, and goes on in
    /// appends that keep it; urlsession's empty creation learns them from the 201.
    func testResumableLimitsAnnouncedOnlyInThe104StopTheCreation() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(1_000_000)
        for (name, transport) in Backends.all {
            let key = "ietf-late-limit-\(name)-\(UUID().uuidString.prefix(8))"
            let told = Locked<[String]>([])
            let endpoint = servers.ietf(key: key, ["max_append": "300000", "quiet_options": "1"])
            let result = try await ResumableUpload(transport: transport, options: resumableOptions(endpoint, path),
                                                   state: RecordingUploadState()) { event in
                if case .retrying(_, _, let reason) = event { told.withLock { $0.append(reason) } }
            }.run()
            let stats = try servers.ietfStats(key: key)
            XCTAssertEqual(result.limits.maxAppendSize, 300_000, name)
            XCTAssertEqual(stats["creations"] as? Int, 1, "\(name): one upload")
            XCTAssertEqual(stats["received"] as? Int, 1_000_000, "\(name): no byte twice")
            XCTAssertEqual(stats["appends"] as? Int, 4, "\(name): 300,000, 300,000, 300,000 and 100,000")
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)
            if name == "curl" {
                XCTAssertTrue(told.current.contains { $0.contains("at most 300000 bytes a request") }, "\(name): \(told.current)")
            }
        }
    }

    /// A target that speaks another interop version sends no 104 and takes the POST as a plain
    /// upload: curl's creation carried the whole file, so that is the upload (and it says so);
    /// urlsession's empty creation gets no upload resource, and the upload is refused.
    func testResumableTargetOfAnotherDraftVersion() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(200_000)
        let curlKey = "ietf-other-curl-\(UUID().uuidString.prefix(8))"
        let plain = try await ResumableUpload(transport: CurlTransport(),
                                              options: resumableOptions(servers.ietf(key: curlKey, ["interop": "7"]), path),
                                              state: RecordingUploadState()).run()
        XCTAssertTrue(plain.plainUpload)
        let plainStats = try servers.ietfStats(key: curlKey)
        XCTAssertEqual(plainStats["plain"] as? Int, 1)
        XCTAssertEqual(plainStats["interim"] as? Int, 0)
        XCTAssertEqual(plainStats["received"] as? Int, 200_000, "the plain upload carried the whole file")

        let urlsessionKey = "ietf-other-urlsession-\(UUID().uuidString.prefix(8))"
        do {
            _ = try await ResumableUpload(transport: URLSessionTransport(),
                                          options: resumableOptions(servers.ietf(key: urlsessionKey, ["interop": "7"]), path),
                                          state: RecordingUploadState()).run()
            XCTFail("no upload resource, no upload")
        } catch let failure as ResumableFailure {
            XCTAssertTrue(failure.description.contains("does not take resumable uploads"), "\(failure)")
        }
    }

    /// An upload resource on another origin than the target gets none of the job's credentials,
    /// and a creation answered with a redirect is never followed (a POST turned into a GET would
    /// answer 200 with nothing stored).
    func testResumableCredentialsStayWithTheTargetAndRedirectsAreRefused() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(300_000)
        for (name, transport) in Backends.all {
            let key = "ietf-origin-\(name)-\(UUID().uuidString.prefix(8))"
            let elsewhere = servers.fault.absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost") + "/_ietf/"
            var options = resumableOptions(servers.ietf(key: key, ["location_base": elsewhere]), path)
            options.headers = ["Authorization": "Bearer not-for-others", "X-Trace": "kept"]
            let result = try await ResumableUpload(transport: transport, options: options, state: RecordingUploadState()).run()
            let stats = try servers.ietfStats(key: key)
            XCTAssertEqual(result.size, 300_000, name)
            XCTAssertEqual(stats["complete"] as? Bool, true, name)
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: path), name)
            XCTAssertEqual(stats["credentials"] as? Int, 0, "\(name): no credential went to the other origin")
        }
        // nginx answers a request for a folder without its slash with 301, a POST too.
        let folder = "redirecting-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: servers.path(folder), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: servers.path(folder)) }
        for (name, transport) in Backends.all {
            do {
                _ = try await ResumableUpload(transport: transport, options: resumableOptions(servers.http.appendingPathComponent(folder), path),
                                              state: RecordingUploadState()).run()
                XCTFail("\(name): a redirected creation taken as an upload")
            } catch let failure as ResumableFailure {
                XCTAssertTrue(failure.description.contains("redirects its POST"), "\(name): \(failure)")
            }
        }
    }

    /// A cancelled job's upload is cancelled on the server too (DELETE on the upload resource).
    func testResumableAbandonCancelsTheUpload() async throws {
        let servers = try TestServers.current()
        let path = try tusFile(600_000)
        for (name, transport) in Backends.all {
            let key = "ietf-abandon-\(name)-\(UUID().uuidString.prefix(8))"
            let state = RecordingUploadState(failAfter: 2)
            let upload = ResumableUpload(transport: transport, options: resumableOptions(servers.ietf(key: key, ["max_append": "262144"]), path),
                                         state: state)
            do {
                _ = try await upload.run()
                XCTFail("\(name): expected the stop")
            } catch is CancellationError {}
            await upload.abandon()
            XCTAssertNil(try state.load(), name)
            XCTAssertEqual(try servers.ietfStats(key: key)["deleted"] as? Int, 1, name)
        }
    }
}
