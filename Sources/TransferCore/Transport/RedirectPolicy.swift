import Foundation

/// How both backends follow a redirect, as one pure decision.
///
/// - Only `http` and `https` targets are followed: a `Location` naming
///   `ftp://`, `file://` or anything else ends the exchange with an error
///   (libcurl would otherwise log in to an FTP server and fetch its file).
/// - Credentials go only to the origin (scheme, host and port) they were
///   given for. When a redirect leaves that origin, these headers are
///   dropped: `Authorization`, `Proxy-Authorization`, `Cookie`, every header
///   whose name looks secret (`Redaction`: token, secret, password, api-key,
///   …) and every header whose value holds a secret from `${env:NAME}`
///   (`Redaction.registerSecret`). Once dropped they stay dropped, even if
///   a later hop returns to the first origin.
/// - 303, and 301/302 after a POST, continue as a GET without a body (what
///   browsers and curl do); 307 and 308 repeat the method and body.
struct RedirectPolicy {
    static let statuses: Set<Int> = [301, 302, 303, 307, 308]

    /// The request for the next hop, or the error that ends the exchange.
    /// - Parameters:
    ///   - request: the request that was answered with a redirect (the
    ///     previous hop's, after earlier decisions).
    ///   - original: the first request (whose origin the credentials belong to).
    ///   - hops: redirects followed so far, this one included.
    static func next(after request: TransferRequest, original: TransferRequest, status: Int, location: String,
                     hops: Int) -> Result<TransferRequest, TransportError> {
        guard hops <= original.maxRedirects else {
            return .failure(TransportError(.tooManyRedirects, url: original.url, message: "more than \(original.maxRedirects) redirects"))
        }
        guard let target = URL(string: location, relativeTo: request.url)?.absoluteURL,
              let scheme = target.scheme?.lowercased() else {
            return .failure(TransportError(.protocolError, url: original.url,
                                           message: "the server redirected to \"\(HTTPHeaders.visible(Redaction.url(string: location)))\", which is not a URL"))
        }
        guard scheme == "http" || scheme == "https" else {
            return .failure(TransportError(.redirectRefused, url: original.url,
                                           message: "the server redirected to a \(HTTPHeaders.visible(scheme)):// URL; only http and https redirects are followed"))
        }
        guard target.host?.isEmpty == false else {
            return .failure(TransportError(.protocolError, url: original.url,
                                           message: "the server redirected to \"\(HTTPHeaders.visible(Redaction.url(string: location)))\", which names no host"))
        }
        var next = request
        next.url = target
        if status == 303 || ((status == 301 || status == 302) && request.method.uppercased() == "POST") {
            if request.method.uppercased() != "HEAD" { next.method = "GET" }
            next.body = .none
            next.headers.remove("Content-Type")
            next.headers.remove("Content-Length")
        }
        if !sameOrigin(target, original.url) {
            for field in request.headers where isOriginOnly(field) {
                next.headers.remove(field.name)
            }
        }
        return .success(next)
    }

    static func isOriginOnly(_ field: (name: String, value: String)) -> Bool {
        let lowered = field.name.lowercased()
        return ["authorization", "proxy-authorization", "cookie"].contains(lowered)
            || Redaction.isSecretHeaderName(lowered)
            || Redaction.containsRegisteredSecret(field.value)
    }

    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func port(_ url: URL) -> Int? { url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil) }
        return a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased() && port(a) == port(b)
    }
}
