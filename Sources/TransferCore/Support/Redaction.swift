import Foundation

/// Keeps secrets out of messages, logs and the screen.
///
/// The rule for a URL, whole, is `redactedURL(_:depth:)`: user info, the values of
/// secret-named query and fragment parameters (`isSecretQueryName`), URLs nested in
/// other parameters' values (percent-encoded or not, to `nestingDepth` levels; deeper
/// ones are replaced whole), and registered secrets anywhere. Everything that shows or
/// writes a URL goes through `url(_:)` or `url(string:)`; free text that may quote one
/// (libcurl's and URLSession's error messages) through `message(_:)`.
package enum Redaction {
    /// Parameter names whose values are secret, compared whole and case-insensitively.
    static let secretQueryNames: Set<String> = [
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature",
        "token", "access_token", "sig", "apikey", "api_key", "password", "key",
        "auth", "code", "session", "sid", "state", "ticket", "otp",
    ]

    /// Name endings that make a parameter secret (`refresh_token`, `client_secret`, `sas_key`).
    static let secretQuerySuffixes = ["_token", "_secret", "_key", "_password"]

    /// How many URLs deep a nested URL is redacted (`?next=https://…?next=https://…`);
    /// a parameter value still holding a URL below that is replaced whole.
    static let nestingDepth = 4

    /// The replacement for every hidden value.
    static let marker = "REDACTED"

    /// `url(_:)` for a URL as text. Text that cannot hold a secret by the rule is
    /// returned as written, apart from registered secrets (the queue shows one of
    /// these per job event). Never fails: text that is not a valid URL is redacted
    /// by the same rule as far as it looks like one.
    package static func url(string: String) -> String {
        guard string.utf8.contains(where: { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") })
        else { return scrub(string) }
        return scrub(redactedURL(Substring(string), depth: nestingDepth))
    }

    /// The URL with any user info and secret values replaced by `REDACTED` (see the type's rule).
    package static func url(_ url: URL) -> String {
        Self.url(string: url.absoluteString)
    }

    /// Free text (an error message) with every URL in it (`scheme://…` up to white space or
    /// a quote) redacted by the URL rule, and registered secrets hidden.
    package static func message(_ text: String) -> String {
        guard holds(text.unicodeScalars[...], "://") else { return scrub(text) }
        var result = ""
        let scalars = text.unicodeScalars
        var tokenStart = scalars.startIndex
        func flush(upTo end: String.UnicodeScalarView.Index) {
            let token = scalars[tokenStart..<end]
            if holds(token, "://") {
                result += redactedURL(Substring(token), depth: nestingDepth)
            } else if token.contains("=") {
                // A URL's rest after a space or a quote that cut it (`…?a b&token=…`, `…%25<…&token=…`):
                // its parameters are still parameters.
                result += redactedLooseParameters(token)
            } else {
                result += String(Substring(token))
            }
        }
        var index = scalars.startIndex
        while index < scalars.endIndex {
            let scalar = scalars[index]
            if scalar.properties.isWhitespace || "\"'<>".unicodeScalars.contains(scalar) {
                flush(upTo: index)
                result.unicodeScalars.append(scalar)
                tokenStart = scalars.index(after: index)
            }
            index = scalars.index(after: index)
        }
        flush(upTo: scalars.endIndex)
        return scrub(result)
    }

    /// The rule, as a pure function of the text (registered secrets aside, which
    /// the callers scrub): `scheme://USER:PASSWORD@host/path?query#fragment` keeps its
    /// scheme, host and path; non-empty user info becomes `REDACTED` (both halves:
    /// a token is often sent as the user name); in the query and the fragment,
    /// `name=value` pairs split at `&` have the value of a secret name replaced, and
    /// a value that holds `://` once percent-decoded (up to three times) is redacted
    /// as a URL one level deeper, or replaced whole at depth 0. Idempotent.
    ///
    /// It reads Unicode scalars, not characters: a combining mark after `?`, `&` or `@`
    /// joins it into one character, which a character-wise reading would not see as a
    /// separator (the fuzz target redaction found `?\u{6DC}&token=…` shown whole).
    static func redactedURL(_ text: Substring, depth: Int) -> String {
        var rest = text.unicodeScalars[...]
        var result = ""
        if let schemeEnd = firstRange(of: "://", in: rest) {
            // No scheme holds `=` either: what comes before `://` there is text a cut left (read as
            // parameters, as `hostPart` reads a host).
            result += hostPart(rest[..<schemeEnd.lowerBound], depth: depth) + "://"
            rest = rest[schemeEnd.upperBound...]
            let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
            let authority = rest[..<authorityEnd]
            if let at = authority.lastIndex(of: "@") {
                let userInfo = authority[..<at]
                if !userInfo.isEmpty {
                    let colon = userInfo.firstIndex(of: ":")
                    let user = userInfo[..<(colon ?? userInfo.endIndex)]
                    result += (user.isEmpty ? "" : marker) + (colon != nil ? ":" + marker : "")
                }
                result += hostPart(authority[at...], depth: depth)
            } else {
                result += hostPart(authority, depth: depth)
            }
            rest = rest[authorityEnd...]
        }
        // The path, then the query and the fragment as parameters.
        guard let parametersStart = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) else { return result + Substring(rest) }
        result += Substring(rest[..<parametersStart])
        rest = rest[parametersStart...]
        while let separator = rest.first {
            result.unicodeScalars.append(separator)
            rest = rest.dropFirst()
            let end = rest.firstIndex(where: { $0 == "#" && separator == "?" }) ?? rest.endIndex
            result += redactedParameters(rest[..<end], depth: depth)
            rest = rest[end...]
        }
        return result
    }

    /// Text outside a URL that holds `name=value` pairs: each piece between `?` and `#` is read as
    /// parameters (`redactedParameters`), so a secret-named value is hidden there too.
    private static func redactedLooseParameters(_ text: Substring.UnicodeScalarView) -> String {
        var result = ""
        var rest = text
        while let separator = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) {
            result += redactedParameters(rest[..<separator], depth: nestingDepth)
            result.unicodeScalars.append(rest[separator])
            rest = rest[rest.index(after: separator)...]
        }
        return result + redactedParameters(rest, depth: nestingDepth)
    }

    /// A URL's scheme or host (and port) as shown. Neither holds `=`: one that does is the rest
    /// of a URL that a space or a line break cut from its query (`…?a\re://x&token=…` in an error
    /// text), and is read as parameters.
    private static func hostPart(_ text: Substring.UnicodeScalarView, depth: Int) -> String {
        text.contains("=") ? redactedParameters(text, depth: depth) : String(Substring(text))
    }

    /// `a=1&b=2` with secret values hidden and nested URLs redacted (see `redactedURL`).
    private static func redactedParameters(_ text: Substring.UnicodeScalarView, depth: Int) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return String(Substring(pair)) }
            let name = String(Substring(pair[..<equals]))
            let value = Substring(pair[pair.index(after: equals)...])
            let decodedName = name.removingPercentEncoding ?? name
            if isSecretQueryName(decodedName) { return name + "=" + (value.isEmpty ? "" : marker) }
            guard let nested = decodedURL(value) else { return String(Substring(pair)) }
            guard depth > 0 else { return name + "=" + marker }
            let redacted = redactedURL(Substring(nested), depth: depth - 1)
            return redacted == nested ? String(Substring(pair)) : name + "=" + percentEncoded(redacted)
        }.joined(separator: "&")
    }

    /// Where `pattern` first occurs in `scalars`, compared scalar by scalar.
    private static func firstRange(of pattern: String, in scalars: Substring.UnicodeScalarView) -> Range<Substring.UnicodeScalarView.Index>? {
        let wanted = Array(pattern.unicodeScalars)
        var start = scalars.startIndex
        while start < scalars.endIndex {
            var index = start
            var matched = 0
            while matched < wanted.count, index < scalars.endIndex, scalars[index] == wanted[matched] {
                matched += 1
                index = scalars.index(after: index)
            }
            if matched == wanted.count { return start..<index }
            start = scalars.index(after: start)
        }
        return nil
    }

    private static func holds(_ scalars: Substring.UnicodeScalarView, _ pattern: String) -> Bool {
        firstRange(of: pattern, in: scalars) != nil
    }

    /// The value percent-decoded until it holds `://` (at most three times), or nil when it never does.
    private static func decodedURL(_ value: Substring) -> String? {
        var text = String(value)
        for _ in 0..<4 {
            if holds(text.unicodeScalars[...], "://") { return text }
            guard text.contains("%"), let decoded = text.removingPercentEncoding, decoded != text else { return nil }
            text = decoded
        }
        return nil
    }

    /// `text` as a query value, every character but the unreserved ones escaped: a second
    /// reading decodes it once to exactly `text`, so the rule stays idempotent (a partly
    /// escaped URL could read as another one, its `%23` no longer ending the authority).
    private static func percentEncoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? marker
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// Words that make a query parameter or header secret wherever they appear in its name.
    static let secretWords = ["token", "secret", "password", "passwd", "signature", "credential", "apikey", "api-key", "api_key"]

    /// Whether a query or fragment parameter's value is secret: its name (compared
    /// case-insensitively) is one of `secretQueryNames`, ends in one of
    /// `secretQuerySuffixes`, or holds one of `secretWords`.
    static func isSecretQueryName(_ name: String) -> Bool {
        let lowered = name.lowercased()
        return secretQueryNames.contains(lowered) || secretQuerySuffixes.contains { lowered.hasSuffix($0) }
            || secretWords.contains { lowered.contains($0) }
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

    package static func headerValue(name: String, value: String) -> String {
        let lowered = name.lowercased()
        if isSecretHeaderName(lowered) { return "REDACTED" }
        if urlHeaders.contains(lowered) { return url(string: value) }
        return message(value)
    }

    /// Values known to be secret (expanded from `${env:NAME}`), hidden wherever they appear.
    /// The user info of the proxies libcurl reads from the environment is among them from the
    /// start: transferd never prints those variables, but libcurl's error text may name the proxy.
    private static let knownSecrets = Locked<Set<String>>(proxyCredentials(ProcessInfo.processInfo.environment))

    /// The variables libcurl (both backends) takes a proxy from.
    static let proxyVariables = ["http_proxy", "https_proxy", "all_proxy", "ftp_proxy"]

    /// The user names and passwords (as written and percent-decoded) in the proxy URLs of `environment`.
    static func proxyCredentials(_ environment: [String: String]) -> Set<String> {
        var found: Set<String> = []
        for (name, value) in environment where proxyVariables.contains(name.lowercased()) {
            // libcurl takes a proxy without a scheme as http.
            let text = value.contains("://") ? value : "http://" + value
            guard let components = URLComponents(string: text) else { continue }
            for part in [components.percentEncodedUser, components.user, components.percentEncodedPassword, components.password] {
                if let part, !part.isEmpty { found.insert(part) }
            }
        }
        return found
    }

    /// Every value is kept (a redirect to another host drops the header carrying it,
    /// however short); only those of 4 characters or more are scrubbed from text,
    /// where a shorter one would mangle every message holding those letters.
    package static func registerSecret(_ value: String) {
        guard !value.isEmpty else { return }
        knownSecrets.withLock { _ = $0.insert(value) }
    }

    /// Whether `text` holds a registered secret.
    static func containsRegisteredSecret(_ text: String) -> Bool {
        knownSecrets.current.contains { text.contains($0) }
    }

    /// `text` with every registered secret replaced by `REDACTED`.
    package static func scrub(_ text: String) -> String {
        let secrets = knownSecrets.current
        guard !secrets.isEmpty else { return text }
        var result = text
        for secret in secrets where secret.count >= 4 && result.contains(secret) {
            result = result.replacingOccurrences(of: secret, with: "REDACTED")
        }
        return result
    }
}
