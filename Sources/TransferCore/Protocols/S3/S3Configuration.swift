import Foundation

/// Where an S3 object lives and how to reach it: endpoint, region,
/// credentials and addressing style, resolved the way the AWS SDKs do.
package struct S3Configuration: Sendable {
    package var endpoint: URL
    package var region: String
    /// What requests are signed with, asked at each signing (temporary credentials are
    /// fetched again before they expire).
    package var credentialsProvider: AWSCredentialsProvider
    /// `https://endpoint/bucket/key` (path style) instead of `https://bucket.endpoint/key`.
    package var pathStyle: Bool

    package init(endpoint: URL, region: String, credentials: AWSCredentials, pathStyle: Bool) {
        self.init(endpoint: endpoint, region: region, credentialsProvider: AWSCredentialsProvider(fixed: credentials), pathStyle: pathStyle)
    }

    package init(endpoint: URL, region: String, credentialsProvider: AWSCredentialsProvider, pathStyle: Bool) {
        self.endpoint = endpoint
        self.region = region
        self.credentialsProvider = credentialsProvider
        self.pathStyle = pathStyle
    }

    /// Resolves from (in order) explicit values, `AWS_ENDPOINT_URL_S3` /
    /// `AWS_ENDPOINT_URL`, `AWS_REGION` / `AWS_DEFAULT_REGION`, and the
    /// credentials as the AWS SDKs' default chain finds them
    /// (`AWSCredentialSource.choose`): the environment, a web identity token
    /// file, the profile (`AWS_PROFILE`, default `default`) of the shared
    /// credentials and config files (static keys, `role_arn` +
    /// `source_profile`, `credential_process`), container credentials, the
    /// instance metadata service. Nothing is fetched here: the provider
    /// fetches at the first signing. Custom endpoints use path-style
    /// addressing; AWS itself virtual-hosted.
    package static func resolve(endpoint: String? = nil, region: String? = nil, profile: String? = nil,
                               environment: [String: String] = ProcessInfo.processInfo.environment) throws -> S3Configuration {
        let profileName = profile ?? environment["AWS_PROFILE"] ?? "default"
        let home = environment["HOME"] ?? NSHomeDirectory()
        let credentialsFile = INIFile.load(environment["AWS_SHARED_CREDENTIALS_FILE"] ?? "\(home)/.aws/credentials")
        let configFile = INIFile.load(environment["AWS_CONFIG_FILE"] ?? "\(home)/.aws/config")
        let profiles = AWSCredentialSource.profiles(credentialsFile: credentialsFile, configFile: configFile)
        let profileConfig = configFile[profileName == "default" ? "default" : "profile \(profileName)"] ?? [:]

        guard let source = try AWSCredentialSource.choose(profileName: profileName, environment: environment, profiles: profiles) else {
            throw S3Error.noCredentials(profile: profileName)
        }
        let resolvedRegion = region ?? environment["AWS_REGION"] ?? environment["AWS_DEFAULT_REGION"]
            ?? profileConfig["region"] ?? "us-east-1"
        let custom = endpoint ?? environment["AWS_ENDPOINT_URL_S3"] ?? environment["AWS_ENDPOINT_URL"]
            ?? profileConfig["endpoint_url"]
        let credentials = source.provider(region: resolvedRegion, environment: environment, profile: profileName)
        if let custom {
            guard let url = URL(string: custom), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw S3Error.badEndpoint(custom)
            }
            return S3Configuration(endpoint: url, region: resolvedRegion, credentialsProvider: credentials, pathStyle: true)
        }
        return S3Configuration(endpoint: URL(string: "https://s3.\(resolvedRegion).amazonaws.com")!, region: resolvedRegion,
                               credentialsProvider: credentials, pathStyle: false)
    }

    /// The URL of `key` in `bucket`, with `query` (already encoded) appended.
    func url(bucket: String, key: String, query: String = "") -> URL {
        var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false)!
        let encodedKey = AWSEncoding.encode(key, keepSlash: true)
        let base = components.percentEncodedPath.hasSuffix("/") ? String(components.percentEncodedPath.dropLast())
            : components.percentEncodedPath
        if pathStyle {
            components.percentEncodedPath = "\(base)/\(bucket)/\(encodedKey)"
        } else {
            components.host = "\(bucket).\(components.host ?? "")"
            components.percentEncodedPath = "\(base)/\(encodedKey)"
        }
        components.percentEncodedQuery = query.isEmpty ? nil : query
        return components.url!
    }
}

/// An `s3://bucket/key` address.
package struct S3Location: Sendable, Equatable {
    package var bucket: String
    package var key: String

    package init(bucket: String, key: String) {
        self.bucket = bucket
        self.key = key
    }

    package init?(_ text: String) {
        guard text.hasPrefix("s3://") else { return nil }
        let rest = text.dropFirst(5)
        guard let slash = rest.firstIndex(of: "/"), slash != rest.startIndex else { return nil }
        bucket = String(rest[..<slash])
        key = String(rest[rest.index(after: slash)...])
        guard !key.isEmpty else { return nil }
    }

    /// Why `text` cannot be downloaded as one object: no key, or a key ending
    /// in `/` (a prefix: S3 would answer with an empty "folder" object or an
    /// error, and either must not be saved as a file; `S3Prefix` takes it).
    package static func downloadProblem(_ text: String) -> String? {
        guard let location = S3Location(text) else { return "\(text) names a bucket, not an object" }
        if location.key.hasSuffix("/") {
            return "\(text) names a prefix (it ends with /), not an object"
        }
        return nil
    }
}

/// `s3://bucket/`, `s3://bucket` or `s3://bucket/some/prefix/`: every object
/// whose key starts with the prefix. The trailing `/` is what marks a prefix
/// (`s3://bucket/photos` names one object).
package struct S3Prefix: Sendable, Equatable {
    package var bucket: String
    /// Empty (the whole bucket) or ending with `/`.
    package var prefix: String

    package init(bucket: String, prefix: String) {
        self.bucket = bucket
        self.prefix = prefix
    }

    package init?(_ text: String) {
        guard text.hasPrefix("s3://") else { return nil }
        let rest = text.dropFirst(5)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        guard slash != rest.startIndex else { return nil }
        let key = slash == rest.endIndex ? "" : String(rest[rest.index(after: slash)...])
        guard key.isEmpty || key.hasSuffix("/") else { return nil }
        bucket = String(rest[..<slash])
        prefix = key
    }
}

/// The sections of an AWS-style INI file (`[name]` then `key = value`).
enum INIFile {
    static func load(_ path: String) -> [String: [String: String]] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        var sections: [String: [String: String]] = [:]
        var current = ""
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                current = String(line.dropFirst().dropLast()).trimmingCharacters(in: .whitespaces)
                continue
            }
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            sections[current, default: [:]][key] = value
        }
        return sections
    }
}

/// S3 failures, each saying what to do. Secrets never appear.
package enum S3Error: Error, CustomStringConvertible, Sendable {
    /// `lastProblem`: why the instance metadata service, the last source, gave none.
    case noCredentials(profile: String, lastProblem: String? = nil)
    case badEndpoint(String)
    case rejectedCredentials(endpoint: String, code: String, accessKey: String)
    case service(status: Int, code: String, message: String, operation: String, endpoint: String)
    case verification(String)

    package var description: String {
        switch self {
        case .noCredentials(let profile, let lastProblem):
            return "no AWS credentials: tried \(AWSCredentialSource.chainDescription.replacingOccurrences(of: "the profile", with: "the profile [\(profile)]"))"
                + (lastProblem.map { " (\($0))" } ?? " (AWS_EC2_METADATA_DISABLED=true)")
                + ": set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add them to the [\(profile)] profile in ~/.aws/credentials"
        case .badEndpoint(let text):
            return "'\(text)' is not an http:// or https:// endpoint URL"
        case .rejectedCredentials(let endpoint, let code, let accessKey):
            return "\(endpoint) rejected the credentials (\(code)) for access key \(accessKey): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the profile), the region and the endpoint; the secret key is not shown"
        case .service(let status, let code, let message, let operation, let endpoint):
            return "\(operation) at \(endpoint) failed: HTTP \(status) \(code)\(message.isEmpty ? "" : ": \(message)")"
        case .verification(let message):
            return message
        }
    }
}
