import Foundation

/// Credentials and, for temporary ones, when they stop working.
package struct AWSExpiringCredentials: Sendable {
    package var credentials: AWSCredentials
    /// nil: they do not expire (keys from the environment or a profile).
    package var expiration: Date?

    package init(credentials: AWSCredentials, expiration: Date?) {
        self.credentials = credentials
        self.expiration = expiration
    }
}

/// Whether credentials held now may still sign, or must be fetched again. Pure.
package enum CredentialRefresh: Equatable, Sendable {
    /// Good for more than `margin`: sign with them.
    case use
    /// Fewer than `margin` left but not expired: fetch new ones; if that fails, these still sign.
    case refreshEarly
    /// Expired (or none yet): fetch new ones, or fail.
    case refreshNow

    /// The AWS SDKs refresh 5 to 15 minutes ahead; a transfer's request must not outlive its key.
    package static let margin: TimeInterval = 5 * 60

    package static func decide(now: Date, expiration: Date?, margin: TimeInterval = CredentialRefresh.margin) -> CredentialRefresh {
        guard let expiration else { return .use }
        if now >= expiration { return .refreshNow }
        return expiration.timeIntervalSince(now) <= margin ? .refreshEarly : .use
    }
}

/// What S3Client signs with: fixed credentials, or a source that hands out temporary ones,
/// fetched on first use and again when fewer than `CredentialRefresh.margin` remain. The
/// signer asks at every signing, so a long transfer moves to new keys before the old ones
/// expire. Every secret fetched is registered with `Redaction`.
///
/// Credentials still good are never waited for: the early refresh runs on a thread of its own
/// (not Swift's cooperative pool, two threads here), once at a time, and not again within 30 s
/// of a failure or soon after a success. Only a signing with none, or expired ones, waits for a
/// fetch; after a failure those fail at once for 30 s with the same reason rather than each
/// waiting on a source that does not answer.
package final class AWSCredentialsProvider: Sendable {
    /// What the credentials come from, for messages ("the environment", "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)").
    package let sourceName: String
    private let fetch: @Sendable () throws -> AWSExpiringCredentials
    private let margin: TimeInterval
    private struct State {
        var held: AWSExpiringCredentials?
        var fetchedAt: Date?
        var failedAt: Date?
        var failure: (any Error)?
        var refreshing = false
    }
    private let state = Locked(State())
    private let fetching = PlainLock()
    private let fetchCount = Locked(0)
    /// How long a failed fetch is not tried again.
    static let pauseAfterFailure: TimeInterval = 30
    /// The longest kept secret (a session token is about 1 KiB): a source that sends more is lying.
    static let longestSecret = 16 << 10

    package init(sourceName: String, margin: TimeInterval = CredentialRefresh.margin,
                 fetch: @escaping @Sendable () throws -> AWSExpiringCredentials) {
        self.sourceName = sourceName
        self.margin = margin
        self.fetch = fetch
    }

    /// Fixed keys that never expire.
    package convenience init(fixed credentials: AWSCredentials, sourceName: String = "fixed credentials") {
        self.init(sourceName: sourceName) { AWSExpiringCredentials(credentials: credentials, expiration: nil) }
        state.withLock { $0.held = AWSExpiringCredentials(credentials: credentials, expiration: nil) }
    }

    /// The credentials to sign with now: those held while they are good (an early refresh starts
    /// beside), else fetched now.
    package func credentials(now: Date = Date()) throws -> AWSCredentials {
        let current = state.current
        if let held = current.held {
            switch CredentialRefresh.decide(now: now, expiration: held.expiration, margin: margin) {
            case .use:
                return held.credentials
            case .refreshEarly:
                refreshBeside(now: now, expiration: held.expiration)
                return held.credentials
            case .refreshNow:
                break
            }
        }
        if let failedAt = current.failedAt, now.timeIntervalSince(failedAt) < Self.pauseAfterFailure, let failure = current.failure {
            throw failure
        }
        fetching.lock()
        defer { fetching.unlock() }
        // Another caller may have fetched while this one waited.
        if let held = state.current.held, CredentialRefresh.decide(now: now, expiration: held.expiration, margin: margin) != .refreshNow {
            return held.credentials
        }
        return try fetchNow(now: now).credentials
    }

    /// Fetches, keeps and returns fresh credentials, or records the failure. Called with `fetching` held.
    private func fetchNow(now: Date) throws -> AWSExpiringCredentials {
        do {
            let fresh = try fetch()
            let secrets = [fresh.credentials.secretAccessKey, fresh.credentials.accessKeyID] + [fresh.credentials.sessionToken].compactMap { $0 }
            guard secrets.allSatisfy({ $0.utf8.count <= Self.longestSecret }) else {
                throw AWSCredentialError.fetch(source: sourceName, problem: "the credentials it gave are longer than any AWS issues (over \(Self.longestSecret / 1024) KiB)")
            }
            if CredentialRefresh.decide(now: now, expiration: fresh.expiration, margin: 0) == .refreshNow {
                throw AWSCredentialError.fetch(source: sourceName, problem: "the credentials it gave have expired already (check the clock and the source)")
            }
            Redaction.registerSecret(fresh.credentials.secretAccessKey)
            if let token = fresh.credentials.sessionToken { Redaction.registerSecret(token) }
            state.withLock {
                $0.held = fresh
                $0.fetchedAt = now
                $0.failedAt = nil
                $0.failure = nil
            }
            fetchCount.withLock { $0 += 1 }
            return fresh
        } catch {
            state.withLock {
                $0.failedAt = now
                $0.failure = error
            }
            throw error
        }
    }

    /// Starts a refresh on a thread of its own unless one is under way, one failed less than 30 s
    /// ago, or the credentials held were fetched less than a second ago (a source handing out
    /// short-lived ones is asked at most once a second, not at every signing).
    private func refreshBeside(now: Date, expiration: Date?) {
        let start = state.withLock { state -> Bool in
            guard !state.refreshing else { return false }
            if let failedAt = state.failedAt, now.timeIntervalSince(failedAt) < Self.pauseAfterFailure { return false }
            if let fetchedAt = state.fetchedAt, let expiration {
                let wait = min(1, max(0, expiration.timeIntervalSince(now)) / 2)
                if now.timeIntervalSince(fetchedAt) < wait { return false }
            }
            state.refreshing = true
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in
            fetching.lock()
            _ = try? fetchNow(now: now)
            fetching.unlock()
            state.withLock { $0.refreshing = false }
        }
        thread.name = "transferd credentials refresh"
        thread.start()
    }

    /// Waits (up to `timeout`) for an early refresh under way to end (for tests).
    package func waitForRefresh(timeout: TimeInterval = 5) {
        let deadline = Date().addingTimeInterval(timeout)
        while state.current.refreshing && Date() < deadline { usleep(5_000) }
    }

    /// The credentials held, without fetching (nil before the first fetch).
    package var lastKnown: AWSCredentials? { state.current.held?.credentials }

    /// How many times credentials were fetched (for tests and the debug log).
    package var fetches: Int { fetchCount.current }
}

/// Where the AWS SDK default chain finds credentials, decided from the environment and the
/// shared files without any I/O beyond having read them. Pure; `S3Configuration.resolve`
/// turns the answer into an `AWSCredentialsProvider`.
package enum AWSCredentialSource: Equatable, Sendable {
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or a profile's static keys.
    case fixed(AWSCredentials, from: String)
    /// AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (or a profile's web_identity_token_file + role_arn).
    case webIdentity(tokenFile: String, roleARN: String, sessionName: String)
    /// A profile's role_arn + source_profile: STS AssumeRole signed with the source profile's keys.
    case assumeRole(roleARN: String, sessionName: String, externalID: String?, source: AWSCredentials, profile: String)
    /// A profile's credential_process.
    case process(command: String, profile: String)
    /// AWS_CONTAINER_CREDENTIALS_FULL_URI / _RELATIVE_URI, with the authorization token or its file.
    case container(url: String, token: String?, tokenFile: String?)
    /// IMDSv2 at the endpoint.
    case instanceMetadata(endpoint: String)

    package static let containerHost = "http://169.254.170.2"
    package static let metadataEndpoint = "http://169.254.169.254"

    /// The sources of the chain in the order tried, for the message when none gives credentials.
    package static let chainDescription = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN,"
        + " the profile (static keys, role_arn + source_profile, credential_process),"
        + " AWS_CONTAINER_CREDENTIALS_FULL_URI / _RELATIVE_URI, the instance metadata service (IMDSv2)"

    /// The first source of the chain that applies, or nil (nothing applies: no credentials).
    /// - Parameters:
    ///   - profile: the profile's settings, the credentials file's over the config file's.
    ///   - profiles: every profile so (for source_profile).
    ///   - now: names the role session when nothing else does (`transferd-SECONDS`, as botocore's `botocore-session-SECONDS`).
    package static func choose(profileName: String, environment: [String: String],
                               profiles: [String: [String: String]], now: Date = Date()) throws -> AWSCredentialSource? {
        func nonEmpty(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let key = nonEmpty("AWS_ACCESS_KEY_ID"), let secret = nonEmpty("AWS_SECRET_ACCESS_KEY") {
            return .fixed(AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: nonEmpty("AWS_SESSION_TOKEN")),
                          from: "the environment (AWS_ACCESS_KEY_ID)")
        }
        let sessionName = nonEmpty("AWS_ROLE_SESSION_NAME") ?? "transferd-\(Int(now.timeIntervalSince1970))"
        if let tokenFile = nonEmpty("AWS_WEB_IDENTITY_TOKEN_FILE") {
            guard let role = nonEmpty("AWS_ROLE_ARN") else {
                throw AWSCredentialError.incomplete("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not: set AWS_ROLE_ARN to the role to assume, or unset AWS_WEB_IDENTITY_TOKEN_FILE")
            }
            return .webIdentity(tokenFile: tokenFile, roleARN: role, sessionName: sessionName)
        }
        if let settings = profiles[profileName] {
            if let role = settings["role_arn"] {
                if let tokenFile = settings["web_identity_token_file"] {
                    return .webIdentity(tokenFile: tokenFile, roleARN: role, sessionName: settings["role_session_name"] ?? sessionName)
                }
                guard let sourceName = settings["source_profile"] else {
                    throw AWSCredentialError.incomplete("profile \(profileName) has role_arn but no source_profile: add source_profile = PROFILE (a profile with aws_access_key_id and aws_secret_access_key); credential_source is not supported")
                }
                let source = profiles[sourceName] ?? [:]
                guard let key = source["aws_access_key_id"], let secret = source["aws_secret_access_key"] else {
                    throw AWSCredentialError.incomplete("profile \(profileName)'s source_profile \(sourceName) has no aws_access_key_id and aws_secret_access_key: add them to [\(sourceName)] in the credentials file (a source profile that itself assumes a role is not supported)")
                }
                return .assumeRole(roleARN: role, sessionName: settings["role_session_name"] ?? sessionName,
                                   externalID: settings["external_id"],
                                   source: AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: source["aws_session_token"]),
                                   profile: profileName)
            }
            if let key = settings["aws_access_key_id"], let secret = settings["aws_secret_access_key"] {
                return .fixed(AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: settings["aws_session_token"]),
                              from: "profile \(profileName)")
            }
            if let command = settings["credential_process"], !command.isEmpty {
                return .process(command: command, profile: profileName)
            }
        }
        let token = nonEmpty("AWS_CONTAINER_AUTHORIZATION_TOKEN")
        let tokenFile = nonEmpty("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
        // The SDKs take the relative URI first, the full one only without it.
        if let relative = nonEmpty("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return .container(url: containerHost + (relative.hasPrefix("/") ? "" : "/") + relative, token: token, tokenFile: tokenFile)
        }
        if let full = nonEmpty("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            return .container(url: full, token: token, tokenFile: tokenFile)
        }
        if nonEmpty("AWS_EC2_METADATA_DISABLED")?.lowercased() == "true" { return nil }
        return .instanceMetadata(endpoint: nonEmpty("AWS_EC2_METADATA_SERVICE_ENDPOINT") ?? metadataEndpoint)
    }

    /// Every profile of the two shared files: `[name]` of the credentials file over
    /// `[profile name]` (or `[default]`) of the config file.
    package static func profiles(credentialsFile: [String: [String: String]],
                                 configFile: [String: [String: String]]) -> [String: [String: String]] {
        var merged: [String: [String: String]] = [:]
        for (section, values) in configFile {
            let name = section.hasPrefix("profile ") ? String(section.dropFirst(8)).trimmingCharacters(in: .whitespaces) : section
            guard section == "default" || section.hasPrefix("profile ") else { continue }
            merged[name, default: [:]].merge(values) { old, _ in old }
        }
        for (name, values) in credentialsFile {
            merged[name, default: [:]].merge(values) { _, new in new }
        }
        return merged
    }

    /// A name for messages (no secret in it).
    package var name: String {
        switch self {
        case .fixed(_, let from): return from
        case .webIdentity: return "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, STS AssumeRoleWithWebIdentity)"
        case .assumeRole(let role, _, _, _, let profile): return "profile \(profile) (STS AssumeRole of \(role))"
        case .process(_, let profile): return "profile \(profile)'s credential_process"
        case .container(let url, _, _): return "container credentials (\(Redaction.url(string: url)))"
        case .instanceMetadata(let endpoint): return "the instance metadata service (\(endpoint))"
        }
    }
}

/// Why credentials could not be had: what, where, and the fix. Never a secret.
package enum AWSCredentialError: Error, CustomStringConvertible, Sendable {
    case incomplete(String)
    case fetch(source: String, problem: String)

    package var description: String {
        switch self {
        case .incomplete(let message): return message
        case .fetch(let source, let problem): return Redaction.scrub("could not get AWS credentials from \(source): \(problem)")
        }
    }
}

extension AWSCredentials: Equatable {
    package static func == (lhs: AWSCredentials, rhs: AWSCredentials) -> Bool {
        lhs.accessKeyID == rhs.accessKeyID && lhs.secretAccessKey == rhs.secretAccessKey && lhs.sessionToken == rhs.sessionToken
    }
}
