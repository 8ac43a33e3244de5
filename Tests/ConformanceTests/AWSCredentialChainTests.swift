import Foundation
import TestSupport
import TransferCore
import XCTest

/// The AWS credential chain against real servers on 127.0.0.1: STS on moto (which checks
/// the SigV4 of S3 requests signed with the keys it handed out, for the role the test
/// server seeds), a credential_process script, and Tests/Servers/credentials_server.py
/// for the container endpoint and IMDSv2. Each case resolves an `S3Configuration` from an
/// environment as a user would set it and signs S3 requests to moto with what it got.
final class AWSCredentialChainTests: XCTestCase {
    static let role = "arn:aws:iam::123456789012:role/transferd-test-role"

    /// moto's request log lines after `offset`: (operation, status, access key).
    private func logged(_ servers: UploadServers, since offset: UInt64) throws -> [(operation: String, status: String, key: String)] {
        Thread.sleep(forTimeInterval: 0.1)
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: servers.s3Log))
        try handle.seek(toOffset: offset)
        return String(decoding: handle.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            return fields.count >= 5 ? (fields[0], fields[2], fields[4]) : nil
        }
    }

    /// Whether moto took every request (a signature it refused is a 403).
    private static func accepted(_ lines: ArraySlice<(operation: String, status: String, key: String)>) -> Bool {
        !lines.isEmpty && lines.allSatisfy { ["200", "404", "409"].contains($0.status) }
    }

    /// The environment of a machine whose only credentials are `extra` (none of the test keys).
    private func bareEnvironment(_ servers: UploadServers, _ extra: [String: String]) throws -> [String: String] {
        let directory = try scratchDirectory("credentials-\(UUID().uuidString.prefix(8))")
        var environment = ["HOME": directory, "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                           "AWS_ENDPOINT_URL": servers.s3.absoluteString, "AWS_REGION": servers.region,
                           "AWS_EC2_METADATA_DISABLED": "true"]
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// Temporary keys for the seeded role, from moto's STS (random, long: fetched credentials are
    /// registered as secrets for the whole test process, which the test key `testing` must not be).
    private func assumedKeys(_ servers: UploadServers) throws -> AWSCredentials {
        try STSRequest.assumeRole(endpoint: servers.s3.absoluteString, region: servers.region, roleARN: Self.role,
                                  sessionName: "chain-test", externalID: nil, source: servers.credentials, profile: "test").credentials
    }

    /// Signs S3 requests with `configuration`'s credentials: a bucket made and looked at.
    private func useS3(_ configuration: S3Configuration) throws {
        let client = S3Client(configuration: configuration, transport: URLSessionTransport(),
                              retry: RetryPolicy(maxAttempts: 2, baseDelay: 0.05, maxDelay: 0.2))
        try blocking {
            try await client.createBucket("credential-chain")
            _ = try await client.headObjectIfPresent(bucket: "credential-chain", key: "absent")
        }
    }

    func testWebIdentityTokenFileAssumesTheRoleAndItsKeysSignS3Requests() throws {
        let servers = try UploadServers.current()
        let directory = try scratchDirectory()
        let tokenFile = directory + "/token"
        let token = "eyJ.web-identity-token-\(UUID().uuidString)"
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let environment = try bareEnvironment(servers, ["AWS_WEB_IDENTITY_TOKEN_FILE": tokenFile, "AWS_ROLE_ARN": Self.role,
                                                        "AWS_ROLE_SESSION_NAME": "chain-test"])
        let offset = try servers.logSize()
        let configuration = try S3Configuration.resolve(environment: environment)
        try useS3(configuration)
        let provider = configuration.credentialsProvider
        let key = try XCTUnwrap(provider.lastKnown?.accessKeyID)
        XCTAssertTrue(key.hasPrefix("ASIA"), "moto's STS hands out temporary keys: \(key)")
        XCTAssertNotNil(provider.lastKnown?.sessionToken)
        let lines = try logged(servers, since: offset)
        XCTAssertEqual(lines.first?.operation, "AssumeRoleWithWebIdentity", "\(lines)")
        XCTAssertEqual(lines.first?.status, "200")
        XCTAssertEqual(lines.first?.key, "-", "AssumeRoleWithWebIdentity is not signed")
        let s3 = lines.dropFirst()
        XCTAssertEqual(s3.map(\.operation), ["CreateBucket", "HeadObject"])
        XCTAssertEqual(Set(s3.map(\.key)), [key], "S3 requests are signed with the assumed role's key")
        XCTAssertTrue(Self.accepted(s3), "moto checked the signatures and took them: \(Array(s3))")
        XCTAssertEqual(provider.fetches, 1)
        XCTAssertEqual(Redaction.scrub(token), "REDACTED", "the web identity token is a registered secret")
    }

    func testAProfilesRoleIsAssumedWithItsSourceProfilesKeys() throws {
        let servers = try UploadServers.current()
        let directory = try scratchDirectory()
        try Data("""
            [base]
            aws_access_key_id = \(servers.credentials.accessKeyID)
            aws_secret_access_key = \(servers.credentials.secretAccessKey)
            """.utf8).write(to: URL(fileURLWithPath: directory + "/credentials"))
        try Data("""
            [profile deploy]
            role_arn = \(Self.role)
            source_profile = base
            role_session_name = deploy-test
            """.utf8).write(to: URL(fileURLWithPath: directory + "/config"))
        let environment = try bareEnvironment(servers, ["AWS_SHARED_CREDENTIALS_FILE": directory + "/credentials",
                                                        "AWS_CONFIG_FILE": directory + "/config", "AWS_PROFILE": "deploy"])
        let offset = try servers.logSize()
        let configuration = try S3Configuration.resolve(environment: environment)
        try useS3(configuration)
        let key = try XCTUnwrap(configuration.credentialsProvider.lastKnown?.accessKeyID)
        let lines = try logged(servers, since: offset)
        XCTAssertEqual(lines.first?.operation, "AssumeRole", "\(lines)")
        XCTAssertEqual(lines.first?.status, "200")
        XCTAssertEqual(lines.first?.key, servers.credentials.accessKeyID, "AssumeRole is signed with the source profile's key")
        XCTAssertNotEqual(key, servers.credentials.accessKeyID)
        XCTAssertEqual(Set(lines.dropFirst().map(\.key)), [key])
        XCTAssertTrue(Self.accepted(lines.dropFirst()), "\(lines)")

        // moto's STS hands out keys for any role ARN (it checks no role exists); it does check
        // AssumeRole's signature: with a wrong source secret, the error says where and what, and no secret.
        try Data("""
            [base]
            aws_access_key_id = \(servers.credentials.accessKeyID)
            aws_secret_access_key = not-the-source-secret-4b1f
            """.utf8).write(to: URL(fileURLWithPath: directory + "/credentials"))
        let refused = try S3Configuration.resolve(environment: environment)
        XCTAssertThrowsError(try refused.credentialsProvider.credentials()) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("profile deploy") && message.contains("STS AssumeRole")
                          && message.contains("SignatureDoesNotMatch"), message)
            XCTAssertFalse(message.contains("not-the-source-secret"), message)
        }
    }

    func testACredentialProcessIsRunWithoutAShellAndItsJSONRead() throws {
        let servers = try UploadServers.current()
        let directory = try scratchDirectory()
        let keys = try assumedKeys(servers)
        let script = directory + "/get creds.sh"
        try Data("""
            #!/bin/sh
            [ "$1" = "--for" ] && [ "$2" = "moto test" ] || { echo "bad arguments: $*" >&2; exit 3; }
            printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "SessionToken": "%s"}' \(keys.accessKeyID) \(keys.secretAccessKey) \(keys.sessionToken ?? "")
            """.utf8).write(to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
        let leaking = directory + "/leak.sh"
        try Data("""
            #!/bin/sh
            echo '{"Version": 1, "AccessKeyId": "AKIDLEAK", "SecretAccessKey": "leaked-secret-9d2e"'
            echo 'leaked-secret-9d2e' >&2
            exit 1
            """.utf8).write(to: URL(fileURLWithPath: leaking))
        chmod(leaking, 0o755)
        try Data("""
            [profile tool]
            credential_process = "\(script)" --for 'moto test'
            [profile leak]
            credential_process = \(leaking)
            [profile slow]
            credential_process = sleep 30
            """.utf8).write(to: URL(fileURLWithPath: directory + "/config"))
        let environment = try bareEnvironment(servers, ["AWS_CONFIG_FILE": directory + "/config",
                                                        "AWS_SHARED_CREDENTIALS_FILE": directory + "/none"])
        let offset = try servers.logSize()
        let configuration = try S3Configuration.resolve(profile: "tool", environment: environment)
        try useS3(configuration)
        XCTAssertTrue(Self.accepted(try logged(servers, since: offset)[...]))

        let leak = try S3Configuration.resolve(profile: "leak", environment: environment)
        XCTAssertThrowsError(try leak.credentialsProvider.credentials()) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("leak.sh failed (exit status 1)"), message)
            XCTAssertFalse(message.contains("leaked-secret"), "the process's output is never shown: \(message)")
        }
        let started = Date()
        XCTAssertThrowsError(try CredentialProcess.run("sleep 30", profile: "slow", environment: environment, timeout: 1)) { error in
            XCTAssertTrue("\(error)".contains("did not finish within 1 s"), "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
    }

    func testContainerCredentialsNeedTheTokenAndAreFetchedAgainBeforeTheyExpire() throws {
        let servers = try UploadServers.current()
        let assumed = AWSExpiringCredentials(credentials: try assumedKeys(servers), expiration: nil)
        let containerToken = "container-token-\(UUID().uuidString)"
        // Credentials that expire 5 minutes and 3 seconds after each answer: within the
        // 5-minute margin after 3 s, when the next signing fetches new ones.
        let server = try CredentialsServer(token: containerToken, credentials: assumed.credentials, lifetime: 303)
        let tokenFile = try scratchDirectory() + "/container-token"
        try Data(containerToken.utf8).write(to: URL(fileURLWithPath: tokenFile))

        var environment = try bareEnvironment(servers, ["AWS_CONTAINER_CREDENTIALS_FULL_URI": server.url + "/container/credentials",
                                                        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "wrong-token"])
        let refused = try S3Configuration.resolve(environment: environment)
        XCTAssertThrowsError(try refused.credentialsProvider.credentials()) { error in
            XCTAssertTrue("\(error)".contains("HTTP 401"), "\(error)")
            XCTAssertTrue("\(error)".contains("AWS_CONTAINER_AUTHORIZATION_TOKEN"), "\(error)")
            XCTAssertFalse("\(error)".contains("wrong-token"), "\(error)")
        }

        environment["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = tokenFile  // the file wins over the variable
        let configuration = try S3Configuration.resolve(environment: environment)
        let client = S3Client(configuration: configuration, transport: URLSessionTransport(),
                              retry: RetryPolicy(maxAttempts: 2, baseDelay: 0.05, maxDelay: 0.2))
        let offset = try servers.logSize()
        // A long operation: signed requests for 5 s, across the moment the credentials near their expiry.
        let started = Date()
        let requests = Locked(0)
        try blocking {
            try await client.createBucket("credential-chain")
            while Date().timeIntervalSince(started) < 5 {
                _ = try await client.headObjectIfPresent(bucket: "credential-chain", key: "absent")
                requests.withLock { $0 += 1 }
                try await Task.sleep(nanoseconds: 200_000_000)
            }
        }
        let stats = try server.stats()
        XCTAssertGreaterThanOrEqual(stats["container"] ?? 0, 2, "fetched again before expiry: \(stats)")
        XCTAssertLessThan(stats["container"] ?? 0, requests.current / 2, "not fetched for every request: \(stats), \(requests.current) requests")
        XCTAssertEqual(configuration.credentialsProvider.fetches, stats["container"])
        let lines = try logged(servers, since: offset)
        XCTAssertEqual(Set(lines.map(\.key)), [assumed.credentials.accessKeyID])
        XCTAssertTrue(Self.accepted(lines[...]), "\(lines.filter { $0.status != "404" })")
    }

    func testIMDSv2SessionTokenThenTheRolesCredentials() throws {
        let servers = try UploadServers.current()
        let keys = try assumedKeys(servers)
        let server = try CredentialsServer(token: "unused-\(UUID().uuidString)", credentials: keys, lifetime: 3600)
        var environment = try bareEnvironment(servers, ["AWS_EC2_METADATA_SERVICE_ENDPOINT": server.url])
        environment["AWS_EC2_METADATA_DISABLED"] = nil
        let configuration = try S3Configuration.resolve(environment: environment)
        try useS3(configuration)
        let stats = try server.stats()
        XCTAssertEqual(stats["imds-token"], 1, "\(stats)")
        XCTAssertEqual(stats["imds-credentials"], 1, "\(stats)")
        XCTAssertEqual(stats["refused"], 0, "every GET carried the session token: \(stats)")
        XCTAssertEqual(configuration.credentialsProvider.lastKnown, keys, "the key, secret and token IMDS handed out")

        // Nothing anywhere: the chain ends at IMDS, and the message names every source tried.
        server.stop()
        let nothing = try S3Configuration.resolve(environment: environment)
        let started = Date()
        XCTAssertThrowsError(try nothing.credentialsProvider.credentials()) { error in
            let message = "\(error)"
            XCTAssertTrue(message.hasPrefix("no AWS credentials: tried AWS_ACCESS_KEY_ID"), message)
            XCTAssertTrue(message.contains("instance metadata service"), message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "a machine without IMDS is not held up long")
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        XCTAssertThrowsError(try S3Configuration.resolve(environment: environment)) { error in
            XCTAssertTrue("\(error)".contains("AWS_EC2_METADATA_DISABLED=true"), "\(error)")
        }
    }
}
