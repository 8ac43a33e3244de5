import Foundation
import TransferCore

/// `pause`, `resume`, `prioritize` and `limit`: a person steering a queue, running or not. They change the store
/// only; a run working the queue (here or, with --store, any worker of the fleet) sees a held
/// job within a second and stops it with its progress saved, and sees the queue paused before
/// its next claim.
enum SteerCommands {
    private static let queueSpec = QueueFlags.queue.spec
    private static let help = StandardFlags.help.spec

    static let pauseState = Flag.string("--state", value: "STATE", help: "every job in STATE: queued, waiting, paused or running")
    static let pauseHost = Flag.string("--host", value: "HOST", help: "every job of HOST that is not held or ended")
    static let pauseAll = Flag.presence("--all", help: "the whole queue: nothing new starts, and the jobs under way stop, until `transferd resume --all`")
    static let finishRunning = Flag.presence("--finish-running", help: "with --all: the jobs under way finish; only new starts wait")

    static let pauseHelp = CommandHelp(name: "pause", usage: "transferd pause ID... | --state STATE | --host HOST | --all [--finish-running] [--queue QUEUE_DIR] [--store URL]",
                               summary: "Holds jobs until `transferd resume`: a held job keeps its partial file and goes on from it; "
                                   + "a running one stops within a second.",
                               options: [queueSpec, QueueFlags.store.spec, pauseState.spec, pauseHost.spec, pauseAll.spec, finishRunning.spec, help])

    static func pause(_ argv: [String]) -> ExitCode {
        return command(pauseHelp, argv, select: { try JobSelection(PauseOptions($0)) }) { arguments, store in
            let flags = PauseOptions(arguments)
            let selection = try JobSelection(flags)
            if flags.finishRunning && !selection.all {
                throw UsageError("--finish-running goes with --all (it lets the jobs under way finish while the queue is paused)")
            }
            if selection.all {
                let finishRunning = flags.finishRunning
                let stopping = try store.pauseQueue(finishRunning: finishRunning)
                Output.out("the queue is paused: no job starts until `transferd resume --all`"
                           + (finishRunning ? "; the jobs under way finish\n"
                               : stopping > 0 ? "; \(stopping) running job\(stopping == 1 ? "" : "s") stop within a second, progress kept\n" : "\n"))
                return .success
            }
            if let ids = selection.ids {
                try change(ids, in: store, by: store.hold, saying: holdLine)
                return .success
            }
            var held = 0, stopping = 0
            try selection.forEach(in: store, states: JobTransition.hold.sources) { job in
                guard let previous = try store.hold(job.id), previous.after(.hold) != nil else { return }
                held += 1
                if previous == .running { stopping += 1 }
            }
            Output.out("\(held) job\(held == 1 ? "" : "s") held" + (stopping > 0 ? " (\(stopping) running, stopping within a second)" : "")
                       + (held > 0 ? "; `transferd resume` takes them up again\n" : "\n"))
            return .success
        }
    }

    static let resumeHost = Flag.string("--host", value: "HOST", help: "every held job of HOST")
    static let resumeAll = Flag.presence("--all", help: "the whole queue: it runs again, and every held job is queued again")

    static let resumeHelp = CommandHelp(name: "resume", usage: "transferd resume ID... | --host HOST | --all [--queue QUEUE_DIR] [--store URL]",
                               summary: "Queues held jobs again; each goes on from where it stopped. --all also lets a paused queue run.",
                               options: [queueSpec, QueueFlags.store.spec, resumeHost.spec, resumeAll.spec, help])

    static func resume(_ argv: [String]) -> ExitCode {
        return command(resumeHelp, argv, select: { try JobSelection(ResumeOptions($0)) }) { arguments, store in
            let selection = try JobSelection(ResumeOptions(arguments))
            if let ids = selection.ids {
                try change(ids, in: store, by: store.unhold, saying: unholdLine)
                if try store.isQueuePaused() {
                    Output.out("the queue itself is paused: nothing starts until `transferd resume --all`\n")
                }
                return .success
            }
            if selection.all {
                let (wasPaused, resumed) = try store.resumeQueue()
                Output.out((wasPaused ? "the queue runs again" : "the queue was not paused")
                           + "; \(resumed) held job\(resumed == 1 ? "" : "s") queued again\n")
                return .success
            }
            var resumed = 0
            try selection.forEach(in: store, states: [.held]) { job in
                if try store.unhold(job.id) == .held { resumed += 1 }
            }
            Output.out("\(resumed) held job\(resumed == 1 ? "" : "s") queued again\n")
            return .success
        }
    }

    static let priority = Flag.string("--priority", value: "N", help: "the priority to set (higher runs first; job files default to 0)")
    static let top = Flag.presence("--top", help: "ahead of every job waiting now (the default)")

    static let prioritizeHelp = CommandHelp(name: "prioritize", usage: "transferd prioritize ID... [--priority N | --top] [--queue QUEUE_DIR] [--store URL]",
                               summary: "Changes the order jobs start in: --top (the default) runs them next, --priority N sets it.",
                               options: [queueSpec, QueueFlags.store.spec, priority.spec, top.spec, help])

    static func prioritize(_ argv: [String]) -> ExitCode {
        return command(prioritizeHelp, argv) { arguments, store in
            let flags = PrioritizeOptions(arguments)
            guard !flags.positionals.isEmpty else { throw UsageError("give the job IDs to move") }
            guard !(flags.priority != nil && flags.top) else { throw UsageError("give --priority N or --top, not both") }
            let priority: Int
            if let text = flags.priority {
                guard let value = Int(text), abs(value) <= 1_000_000 else {
                    throw UsageError("--priority takes a whole number from -1000000 to 1000000, not '\(text)'")
                }
                priority = value
            } else {
                priority = try store.priorityAheadOfWaitingJobs()
            }
            for typed in flags.positionals {
                let id = try JobIDs.resolve(typed, in: store)
                guard let state = try store.setPriority(id, to: priority) else { throw QueueError.unknownJob(typed) }
                let note: String
                switch state {
                case .queued, .waiting, .paused: note = flags.priority != nil ? "" : "; it starts next"
                case .held: note = "; it is held: `transferd resume \(id)` lets it run"
                case .running, .finishing: note = "; it is under way already"
                case .done, .failed, .cancelled: note = "; it has ended (\(state.rawValue)), so this changes nothing until it is retried"
                }
                Output.out("\(id): priority \(priority)\(note)\n")
            }
            return .success
        }
    }

    static let jobs = Flag.string("--jobs", value: "N", help: "jobs each run transfers at once, 1 to 1000 (default: each run's own --jobs)")
    static let perHost = Flag.string("--per-host", value: "N",
                                     help: "connections one host gets at once in each run, 1 to 1000 (default: each run's own --per-host)")
    static let clear = Flag.presence("--clear", help: "drop what was set here: each run keeps its own --limit-rate, --jobs and --per-host again")
    static let job = Flag.string("--job", value: "ID",
                                 help: "one job's own rate instead: RATE, off (none at all) or default (its job file's limit_rate); "
                                     + "a running download follows within a second, an upload from its next attempt")

    static let limitHelp = CommandHelp(name: "limit", usage: "transferd limit [RATE | UP:DOWN | off | 'HH:MM,RATE HH:MM,RATE ...'] [--jobs N] [--per-host N] | --clear "
                                   + "[--queue QUEUE_DIR] [--store URL]",
                               summary: "Shows or sets the queue's bandwidth limit and how many jobs each run transfers at once, for "
                                   + "every run and worker of it; a running one keeps a change within a second. RATE caps uploads and "
                                   + "downloads together (512K, 10M); UP:DOWN caps each (either may be off); a timetable changes it "
                                   + "by the local time of day. `default` (for the rate, --jobs or --per-host) gives runs their own back.",
                               options: [queueSpec, QueueFlags.store.spec, jobs.spec, perHost.spec, clear.spec, job.spec, help])

    static func limit(_ argv: [String]) -> ExitCode {
        return command(limitHelp, argv) { arguments, store in
            let flags = LimitOptions(arguments)
            if let typed = flags.job {
                guard flags.positionals.count == 1, [jobs.spec, perHost.spec, clear.spec].allSatisfy({ !flags.given($0) }) else {
                    throw UsageError("--job ID takes one rate (512K, 10M), off or default, and nothing else")
                }
                let value: String?
                do { value = try JobRateChange.stored(flags.positionals[0]) } catch { throw UsageError("\(error)") }
                let id = try JobIDs.resolve(typed, in: store)
                guard let previous = try store.setJobRate(id, to: value) else { throw QueueError.unknownJob(id) }
                let rate = value.flatMap(Int64.init)
                Output.out(value == nil ? "\(id): back to its job file's limit_rate" : "\(id): \(JobRateChange.described(rate))")
                Output.out(previous == .running ? "; the running transfer follows within a second (an upload from its next attempt)\n"
                           : previous.isFinal ? " (the job has ended: it applies if it runs again)\n" : "\n")
                return .success
            }
            let given = flags.positionals.joined(separator: " ")
            let change: LimitChange
            do {
                change = try LimitChange(rate: given.isEmpty ? nil : given, jobs: flags.jobs, perHost: flags.perHost)
            } catch { throw UsageError("\(error)") }
            if flags.clear {
                guard change.isEmpty else { throw UsageError("give a limit, --jobs or --per-host, or --clear, not both") }
                try LimitChange.clearAll.apply(to: store)
                Output.out(limitLines(QueueSettings()))
                return .success
            }
            guard !change.isEmpty else {
                Output.out(limitLines(try store.settings()))
                return .success
            }
            try change.apply(to: store)
            Output.out(limitLines(try store.settings()) + "a running queue keeps it within a second; `transferd limit --clear` drops it\n")
            return .success
        }
    }

    static let states = Flag.string("--state", value: "STATES", help: "which ended jobs: done, failed, cancelled, comma-separated (default: done)")
    static let olderThan = Flag.string("--older-than", value: "AGE", help: "only jobs that ended longer ago than AGE: 90s, 30m, 12h, 7d")

    static let purgeHelp = CommandHelp(name: "purge", usage: "transferd purge [--state done,failed,cancelled] [--older-than AGE] [--queue QUEUE_DIR] [--store URL]",
                               summary: "Forgets ended jobs, so a long-lived queue's store stays small. Result files already written "
                                   + "in done/ and failed/ stay; the job files stay known, so dropping one again adds nothing.",
                               options: [queueSpec, QueueFlags.store.spec, states.spec, olderThan.spec, help])

    static func purge(_ argv: [String]) -> ExitCode {
        return command(purgeHelp, argv) { arguments, store in
            let flags = PurgeOptions(arguments)
            guard flags.positionals.isEmpty else { throw UsageError("purge takes no job IDs; choose jobs with --state and --older-than") }
            let selection: PurgeSelection
            do {
                selection = try PurgeSelection(states: flags.states, olderThan: flags.olderThan)
            } catch { throw UsageError("\(error)") }
            let layout = try QueueFlags.layout(flags.queue, command: "purge")
            // A hook owed for a job keeps it (this folder's outbox; another worker's is on its machine).
            let owed = QueueFlags.queueFolderExists(layout) ? layout.jobsOwedHooks() : []
            // A run may still write result files: with --store always, here when one holds the lock.
            let runActive = try QueueFlags.storeURL(flags.queue) != nil || RunLock.activeRun(path: layout.lockFile) != nil
            let count = try store.purge(states: Set(selection.states), finishedBefore: selection.finishedBefore(runActive: runActive),
                                        excluding: owed)
            let which = selection.states.map(\.rawValue).joined(separator: " or ")
            Output.out("purged \(count) \(which) job\(count == 1 ? "" : "s")"
                       + (flags.olderThan.map { " that ended more than \($0) ago" } ?? "") + "\n")
            return .success
        }
    }

    /// What `limit` and `status` say of the queue's limits.
    static func limitLines(_ settings: QueueSettings, now: Date = Date()) -> String {
        var lines = ""
        if let text = settings.rateLimit, let schedule = try? RateSchedule.parse(text) {
            if schedule.isTimetable {
                lines += "limit by the time of day (local), for every run of this queue; now: \(schedule.limit(at: now).described)\n"
                for entry in schedule.entries {
                    lines += String(format: "  from %02d:%02d  ", entry.minute / 60, entry.minute % 60) + entry.limit.described + "\n"
                }
            } else {
                lines += "limit: \(schedule.entries[0].limit.described), for every run of this queue\n"
            }
        } else {
            lines += "no queue-wide limit: each run keeps its own --limit-rate (none unless given)\n"
        }
        if let jobs = settings.jobs {
            lines += "jobs at once: \(jobs) in each run of this queue (over its own --jobs)\n"
        }
        if let perHost = settings.perHost {
            lines += "connections to one host at once: \(perHost) in each run of this queue (over its own --per-host)\n"
        }
        for (id, rate) in settings.jobRates.sorted(by: { $0.key < $1.key }) {
            lines += "job \(id): \(JobRateChange.described(rate)) (over its job file's limit_rate)\n"
        }
        return lines
    }

    /// Applies `change` (hold or unhold) to each job `ids` name (whole ids or unique prefixes),
    /// saying for each what it did by the state the job had.
    private static func change(_ ids: [String], in store: QueueStore, by change: (String) throws -> JobState?,
                               saying line: (String, JobState) -> String) throws {
        for typed in ids {
            let id = try JobIDs.resolve(typed, in: store)
            guard let previous = try change(id) else { throw QueueError.unknownJob(typed) }
            Output.out(line(id, previous))
        }
    }

    /// What `resume ID` says, by the state the job had.
    static func unholdLine(_ id: String, _ previous: JobState) -> String {
        previous == .held ? "\(id): queued again; a run goes on from where it stopped\n"
            : "\(id) is not held (it is \(previous.rawValue)); nothing changed\n"
    }

    /// What `pause ID` says, by the state the job had.
    static func holdLine(_ id: String, _ previous: JobState) -> String {
        switch previous {
        case .running: return "\(id): the running transfer stops within a second, its progress kept; `transferd resume \(id)` goes on\n"
        case .held: return "\(id) is already held\n"
        case .finishing: return "\(id) is finishing (its file is complete and being put in place); it was not held\n"
        case .done, .failed, .cancelled: return "\(id) has ended (\(previous.rawValue)); nothing to pause\n"
        case .queued, .waiting, .paused: return "\(id): held; `transferd resume \(id)` lets it run\n"
        }
    }

    /// Parses, handles --help, checks the job selection (`select`: `pause`, `resume`), opens the
    /// store, runs `body`, and maps errors to exit codes.
    private static func command(_ help: CommandHelp, _ argv: [String], select: ((ParsedArguments) throws -> JobSelection)? = nil,
                                _ body: (ParsedArguments, QueueStore) throws -> ExitCode) -> ExitCode {
        QueueCommands.command(help, argv) { arguments in
            if let select { _ = try select(arguments) }
            let queue = QueueOptions(arguments)
            let layout = try QueueFlags.layout(queue, command: help.name)
            if try QueueFlags.storeURL(queue) == nil && !QueueFlags.queueFolderExists(layout) {
                throw QueueError.noQueue(layout.directory)
            }
            return try body(arguments, try QueueFlags.openStore(layout, queue))
        }
    }
}

/// `pause`'s options, typed.
struct PauseOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var state: String? { arguments[SteerCommands.pauseState] }
    var host: String? { arguments[SteerCommands.pauseHost] }
    var all: Bool { arguments[SteerCommands.pauseAll] }
    var finishRunning: Bool { arguments[SteerCommands.finishRunning] }
}

/// `resume`'s options, typed.
struct ResumeOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var host: String? { arguments[SteerCommands.resumeHost] }
    var all: Bool { arguments[SteerCommands.resumeAll] }
}

/// `prioritize`'s options, typed. `--priority` is checked by the command, in words of its own.
struct PrioritizeOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var priority: String? { arguments[SteerCommands.priority] }
    var top: Bool { arguments[SteerCommands.top] }
}

/// `limit`'s options, typed. `--jobs` and `--per-host` take `default` too: `LimitChange` reads them.
struct LimitOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var jobs: String? { arguments[SteerCommands.jobs] }
    var perHost: String? { arguments[SteerCommands.perHost] }
    var clear: Bool { arguments[SteerCommands.clear] }
    var job: String? { arguments[SteerCommands.job] }
}

/// `purge`'s options, typed. `PurgeSelection` reads the states and the age.
struct PurgeOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var states: String? { arguments[SteerCommands.states] }
    var olderThan: String? { arguments[SteerCommands.olderThan] }
    var queue: QueueOptions { QueueOptions(arguments) }
}

/// Which jobs a `pause` or `resume` names: ids (or unique prefixes of them), every job in a
/// state or of a host, or the whole queue. Exactly one way.
struct JobSelection: Equatable {
    var ids: [String]?
    var state: JobState?
    var host: String?
    var all = false

    init(ids: [String]? = nil, state: JobState? = nil, host: String? = nil, all: Bool = false) {
        self.ids = ids
        self.state = state
        self.host = host
        self.all = all
    }

    /// What `pause` names.
    init(_ options: PauseOptions) throws {
        try self.init(ids: options.positionals, state: options.state, host: options.host, all: options.all, verb: "pause")
    }

    /// What `resume` names (it takes no --state).
    init(_ options: ResumeOptions) throws {
        try self.init(ids: options.positionals, state: nil, host: options.host, all: options.all, verb: "resume")
    }

    /// Exactly one way, or a usage error that says which ways `verb` has.
    private init(ids given: [String], state name: String?, host: String?, all: Bool, verb: String) throws {
        let ways = [!given.isEmpty, name != nil, host != nil, all]
        guard ways.filter({ $0 }).count == 1 else {
            throw UsageError(verb == "pause" ? "give job IDs, --state STATE, --host HOST or --all (one of them)"
                                 : "give job IDs, --host HOST or --all (one of them)")
        }
        if !given.isEmpty { ids = given }
        if let name {
            let allowed = JobTransition.hold.sources
            guard let found = JobState(rawValue: name), allowed.contains(found) else {
                throw UsageError("--state takes \(allowed.map(\.rawValue).joined(separator: ", ")), not '\(name)'"
                                 + (Spelling.closest(to: name, in: Set(allowed.map(\.rawValue))).map { " (did you mean '\($0)'?)" } ?? ""))
            }
            state = found
        }
        self.host = host.map { $0.lowercased() }
        self.all = all
    }

    /// Whether `job` is one this selection names (ids are resolved apart, by `JobIDs`).
    func matches(_ job: JobRecord) -> Bool {
        if let state, job.state != state { return false }
        if let host, job.spec.host.lowercased() != host { return false }
        return ids == nil
    }

    /// Runs `body` for every job in `states` that the selection names, a page at a time (a
    /// queue of a million is never held in memory at once).
    func forEach(in store: QueueStore, states: [JobState], _ body: (JobRecord) throws -> Void) throws {
        for state in states where self.state == nil || self.state == state {
            try store.forEachJob(in: state) { job in
                if matches(job) { try body(job) }
            }
        }
    }
}
