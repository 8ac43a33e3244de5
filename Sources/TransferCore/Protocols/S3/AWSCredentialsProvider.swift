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
/// fetched on first use and again when fewer than `CredentialRefresh.margin` remain, one
/// fetch at a time. The signer asks at every signing, so a long transfer moves to new keys
/// before the old ones expire. Every secret fetched is registered with `Redaction`.
package final class AWSCredentialsProvider: Sendable {
    /// What the credentials come from, for messages ("the environment", "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)").
    package let sourceName: String
    private let fetch: @Sendable () throws -> AWSExpiringCredentials
    private let margin: TimeInterval
    private let held = Locked<AWSExpiringCredentials?>(nil)
    private let fetching = PlainLock()
    private let fetchCount = Locked(0)

    package init(sourceName: String, margin: TimeInterval = CredentialRefresh.margin,
                 fetch: @escaping @Sendable () throws -> AWSExpiringCredentials) {
        self.sourceName = sourceName
        self.margin = margin
        self.fetch = fetch
    }

    /// Fixed keys that never expire.
    package convenience init(fixed credentials: AWSCredentials, sourceName: String = "fixed credentials") {
        self.init(sourceName: sourceName) { AWSExpiringCredentials(credentials: credentials, expiration: nil) }
        held.withLock { $0 = AWSExpiringCredentials(credentials: credentials, expiration: nil) }
    }

    /// The credentials to sign with now (fetched when none are held or they are about to expire).
    package func credentials(now: Date = Date()) throws -> AWSCredentials {
        if let current = held.current, CredentialRefresh.decide(now: now, expiration: current.expiration, margin: margin) == .use {
            return current.credentials
        }
        fetching.lock()
        defer { fetching.unlock() }
        // Another caller may have fetched while this one waited.
        let current = held.current
        if let current, CredentialRefresh.decide(now: now, expiration: current.expiration, margin: margin) == .use {
            return current.credentials
        }
        do {
            let fresh = try fetch()
            Redaction.registerSecret(fresh.credentials.secretAccessKey)
            if let token = fresh.credentials.sessionToken { Redaction.registerSecret(token) }
            held.withLock { $0 = fresh }
            fetchCount.withLock { $0 += 1 }
            return fresh.credentials
        } catch {
            if let current, CredentialRefresh.decide(now: now, expiration: current.expiration, margin: margin) == .refreshEarly {
                return current.credentials  // still valid; the next signing tries again
            }
            throw error
        }
    }

    /// The credentials held, without fetching (nil before the first fetch).
    package var lastKnown: AWSCredentials? { held.current?.credentials }

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
        if let full = nonEmpty("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            return .container(url: full, token: token, tokenFile: tokenFile)
        }
        if let relative = nonEmpty("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return .container(url: containerHost + (relative.hasPrefix("/") ? "" : "/") + relative, token: token, tokenFile: tokenFile)
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
