import Foundation

/// Keeps secrets out of messages, logs and the screen.
public enum Redaction {
    static let secretQueryNames: Set<String> = [
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature",
        "token", "access_token", "sig", "apikey", "api_key", "password",
    ]

    /// `url(_:)` for a URL as text. Without user info or a query there is
    /// nothing to redact, and the text is returned as written (no parsing:
    /// the queue shows one of these per job event).
    public static func url(string: String) -> String {
        guard string.utf8.contains(where: { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "?") }) else { return string }
        return URL(string: string).map(url) ?? string
    }

    /// The URL with any user info and secret-looking query values replaced by `REDACTED`.
    public static func url(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            return url.absoluteString
        }
        // Both halves of user info: a token is often sent as the user name.
        if components.user != nil { components.user = "REDACTED" }
        if components.password != nil { components.password = "REDACTED" }
        if let items = components.queryItems {
            components.queryItems = items.map { item in
                isSecretQueryName(item.name)
                    ? URLQueryItem(name: item.name, value: "REDACTED") : item
            }
        }
        return components.string ?? url.absoluteString
    }

    /// Words that make a query parameter or header secret wherever they appear in its name.
    static let secretWords = ["token", "secret", "password", "passwd", "signature", "credential", "apikey", "api-key", "api_key"]

    static func isSecretQueryName(_ name: String) -> Bool {
        let lowered = name.lowercased()
        return secretQueryNames.contains(lowered) || lowered == "key" || secretWords.contains { lowered.contains($0) }
    }

    /// Header names whose values are never shown.
    static let secretHeaders: Set<String> = [
        "authorization", "proxy-authorization", "cookie", "set-cookie", "x-amz-security-token", "x-api-key",
    ]

    /// Headers whose values are URLs (a redirect may point at a presigned URL).
    static let urlHeaders: Set<String> = ["location", "content-location"]

    /// Whether a header with this (lower-case) name carries a secret.
    static func isSecretHeaderName(_ lowered: String) -> Bool {
        secretHeaders.contains(lowered) || secretWords.contains(where: { lowered.contains($0) })
    }

    public static func headerValue(name: String, value: String) -> String {
        let lowered = name.lowercased()
        if isSecretHeaderName(lowered) { return "REDACTED" }
        if urlHeaders.contains(lowered), let url = URL(string: value) { return Redaction.url(url) }
        return scrub(value)
    }

    /// Values known to be secret (expanded from `${env:NAME}`), hidden wherever they appear.
    private static let knownSecrets = Locked<Set<String>>([])

    /// Every value is kept (a redirect to another host drops the header carrying it,
    /// however short); only those of 4 characters or more are scrubbed from text,
    /// where a shorter one would mangle every message holding those letters.
    public static func registerSecret(_ value: String) {
        guard !value.isEmpty else { return }
        knownSecrets.withLock { _ = $0.insert(value) }
    }

    /// Whether `text` holds a registered secret.
    static func containsRegisteredSecret(_ text: String) -> Bool {
        knownSecrets.current.contains { text.contains($0) }
    }

    /// `text` with every registered secret replaced by `REDACTED`.
    public static func scrub(_ text: String) -> String {
        let secrets = knownSecrets.current
        guard !secrets.isEmpty else { return text }
        var result = text
        for secret in secrets where secret.count >= 4 && result.contains(secret) {
            result = result.replacingOccurrences(of: secret, with: "REDACTED")
        }
        return result
    }
}
