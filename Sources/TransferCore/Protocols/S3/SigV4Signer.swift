import Foundation

/// Credentials for AWS Signature Version 4. The secret never appears in
/// descriptions, logs or errors.
package struct AWSCredentials: Sendable, CustomStringConvertible {
    package var accessKeyID: String
    package var secretAccessKey: String
    package var sessionToken: String?

    package init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    package var description: String { "AWSCredentials(\(accessKeyID), secret REDACTED)" }
}

/// AWS Signature Version 4 with the `Authorization` header. A pure value:
/// give it a request and a time, get the headers to add.
///
/// S3 flavour (`service == "s3"`): the path is used as sent (no
/// normalisation, no double encoding) and `x-amz-content-sha256` is always
/// signed, holding the payload hash or `UNSIGNED-PAYLOAD`.
package struct SigV4Signer: Sendable {
    package var credentials: AWSCredentials
    package var region: String
    package var service: String

    package static let unsignedPayload = "UNSIGNED-PAYLOAD"
    package static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    package init(credentials: AWSCredentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The intermediate strings, for tests and the debug log (no secret in them).
    package struct Signature: Sendable {
        package var canonicalRequest: String
        package var stringToSign: String
        package var signature: String
        package var headers: HTTPHeaders
    }

    /// Signs `method url` with `headers` (Host is derived from the URL).
    /// - Parameter payloadHash: hex SHA-256 of the body, or `UNSIGNED-PAYLOAD`.
    /// - Returns: the headers to send (the given ones plus Host, X-Amz-Date,
    ///   X-Amz-Content-Sha256 for S3, X-Amz-Security-Token, Authorization).
    package func sign(method: String, url: URL, headers: HTTPHeaders = [:], payloadHash: String, date: Date = Date()) -> Signature {
        let amzDate = Self.timestamp(date)
        let day = String(amzDate.prefix(8))
        var all = headers
        all.set("Host", Self.hostHeader(url))
        all.set("X-Amz-Date", amzDate)
        if service == "s3" { all.set("X-Amz-Content-Sha256", payloadHash) }
        if let token = credentials.sessionToken { all.set("X-Amz-Security-Token", token) }

        var canonical: [(String, String)] = []
        for field in all {
            let name = field.name.lowercased()
            guard !["authorization", "user-agent", "expect", "content-length", "transfer-encoding"].contains(name) else { continue }
            let value = Self.collapsedSpaces(field.value)
            if let index = canonical.firstIndex(where: { $0.0 == name }) {
                canonical[index].1 += "," + value
            } else {
                canonical.append((name, value))
            }
        }
        canonical.sort { $0.0 < $1.0 }
        let signedHeaders = canonical.map(\.0).joined(separator: ";")
        let canonicalRequest = [
            method.uppercased(),
            canonicalPath(url),
            Self.canonicalQuery(url),
            canonical.map { "\($0.0):\($0.1)\n" }.joined(),
            signedHeaders,
            payloadHash,
        ].joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope,
                            SHA256Hasher.hex(of: canonicalRequest)].joined(separator: "\n")
        let signature = HMACSHA256.mac(key: signingKey(day: day), message: stringToSign).hexString
        all.set("Authorization",
                "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)")
        return Signature(canonicalRequest: canonicalRequest, stringToSign: stringToSign, signature: signature, headers: all)
    }

    /// The key of one day's scope: four HMACs, the same for every request of the day
    /// (kept, as AWS's SDKs keep it, for the last scope signed).
    func signingKey(day: String) -> [UInt8] {
        let scope = SigningKeyScope(secret: credentials.secretAccessKey, day: day, region: region, service: service)
        if let cached = Self.lastSigningKey.withLock({ $0 }), cached.scope == scope { return cached.key }
        var key = HMACSHA256.mac(key: Array("AWS4\(credentials.secretAccessKey)".utf8), message: day)
        for part in [region, service, "aws4_request"] { key = HMACSHA256.mac(key: key, message: part) }
        Self.lastSigningKey.withLock { $0 = (scope, key) }
        return key
    }

    struct SigningKeyScope: Equatable {
        var secret: String
        var day: String
        var region: String
        var service: String
    }

    /// In memory only, like the secret it comes from.
    private static let lastSigningKey = Locked<(scope: SigningKeyScope, key: [UInt8])?>(nil)

    /// A header value with its runs of spaces and tabs made one space and its ends trimmed,
    /// as SigV4's canonical form wants (copied only when it changes).
    static func collapsedSpaces(_ value: String) -> String {
        var previousSpace = true  // a leading space is dropped
        var clean = true
        for byte in value.utf8 {
            let space = byte == 0x20 || byte == 0x09
            if space && (previousSpace || byte == 0x09) { clean = false; break }
            previousSpace = space
        }
        if clean && !previousSpace { return value }
        return value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// `YYYYMMDDTHHMMSSZ` in UTC (by hand: `String(format:)` was a third of signing's time).
    static func timestamp(_ date: Date) -> String {
        var time = time_t(date.timeIntervalSince1970)
        var fields = tm()
        gmtime_r(&time, &fields)
        var text: [UInt8] = []
        text.reserveCapacity(16)
        func digits(_ value: Int32, _ count: Int) {
            var divisor: Int32 = 1
            for _ in 1..<count { divisor *= 10 }
            var rest = value
            for _ in 0..<count {
                text.append(UInt8(ascii: "0") + UInt8((rest / divisor) % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(fields.tm_year + 1900, 4)
        digits(fields.tm_mon + 1, 2)
        digits(fields.tm_mday, 2)
        text.append(UInt8(ascii: "T"))
        digits(fields.tm_hour, 2)
        digits(fields.tm_min, 2)
        digits(fields.tm_sec, 2)
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    static func hostHeader(_ url: URL) -> String {
        let host = url.host ?? ""
        guard let port = url.port else { return host }
        let defaultPort = url.scheme == "https" ? 443 : 80
        return port == defaultPort ? host : "\(host):\(port)"
    }

    /// The path as sent (already percent-encoded) for S3; other services encode each segment once more.
    func canonicalPath(_ url: URL) -> String {
        let path = URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedPath ?? "/"
        let sent = path.isEmpty ? "/" : path
        guard service != "s3" else { return sent }
        return sent.split(separator: "/", omittingEmptySubsequences: false)
            .map { AWSEncoding.encode(String($0)) }.joined(separator: "/")
    }

    static func canonicalQuery(_ url: URL) -> String {
        guard let query = URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedQuery, !query.isEmpty else {
            return ""
        }
        let pairs = query.split(separator: "&").map { item -> (String, String) in
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            let value = parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? String(parts[1])) : ""
            return (AWSEncoding.encode(name), AWSEncoding.encode(value))
        }
        return pairs.sorted { $0.0 == $1.0 ? $0.1 < $1.1 : $0.0 < $1.0 }.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }
}

/// RFC 3986 percent-encoding as AWS wants it: everything but A–Z a–z 0–9 - _ . ~
package enum AWSEncoding {
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// By bytes into one buffer (every key of every request passes here).
    package static func encode(_ text: String, keepSlash: Bool = false) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var result: [UInt8] = []
        result.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if isUnreserved(byte) || (keepSlash && byte == UInt8(ascii: "/")) {
                result.append(byte)
            } else {
                result.append(UInt8(ascii: "%"))
                result.append(hex[Int(byte >> 4)])
                result.append(hex[Int(byte & 0x0F)])
            }
        }
        return String(decoding: result, as: UTF8.self)
    }
}
