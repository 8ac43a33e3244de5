import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs the hooks jobs owe, off the run loop: at most four at once, each
/// command with its timeout, each notify POST retried with backoff. What a hook
/// did is recorded on its job (`hook` in the store); the outbox entry goes
/// only after that, so a hook cut off by a killed process runs on the next start.
final class HookRunner: Sendable {
    private let store: QueueStore
    private let outbox: HookOutbox
    let hooks: RunHooks
    private let workingDirectory: String
    /// The notify signing secret, from `TRANSFERD_NOTIFY_SECRET`.
    private let secret: String?
    /// Four at once; the rest wait in the queue, not on parked threads (10,000 owed hooks must
    /// not take every thread of the process).
    private let queue: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "transferd.hooks"
        queue.maxConcurrentOperationCount = 4
        return queue
    }()
    private let running = DispatchGroup()
    /// The first wait between notify attempts (doubled each time; tests shorten it).
    let notifyBaseDelay: TimeInterval
    static let notifyAttempts = 5
    /// Lines of a command's output kept on the job.
    static let outputLines = 20

    init(store: QueueStore, layout: QueueLayout, hooks: RunHooks, notifyBaseDelay: TimeInterval = 1) {
        self.store = store
        self.outbox = HookOutbox(directory: layout.stateDirectory + "/hooks")
        self.hooks = hooks
        self.workingDirectory = layout.root
        self.notifyBaseDelay = notifyBaseDelay
        let secret = ProcessInfo.processInfo.environment["TRANSFERD_NOTIFY_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        if let secret { Redaction.registerSecret(secret) }
        self.secret = secret
    }

    /// What a job's end owes, if anything.
    func due(_ record: JobRecord, _ state: JobState, bytes: Int64? = nil, sha256: String? = nil, error: String? = nil) -> DueHook? {
        DueHook.due(for: record.spec, state: state, run: hooks, bytes: bytes, sha256: sha256, error: error)
    }

    /// Before the jobs' ends are recorded: their hooks are owed from now on.
    /// - Returns: the hooks as owed (each names its outbox entry): what `start` and `forget` take.
    func owe(_ due: [DueHook]) throws -> [DueHook] {
        try outbox.record(due)
    }

    /// `owe`, as a value the caller settles once the store has answered (`OwedHooks.settle`).
    func owing(_ due: [DueHook]) throws -> OwedHooks {
        OwedHooks(runner: self, hooks: try owe(due))
    }

    /// The ends were not recorded (another worker took the job, a user cancelled it): nothing is owed.
    func forget(_ due: [DueHook]) {
        for hook in due { outbox.remove(hook) }
    }

    /// The jobs whose hook for ending in `state` is owed now.
    func owedJobs(in state: JobState) -> Set<String> {
        Set(outbox.entries().filter { $0.state == state }.map(\.jobID))
    }

    /// After the ends were recorded.
    func start(_ due: [DueHook]) {
        for hook in due {
            running.enter()
            queue.addOperation { [self] in
                defer { running.leave() }
                execute(hook)
            }
        }
    }

    /// At the start of a run: hooks an earlier process owed and did not finish, for jobs that
    /// did end that way (an entry whose job is in another state now is dropped: the job's end
    /// was never recorded, and it will owe its hook again when it does end).
    func startLeftovers() throws {
        var owed: [DueHook] = []
        for hook in outbox.entries() {
            if try store.job(hook.jobID)?.state == hook.state { owed.append(hook) } else { outbox.remove(hook) }
        }
        start(owed)
    }

    /// Waits for the hooks under way (each ends within its timeout).
    func wait(timeout: TimeInterval) {
        _ = running.wait(timeout: .now() + timeout)
    }

    // MARK: Running one

    private func execute(_ hook: DueHook) {
        var hook = hook
        if hook.state == .done, hook.sha256 == nil, hook.kind == JobSpec.Kind.download.rawValue, let destination = hook.destination {
            // Downloads without an expected digest are not hashed as they arrive; a hook gets one anyway.
            hook.sha256 = try? SHA256Hasher.hex(ofFileAt: destination)
        }
        var result = JSONObject()
        result.add("state", hook.state.rawValue)
        if let command = hook.command { result.add("command", .object(run(command, environment: hook.environment))) }
        if let url = hook.notify { result.add("notify", .object(notify(url, body: hook.notifyBody(at: Date())))) }
        result.add("at", JSONObject.timestamp(Date()))
        // A store that cannot record it now leaves the entry: the next start runs the hook again.
        guard (try? store.recordHook(result.serialized(), for: hook.jobID)) != nil else { return }
        outbox.remove(hook)
    }

    /// What a hook command inherits from the run: enough to find programs and write files, not the
    /// run's secrets (AWS keys, the store's URL, the API token, the notify secret).
    static let inheritedVariables: Set<String> = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE",
                                                  "TZ", "TMPDIR", "TERM"]

    private func run(_ command: [String], environment: [String: String]) -> JSONObject {
        var result = JSONObject()
        let started = Date()
        let inherited = ProcessInfo.processInfo.environment.filter { Self.inheritedVariables.contains($0.key) }
        // No shell: the first item is the program, found on PATH like execvp does. The command
        // and whatever it starts in its process group end with it or at the timeout.
        let outcome = HookProcess.run(command, environment: inherited.merging(environment) { _, hook in hook },
                                      directory: workingDirectory, timeout: hooks.timeout, outputLines: Self.outputLines)
        switch outcome.ending {
        case .notStarted(let reason):
            result.add("status", "not started")
            result.add("error", "\(command[0]): \(reason)")
            return result
        case .timedOut:
            result.add("status", "timed out")
        case .signalled(let signal):
            result.add("status", "killed")
            result.add("signal", Int(signal))
        case .exited(let status):
            result.add("status", status == 0 ? "ok" : (status == 127 ? "not found" : "failed"))
            result.add("exit", Int(status))
        }
        result.add("seconds", .number((Date().timeIntervalSince(started) * 1000).rounded() / 1000))
        result.add("output", .array(outcome.output.map { .string(Redaction.message($0)) }))
        return result
    }

    private func notify(_ address: String, body: String) -> JSONObject {
        var result = JSONObject()
        guard let url = URL(string: address) else {
            result.add("status", "failed")
            result.add("error", "not a URL")
            return result
        }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("transferd", forHTTPHeaderField: "User-Agent")
        if let secret { request.setValue(DueHook.signature(body: body, secret: secret), forHTTPHeaderField: "X-Transferd-Signature") }
        var lastError = ""
        for attempt in 1...Self.notifyAttempts {
            let (status, retryAfter, error) = send(request)
            if let status, (200..<300).contains(status) {
                result.add("status", "sent")
                result.add("http", status)
                result.add("attempts", attempt)
                return result
            }
            lastError = status.map { "HTTP \($0)" } ?? error ?? "no answer"
            // Whether asking again may help is the one classifier's answer, as for transfers: no
            // answer, 408, 425, 429 and passing 5xx may; 501, 505, other 4xx and 3xx will not.
            var wait = notifyBaseDelay * pow(2, Double(attempt - 1))
            if let status {
                switch RetryPolicy.Failure.http(status: status, retryAfter: retryAfter).retryability {
                case .never:
                    result.add("status", "failed")
                    result.add("error", lastError)
                    result.add("attempts", attempt)
                    return result
                case .withBackoff(let asked):
                    // A receiver's Retry-After is kept, up to a minute (a hook holds a run's end).
                    if let asked { wait = max(wait, min(asked.delay(from: Date()), 60)) }
                case .immediately:
                    break
                }
            }
            if attempt < Self.notifyAttempts { Thread.sleep(forTimeInterval: wait) }
        }
        result.add("status", "failed")
        result.add("error", Redaction.message(lastError))
        result.add("attempts", Self.notifyAttempts)
        return result
    }

    /// One POST: the status once its head arrives (the body is not read: a receiver that sends an
    /// endless one costs nothing), or why there was none, within 30 s in all.
    private func send(_ request: URLRequest) -> (status: Int?, retryAfter: RetryAfter?, error: String?) {
        let reader = StatusOnly()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 15
        configuration.timeoutIntervalForResource = 30
        let session = URLSession(configuration: configuration, delegate: reader, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: request).resume()
        reader.done.wait()
        let answer = reader.answer.current
        return (answer.status, answer.retryAfter, answer.error)
    }
}

/// A data delegate that keeps a response's status and cancels the rest.
// `done` is signalled once, which `answer` (a lock) decides.
private final class StatusOnly: NSObject, URLSessionDataDelegate, Sendable {
    let done = DispatchSemaphore(value: 0)
    /// The status with its Retry-After, the error without one, and whether `done` was signalled.
    let answer = Locked<(status: Int?, retryAfter: RetryAfter?, error: String?, signalled: Bool)>((nil, nil, nil, false))

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        let http = response as? HTTPURLResponse
        answer.withLock { answer in
            answer.status = http?.statusCode
            answer.retryAfter = (http?.value(forHTTPHeaderField: "Retry-After")).flatMap(RetryAfter.init(header:))
        }
        completionHandler(.cancel)
        // FoundationNetworking ignores that disposition and reads the body on, to its end or to the
        // 30 s resource timeout (an endless one to the timeout): the status answers now, and the task
        // is cancelled by hand, from another thread (cancel() waits for FoundationNetworking's work
        // queue, see URLSessionExchange).
        finish()
        DispatchQueue.global().async { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        answer.withLock { answer in
            if answer.status == nil { answer.error = error.map { Redaction.message($0.localizedDescription) } ?? "no answer" }
        }
        finish()
    }

    private func finish() {
        let first = answer.withLock { answer -> Bool in
            defer { answer.signalled = true }
            return !answer.signalled
        }
        if first { done.signal() }
    }
}

/// The last lines of a command's output, in bounded memory.
final class OutputTail: Sendable {
    private let limit: Int
    private let kept = Locked(Data())
    /// Bytes kept at most: a command that writes gigabytes costs nothing.
    static let byteLimit = 16 << 10

    init(lines: Int) {
        limit = lines
    }

    func append(_ data: Data) {
        kept.withLock { kept in
            kept.append(data)
            if kept.count > Self.byteLimit * 2 { kept = kept.suffix(Self.byteLimit) }
        }
    }

    var lines: [String] {
        kept.withLock { kept in
            let text = String(decoding: kept.suffix(Self.byteLimit), as: UTF8.self)
            var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            if lines.last == "" { lines.removeLast() }
            return Array(lines.suffix(limit))
        }
    }
}

/// What jobs' ends owe their hooks, from the moment before the store records the ends (owed on
/// disk, so a process killed between the two runs them at least once) until the store has
/// answered: `settle` then starts the hooks of the ends it recorded and forgets the others
/// (another worker took the job, a user cancelled it). The one sequence every end of a job
/// goes through, one job or a batch.
struct OwedHooks {
    fileprivate let runner: HookRunner
    fileprivate let hooks: [DueHook]

    /// Starts the hooks of the jobs whose end was recorded, forgets the rest.
    func settle(recorded: (_ jobID: String) -> Bool) {
        runner.forget(hooks.filter { !recorded($0.jobID) })
        runner.start(hooks.filter { recorded($0.jobID) })
    }
}
