import Foundation

/// The control API's answers: each request, matched to a route, checked for the
/// token, and answered from the store and the run's monitor. No sockets here
/// (`ControlServer` listens), so every endpoint is tested with plain values.
package final class ControlAPI: Sendable {
    let store: QueueStore
    let layout: QueueLayout
    let token: APIToken
    let monitor: RunMonitor
    /// The per-host connections and limits of the run now.
    let hosts: @Sendable () -> [HostUse]
    /// Tells the run that jobs were added or re-queued, so it claims without waiting.
    let changed: @Sendable () -> Void
    /// Seconds between an idle event stream's heartbeats.
    let heartbeat: TimeInterval
    /// Whether posted job files may carry hook commands (`--allow-job-hooks`).
    let allowsCommands: Bool

    package static let bodyLimit = JobFileParser.maxFileSize
    static let pageLimit = 1000

    package init(store: QueueStore, layout: QueueLayout, token: APIToken, monitor: RunMonitor, heartbeat: TimeInterval = 15,
                allowsCommands: Bool = false,
                hosts: @escaping @Sendable () -> [HostUse] = { [] }, changed: @escaping @Sendable () -> Void = {}) {
        self.allowsCommands = allowsCommands
        self.store = store
        self.layout = layout
        self.token = token
        self.monitor = monitor
        self.heartbeat = heartbeat
        self.hosts = hosts
        self.changed = changed
    }

    /// The checks that need no body, made when the headers are in: the route, the token, and that
    /// only `POST /v1/jobs` carries a body. Nil: read the body and answer with `respond`.
    package func preflight(_ request: HTTPRequest) -> HTTPResponse? {
        guard case .success(let route) = APIRoute.match(method: request.method, path: request.path) else {
            return respond(to: request)  // the 404 or 405, which reads nothing
        }
        if route.needsToken, let refusal = checkToken(request, route: route) { return refusal }
        let hasBody = (request.headers["content-length"].flatMap(Int.init) ?? 0) > 0 || request.headers["transfer-encoding"] != nil
        if hasBody && route != .addJobs {
            return .error(400, "\(request.method) \(request.path) takes no request body", fix: "send it without one")
        }
        return nil
    }

    package func respond(to request: HTTPRequest) -> HTTPResponse {
        let route: APIRoute
        switch APIRoute.match(method: request.method, path: request.path) {
        case .success(let matched): route = matched
        case .failure(.notFound):
            return .error(404, "no endpoint \(request.path)", fix: "the endpoints are listed in docs/control-api.md")
        case .failure(.methodNotAllowed(let allowed)):
            return .error(405, "\(request.path) does not take \(request.method)", fix: "use \(allowed.joined(separator: " or "))",
                          headers: [("Allow", allowed.joined(separator: ", "))])
        }
        if route.needsToken, let refusal = checkToken(request, route: route) { return refusal }
        do {
            switch route {
            case .asset(let asset): return Dashboard.response(asset)
            case .metrics: return try metrics()
            case .listJobs: return try listJobs(request)
            case .job(let id): return try job(id)
            case .addJobs: return try addJobs(request)
            case .cancel(let id): return try cancel(id)
            case .retry(let id): return try retry(id)
            case .pause(let id): return try pause(id)
            case .resume(let id): return try resume(id)
            case .prioritize(let id): return try prioritize(id, value: request.query["value"])
            case .limitJob(let id): return try limitJob(id, rate: request.query["rate"])
            case .pauseQueue: return try pauseQueue(finishRunning: request.query["finish_running"] == "1")
            case .resumeQueue: return try resumeQueue()
            case .limit: return try limit()
            case .setLimit:
                return try setLimit(request.query["rate"], jobs: request.query["jobs"], perHost: request.query["per_host"],
                                    clear: request.query["clear"] == "1")
            case .purge: return try purge(states: request.query["state"], olderThan: request.query["older_than"])
            case .summary: return try summary()
            case .events:
                let stream = EventStream(journal: monitor.journal,
                                         lastEventID: request.headers["last-event-id"] ?? request.query["last_event_id"],
                                         heartbeat: heartbeat)
                return HTTPResponse(status: 200, contentType: "text/event-stream", stream: stream,
                                    headers: [("X-Accel-Buffering", "no")])
            }
        } catch {
            // The store failed (the database went away, say): the client learns it, the run goes on.
            return .error(503, "the queue's store could not answer: \(Redaction.message("\(error)"))", fix: "try again shortly")
        }
    }

    // MARK: Authorization

    /// Whether the request bears this run's token (in the header, or in the query of the event stream).
    func bearsToken(_ request: HTTPRequest) -> Bool {
        let route = APIRoute.match(method: request.method, path: request.path)
        guard case .success(let matched) = route else { return false }
        return checkToken(request, route: matched) == nil
    }

    private func checkToken(_ request: HTTPRequest, route: APIRoute) -> HTTPResponse? {
        var given: String?
        if let header = request.headers["authorization"] {
            let parts = header.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" { given = String(parts[1]).trimmingCharacters(in: .whitespaces) }
        } else if route == .events {
            // A browser's EventSource cannot send headers: the stream alone takes the token in the query.
            given = request.query["token"]
        }
        guard let given else {
            return .error(401, "this endpoint needs the API token",
                          fix: "send the header Authorization: Bearer TOKEN, the token being the content of \(token.path)",
                          headers: [("WWW-Authenticate", "Bearer")])
        }
        guard token.matches(given) else {
            return .error(401, "the API token is not this run's",
                          fix: "use the content of \(token.path)", headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
        }
        return nil
    }

    // MARK: Jobs

    private func listJobs(_ request: HTTPRequest) throws -> HTTPResponse {
        var state: JobState?
        if let name = request.query["state"], !name.isEmpty {
            guard let parsed = JobState(rawValue: name) else {
                return .error(400, "state '\(name)' is not a job state",
                              fix: "use one of \(JobState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            state = parsed
        }
        var limit = 100
        if let text = request.query["limit"] {
            guard let value = Int(text), (1...Self.pageLimit).contains(value) else {
                return .error(400, "limit '\(text)' is not a number from 1 to \(Self.pageLimit)")
            }
            limit = value
        }
        var after: Int64 = 0
        if let text = request.query["cursor"], !text.isEmpty {
            guard let cursor = JobCursor(token: text) else {
                return .error(400, "cursor '\(text.prefix(80))' is not one this API gave out",
                              fix: "pass the \"next\" value of the previous page unchanged, or leave cursor out to start over")
            }
            after = cursor.seq
        }
        // One more than the page says whether there is a next one.
        let jobs = try store.jobs(in: state, after: after, limit: limit + 1)
        let page = jobs.prefix(limit)
        var object = JSONObject()
        object.add("jobs", .array(page.map { .object($0.apiJSON) }))
        object.add("next", jobs.count > limit ? .string(JobCursor(seq: page.last!.seq).token) : .null)
        return .json(200, object)
    }

    private func job(_ id: String) throws -> HTTPResponse {
        guard let record = try store.job(id) else { return Self.unknown(id) }
        return .json(200, record.apiJSON)
    }

    /// A job file in the body, checked exactly as one dropped in the queue folder and
    /// recorded all or nothing; a copy is kept in `accepted/` like a dropped file.
    private func addJobs(_ request: HTTPRequest) throws -> HTTPResponse {
        let type = request.headers["content-type"]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        let isList = type == "text/plain" || type == "text/uri-list"
        let stamp = Int(Date().timeIntervalSince1970 * 1000)
        let name = "api-\(stamp)-\(UUID().uuidString.prefix(8).lowercased())" + (isList ? ".urls" : ".json")
        let jobs: [JobSpec]
        switch JobFileParser(root: layout.root, queueDirectory: layout.directory, allowsCommands: allowsCommands)
            .parse(name: name, data: request.body) {
        case .failure(let rejection): return Self.rejected(rejection, status: 422)
        case .success(let parsed): jobs = parsed
        }
        let outcome: IngestOutcome
        switch try store.ingest([JobFileContent(fileName: name, contentHash: SHA256Hasher.hex(of: request.body), jobs: jobs)])[0] {
        case .idTaken(let conflict): return Self.rejected(conflict.rejection(file: name), status: 409)
        case .invalid(let rejection): return Self.rejected(rejection, status: 422)
        case .recorded(let recorded): outcome = recorded
        }
        keepCopy(name: name, body: request.body)
        changed()
        var object = JSONObject()
        object.add("file", name)
        object.add("added", outcome.added)
        object.add("already_known", outcome.alreadyKnown)
        object.add("duplicate_file", .bool(outcome.duplicateFile))
        object.add("ids", .array(jobs.map { .string($0.id) }))
        return .json(201, object)
    }

    private func keepCopy(name: String, body: Data) {
        // Owner only: a job file may hold header references and URLs the user keeps to themself.
        let path = (layout.accepted as NSString).appendingPathComponent(name)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        _ = body.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    private func cancel(_ id: String) throws -> HTTPResponse {
        guard let previous = try store.cancel(id) else { return Self.unknown(id) }
        var object = JSONObject()
        object.add("id", id)
        object.add("previous_state", previous.rawValue)
        if previous.isFinal {
            object.add("error", "the job is already \(previous.rawValue)")
            return .json(409, object)
        }
        object.add("state", "cancelled")
        return .json(200, object)
    }

    private func pause(_ id: String) throws -> HTTPResponse {
        guard let previous = try store.hold(id) else { return Self.unknown(id) }
        var object = JSONObject()
        object.add("id", id)
        object.add("previous_state", previous.rawValue)
        guard previous.after(.hold) != nil || previous == .held else {
            object.add("error", previous == .finishing ? "the job is finishing (its file is complete); it was not held"
                           : "the job has ended (\(previous.rawValue)); nothing to pause")
            return .json(409, object)
        }
        object.add("state", JobState.held.rawValue)
        return .json(200, object)
    }

    private func resume(_ id: String) throws -> HTTPResponse {
        guard let previous = try store.unhold(id) else { return Self.unknown(id) }
        guard previous == .held else {
            return .error(409, "job \(id) is \(previous.rawValue); only held jobs are resumed")
        }
        changed()
        var object = JSONObject()
        object.add("id", id)
        object.add("previous_state", previous.rawValue)
        object.add("state", JobState.queued.rawValue)
        return .json(200, object)
    }

    /// `?value=N` sets the priority; without it the job goes ahead of every job waiting now.
    private func prioritize(_ id: String, value: String?) throws -> HTTPResponse {
        let priority: Int
        if let value {
            guard let number = Int(value), abs(number) <= 1_000_000 else {
                return .error(400, "value must be a whole number from -1000000 to 1000000, not \(value)")
            }
            priority = number
        } else {
            priority = try store.priorityAheadOfWaitingJobs()
        }
        guard let previous = try store.setPriority(id, to: priority) else { return Self.unknown(id) }
        changed()
        var object = JSONObject()
        object.add("id", id)
        object.add("state", previous.rawValue)
        object.add("priority", priority)
        return .json(200, object)
    }

    /// `?rate=512K|off|default`: the job's own rate limit (`transferd limit --job`).
    private func limitJob(_ id: String, rate: String?) throws -> HTTPResponse {
        guard let rate else { return .error(400, "give rate=RATE (512K, 10M), off or default") }
        let value: String?
        do { value = try JobRateChange.stored(rate) } catch { return .error(400, "\(error)") }
        guard let previous = try store.setJobRate(id, to: value) else { return Self.unknown(id) }
        changed()
        var object = JSONObject()
        object.add("id", id)
        object.add("state", previous.rawValue)
        if let bytes = value.flatMap(Int64.init) { object.add("rate", bytes) } else { object.add("rate", "default") }
        return .json(200, object)
    }

    /// The whole queue: nothing new starts; the jobs under way are held too unless they may finish.
    private func pauseQueue(finishRunning: Bool) throws -> HTTPResponse {
        let stopping = try store.pauseQueue(finishRunning: finishRunning)
        var object = JSONObject()
        object.add("queue_paused", .bool(true))
        object.add("stopping", stopping)
        return .json(200, object)
    }

    /// The whole queue runs again, and every held job is queued again.
    private func resumeQueue() throws -> HTTPResponse {
        let resumed = try store.resumeQueue().resumed
        changed()
        var object = JSONObject()
        object.add("queue_paused", .bool(false))
        object.add("resumed", resumed)
        return .json(200, object)
    }

    /// The queue's limits as stored (`rate_limit`, `jobs`; null when not set) and what the rate
    /// limit keeps now.
    private func limit() throws -> HTTPResponse {
        .json(200, Self.limitObject(try store.settings()))
    }

    /// `?rate=TEXT` sets the limit for every run of the queue (a rate, `UP:DOWN`, `off` or a
    /// timetable, as `transferd limit` takes it); `?jobs=N` (or `default`) the jobs each run
    /// transfers at once; `?clear=1` drops both. A mistake in either changes nothing.
    private func setLimit(_ rate: String?, jobs: String?, perHost: String?, clear: Bool) throws -> HTTPResponse {
        let change: LimitChange
        do { change = try LimitChange(rate: rate, jobs: jobs, perHost: perHost) } catch { return .error(400, "\(error)") }
        if clear {
            guard change.isEmpty else { return .error(400, "give rate=LIMIT, jobs=N, per_host=N or clear=1, not both") }
            try LimitChange.clearAll.apply(to: store)
        } else {
            guard !change.isEmpty else {
                return .error(400, "give rate=LIMIT (such as 10M, 1M:off, off or 08:00,512K 19:00,off), jobs=N, per_host=N or clear=1")
            }
            try change.apply(to: store)
        }
        changed()
        return .json(200, Self.limitObject(try store.settings()))
    }

    static func limitObject(_ settings: QueueSettings, now: Date = Date()) -> JSONObject {
        var object = JSONObject()
        let schedule = settings.rateLimit.flatMap { try? RateSchedule.parse($0) }
        object.add("rate_limit", schedule.map { .string($0.text) } ?? .null)
        object.add("timetable", .bool(schedule?.isTimetable ?? false))
        object.add("now", schedule.map { .string($0.limit(at: now).described) } ?? .null)
        object.add("jobs", settings.jobs.map { .int(Int64($0)) } ?? .null)
        object.add("per_host", settings.perHost.map { .int(Int64($0)) } ?? .null)
        return object
    }

    /// `?state=done,failed&older_than=7d`, as `transferd purge` takes them (default: done, any age).
    private func purge(states: String?, olderThan: String?) throws -> HTTPResponse {
        let selection: PurgeSelection
        do { selection = try PurgeSelection(states: states, olderThan: olderThan) } catch { return .error(400, "\(error)") }
        let count = try store.purge(states: Set(selection.states), finishedBefore: selection.finishedBefore(runActive: true),
                                    excluding: layout.jobsOwedHooks())
        changed()
        var object = JSONObject()
        object.add("purged", count)
        object.add("states", .array(selection.states.map { .string($0.rawValue) }))
        return .json(200, object)
    }

    private func retry(_ id: String) throws -> HTTPResponse {
        guard let record = try store.job(id) else { return Self.unknown(id) }
        guard try store.requeue(id: id) > 0 else {
            return .error(409, "job \(id) is \(record.state.rawValue); only failed or cancelled jobs are retried")
        }
        try ResultFiles(layout: layout, store: store).update(sourceFiles: [record.sourceFile])
        changed()
        var object = JSONObject()
        object.add("id", id)
        object.add("previous_state", record.state.rawValue)
        object.add("state", "queued")
        return .json(200, object)
    }

    // MARK: The run

    private func summary() throws -> HTTPResponse {
        // Read before the store: a client that follows the stream from this id misses nothing
        // that happened after the counts (it may see an event the counts already hold).
        let eventID = EventID(run: monitor.journal.run, number: monitor.journal.newest)
        let counts = try store.counts()
        var object = JSONObject()
        object.add("event_id", eventID.description)
        var jobs = JSONObject()
        for state in JobState.allCases { jobs.add(state.rawValue, counts[state] ?? 0) }
        object.add("jobs", .object(jobs))
        let settings = try store.settings()
        object.add("queue_paused", .bool(settings.paused))
        object.add("rate_limit", settings.rateLimit.map { .string($0) } ?? .null)
        object.add("jobs_limit", settings.jobs.map { .int(Int64($0)) } ?? .null)
        object.add("run", .object(monitor.totals))
        object.add("hosts", .array(hosts().sorted { $0.host < $1.host }.map { use in
            var item = JSONObject()
            item.add("host", use.host)
            item.add("connections", use.connections)
            item.add("limit", use.limit)
            return .object(item)
        }))
        object.add("workers", .array(try store.workers().map { worker in
            var item = JSONObject()
            item.add("name", worker.name)
            item.add("host", worker.host)
            item.add("pid", Int64(worker.pid))
            item.add("last_heartbeat", JSONObject.timestamp(worker.lastHeartbeat))
            item.add("jobs", worker.jobsHeld)
            return .object(item)
        }))
        return .json(200, object)
    }

    private func metrics() throws -> HTTPResponse {
        let text = MetricsText.render(tally: monitor.counters, jobs: try store.counts(), hosts: hosts(),
                                      eventStreams: monitor.journal.streams)
        return HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: Data(text.utf8))
    }

    // MARK: Wording

    static func unknown(_ id: String) -> HTTPResponse {
        .error(404, "no job \(id)", fix: "GET /v1/jobs lists the jobs and their ids")
    }

    static func rejected(_ rejection: JobFileRejection, status: Int) -> HTTPResponse {
        var object = JSONObject()
        object.add("error", status == 409 ? "the job file was refused: an id belongs to another job" : "the job file is not valid")
        object.add("errors", .array(rejection.errors.map { error in
            var item = JSONObject()
            item.add("job", error.job.map { .int(Int64($0)) } ?? .null)
            item.add("id", error.id.map(JSONObject.Value.string) ?? .null)
            item.add("field", error.field.map(JSONObject.Value.string) ?? .null)
            if let line = error.line, let column = error.column {
                item.add("line", .int(Int64(line)))
                item.add("column", .int(Int64(column)))
            }
            item.add("message", error.message)
            item.add("fix", error.fix.map(JSONObject.Value.string) ?? .null)
            return .object(item)
        }))
        object.add("text", rejection.description)
        return .json(status, object)
    }
}

extension JobRecord {
    /// A job as the control API shows it: secrets redacted as in every other view.
    var apiJSON: JSONObject {
        func date(_ value: Date?) -> JSONObject.Value { value.map { .string(JSONObject.timestamp($0)) } ?? .null }
        var object = JSONObject()
        object.add("id", id)
        object.add("kind", spec.kind.rawValue)
        object.add("state", state.rawValue)
        object.add("url", Redaction.url(string: spec.url))
        object.add("destination", spec.destination.map(JSONObject.Value.string) ?? .null)
        object.add("source", spec.source.map(JSONObject.Value.string) ?? .null)
        object.add("bytes_done", bytesDone)
        object.add("bytes_total", bytesTotal.map(JSONObject.Value.int) ?? .null)
        object.add("speed", speed.map { .int(Int64($0)) } ?? .null)
        // Failed attempts in a row without progress: the retry budget used (a job done at its
        // first try has 0). Named for what it counts; "attempts" read as tries made, one short.
        object.add("failed_attempts", attempts)
        object.add("priority", spec.priority)
        object.add("last_error", lastError.map { .string(Redaction.message($0)) } ?? .null)
        object.add("sha256", sha256.map(JSONObject.Value.string) ?? .null)
        object.add("created_at", date(createdAt))
        object.add("started_at", date(startedAt))
        object.add("finished_at", date(finishedAt))
        object.add("next_attempt_at", date(nextAttemptAt))
        object.add("worker", worker.map(JSONObject.Value.string) ?? .null)
        object.add("job_file", sourceFile)
        // What the job's hook did (written by this process, so it parses).
        object.add("hook", hook.flatMap { try? JSONParser.parse($0) }.map(JSONObject.Value.init(parsed:)) ?? .null)
        return object
    }
}
