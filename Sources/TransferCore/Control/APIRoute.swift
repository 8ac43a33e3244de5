import Foundation

/// The control API's endpoints, matched from a method and a path without I/O.
enum APIRoute: Sendable, Equatable {
    /// The dashboard: the page, its script and its style sheet.
    case asset(DashboardAsset)
    case metrics
    case listJobs
    case job(String)
    case addJobs
    case cancel(String)
    case retry(String)
    /// A person pauses (holds) a job, or resumes a held one.
    case pause(String)
    case resume(String)
    /// A job's priority set, or the job moved ahead of every waiting one.
    case prioritize(String)
    /// A job's own rate limit set (`transferd limit --job`).
    case limitJob(String)
    /// The whole queue paused or resumed.
    case pauseQueue
    case resumeQueue
    /// The queue's bandwidth limit (`transferd limit`), read or set.
    case limit
    case setLimit
    /// Ended jobs forgotten (`transferd purge`).
    case purge
    case summary
    case events

    /// Why no route answered.
    enum Miss: Error, Sendable, Equatable {
        case notFound
        /// The path exists, with other methods.
        case methodNotAllowed(allowed: [String])
    }

    /// Every endpoint but the page (which holds no data and asks for the token) and
    /// `/metrics` (for scrapers, counters only) needs the bearer token.
    var needsToken: Bool {
        switch self {
        case .asset, .metrics: return false
        default: return true
        }
    }

    static func match(method: String, path: String) -> Result<APIRoute, Miss> {
        // HEAD is answered as GET (libmicrohttpd leaves the body out).
        let method = method == "HEAD" ? "GET" : method
        var segments = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if segments.first == "" { segments.removeFirst() }
        if segments.count > 1 && segments.last == "" { segments.removeLast() }
        let candidates: [(method: String, route: APIRoute)]
        switch segments {
        case [""]: candidates = [("GET", .asset(.page))]
        case ["dashboard.js"]: candidates = [("GET", .asset(.script))]
        case ["dashboard.css"]: candidates = [("GET", .asset(.style))]
        case ["metrics"]: candidates = [("GET", .metrics)]
        case ["v1", "jobs"]: candidates = [("GET", .listJobs), ("POST", .addJobs)]
        case ["v1", "summary"]: candidates = [("GET", .summary)]
        case ["v1", "events"]: candidates = [("GET", .events)]
        case ["v1", "pause"]: candidates = [("POST", .pauseQueue)]
        case ["v1", "resume"]: candidates = [("POST", .resumeQueue)]
        case ["v1", "limit"]: candidates = [("GET", .limit), ("POST", .setLimit)]
        case ["v1", "purge"]: candidates = [("POST", .purge)]
        case let parts where parts.count == 3 && parts[0] == "v1" && parts[1] == "jobs" && !parts[2].isEmpty:
            candidates = [("GET", .job(parts[2]))]
        case let parts where parts.count == 4 && parts[0] == "v1" && parts[1] == "jobs" && !parts[2].isEmpty:
            switch parts[3] {
            case "cancel": candidates = [("POST", .cancel(parts[2]))]
            case "retry": candidates = [("POST", .retry(parts[2]))]
            case "pause": candidates = [("POST", .pause(parts[2]))]
            case "resume": candidates = [("POST", .resume(parts[2]))]
            case "priority": candidates = [("POST", .prioritize(parts[2]))]
            case "limit": candidates = [("POST", .limitJob(parts[2]))]
            default: candidates = []
            }
        default: candidates = []
        }
        guard !candidates.isEmpty else { return .failure(.notFound) }
        if let hit = candidates.first(where: { $0.method == method }) { return .success(hit.route) }
        return .failure(.methodNotAllowed(allowed: candidates.map(\.method)))
    }
}

/// The files of the dashboard, kept in the repository and built into the binary.
enum DashboardAsset: String, Sendable, Equatable, CaseIterable {
    case page, script, style
}

/// The position after the last job of a page of `GET /v1/jobs`: opaque to clients
/// (base64url of `v1:SEQ`), checked when it comes back.
struct JobCursor: Sendable, Equatable {
    let seq: Int64

    init(seq: Int64) { self.seq = seq }

    init?(token: String) {
        var base64 = token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard token.count <= 64, let data = Data(base64Encoded: base64),
              let text = String(data: data, encoding: .utf8), text.hasPrefix("v1:"),
              let seq = Int64(text.dropFirst(3)), seq >= 0 else { return nil }
        self.seq = seq
    }

    var token: String {
        Data("v1:\(seq)".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
