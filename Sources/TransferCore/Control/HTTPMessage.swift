import Foundation

/// A request as the control API sees it: plain values, so routing and handlers
/// are tested without a socket.
package struct HTTPRequest: Sendable {
    package var method: String
    /// The path without the query, percent-decoded.
    package var path: String
    package var query: [String: String]
    /// Header names lower-cased.
    package var headers: [String: String]
    package var body: Data

    package init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: Data = Data()) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { _, last in last })
        self.body = body
    }
}

/// A source of a streamed response body (an event stream): `next` blocks until it
/// has bytes (at most `limit`), and returns nil when the stream ends.
package protocol ResponseStream: AnyObject, Sendable {
    func next(limit: Int) -> Data?
}

package struct HTTPResponse: Sendable {
    package var status: Int
    package var headers: [(name: String, value: String)]
    package var body: Data
    /// Sent instead of `body`, for as long as it lasts.
    package var stream: ResponseStream?

    package init(status: Int, contentType: String, body: Data, headers: [(name: String, value: String)] = []) {
        self.status = status
        self.headers = [("Content-Type", contentType), ("Cache-Control", "no-store")] + headers
        self.body = body
        self.stream = nil
    }

    package init(status: Int, contentType: String, stream: ResponseStream, headers: [(name: String, value: String)] = []) {
        self.status = status
        self.headers = [("Content-Type", contentType), ("Cache-Control", "no-store")] + headers
        self.body = Data()
        self.stream = stream
    }

    package static func json(_ status: Int, _ object: JSONObject, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json", body: Data((object.serialized() + "\n").utf8), headers: headers)
    }

    /// An error as every endpoint words it: what went wrong and how to fix it.
    package static func error(_ status: Int, _ message: String, fix: String? = nil,
                             headers: [(name: String, value: String)] = []) -> HTTPResponse {
        var object = JSONObject()
        object.add("error", message)
        if let fix { object.add("fix", fix) }
        return json(status, object, headers: headers)
    }

    package func header(_ name: String) -> String? {
        headers.last { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}
