import Foundation

/// A run in another process, as its control API shows it: a snapshot
/// (`GET /v1/summary`, `GET /v1/jobs?state=running|waiting`) brought up to
/// date by its event stream. What `transferd status --watch --remote` draws;
/// a value, tested without a socket.
package struct RemoteRun: Sendable {
    package private(set) var progress: RunProgress
    /// The event to follow the stream from (the snapshot's, then each one applied).
    package private(set) var lastEventID: String?
    /// Set by the run's `summary` event: the run is over.
    package private(set) var ended: (done: Int, failed: Int, cancelled: Int, interrupted: Bool)?

    package struct SnapshotError: Error, CustomStringConvertible {
        package let description: String
    }

    /// - Parameters:
    ///   - summary: the body of `GET /v1/summary`.
    ///   - jobs: the `jobs` of `GET /v1/jobs?state=running` and `?state=waiting` pages, in any order.
    package init(summary: Data, jobs: [Data], at now: Date) throws {
        guard case .object(let members)? = try? JSONParser.parse(String(decoding: summary, as: UTF8.self)),
              case .object(let countsJSON)? = members["jobs"] else {
            throw SnapshotError(description: "the summary is not the control API's (no \"jobs\" counts)")
        }
        var counts: [JobState: Int] = [:]
        for (name, value) in countsJSON {
            if let state = JobState(rawValue: name), case .integer(let count) = value { counts[state] = Int(clamping: count) }
        }
        var records: [JobRecord] = []
        for page in jobs {
            guard case .object(let body)? = try? JSONParser.parse(String(decoding: page, as: UTF8.self)),
                  case .array(let items)? = body["jobs"] else {
                throw SnapshotError(description: "a jobs page is not the control API's (no \"jobs\" list)")
            }
            records += items.compactMap(Self.record)
        }
        progress = RunProgress(active: records, counts: counts, at: now)
        if case .string(let id)? = members["event_id"] { lastEventID = id }
    }

    /// Applies one event of the stream; false when the view must be read again
    /// from a snapshot (the stream said `reset`).
    package mutating func apply(_ event: ServerSentEvent, at now: Date) -> Bool {
        if !event.lastEventID.isEmpty { lastEventID = event.lastEventID }
        switch DecodedQueueEvent(json: event.data) {
        case .event(let queueEvent):
            progress.apply(queueEvent, at: now)
            _ = progress.takeFinished()
        case .summary(let done, let failed, let cancelled, let interrupted):
            ended = (done, failed, cancelled, interrupted)
        case .reset:
            return false
        case .other:
            if event.type == "reset" { return false }
        }
        return true
    }

    /// One formatter, used under a lock: Foundation does not mark it Sendable on Linux.
    private static let timestamps: Locked<ISO8601DateFormatter> = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return Locked(formatter)
    }()

    private static func record(_ value: JSONValue) -> JobRecord? {
        guard case .object(let job) = value, case .string(let id)? = job["id"],
              case .string(let stateName)? = job["state"], let state = JobState(rawValue: stateName) else { return nil }
        func string(_ key: String) -> String? {
            if case .string(let text)? = job[key] { return text }
            return nil
        }
        func integer(_ key: String) -> Int64? {
            if case .integer(let number)? = job[key] { return number }
            return nil
        }
        let kind = string("kind").flatMap(JobSpec.Kind.init(rawValue:)) ?? .download
        let spec = JobSpec(id: id, kind: kind, url: string("url") ?? "", destination: string("destination"), source: string("source"))
        let date = { (key: String) in string(key).flatMap { text in timestamps.withLock { $0.date(from: text) } } }
        return JobRecord(seq: 0, spec: spec, state: state, attempts: Int(clamping: integer("attempts") ?? 0),
                         nextAttemptAt: date("next_attempt_at"), lastError: string("last_error"),
                         bytesDone: max(0, integer("bytes_done") ?? 0), bytesTotal: integer("bytes_total"),
                         speed: integer("speed").map(Double.init), sha256: nil, sourceFile: string("job_file") ?? "",
                         createdAt: date("created_at") ?? Date(timeIntervalSince1970: 0), startedAt: date("started_at"),
                         finishedAt: nil, cancelRequested: false, checkpoint: nil)
    }
}
