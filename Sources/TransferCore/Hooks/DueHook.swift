import Foundation

/// The hooks a run gives every job that has none of its own (`--on-done`,
/// `--on-failed`, `--notify`).
package struct RunHooks: Sendable, Equatable {
    package var onDone: [String]?
    package var onFailed: [String]?
    package var notify: String?
    /// How long a hook command may run before it is stopped (SIGTERM, then SIGKILL).
    package var timeout: TimeInterval = 60
    /// Whether job files (and the API) may give `on_done` / `on_failed` commands (`--allow-job-hooks`).
    package var allowJobCommands = false

    package init(onDone: [String]? = nil, onFailed: [String]? = nil, notify: String? = nil) {
        self.onDone = onDone
        self.onFailed = onFailed
        self.notify = notify
    }

    /// A command given as a flag: a JSON list (`["/bin/x", "a b"]`), or words split at spaces.
    package static func command(flag text: String) -> Result<[String], HookFlagError> { HookCommand.parse(flag: text) }

    /// Why `url` cannot be a notify URL; nil when it can.
    package static func notifyProblem(_ url: String) -> String? { HookCommand.notifyProblem(url) }
}

/// A hook that is owed: a job ended done or failed and has a command or a
/// notify URL for that. Written to the outbox before the job's end is recorded,
/// removed once the hook ran, so a process killed in between runs it on its
/// next start (at least once).
struct DueHook: Equatable, Sendable {
    var jobID: String
    /// "done" or "failed".
    var state: JobState
    var command: [String]?
    var notify: String?
    var kind: String
    /// The job's URL with its secrets redacted.
    var url: String
    var destination: String?
    var source: String?
    var bytes: Int64?
    var sha256: String?
    var error: String?
    /// The outbox file that holds it, once it is owed (not part of the entry's content).
    var entry: String?

    /// What the job's end owes, if anything: the job's own hooks first, then the run's.
    static func due(for spec: JobSpec, state: JobState, run: RunHooks, bytes: Int64?, sha256: String?, error: String?) -> DueHook? {
        let command: [String]?
        switch state {
        case .done: command = spec.onDone ?? run.onDone
        case .failed: command = spec.onFailed ?? run.onFailed
        default: return nil
        }
        let notify = spec.notify ?? run.notify
        guard command != nil || notify != nil else { return nil }
        return DueHook(jobID: spec.id, state: state, command: command, notify: notify, kind: spec.kind.rawValue,
                       url: Redaction.url(string: spec.url), destination: spec.destination, source: spec.source,
                       bytes: bytes, sha256: sha256, error: error.map(Redaction.message))
    }

    /// The hook command's environment, added to the run's own.
    var environment: [String: String] {
        var values = ["TRANSFERD_JOB_ID": jobID, "TRANSFERD_STATUS": state.rawValue, "TRANSFERD_KIND": kind, "TRANSFERD_URL": url]
        values["TRANSFERD_DEST"] = destination ?? ""
        values["TRANSFERD_SOURCE"] = source ?? ""
        values["TRANSFERD_BYTES"] = bytes.map(String.init) ?? ""
        values["TRANSFERD_SHA256"] = sha256 ?? ""
        values["TRANSFERD_ERROR"] = error ?? ""
        return values
    }

    /// The body of the notify POST: the job's outcome.
    func notifyBody(at date: Date) -> String {
        var object = JSONObject()
        object.add("event", "job_\(state.rawValue)")
        object.add("id", jobID)
        object.add("state", state.rawValue)
        object.add("kind", kind)
        object.add("url", url)
        object.add("destination", destination.map(JSONObject.Value.string) ?? .null)
        object.add("source", source.map(JSONObject.Value.string) ?? .null)
        object.add("bytes", bytes.map(JSONObject.Value.int) ?? .null)
        object.add("sha256", sha256.map(JSONObject.Value.string) ?? .null)
        object.add("error", error.map(JSONObject.Value.string) ?? .null)
        object.add("at", JSONObject.timestamp(date))
        return object.serialized()
    }

    /// The `X-Transferd-Signature` header's value: HMAC-SHA256 of the body with the secret.
    static func signature(body: String, secret: String) -> String {
        "sha256=" + HMACSHA256.mac(key: Array(secret.utf8), message: body).hexString
    }

    // MARK: The outbox's form

    var stored: String {
        var object = JSONObject()
        object.add("id", jobID)
        object.add("state", state.rawValue)
        if let command { object.add("command", .array(command.map { .string($0) })) }
        if let notify { object.add("notify", notify) }
        object.add("kind", kind)
        object.add("url", url)
        if let destination { object.add("destination", destination) }
        if let source { object.add("source", source) }
        if let bytes { object.add("bytes", bytes) }
        if let sha256 { object.add("sha256", sha256) }
        if let error { object.add("error", error) }
        return object.serialized()
    }

    init(jobID: String, state: JobState, command: [String]?, notify: String?, kind: String, url: String,
         destination: String?, source: String?, bytes: Int64?, sha256: String?, error: String?) {
        self.jobID = jobID
        self.state = state
        self.command = command
        self.notify = notify
        self.kind = kind
        self.url = url
        self.destination = destination
        self.source = source
        self.bytes = bytes
        self.sha256 = sha256
        self.error = error
    }

    /// Reads an outbox entry; nil for anything that is not one (it is skipped, not run).
    init?(stored text: String) {
        guard case .object(let members)? = try? JSONParser.parse(text),
              case .string(let id)? = members["id"], case .string(let stateName)? = members["state"],
              let state = JobState(rawValue: stateName), state == .done || state == .failed else { return nil }
        func string(_ key: String) -> String? {
            if case .string(let value)? = members[key] { return value }
            return nil
        }
        var command: [String]?
        if case .array(let items)? = members["command"] {
            command = items.compactMap { if case .string(let word) = $0 { return word } else { return nil } }
            guard command?.count == items.count, HookCommand.problem(command!) == nil else { return nil }
        }
        var bytes: Int64?
        if case .integer(let value)? = members["bytes"] { bytes = value }
        self.init(jobID: id, state: state, command: command, notify: string("notify"), kind: string("kind") ?? "",
                  url: string("url") ?? "", destination: string("destination"), source: string("source"),
                  bytes: bytes, sha256: string("sha256"), error: string("error"))
        guard self.command != nil || notify != nil else { return nil }
    }
}

/// Checks of hook commands and notify URLs, shared by job files and flags.
enum HookCommand {
    static func problem(_ argv: [String]) -> String? {
        guard let program = argv.first, !program.isEmpty else { return "the command is empty: its first item is the program to run" }
        if argv.count > 256 { return "the command has \(argv.count) items; at most 256" }
        if argv.contains(where: { $0.utf8.count > 4096 }) { return "an item of the command is longer than 4096 bytes" }
        if argv.contains(where: { $0.contains("\0") }) { return "an item of the command holds a NUL character" }
        return nil
    }

    static func notifyProblem(_ text: String) -> String? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
              let host = url.host, !host.isEmpty else {
            return "\"\(Redaction.url(string: text))\" is not an http:// or https:// URL"
        }
        return nil
    }

    /// A command given as a flag: a JSON list (`["/bin/x", "a b"]`), or words split at spaces.
    static func parse(flag text: String) -> Result<[String], HookFlagError> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        var argv: [String]
        if trimmed.hasPrefix("[") {
            guard case .array(let items)? = try? JSONParser.parse(trimmed) else {
                return .failure(HookFlagError(description: "\(text) is not a JSON list of strings"))
            }
            argv = []
            for item in items {
                guard case .string(let word) = item else { return .failure(HookFlagError(description: "\(text) holds a non-string")) }
                argv.append(word)
            }
        } else {
            argv = trimmed.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        }
        if let problem = problem(argv) { return .failure(HookFlagError(description: problem)) }
        return .success(argv)
    }
}

package struct HookFlagError: Error, CustomStringConvertible {
    package let description: String
}
