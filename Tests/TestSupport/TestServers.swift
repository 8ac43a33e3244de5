import Foundation
import TransferCore
import XCTest

/// The local servers that `scripts/test` started, read from its environment.
/// Missing variables fail the test with the fix: run the tests through `scripts/test`.
package struct TestServers: Sendable {
    package let http: URL
    package let https: URL
    package let fault: URL
    package let caBundle: String
    package let spkiPin: String
    package let www: String
    package let nginxLog: String

    /// The fault server's anonymous FTP responder (`ftp://127.0.0.1:PORT`, serves
    /// `FTP-SECRET-CONTENT` for any path), from `TRANSFERD_TEST_FTP`; nil with an
    /// env file from before it existed. Its control connections are counted in
    /// `stats(key: "ftp")`.
    package var ftp: URL? {
        guard let value = ProcessInfo.processInfo.environment["TRANSFERD_TEST_FTP"], !value.isEmpty else { return nil }
        return URL(string: value)
    }

    package static func current(file: StaticString = #filePath, line: UInt = #line) throws -> TestServers {
        let environment = ProcessInfo.processInfo.environment
        func value(_ name: String) throws -> String {
            guard let value = environment[name], !value.isEmpty else {
                XCTFail("\(name) is not set: run the tests with scripts/test, which starts the servers", file: file, line: line)
                throw XCTSkip("no test servers")
            }
            return value
        }
        return TestServers(http: URL(string: try value("TRANSFERD_TEST_HTTP"))!,
                           https: URL(string: try value("TRANSFERD_TEST_HTTPS"))!,
                           fault: URL(string: try value("TRANSFERD_TEST_FAULT"))!,
                           caBundle: try value("TRANSFERD_TEST_CA"),
                           spkiPin: try value("TRANSFERD_TEST_SPKI"),
                           www: try value("TRANSFERD_TEST_WWW"),
                           nginxLog: try value("TRANSFERD_TEST_NGINX_LOG"))
    }

    /// A fault-server URL for `file` with the given fault parameters and a unique key.
    package func fault(_ file: String, _ parameters: [String: String] = [:], key: String = UUID().uuidString) -> (URL, String) {
        var components = URLComponents(url: fault.appendingPathComponent(file), resolvingAgainstBaseURL: false)!
        components.queryItems = parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
            + [URLQueryItem(name: "key", value: key)]
        return (components.url!, key)
    }

    /// Gives the fault server's requests for `path` these fault parameters (their own query's
    /// win), under `key`: for a client that picks its paths itself (the control API's
    /// `/v1/summary`). `reset(key:)` takes them back.
    package func preset(_ path: String, _ parameters: [String: String], key: String) throws {
        var components = URLComponents(url: fault.appendingPathComponent("_preset"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "path", value: path)]
            + parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
            + [URLQueryItem(name: "key", value: key)]
        let answer = String(decoding: try Data(contentsOf: components.url!), as: UTF8.self)
        guard answer.contains("\"preset\"") else { throw POSIXFailure(operation: "preset \(path): \(answer)", path: path, code: EINVAL) }
    }

    /// Forgets what the fault server counted for `key`, and its presets.
    package func reset(key: String) {
        _ = try? Data(contentsOf: URL(string: "\(fault.absoluteString)/_reset?key=\(key)")!)
    }

    package struct FaultStats: Decodable {
        package let requests: Int
        package let bytes_sent: Int64
        package let ranges: [String?]
    }

    /// What the fault server saw for one key (`"ftp"`: the FTP responder's
    /// control connections and data bytes).
    package func stats(key: String) throws -> FaultStats {
        let url = URL(string: "\(fault.absoluteString)/_stats?key=\(key)")!
        return try JSONDecoder().decode(FaultStats.self, from: Data(contentsOf: url))
    }

    /// Everything the fault server counted for one key, as its JSON has it.
    package func rawStats(key: String) throws -> [String: Any] {
        let url = URL(string: "\(fault.absoluteString)/_stats?key=\(key)")!
        return try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any] ?? [:]
    }

    package func path(_ file: String) -> String { (www as NSString).appendingPathComponent(file) }

    /// A folder under nginx's root, removed when `test` ends, holding `good/64m.bin` (the fixture),
    /// `bad/64m.bin` (8 bytes changed at the start of every MiB: another file of the same size) and
    /// `short/64m.bin` (its first 1,000 bytes): mirrors that agree, lie and disagree. Returns its
    /// name below the root.
    package func mirrorFolder(_ test: XCTestCase) throws -> String {
        let name = "mirrors-\(UUID().uuidString.prefix(8))"
        let root = path(name)
        let manager = FileManager.default
        for folder in ["good", "bad", "short"] {
            try manager.createDirectory(atPath: "\(root)/\(folder)", withIntermediateDirectories: true)
        }
        try manager.copyItem(atPath: path("64m.bin"), toPath: "\(root)/good/64m.bin")
        var bad = try Data(contentsOf: URL(fileURLWithPath: path("64m.bin")))
        for mebibyte in 0..<64 { bad.replaceSubrange((mebibyte << 20)..<((mebibyte << 20) + 8), with: Data("XXXXXXXX".utf8)) }
        try bad.write(to: URL(fileURLWithPath: "\(root)/bad/64m.bin"))
        try bad.prefix(1000).write(to: URL(fileURLWithPath: "\(root)/short/64m.bin"))
        test.addTeardownBlock { try? manager.removeItem(atPath: root) }
        return name
    }

    /// A Metalink 4 document for the fixture `file` (its size, SHA-256 and SHA-256 piece hashes of
    /// `pieceLength` bytes) served at `urls`, in that order of priority.
    package func metalink(for file: String, urls: [URL], pieceLength: Int = 1 << 20) throws -> String {
        let data = try Data(contentsOf: URL(fileURLWithPath: path(file)))
        let pieces = stride(from: 0, to: data.count, by: pieceLength).map { start in
            "<hash>\(SHA256Hasher.hex(of: data[start..<min(data.count, start + pieceLength)]))</hash>"
        }.joined()
        let listed = urls.enumerated().map { "<url priority=\"\($0.offset + 1)\">\($0.element.absoluteString)</url>" }.joined()
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="\((file as NSString).lastPathComponent)">\
            <size>\(data.count)</size><hash type="sha-256">\(SHA256Hasher.hex(of: data))</hash>\
            <pieces length="\(pieceLength)" type="sha-256">\(pieces)</pieces>\(listed)</file></metalink>
            """
    }

    /// SHA-256 of a served file, computed once per process.
    package func sha256(of file: String) throws -> String {
        try Self.digests.withLock { cache in
            if let known = cache[file] { return known }
            let digest = try SHA256Hasher.hex(ofFileAt: path(file))
            cache[file] = digest
            return digest
        }
    }

    private static let digests = LockedBox<[String: String]>([:])

    /// The fault server's tus creation URL for `key` (`/_tus/files?key=K&PARAMS`: faults for that key).
    package func tus(key: String, _ parameters: [String: String] = [:]) -> URL {
        var components = URLComponents(url: fault.appendingPathComponent("_tus/files"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "key", value: key)]
            + parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        return components.url!
    }

    /// Sets (or with an empty value, removes) tus faults of `key` (`/_tus/set`).
    package func setTusFaults(key: String, _ parameters: [String: String]) throws {
        var components = URLComponents(url: fault.appendingPathComponent("_tus/set"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "key", value: key)]
            + parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        _ = try Data(contentsOf: components.url!)
    }

    /// What the fault server's tus endpoint counted for `key`: `creations`, `received` (PATCH body
    /// bytes read, resent ones included), `patches` (accepted), `conflicts` (409s), `checksums`, `mismatches`, `heads`, `deleted`,
    /// `lost`, and of the latest upload `offset`, `length`, `sha256` (of the bytes it holds).
    package func tusStats(key: String) throws -> [String: Any] {
        var components = URLComponents(url: fault.appendingPathComponent("_tus/stats"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "key", value: key)]
        return try JSONSerialization.jsonObject(with: Data(contentsOf: components.url!)) as? [String: Any] ?? [:]
    }

    /// The fault server's resumable-upload target for `key` (`/_ietf/upload?key=K&PARAMS`: faults for that key).
    package func ietf(key: String, _ parameters: [String: String] = [:]) -> URL {
        var components = URLComponents(url: fault.appendingPathComponent("_ietf/upload"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "key", value: key)]
            + parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        return components.url!
    }

    /// Sets (or with an empty value, removes) resumable-upload faults of `key` (`/_ietf/set`;
    /// `forget=1` loses the key's latest upload now).
    package func setIetfFaults(key: String, _ parameters: [String: String]) throws {
        var components = URLComponents(url: fault.appendingPathComponent("_ietf/set"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "key", value: key)]
            + parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        _ = try Data(contentsOf: components.url!)
    }

    /// What the fault server's resumable-upload endpoint counted for `key`: `creations`,
    /// `empty_creations`, `plain`, `interim` (104s sent), `requests` (creations), `appends`,
    /// `received` (body bytes read in all, resent ones included: minus the file's size, the bytes
    /// resent), `conflicts`, `heads`, `deleted`, `lost`, `cuts`, `too_large`, and of the latest
    /// upload `offset`, `length`, `complete`, `creation_received`, `sha256`, `id`.
    package func ietfStats(key: String) throws -> [String: Any] {
        var components = URLComponents(url: fault.appendingPathComponent("_ietf/stats"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "key", value: key)]
        return try JSONSerialization.jsonObject(with: Data(contentsOf: components.url!)) as? [String: Any] ?? [:]
    }

    package func size(of file: String) throws -> Int64 {
        (try FileManager.default.attributesOfItem(atPath: path(file))[.size] as! NSNumber).int64Value
    }
}

/// A value shared between a test and the threads or tasks it starts: TransferCore's `Locked`
/// under the name the tests know.
package typealias LockedBox<Value> = Locked<Value>

/// Both backends, for running every conformance case against each.
package enum Backends {
    package static let all: [(String, Transport)] = [("curl", CurlTransport()), ("urlsession", URLSessionTransport())]
}

/// Skips a test whose size makes it a poor fit for an instrumented build:
/// `scripts/test --sanitize` sets `TRANSFERD_TEST_SANITIZER`.
package func skipUnderSanitizer(_ why: String) throws {
    if let kind = ProcessInfo.processInfo.environment["TRANSFERD_TEST_SANITIZER"], !kind.isEmpty {
        throw XCTSkip("skipped under the \(kind) sanitizer: \(why)")
    }
}

/// A fresh scratch directory per test.
package func scratchDirectory(_ name: String = #function) throws -> String {
    let base = ProcessInfo.processInfo.environment["TMPDIR"] ?? NSTemporaryDirectory()
    let clean = name.filter { $0.isLetter || $0.isNumber }
    let path = (base as NSString).appendingPathComponent("transferd-tests/\(clean)-\(UUID().uuidString.prefix(8))")
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Collects a whole response in memory (small responses only).
package final class CollectingSink: ResponseSink, Sendable {
    /// Written on the transport's thread, read by the test once the exchange is over.
    private let received = Locked((head: ResponseHead?.none, body: Data(), bodyBeforeHead: false))
    package var head: ResponseHead? { received.current.head }
    package var body: Data { received.current.body }
    package var bodyBeforeHead: Bool { received.current.bodyBeforeHead }
    package init() {}
    package func receive(head: ResponseHead) throws { received.withLock { $0.head = head } }
    package func receive(body chunk: UnsafeRawBufferPointer) throws {
        received.withLock { received in
            if received.head == nil { received.bodyBeforeHead = true }
            received.body.append(contentsOf: chunk)
        }
    }
}

/// The upload peers `scripts/test` starts: moto's S3 server (signatures
/// enforced, one log line per request), a multipart/form-data parser and,
/// when started, SeaweedFS as a second S3 server (`seaweedS3`).
package struct UploadServers {
    package let s3: URL
    package let credentials: AWSCredentials
    package let region: String
    package let s3Log: String
    package let form: URL
    package let formRoot: String
    /// tuspyserver's tus creation URL (`TRANSFERD_TEST_TUS`, `…/files`) and the folder it stores uploads in.
    package let tus: URL
    package let tusRoot: String

    package static func current(file: StaticString = #filePath, line: UInt = #line) throws -> UploadServers {
        let environment = ProcessInfo.processInfo.environment
        func value(_ name: String) throws -> String {
            guard let value = environment[name], !value.isEmpty else {
                XCTFail("\(name) is not set: run the tests with scripts/test, which starts the servers", file: file, line: line)
                throw XCTSkip("no upload servers")
            }
            return value
        }
        return UploadServers(s3: URL(string: try value("TRANSFERD_TEST_S3"))!,
                             credentials: AWSCredentials(accessKeyID: try value("TRANSFERD_TEST_S3_ACCESS_KEY"),
                                                         secretAccessKey: try value("TRANSFERD_TEST_S3_SECRET_KEY")),
                             region: try value("TRANSFERD_TEST_S3_REGION"), s3Log: try value("TRANSFERD_TEST_S3_LOG"),
                             form: URL(string: try value("TRANSFERD_TEST_FORM"))!, formRoot: try value("TRANSFERD_TEST_FORM_ROOT"),
                             tus: URL(string: try value("TRANSFERD_TEST_TUS"))!, tusRoot: try value("TRANSFERD_TEST_TUS_ROOT"))
    }

    package var configuration: S3Configuration {
        S3Configuration(endpoint: s3, region: region, credentials: credentials, pathStyle: true)
    }

    /// SeaweedFS's S3 gateway (`weed server`, a second, real S3 server; same
    /// key, secret and region as moto, no request log), from
    /// `TRANSFERD_TEST_SEAWEED_S3`; nil when that is not set (an env file from
    /// before SeaweedFS was added). See Tests/Servers/README.md for how it
    /// differs from moto.
    package var seaweedS3: URL? {
        guard let value = ProcessInfo.processInfo.environment["TRANSFERD_TEST_SEAWEED_S3"], !value.isEmpty else { return nil }
        return URL(string: value)
    }

    /// The S3 configuration for SeaweedFS (path style, the test key), or nil
    /// when it was not started.
    package var seaweedConfiguration: S3Configuration? {
        guard let endpoint = seaweedS3 else { return nil }
        return S3Configuration(endpoint: endpoint, region: region, credentials: credentials, pathStyle: true)
    }

    /// Every real S3 server to run a case against, by name: `moto` always,
    /// then `seaweedfs` when it was started.
    package var s3Servers: [(name: String, configuration: S3Configuration)] {
        s3Targets.map { ($0.name, $0.configuration) }
    }

    /// `s3Servers` with the environment for a `transferd` process talking to each.
    package var s3Targets: [(name: String, configuration: S3Configuration, environment: [String: String])] {
        var targets = [(name: "moto", configuration: configuration, environment: environment)]
        if let seaweed = seaweedConfiguration, let environment = seaweedEnvironment {
            targets.append((name: "seaweedfs", configuration: seaweed, environment: environment))
        }
        return targets
    }

    /// Environment for a `transferd` process talking to SeaweedFS instead of
    /// moto; nil when it was not started.
    package var seaweedEnvironment: [String: String]? {
        guard let endpoint = seaweedS3 else { return nil }
        var environment = self.environment
        environment["AWS_ENDPOINT_URL"] = endpoint.absoluteString
        return environment
    }

    /// Environment for a `transferd` process talking to the S3 server.
    package var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["AWS_ACCESS_KEY_ID"] = credentials.accessKeyID
        environment["AWS_SECRET_ACCESS_KEY"] = credentials.secretAccessKey
        environment["AWS_ENDPOINT_URL"] = s3.absoluteString
        environment["AWS_REGION"] = region
        return environment
    }

    /// Operations logged by the S3 server after byte `offset` of its log (first word of each line).
    package func operations(since offset: UInt64) throws -> [String] {
        Thread.sleep(forTimeInterval: 0.1)
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: s3Log))
        try handle.seek(toOffset: offset)
        return String(decoding: handle.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
            .compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    package func logSize() throws -> UInt64 {
        (try FileManager.default.attributesOfItem(atPath: s3Log)[.size] as! NSNumber).uint64Value
    }

    /// The log's size once it has stopped growing for half a second (at most 5 s):
    /// after a client is killed, the server may still finish and log the
    /// requests that client had in flight.
    package func settledLogSize() throws -> UInt64 {
        var size = try logSize()
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            Thread.sleep(forTimeInterval: 0.5)
            let now = try logSize()
            if now == size { break }
            size = now
        }
        return size
    }
}

/// Runs async work from a synchronous test and waits for it (at most
/// `timeout` seconds), rethrowing what it threw.
package func blocking(timeout: TimeInterval = 300, _ body: @escaping @Sendable () async throws -> Void) throws {
    let done = DispatchSemaphore(value: 0)
    let failure = LockedBox<Error?>(nil)
    Task {
        do { try await body() } catch { failure.withLock { $0 = error } }
        done.signal()
    }
    guard done.wait(timeout: .now() + timeout) == .success else {
        throw NSError(domain: "transferd.tests", code: 1, userInfo: [NSLocalizedDescriptionKey: "async work took over \(timeout) s"])
    }
    if let error = failure.withLock({ $0 }) { throw error }
}
