import Foundation
@testable import TransferCore
import XCTest

/// The credential chain's pure decisions: which source, when to fetch again, and the
/// parsing of what the sources answer. No I/O (the fetches run in ConformanceTests).
final class AWSCredentialSourceTests: XCTestCase {
    private let keys = AWSCredentials(accessKeyID: "AKIDENV", secretAccessKey: "env-secret")

    private func choose(_ environment: [String: String], profile: String = "default",
                        credentials: [String: [String: String]] = [:],
                        config: [String: [String: String]] = [:]) throws -> AWSCredentialSource? {
        try AWSCredentialSource.choose(profileName: profile, environment: environment,
                                       profiles: AWSCredentialSource.profiles(credentialsFile: credentials, configFile: config))
    }

    func testTheChainsOrder() throws {
        let everything: [String: String] = [
            "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret",
            "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ROLE_ARN": "arn:aws:iam::1:role/web",
            "AWS_ROLE_SESSION_NAME": "s", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:1/c",
        ]
        let profile = ["default": ["aws_access_key_id": "AKIDFILE", "aws_secret_access_key": "file-secret"]]
        XCTAssertEqual(try choose(everything, credentials: profile), .fixed(keys, from: "the environment (AWS_ACCESS_KEY_ID)"))

        var environment = everything
        environment["AWS_ACCESS_KEY_ID"] = nil
        XCTAssertEqual(try choose(environment, credentials: profile),
                       .webIdentity(tokenFile: "/var/run/token", roleARN: "arn:aws:iam::1:role/web", sessionName: "s"))

        environment["AWS_WEB_IDENTITY_TOKEN_FILE"] = nil
        XCTAssertEqual(try choose(environment, credentials: profile),
                       .fixed(AWSCredentials(accessKeyID: "AKIDFILE", secretAccessKey: "file-secret"), from: "profile default"))

        XCTAssertEqual(try choose(environment), .container(url: "http://127.0.0.1:1/c", token: nil, tokenFile: nil))

        environment["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = nil
        XCTAssertEqual(try choose(environment), .instanceMetadata(endpoint: "http://169.254.169.254"))
        environment["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:9"
        XCTAssertEqual(try choose(environment), .instanceMetadata(endpoint: "http://127.0.0.1:9"))
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        XCTAssertNil(try choose(environment), "nothing left: no credentials")
    }

    func testProfilesWithARoleOrAProcess() throws {
        let credentials = ["base": ["aws_access_key_id": "AKIDBASE", "aws_secret_access_key": "base-secret"]]
        let config = [
            "profile deploy": ["role_arn": "arn:aws:iam::1:role/deploy", "source_profile": "base", "role_session_name": "ci",
                               "external_id": "x-1"],
            "profile tool": ["credential_process": "/usr/bin/get-creds --id 'a b'"],
            "profile orphan": ["role_arn": "arn:aws:iam::1:role/deploy"],
            "profile far": ["role_arn": "arn:aws:iam::1:role/deploy", "source_profile": "deploy"],
            "profile both": ["aws_access_key_id": "AKIDCONF", "aws_secret_access_key": "conf-secret", "credential_process": "x"],
        ]
        XCTAssertEqual(try choose([:], profile: "deploy", credentials: credentials, config: config),
                       .assumeRole(roleARN: "arn:aws:iam::1:role/deploy", sessionName: "ci", externalID: "x-1",
                                   source: AWSCredentials(accessKeyID: "AKIDBASE", secretAccessKey: "base-secret"), profile: "deploy"))
        XCTAssertEqual(try choose([:], profile: "tool", config: config),
                       .process(command: "/usr/bin/get-creds --id 'a b'", profile: "tool"))
        XCTAssertEqual(try choose([:], profile: "both", config: config),
                       .fixed(AWSCredentials(accessKeyID: "AKIDCONF", secretAccessKey: "conf-secret"), from: "profile both"),
                       "static keys before credential_process")
        XCTAssertThrowsError(try choose([:], profile: "orphan", config: config)) { error in
            XCTAssertTrue("\(error)".contains("no source_profile"), "\(error)")
        }
        XCTAssertThrowsError(try choose([:], profile: "far", credentials: credentials, config: config)) { error in
            XCTAssertTrue("\(error)".contains("source_profile deploy has no aws_access_key_id"), "\(error)")
        }
        // The credentials file's values win over the config file's for the same profile.
        let merged = AWSCredentialSource.profiles(credentialsFile: ["tool": ["credential_process": "b"]], configFile: config)
        XCTAssertEqual(merged["tool"]?["credential_process"], "b")
        XCTAssertNil(merged["profile tool"])
    }

    func testWebIdentityWithoutARoleAndTheContainerVariables() throws {
        XCTAssertEqual(try AWSCredentialSource.choose(profileName: "default", environment: ["AWS_WEB_IDENTITY_TOKEN_FILE": "/t",
                                                                                          "AWS_ROLE_ARN": "arn:aws:iam::1:role/r"],
                                                      profiles: [:], now: Date(timeIntervalSince1970: 1_700_000_000)),
                       .webIdentity(tokenFile: "/t", roleARN: "arn:aws:iam::1:role/r", sessionName: "transferd-1700000000"))
        XCTAssertThrowsError(try choose(["AWS_WEB_IDENTITY_TOKEN_FILE": "/t"])) { error in
            XCTAssertTrue("\(error)".contains("AWS_ROLE_ARN is not"), "\(error)")
        }
        XCTAssertEqual(try choose(["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/id",
                                   "AWS_CONTAINER_AUTHORIZATION_TOKEN": "tok"]),
                       .container(url: "http://169.254.170.2/v2/credentials/id", token: "tok", tokenFile: nil))
        XCTAssertEqual(try choose(["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:1/c",
                                   "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/f"]),
                       .container(url: "http://127.0.0.1:1/c", token: nil, tokenFile: "/f"))
        XCTAssertTrue(CredentialEndpoint.containerURLAllowed(URL(string: "http://127.0.0.1:8080/c")!))
        XCTAssertTrue(CredentialEndpoint.containerURLAllowed(URL(string: "http://169.254.170.23/v1/credentials")!))
        XCTAssertTrue(CredentialEndpoint.containerURLAllowed(URL(string: "https://creds.example/c")!))
        XCTAssertFalse(CredentialEndpoint.containerURLAllowed(URL(string: "http://creds.example/c")!),
                       "a token is not sent in clear text to any host")
        XCTAssertFalse(CredentialEndpoint.containerURLAllowed(URL(string: "http://127.attacker.example/c")!),
                       "a name that starts like a loopback address is no loopback address")
        XCTAssertTrue(CredentialEndpoint.containerURLAllowed(URL(string: "http://[::1]:8080/c")!))
        // With both set, the SDKs take the relative URI.
        XCTAssertEqual(try choose(["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/c", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:1/c"]),
                       .container(url: "http://169.254.170.2/v2/c", token: nil, tokenFile: nil))
    }

    func testWhenCredentialsAreFetchedAgain() {
        let now = Date(timeIntervalSince1970: 1_000_000)
        XCTAssertEqual(CredentialRefresh.decide(now: now, expiration: nil), .use)
        XCTAssertEqual(CredentialRefresh.decide(now: now, expiration: now.addingTimeInterval(3600)), .use)
        XCTAssertEqual(CredentialRefresh.decide(now: now, expiration: now.addingTimeInterval(301)), .use)
        XCTAssertEqual(CredentialRefresh.decide(now: now, expiration: now.addingTimeInterval(299)), .refreshEarly)
        XCTAssertEqual(CredentialRefresh.decide(now: now, expiration: now), .refreshNow)
        XCTAssertEqual(CredentialRefresh.decide(now: now, expiration: now.addingTimeInterval(-1)), .refreshNow)
    }

    func testTheProviderFetchesOnceUntilTheCredentialsNearTheirExpiry() throws {
        let start = Date(timeIntervalSince1970: 2_000_000)
        let fetched = LockedCounter()
        let failing = LockedCounter()
        let provider = AWSCredentialsProvider(sourceName: "test") {
            if failing.value > 0 { throw AWSCredentialError.incomplete("down") }
            let number = fetched.increment()
            return AWSExpiringCredentials(credentials: AWSCredentials(accessKeyID: "AKID\(number)", secretAccessKey: "unit-secret-\(number)-7f3a9c",
                                                                      sessionToken: "unit-token-\(number)-7f3a9c"),
                                          expiration: start.addingTimeInterval(3600 * Double(number)))
        }
        XCTAssertNil(provider.lastKnown)
        XCTAssertEqual(try provider.credentials(now: start).accessKeyID, "AKID1")
        XCTAssertEqual(try provider.credentials(now: start.addingTimeInterval(3000)).accessKeyID, "AKID1")
        XCTAssertEqual(provider.fetches, 1)
        // Under 5 minutes left: the held ones still sign, and new ones are fetched beside.
        XCTAssertEqual(try provider.credentials(now: start.addingTimeInterval(3400)).accessKeyID, "AKID1", "still good: not waited for")
        provider.waitForRefresh()
        XCTAssertEqual(provider.fetches, 2)
        XCTAssertEqual(try provider.credentials(now: start.addingTimeInterval(3401)).accessKeyID, "AKID2", "the refreshed ones")
        XCTAssertEqual(Redaction.scrub("unit-token-2-7f3a9c unit-secret-2-7f3a9c"), "REDACTED REDACTED", "fetched secrets are registered")

        // A failed early refresh keeps the still valid credentials; once expired, the failure is thrown.
        failing.increment()
        XCTAssertEqual(try provider.credentials(now: start.addingTimeInterval(7000)).accessKeyID, "AKID2")
        provider.waitForRefresh()
        XCTAssertThrowsError(try provider.credentials(now: start.addingTimeInterval(7200)))
        failing.reset()
        // For 30 s after a failure the same failure is given at once, not waited for again.
        XCTAssertThrowsError(try provider.credentials(now: start.addingTimeInterval(7210)))
        XCTAssertEqual(try provider.credentials(now: start.addingTimeInterval(7231)).accessKeyID, "AKID3")
    }

    func testOneFetchAtATime() throws {
        let fetched = LockedCounter()
        let provider = AWSCredentialsProvider(sourceName: "test") {
            fetched.increment()
            Thread.sleep(forTimeInterval: 0.2)
            return AWSExpiringCredentials(credentials: AWSCredentials(accessKeyID: "AKID", secretAccessKey: "unit-secret-once-7f3a9c"),
                                          expiration: Date().addingTimeInterval(3600))
        }
        DispatchQueue.concurrentPerform(iterations: 8) { _ in _ = try? provider.credentials() }
        XCTAssertEqual(fetched.value, 1, "eight signers at once, one fetch")
    }

    func testCredentialProcessArgumentsAreSplitAsTheAWSCLIDoes() {
        XCTAssertEqual(CredentialProcess.arguments("/usr/bin/tool --profile x"), ["/usr/bin/tool", "--profile", "x"])
        XCTAssertEqual(CredentialProcess.arguments("tool 'a b' \"c \\\"d\\\"\" e\\ f"), ["tool", "a b", "c \"d\"", "e f"])
        XCTAssertEqual(CredentialProcess.arguments("tool \"$HOME\\x\" ''"), ["tool", "$HOME\\x", ""])
        XCTAssertEqual(CredentialProcess.arguments("  tool   "), ["tool"])
        XCTAssertNil(CredentialProcess.arguments("tool 'open"))
        XCTAssertNil(CredentialProcess.arguments("tool \"open"))
    }

    func testTheJSONOfAProcessAndOfTheEndpoints() throws {
        let process = #"{"Version": 1, "AccessKeyId": "AKID", "SecretAccessKey": "sec", "SessionToken": "tok", "Expiration": "2026-12-07T03:36:55Z"}"#
        let parsed = try AWSCredentialDocument.parse(Data(process.utf8), kind: .process).get()
        XCTAssertEqual(parsed.credentials, AWSCredentials(accessKeyID: "AKID", secretAccessKey: "sec", sessionToken: "tok"))
        XCTAssertEqual(parsed.expiration, Date(timeIntervalSince1970: 1_796_614_615))

        let endpoint = #"{"Code": "Success", "AccessKeyId": "AKID", "SecretAccessKey": "sec", "Token": "tok", "Expiration": "2026-12-07T03:36:55.123Z"}"#
        let fromEndpoint = try AWSCredentialDocument.parse(Data(endpoint.utf8), kind: .endpoint).get()
        XCTAssertEqual(fromEndpoint.credentials.sessionToken, "tok")
        XCTAssertNotNil(fromEndpoint.expiration)
        XCTAssertNil(try AWSCredentialDocument.parse(Data(#"{"Version": 1, "AccessKeyId": "AKID", "SecretAccessKey": "sec"}"#.utf8),
                                                     kind: .process).get().expiration, "long-term keys do not expire")

        for bad in [#"{"AccessKeyId": "AKID", "SecretAccessKey": "sec"}"#,  // no Version
                    #"{"Version": 2, "AccessKeyId": "AKID", "SecretAccessKey": "sec"}"#,
                    #"{"Version": 1, "AccessKeyId": "AKID"}"#,
                    #"{"Version": 1, "AccessKeyId": "AKID", "SecretAccessKey": "sec", "Expiration": "tomorrow"}"#,
                    "[1]", "sec"] {
            guard case .failure(let problem) = AWSCredentialDocument.parse(Data(bad.utf8), kind: .process) else {
                return XCTFail("accepted \(bad)")
            }
            XCTAssertFalse("\(problem)".contains("sec"), "no value of the document in the message: \(problem)")
        }
        guard case .failure = AWSCredentialDocument.parse(Data(#"{"Code": "Failure", "AccessKeyId": "A", "SecretAccessKey": "s"}"#.utf8),
                                                          kind: .endpoint) else { return XCTFail("a failed Code was taken") }
    }

    func testTheCredentialsOfAnSTSAnswer() throws {
        let xml = """
            <AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult><Credentials>
            <AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>secret/+x</SecretAccessKey>
            <SessionToken>FQoG+token=</SessionToken><Expiration>2026-12-07T03:36:55.290546Z</Expiration>
            </Credentials></AssumeRoleResult></AssumeRoleResponse>
            """
        let credentials = try XCTUnwrap(STSRequest.credentials(in: Data(xml.utf8)))
        XCTAssertEqual(credentials.credentials,
                       AWSCredentials(accessKeyID: "ASIAEXAMPLE", secretAccessKey: "secret/+x", sessionToken: "FQoG+token="))
        XCTAssertNotNil(credentials.expiration)
        var notUTF8 = Data("<AssumeRoleResponse><AssumeRoleResult><Credent".utf8)
        notUTF8.append(0xFF)
        notUTF8.append(contentsOf: Data("ials></Credent\u{FFFD}ials></AssumeRoleResult></AssumeRoleResponse>".utf8))
        XCTAssertNil(STSRequest.credentials(in: notUTF8), "an answer that is not UTF-8 is no credentials (and no trap)")
        XCTAssertNil(STSRequest.credentials(in: Data("<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>".utf8)))
        XCTAssertEqual(STSRequest.endpoint(region: "eu-west-1", environment: [:]), "https://sts.eu-west-1.amazonaws.com")
        XCTAssertEqual(STSRequest.endpoint(region: "eu-west-1", environment: ["AWS_ENDPOINT_URL": "http://127.0.0.1:1"]), "http://127.0.0.1:1")
        XCTAssertEqual(STSRequest.endpoint(region: "eu-west-1", environment: ["AWS_ENDPOINT_URL": "http://127.0.0.1:1",
                                                                               "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:2"]),
                       "http://127.0.0.1:2")
        XCTAssertEqual(STSRequest.form([("RoleArn", "arn:aws:iam::1:role/a"), ("WebIdentityToken", "a+b/c=")]),
                       "RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fa&WebIdentityToken=a%2Bb%2Fc%3D")
    }

    func testNoCredentialsNamesEverySourceTried() {
        let message = "\(S3Error.noCredentials(profile: "work"))"
        for source in ["AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "[work]", "credential_process",
                       "AWS_CONTAINER_CREDENTIALS_FULL_URI", "instance metadata"] {
            XCTAssertTrue(message.contains(source), "\(source) in: \(message)")
        }
    }
}

private final class LockedCounter: Sendable {
    private let count = Locked(0)
    var value: Int { count.current }
    @discardableResult func increment() -> Int { count.withLock { $0 += 1; return $0 } }
    func reset() { count.withLock { $0 = 0 } }
}
