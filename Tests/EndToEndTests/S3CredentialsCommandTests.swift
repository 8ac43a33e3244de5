import Foundation
import TestSupport
import TransferCore
import XCTest

/// The credential chain through the `transferd` binary: `put` and `get` with nothing but a
/// web identity token file (moto's STS), and the message and exit code with no source at all.
final class S3CredentialsCommandTests: XCTestCase {
    func testPutAndGetWithAWebIdentityTokenFile() throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        let directory = try scratchDirectory()
        let token = "eyJ.cli-web-identity-\(UUID().uuidString)"
        try Data(token.utf8).write(to: URL(fileURLWithPath: directory + "/token"))
        var environment = peers.environment
        environment["AWS_ACCESS_KEY_ID"] = nil
        environment["AWS_SECRET_ACCESS_KEY"] = nil
        environment["HOME"] = directory
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        environment["AWS_WEB_IDENTITY_TOKEN_FILE"] = directory + "/token"
        environment["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/transferd-test-role"
        try blocking { try await S3Client(configuration: peers.configuration, transport: URLSessionTransport()).createBucket("cli-credentials") }

        let offset = try peers.logSize()
        let put = try TransferdProcess.run(["put", servers.path("1m.bin"), "s3://cli-credentials/1m.bin"], directory: directory,
                                           environment: environment)
        XCTAssertEqual(put.status, 0, put.stderr)
        let get = try TransferdProcess.run(["get", "s3://cli-credentials/1m.bin", "-o", directory + "/back.bin"], directory: directory,
                                           environment: environment)
        XCTAssertEqual(get.status, 0, get.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/back.bin"), try servers.sha256(of: "1m.bin"))
        let lines = try String(contentsOfFile: peers.s3Log, encoding: .utf8).utf8.dropFirst(Int(offset))
        let operations = String(decoding: Array(lines), as: UTF8.self).split(separator: "\n").map { $0.split(separator: " ") }
        XCTAssertEqual(operations.filter { $0.first == "AssumeRoleWithWebIdentity" }.count, 2, "one per process")
        let s3 = operations.filter { $0.first != "AssumeRoleWithWebIdentity" }
        XCTAssertFalse(s3.isEmpty)
        XCTAssertTrue(s3.allSatisfy { $0.count > 4 && $0[4].hasPrefix("ASIA") && ["200", "206"].contains($0[2]) },
                      "every S3 request signed with the assumed role's key and taken: \(s3)")
        XCTAssertFalse((put.stderr + put.stdout + get.stderr + get.stdout).contains(token))
    }

    /// Container credentials that come within the 5-minute margin 1 s after each answer: a
    /// rate-limited multipart upload of some 4 s must fetch new ones while it runs, and every
    /// request it makes must still be taken.
    func testALongUploadFetchesFreshContainerCredentialsBeforeTheOldExpire() throws {
        let servers = try TestServers.current()
        let peers = try UploadServers.current()
        let directory = try scratchDirectory()
        let keys = try STSRequest.assumeRole(endpoint: peers.s3.absoluteString, region: peers.region,
                                             roleARN: "arn:aws:iam::123456789012:role/transferd-test-role", sessionName: "cli-refresh",
                                             externalID: nil, source: peers.credentials, profile: "test").credentials
        let token = "container-token-\(UUID().uuidString)"
        let server = try CredentialsServer(token: token, credentials: keys, lifetime: 301)
        var environment = peers.environment
        environment["AWS_ACCESS_KEY_ID"] = nil
        environment["AWS_SECRET_ACCESS_KEY"] = nil
        environment["HOME"] = directory
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        environment["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server.url + "/container/credentials"
        environment["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = token
        try blocking { try await S3Client(configuration: peers.configuration, transport: URLSessionTransport()).createBucket("cli-credentials") }

        let offset = try peers.logSize()
        let started = Date()
        let put = try TransferdProcess.run(["put", servers.path("64m.bin"), "s3://cli-credentials/64m.bin", "--part-size", "5M",
                                            "--parts", "2", "--limit-rate", "16M"], directory: directory, environment: environment)
        let seconds = Date().timeIntervalSince(started)
        XCTAssertEqual(put.status, 0, put.stderr)
        XCTAssertGreaterThan(seconds, 3, "the upload ran long enough to cross a refresh")
        let fetches = try server.stats()["container"] ?? 0
        XCTAssertGreaterThanOrEqual(fetches, 2, "fetched again during the upload (\(seconds) s)")
        let lines = try String(contentsOfFile: peers.s3Log, encoding: .utf8).utf8.dropFirst(Int(offset))
        let requests = String(decoding: Array(lines), as: UTF8.self).split(separator: "\n").map { $0.split(separator: " ") }
        XCTAssertGreaterThan(requests.filter { $0.first == "UploadPart" }.count, 10)
        XCTAssertTrue(requests.allSatisfy { $0.count > 4 && $0[4] == Substring(keys.accessKeyID) && $0[2] == "200" },
                      "every request signed with the container's credentials and taken: \(requests.filter { $0.count > 2 && $0[2] != "200" })")
        XCTAssertFalse((put.stderr + put.stdout).contains(token))
    }

    func testNoCredentialsAnywhereIsAUsageErrorNamingTheSources() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("AWS_") }
        environment["HOME"] = directory
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        environment["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
        let put = try TransferdProcess.run(["put", servers.path("1m.bin"), "s3://bucket/1m.bin"], directory: directory,
                                           environment: environment)
        XCTAssertEqual(put.status, 2, put.stderr)
        XCTAssertTrue(put.stderr.contains("no AWS credentials: tried AWS_ACCESS_KEY_ID"), put.stderr)
        XCTAssertTrue(put.stderr.contains("credential_process") && put.stderr.contains("AWS_CONTAINER_CREDENTIALS_FULL_URI"), put.stderr)
    }
}
