/// Which request headers a job may set: the one rule for job files' `headers`
/// and the `-H`/`--header` flag of `get` and `put`.
///
/// A header that frames the message (Content-Length, Transfer-Encoding), names
/// the origin (Host), steers the connection (the hop-by-hop ones: Connection,
/// Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade), changes how the body is
/// sent (Expect) or asks for part of a resource (Range, If-Range) is transferd's
/// to set. From a job it would let a body carry a second, smuggled request, hang
/// a download waiting for bytes never sent, send one origin's Host to another
/// after a redirect, or break the ranges a download resumes and splits with.
/// Names compare without regard to case; a name or value that is not one clean
/// line (CR, LF, NUL) is refused as `HTTPHeaders.problem` says.
package enum JobHeaderRule {
    package struct Refusal: Equatable, Sendable, CustomStringConvertible {
        /// What is wrong and why.
        package let message: String
        /// What to do instead.
        package let fix: String
        package var description: String { "\(message) — \(fix)" }
    }

    /// Why `name: value` may not be set by a job, or nil when it may.
    package static func refusal(name: String, value: String) -> Refusal? {
        if let problem = HTTPHeaders.problem(name: name, value: value) {
            return Refusal(message: problem,
                           fix: "a header is one line: a name of letters, digits and -, and a value without line breaks")
        }
        guard let reserved = reserved.first(where: { HTTPHeaders.sameName($0.name, name) }) else { return nil }
        return Refusal(message: "\(reserved.name) \(reserved.why); a job cannot set it", fix: reserved.fix)
    }

    private static let connection = "is a hop-by-hop header: it steers the connection, which transferd manages"
    private static let remove = "remove it"
    private static let reserved: [(name: String, why: String, fix: String)] = [
        ("Content-Length", "is set by transferd from the body", remove),
        ("Transfer-Encoding", "is set by transferd from the body", remove),
        ("Host", "is set by transferd from the URL (and changes when a redirect leaves the origin)",
         "remove it and put the host in the url"),
        ("Connection", connection, remove),
        ("Keep-Alive", connection, remove),
        ("Proxy-Connection", connection, remove),
        ("TE", connection, remove),
        ("Trailer", connection, remove),
        ("Upgrade", connection, remove),
        ("Expect", "is set by transferd: it decides how a body is sent", remove),
        ("Range", "is set by transferd, which resumes and splits downloads with ranges of its own",
         "remove it: transferd downloads the whole resource"),
        ("If-Range", "is set by transferd, which resumes downloads with ranges of its own",
         "remove it: transferd checks that a resumed download is the same resource itself"),
    ]
}
