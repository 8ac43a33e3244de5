import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The JSON that a credential_process prints and that the container and instance metadata
/// endpoints answer with: `AccessKeyId`, `SecretAccessKey`, `SessionToken` (process) or
/// `Token` (endpoints), `Expiration` (ISO 8601). Outside input, read with `JSONParser`.
package enum AWSCredentialDocument {
    package enum Kind: Sendable {
        /// credential_process: `Version` must be 1.
        case process
        /// The container and instance metadata endpoints.
        case endpoint
    }

    /// The credentials, or a message saying what is wrong (never a value from the document).
    package static func parse(_ data: Data, kind: Kind) -> Result<AWSExpiringCredentials, AWSCredentialError> {
        func bad(_ problem: String) -> Result<AWSExpiringCredentials, AWSCredentialError> {
            .failure(.incomplete(problem))
        }
        guard let value = try? JSONParser.parse(data), case .object(let fields) = value else {
            return bad("the answer is not a JSON object")
        }
        func text(_ name: String) -> String? {
            if case .string(let value)? = fields[name], !value.isEmpty { return value }
            return nil
        }
        if kind == .process {
            guard case .integer(1)? = fields["Version"] else { return bad("Version is not 1 (the only version there is)") }
        } else if let code = text("Code"), code != "Success" {
            return bad("the endpoint answered Code \(String(code.prefix(40)).filter { $0.isLetter || $0.isNumber })")
        }
        guard let key = text("AccessKeyId"), let secret = text("SecretAccessKey") else {
            return bad("AccessKeyId or SecretAccessKey is missing or not a string")
        }
        let token = text("SessionToken") ?? text("Token")
        var expiration: Date?
        if let stamp = text("Expiration") {
            guard let date = parseTimestamp(stamp) else { return bad("Expiration is not an ISO 8601 time") }
            expiration = date
        }
        return .success(AWSExpiringCredentials(credentials: AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: token),
                                               expiration: expiration))
    }

    /// `2026-12-07T03:36:55Z`, with or without fractional seconds.
    package static func parseTimestamp(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// The HTTP requests credential sources make: few and small, each blocking its caller
/// (the signer asks synchronously) on URLSession's own threads, with a timeout.
enum CredentialHTTP {
    struct Answer {
        var status: Int
        var body: Data
    }

    static let bodyLimit = 1 << 20

    static func send(method: String, url: URL, headers: [String: String] = [:], body: Data? = nil,
                     timeout: TimeInterval) throws -> Answer {
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = body
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout * 2
        configuration.connectionProxyDictionary = [:]
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let result = Locked<Result<Answer, Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = session.dataTask(with: request) { data, response, error in
            if let error {
                result.withLock { $0 = .failure(error) }
            } else {
                let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                result.withLock { $0 = .success(Answer(status: status, body: (data ?? Data()).prefix(bodyLimit))) }
            }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + timeout * 2 + 1) == .timedOut {
            // Not left receiving: an answer without end would grow without bound.
            task.cancel()
            throw AWSCredentialError.incomplete("no answer from \(Redaction.url(url)) within \(Int(timeout * 2 + 1)) s")
        }
        switch result.current {
        case .success(let answer)?: return answer
        case .failure(let error)?:
            throw AWSCredentialError.incomplete("\(Redaction.url(url)): \((error as NSError).localizedDescription)")
        case nil: throw AWSCredentialError.incomplete("\(Redaction.url(url)): no answer")
        }
    }
}

/// STS: AssumeRoleWithWebIdentity (unsigned) and AssumeRole (signed, service "sts").
package enum STSRequest {
    /// AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com.
    package static func endpoint(region: String, environment: [String: String]) -> String {
        for name in ["AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"] {
            if let value = environment[name], !value.isEmpty { return value }
        }
        return "https://sts.\(region).amazonaws.com"
    }

    /// The form body of an action (values encoded as SigV4 wants them).
    package static func form(_ fields: [(String, String)]) -> String {
        fields.map { "\(AWSEncoding.encode($0.0))=\(AWSEncoding.encode($0.1))" }.joined(separator: "&")
    }

    /// The credentials in an STS answer (`…Result/Credentials`), or what is wrong.
    package static func credentials(in body: Data) -> AWSExpiringCredentials? {
        // Decoded leniently first, as S3Client reads its answers: FoundationXML traps on an element
        // name that is not UTF-8 (found by fuzzing, target aws-credentials).
        guard let root = S3XMLElement.parse(String(decoding: body, as: UTF8.self)) else { return nil }
        let result = root.children.first { $0.name.hasSuffix("Result") }
        guard let credentials = result?.child("Credentials"),
              let key = credentials.value("AccessKeyId"), !key.isEmpty,
              let secret = credentials.value("SecretAccessKey"), !secret.isEmpty else { return nil }
        let token = credentials.value("SessionToken")
        // STS credentials always expire: one without a readable Expiration is taken to last the
        // least STS grants (15 minutes), and is fetched again before then, never kept for ever.
        let expiration = credentials.value("Expiration").flatMap(AWSCredentialDocument.parseTimestamp)
            ?? Date().addingTimeInterval(15 * 60)
        return AWSExpiringCredentials(credentials: AWSCredentials(accessKeyID: key, secretAccessKey: secret,
                                                                  sessionToken: token?.isEmpty == false ? token : nil),
                                      expiration: expiration)
    }

    static func send(action: String, endpoint: String, form body: String, signer: SigV4Signer?,
                     source: String) throws -> AWSExpiringCredentials {
        guard let base = URL(string: endpoint), base.scheme == "http" || base.scheme == "https", base.host != nil else {
            throw AWSCredentialError.fetch(source: source, problem: "'\(Redaction.url(string: endpoint))' is not an http:// or https:// STS endpoint: check AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL")
        }
        let url = base.path.isEmpty ? base.appendingPathComponent("") : base
        let data = Data(body.utf8)
        var headers = ["Content-Type": "application/x-www-form-urlencoded; charset=utf-8"]
        if let signer {
            let signed = signer.sign(method: "POST", url: url, headers: HTTPHeaders(headers.map { ($0.key, $0.value) }),
                                     payloadHash: SHA256Hasher.hex(of: data))
            headers = [:]
            for field in signed.headers where field.name.lowercased() != "host" { headers[field.name] = field.value }
        }
        let answer: CredentialHTTP.Answer
        do {
            answer = try CredentialHTTP.send(method: "POST", url: url, headers: headers, body: data, timeout: 10)
        } catch {
            throw AWSCredentialError.fetch(source: source, problem: "STS \(action) at \(Redaction.url(url)) failed: \(error)")
        }
        guard answer.status == 200, let credentials = credentials(in: answer.body) else {
            // STS says `<ErrorResponse><Error><Code>…`, moto `<ErrorResponse><Errors><Error>…`.
            func firstError(_ element: S3XMLElement?, depth: Int = 0) -> S3XMLElement? {
                guard let element, depth < 4 else { return nil }
                if element.name == "Error" { return element }
                return element.children.lazy.compactMap { firstError($0, depth: depth + 1) }.first
            }
            let error = firstError(S3XMLElement.parse(String(decoding: answer.body, as: UTF8.self)))
            // Scrubbed before it is cut: a secret the server echoes must not survive in part.
            let code = String(Redaction.scrub(error?.value("Code") ?? "no credentials in the answer").prefix(64))
            let message = (error?.value("Message")).map { ": " + String(Redaction.scrub($0).prefix(300)) } ?? ""
            throw AWSCredentialError.fetch(source: source, problem: "STS \(action) at \(Redaction.url(url)) answered HTTP \(answer.status) \(code)\(message); check the role ARN, its trust policy and the STS endpoint")
        }
        return credentials
    }

    package static func assumeRoleWithWebIdentity(endpoint: String, roleARN: String, sessionName: String,
                                                  tokenFile: String) throws -> AWSExpiringCredentials {
        let source = "web identity (AWS_WEB_IDENTITY_TOKEN_FILE \(tokenFile))"
        guard let raw = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
            throw AWSCredentialError.fetch(source: source, problem: "cannot read the token file \(tokenFile): check AWS_WEB_IDENTITY_TOKEN_FILE and the file's permissions")
        }
        let token = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        Redaction.registerSecret(token)
        let body = form([("Action", "AssumeRoleWithWebIdentity"), ("Version", "2011-06-15"), ("RoleArn", roleARN),
                         ("RoleSessionName", sessionName), ("WebIdentityToken", token)])
        return try send(action: "AssumeRoleWithWebIdentity", endpoint: endpoint, form: body, signer: nil, source: source)
    }

    package static func assumeRole(endpoint: String, region: String, roleARN: String, sessionName: String,
                                   externalID: String?, source credentials: AWSCredentials, profile: String) throws -> AWSExpiringCredentials {
        var fields = [("Action", "AssumeRole"), ("Version", "2011-06-15"), ("RoleArn", roleARN), ("RoleSessionName", sessionName)]
        if let externalID { fields.append(("ExternalId", externalID)) }
        return try send(action: "AssumeRole", endpoint: endpoint, form: form(fields),
                        signer: SigV4Signer(credentials: credentials, region: region, service: "sts"),
                        source: "profile \(profile) (role_arn \(roleARN))")
    }
}

/// A profile's `credential_process`: the command run without a shell, its JSON read from stdout.
package enum CredentialProcess {
    package static let outputLimit = 64 << 10
    package static let timeout: TimeInterval = 60

    /// The command split into arguments as the AWS CLI does it (POSIX shell words: blanks
    /// separate; '…' is literal; "…" and a bare backslash escape), or nil when a quote is open.
    package static func arguments(_ command: String) -> [String]? {
        var words: [String] = []
        // Read by Unicode scalars, as a shell reads bytes: a combining mark after a quote must not
        // merge with it into one Character that is no longer a quote.
        var word = String.UnicodeScalarView()
        var inWord = false
        var iterator = command.unicodeScalars.makeIterator()
        while let character = iterator.next() {
            switch character {
            case " ", "\t", "\n":
                if inWord { words.append(String(word)); word = String.UnicodeScalarView(); inWord = false }
            case "'":
                inWord = true
                while true {
                    guard let next = iterator.next() else { return nil }
                    if next == "'" { break }
                    word.append(next)
                }
            case "\"":
                inWord = true
                while true {
                    guard let next = iterator.next() else { return nil }
                    if next == "\"" { break }
                    if next == "\\" {
                        guard let escaped = iterator.next() else { return nil }
                        if !"\\\"$`\n".unicodeScalars.contains(escaped) { word.append("\\") }
                        if escaped != "\n" { word.append(escaped) }
                    } else {
                        word.append(next)
                    }
                }
            case "\\":
                inWord = true
                guard let escaped = iterator.next() else { return nil }
                if escaped != "\n" { word.append(escaped) }
            default:
                inWord = true
                word.append(character)
            }
        }
        if inWord { words.append(String(word)) }
        return words
    }

    /// `name` found on PATH when it has no slash.
    static func executable(_ name: String, path: String?) -> String? {
        if name.contains("/") { return name }
        for directory in (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    package static func run(_ command: String, profile: String, environment: [String: String],
                            timeout: TimeInterval = CredentialProcess.timeout) throws -> AWSExpiringCredentials {
        let source = "profile \(profile)'s credential_process"
        // The command itself may hold a secret; messages name its program only.
        guard let words = arguments(command), let program = words.first else {
            throw AWSCredentialError.fetch(source: source, problem: "the command is empty or has an unclosed quote: fix credential_process in the config file")
        }
        guard let executable = executable(program, path: environment["PATH"]) else {
            throw AWSCredentialError.fetch(source: source, problem: "\(program) is not found on PATH: give its full path in credential_process")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = Array(words.dropFirst())
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw AWSCredentialError.fetch(source: source, problem: "\(program) could not be started (\((error as NSError).localizedDescription))")
        }
        let pid = process.processIdentifier
        // Read against a deadline with poll(2): a helper that leaves a background process holding
        // its output open (an agent it starts) never gives EOF, and must not hold this up for ever.
        let deadline = Date().addingTimeInterval(timeout)
        var data = Data()
        var tooLong = false
        var timedOut = false
        let fd = output.fileHandleForReading.fileDescriptor
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else {
                timedOut = true
                break
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(left, 1) * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 { continue }
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            if data.count + count > outputLimit {
                tooLong = true
                break
            }
            data.append(contentsOf: buffer[0..<count])
        }
        if timedOut || tooLong { kill(pid, SIGKILL) }
        try? output.fileHandleForReading.close()
        // The process itself is waited for with the same deadline (plus a second after a kill).
        while process.isRunning && Date() < deadline.addingTimeInterval(timedOut || tooLong ? 1 : 0) { usleep(10_000) }
        if process.isRunning {
            kill(pid, SIGKILL)
            timedOut = true
        }
        process.waitUntilExit()
        if timedOut {
            throw AWSCredentialError.fetch(source: source, problem: "\(program) did not finish within \(Int(timeout)) s and was stopped")
        }
        if tooLong {
            throw AWSCredentialError.fetch(source: source, problem: "\(program) printed more than \(outputLimit / 1024) KiB; a credential_process prints one JSON object")
        }
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw AWSCredentialError.fetch(source: source, problem: "\(program) failed (exit status \(process.terminationStatus)); its output is not shown, as it may hold secrets")
        }
        switch AWSCredentialDocument.parse(data, kind: .process) {
        case .success(let credentials): return credentials
        case .failure(let problem):
            throw AWSCredentialError.fetch(source: source, problem: "\(program) printed no usable credentials: \(problem)")
        }
    }
}

/// The container credentials endpoint and the EC2 instance metadata service (IMDSv2).
package enum CredentialEndpoint {
    /// Whether AWS's SDKs would send a container token to `url`: https anywhere; http only
    /// to a loopback address or the ECS/EKS agents (169.254.170.2, 169.254.170.23).
    package static func containerURLAllowed(_ url: URL) -> Bool {
        if url.scheme == "https" { return url.host != nil }
        guard url.scheme == "http", let host = url.host else { return false }
        // An address literal, never a name that merely starts like one (127.attacker.example).
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            let first = UInt32(bigEndian: v4.s_addr) >> 24
            return first == 127 || host == "169.254.170.2" || host == "169.254.170.23"
        }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 {
            return bare == "::1" || bare.lowercased() == "fd00:ec2::23"
        }
        return host == "localhost"
    }

    package static func container(url text: String, token: String?, tokenFile: String?) throws -> AWSExpiringCredentials {
        let source = "container credentials (\(Redaction.url(string: text)))"
        guard let url = URL(string: text), containerURLAllowed(url) else {
            throw AWSCredentialError.fetch(source: source, problem: "the URL must be https://, or http:// to a loopback address or 169.254.170.2 / 169.254.170.23: check AWS_CONTAINER_CREDENTIALS_FULL_URI")
        }
        var headers: [String: String] = [:]
        if let tokenFile {
            guard let raw = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
                throw AWSCredentialError.fetch(source: source, problem: "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE \(tokenFile)")
            }
            headers["Authorization"] = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        } else if let token {
            headers["Authorization"] = token
        }
        if let value = headers["Authorization"] { Redaction.registerSecret(value) }
        let answer: CredentialHTTP.Answer
        do {
            answer = try CredentialHTTP.send(method: "GET", url: url, headers: headers, timeout: 2)
        } catch {
            throw AWSCredentialError.fetch(source: source, problem: "\(error)")
        }
        guard answer.status == 200 else {
            throw AWSCredentialError.fetch(source: source, problem: "HTTP \(answer.status)"
                + ([401, 403].contains(answer.status) ? ": check AWS_CONTAINER_AUTHORIZATION_TOKEN / AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE" : ""))
        }
        switch AWSCredentialDocument.parse(answer.body, kind: .endpoint) {
        case .success(let credentials): return credentials
        case .failure(let problem): throw AWSCredentialError.fetch(source: source, problem: "\(problem)")
        }
    }

    /// IMDSv2: a session token (PUT), the role's name, then its credentials, each with the token.
    package static func instanceMetadata(endpoint: String, timeout: TimeInterval = 1) throws -> AWSExpiringCredentials {
        let source = "the instance metadata service (\(endpoint))"
        guard let base = URL(string: endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint),
              base.scheme == "http" || base.scheme == "https" else {
            throw AWSCredentialError.fetch(source: source, problem: "not an http:// URL: check AWS_EC2_METADATA_SERVICE_ENDPOINT")
        }
        func url(_ path: String) -> URL { URL(string: base.absoluteString + path)! }
        func send(_ method: String, _ path: String, _ headers: [String: String]) throws -> CredentialHTTP.Answer {
            do {
                return try CredentialHTTP.send(method: method, url: url(path), headers: headers, timeout: timeout)
            } catch {
                throw AWSCredentialError.fetch(source: source, problem: "\(error) (set AWS_EC2_METADATA_DISABLED=true off EC2)")
            }
        }
        let tokenAnswer = try send("PUT", "/latest/api/token", ["X-aws-ec2-metadata-token-ttl-seconds": "21600"])
        guard tokenAnswer.status == 200, !tokenAnswer.body.isEmpty else {
            throw AWSCredentialError.fetch(source: source, problem: "PUT /latest/api/token answered HTTP \(tokenAnswer.status)")
        }
        let token = String(decoding: tokenAnswer.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        Redaction.registerSecret(token)
        let headers = ["X-aws-ec2-metadata-token": token]
        let listPath = "/latest/meta-data/iam/security-credentials/"
        let list = try send("GET", listPath, headers)
        let role = String(decoding: list.body, as: UTF8.self).split(whereSeparator: \.isNewline).first
            .map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard list.status == 200, !role.isEmpty, !role.contains("/") else {
            throw AWSCredentialError.fetch(source: source, problem: "GET \(listPath) answered HTTP \(list.status) without a role name: attach an instance profile to the instance")
        }
        let answer = try send("GET", listPath + AWSEncoding.encode(role), headers)
        guard answer.status == 200 else {
            throw AWSCredentialError.fetch(source: source, problem: "GET \(listPath)\(role) answered HTTP \(answer.status)")
        }
        switch AWSCredentialDocument.parse(answer.body, kind: .endpoint) {
        case .success(let credentials): return credentials
        case .failure(let problem): throw AWSCredentialError.fetch(source: source, problem: "\(problem)")
        }
    }
}

extension AWSCredentialSource {
    /// The provider that fetches from this source (STS in `region`).
    package func provider(region: String, environment: [String: String], profile: String = "default") -> AWSCredentialsProvider {
        switch self {
        case .fixed(let credentials, let from):
            return AWSCredentialsProvider(fixed: credentials, sourceName: from)
        case .webIdentity(let tokenFile, let roleARN, let sessionName):
            let endpoint = STSRequest.endpoint(region: region, environment: environment)
            return AWSCredentialsProvider(sourceName: name) {
                try STSRequest.assumeRoleWithWebIdentity(endpoint: endpoint, roleARN: roleARN, sessionName: sessionName,
                                                         tokenFile: tokenFile)
            }
        case .assumeRole(let roleARN, let sessionName, let externalID, let source, let profile):
            let endpoint = STSRequest.endpoint(region: region, environment: environment)
            return AWSCredentialsProvider(sourceName: name) {
                try STSRequest.assumeRole(endpoint: endpoint, region: region, roleARN: roleARN, sessionName: sessionName,
                                          externalID: externalID, source: source, profile: profile)
            }
        case .process(let command, let profile):
            return AWSCredentialsProvider(sourceName: name) {
                try CredentialProcess.run(command, profile: profile, environment: environment)
            }
        case .container(let url, let token, let tokenFile):
            if let token { Redaction.registerSecret(token) }
            return AWSCredentialsProvider(sourceName: name) {
                try CredentialEndpoint.container(url: url, token: token, tokenFile: tokenFile)
            }
        case .instanceMetadata(let endpoint):
            return AWSCredentialsProvider(sourceName: name) {
                do {
                    return try CredentialEndpoint.instanceMetadata(endpoint: endpoint)
                } catch {
                    // The last source of the chain: no credentials anywhere (S3Error names every source tried).
                    throw S3Error.noCredentials(profile: profile, lastProblem: "\(error)")
                }
            }
        }
    }
}
