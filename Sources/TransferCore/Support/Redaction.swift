import Foundation

/// Keeps secrets out of messages, logs and the screen.
public enum Redaction {
    static let secretQueryNames: Set<String> = [
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature",
        "token", "access_token", "sig", "apikey", "api_key", "password",
    ]

    /// The URL with any user info and secret-looking query values replaced by `REDACTED`.
    public static func url(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            return url.absoluteString
        }
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

    public static func headerValue(name: String, value: String) -> String {
        let lowered = name.lowercased()
        return secretHeaders.contains(lowered) || secretWords.contains { lowered.contains($0) } ? "REDACTED" : value
    }
}
