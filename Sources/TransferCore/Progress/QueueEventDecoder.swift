import Foundation

/// Reads back what `QueueEventEncoder` writes (a `--json` line, an event stream's
/// `data:`), for views of a run in another process: `status --watch --remote`.
/// Fields it does not know are ignored; an object it cannot read is `.other`.
package enum DecodedQueueEvent: Sendable, Equatable {
    case event(QueueEvent)
    /// The run's last event: its counts.
    case summary(done: Int, failed: Int, cancelled: Int, interrupted: Bool)
    /// The stream's events were not all delivered: read the snapshot again.
    case reset
    case other

    package init(json text: String) {
        guard case .object(let members)? = try? JSONParser.parse(text), case .string(let name)? = members["event"] else {
            self = .other
            return
        }
        func string(_ key: String) -> String? {
            if case .string(let value)? = members[key] { return value }
            return nil
        }
        func integer(_ key: String, in object: [String: JSONValue]? = nil) -> Int64? {
            switch (object ?? members)[key] {
            case .integer(let value)?: return value
            case .number(let value)? where value.isFinite && abs(value) < 9e18: return Int64(value)
            default: return nil
            }
        }
        func number(_ key: String) -> Double? {
            switch members[key] {
            case .integer(let value)?: return Double(value)
            case .number(let value)?: return value
            default: return nil
            }
        }
        switch name {
        case "run_started":
            self = .event(.runStarted(pending: Int(clamping: integer("pending") ?? 0)))
        case "started":
            guard let id = string("id") else { self = .other; return }
            self = .event(.started(JobStarted(id: id, kind: string("kind") ?? "", name: string("name") ?? id, url: string("url") ?? "",
                                              destination: string("destination"), bytesDone: max(0, integer("bytes_done") ?? 0),
                                              bytesTotal: integer("bytes_total"), attempt: Int(clamping: integer("attempt") ?? 1))))
        case "progress":
            guard case .array(let items)? = members["jobs"] else { self = .other; return }
            self = .event(.progress(items.compactMap { item in
                guard case .object(let job) = item, case .string(let id)? = job["id"] else { return nil }
                return JobProgress(id: id, bytesDone: max(0, integer("bytes_done", in: job) ?? 0), bytesTotal: integer("bytes_total", in: job))
            }))
        case "retrying":
            guard let id = string("id") else { self = .other; return }
            self = .event(.retrying(JobRetry(id: id, attempt: Int(clamping: integer("attempt") ?? 1),
                                             delay: max(0, min(number("delay") ?? 0, 86_400)), reason: string("reason") ?? "")))
        case "finished":
            guard let id = string("id"), let state = string("state").flatMap(JobState.init(rawValue:)) else { self = .other; return }
            let destination = string("destination")
            self = .event(.finished(JobFinished(id: id, state: state,
                                                name: destination.map { ($0 as NSString).lastPathComponent } ?? id,
                                                url: string("url") ?? "", destination: destination, bytes: integer("bytes"),
                                                elapsed: number("seconds"), sha256: string("sha256"),
                                                skipped: members["skipped"] == .bool(true), error: string("error"))))
        case "completing":
            guard let id = string("id") else { self = .other; return }
            self = .event(.completing(id: id, bytes: max(0, integer("bytes") ?? 0)))
        case "paused", "held":
            guard case .array(let items)? = members["ids"] else { self = .other; return }
            let ids = items.compactMap { item -> String? in if case .string(let id) = item { return id } else { return nil } }
            self = .event(name == "held" ? .held(ids: ids) : .paused(ids: ids))
        case "summary":
            self = .summary(done: Int(clamping: integer("done") ?? 0), failed: Int(clamping: integer("failed") ?? 0),
                            cancelled: Int(clamping: integer("cancelled") ?? 0), interrupted: members["interrupted"] == .bool(true))
        case "reset":
            self = .reset
        default:
            self = .other
        }
    }
}
