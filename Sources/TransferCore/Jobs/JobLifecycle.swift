import Foundation

/// What can happen to a job, as a store records it. Which states each one
/// applies to, and where it leads, is `JobState.after(_:)`: one pure function
/// that both stores' statements take their state conditions from, so a stale
/// or racing write (a retry recorded for a job a user cancelled a moment ago,
/// a failure for a job already done) changes nothing.
public enum JobTransition: CaseIterable, Sendable {
    /// A worker takes a runnable job.
    case claim
    /// An attempt failed and another is due later.
    case scheduleRetry
    /// A run stops: its job waits for the next run (a store of one run).
    case pause
    /// A worker stops: its job goes back to the queue for any worker (a shared store).
    case release
    /// A process that ended without a word left the job: it is queued again.
    case recover
    /// The file is complete and synced, about to be renamed into place.
    case markFinishing
    /// The job succeeded.
    case complete
    /// The job failed for good.
    case fail
    /// Its runner stopped it because a user cancelled it.
    case cancelStopped
    /// A user cancelled a job no one is transferring: it ends at once.
    case cancelAtOnce
    /// A user cancelled a job being transferred: its runner is asked to stop it.
    case requestCancel
    /// A user retries a job that ended (or waits): it starts over from the queue.
    case requeue
    /// A person pauses a job (`transferd pause`): it is held, with its attempts, checkpoint and
    /// partial file, until they resume it; a running one's runner sees it held and stops it.
    case hold
    /// A person resumes a held job: it is queued again and goes on from its checkpoint.
    case unhold

    /// The transition that ends a job in `state` (done, failed, or cancelled by its runner).
    public static func ending(in state: JobState) -> JobTransition {
        switch state {
        case .done: return .complete
        case .cancelled: return .cancelStopped
        default: return .fail
        }
    }

    /// The states it applies to, in declaration order.
    public var sources: [JobState] {
        JobState.allCases.filter { $0.after(self) != nil }
    }

    /// `'a', 'b'`: the sources for a statement's `state IN (…)`.
    var sqlStates: String {
        sources.map { "'\($0.rawValue)'" }.joined(separator: ", ")
    }
}

extension JobState {
    /// Where `transition` leads from this state; nil where it does not apply.
    public func after(_ transition: JobTransition) -> JobState? {
        switch (transition, self) {
        case (.claim, .queued), (.claim, .waiting):
            return .running
        case (.scheduleRetry, .running):
            return .waiting
        case (.pause, .running):
            return .paused
        case (.release, .running), (.recover, .running), (.recover, .paused):
            return .queued
        case (.markFinishing, .running):
            return .finishing
        // A finishing job is complete on disk: it ends (done, failed by its rename, or
        // cancelled), it never runs again.
        case (.complete, .running), (.complete, .finishing):
            return .done
        case (.fail, .running), (.fail, .finishing):
            return .failed
        case (.cancelStopped, .running):
            return .cancelled
        case (.cancelAtOnce, .queued), (.cancelAtOnce, .waiting), (.cancelAtOnce, .paused), (.cancelAtOnce, .held),
             (.cancelAtOnce, .finishing):
            return .cancelled
        case (.requestCancel, .running):
            return .running
        // `done` is never left: its file is in place and its result recorded.
        case (.requeue, .failed), (.requeue, .cancelled), (.requeue, .waiting):
            return .queued
        // A finishing job is complete on disk and is not held; an ended one has nothing to hold.
        case (.hold, .queued), (.hold, .waiting), (.hold, .paused), (.hold, .running):
            return .held
        case (.unhold, .held):
            return .queued
        default:
            return nil
        }
    }

    /// What a user's `cancel` does to a job in this state.
    public var cancelEffect: CancelEffect {
        if after(.cancelAtOnce) != nil { return .endsNow }
        if after(.requestCancel) != nil { return .stopRequested }
        return .none
    }
}

/// What a user's `cancel` does.
public enum CancelEffect: Sendable, Equatable {
    /// No one is transferring it: it is cancelled now.
    case endsNow
    /// Its runner is asked to stop it, and records it cancelled.
    case stopRequested
    /// It had already ended.
    case none
}

/// What a person asked of a job its runner transfers.
public enum JobStop: Sendable, Equatable {
    /// Cancelled: the runner stops it and records it `cancelled`.
    case cancel
    /// Held (`transferd pause`): the runner stops it and leaves it held, its partial file and
    /// checkpoint kept for when it is resumed.
    case hold
}

/// What people asked of a running queue, as a run reads it twice a second in one store read:
/// which of its jobs to stop, and the queue's settings (paused, a rate limit).
public struct RunSteering: Sendable, Equatable {
    /// The run's jobs a person asked to stop, and how.
    public var stops: [String: JobStop]
    public var settings: QueueSettings

    public init(stops: [String: JobStop] = [:], settings: QueueSettings = QueueSettings()) {
        self.stops = stops
        self.settings = settings
    }
}

/// What a person set for the whole queue, kept in the store for every run and worker.
public struct QueueSettings: Sendable, Equatable {
    /// Whether the whole queue is paused (`transferd pause --all`): no run claims a job.
    public var paused: Bool
    /// The run-wide rate limit `transferd limit` set (`RateSchedule` text), over every run's
    /// own `--limit-rate`; nil when none is set.
    public var rateLimit: String?
    /// Jobs each run transfers at once (`transferd limit --jobs`), over every run's own
    /// `--jobs`; nil when none is set.
    public var jobs: Int?
    /// Connections one host gets at once in each run (`transferd limit --per-host`), over every
    /// run's own `--per-host`; nil when none is set.
    public var perHost: Int?

    /// Jobs' own rate limits a person set (`transferd limit --job ID RATE`), by job id, in bytes
    /// per second, over the job file's `limit_rate`; 0: no limit at all.
    public var jobRates: [String: Int64] = [:]

    /// The most `jobs` and `perHost` may be.
    package static let maximumJobs = 1000

    /// Where a job's own rate limit is stored among the settings: this prefix and its id.
    public static let jobRatePrefix = "rate:"

    /// The names settings are stored under.
    public enum Key: String, Sendable, CaseIterable {
        case paused
        case rateLimit = "rate_limit"
        case jobs
        case perHost = "per_host"
    }

    public init(paused: Bool = false, rateLimit: String? = nil, jobs: Int? = nil, perHost: Int? = nil) {
        self.paused = paused
        self.rateLimit = rateLimit
        self.jobs = jobs
        self.perHost = perHost
    }

    /// Settings from stored name-value pairs (unknown names and values out of range are
    /// ignored: a newer version's).
    public init(values: [String: String]) {
        func count(_ key: Key) -> Int? {
            values[key.rawValue].flatMap(Int.init).flatMap { (1...Self.maximumJobs).contains($0) ? $0 : nil }
        }
        self.init(paused: values[Key.paused.rawValue] == "1", rateLimit: values[Key.rateLimit.rawValue],
                  jobs: count(.jobs), perHost: count(.perHost))
        for (name, value) in values where name.hasPrefix(Self.jobRatePrefix) {
            guard let rate = Int64(value), rate >= 0 else { continue }
            jobRates[String(name.dropFirst(Self.jobRatePrefix.count))] = rate
        }
    }

    /// The rate limit job `id` runs under now: a person's (`limit --job`), else its file's; nil: none.
    public func rate(of id: String, file: Int64?) -> Int64? {
        guard let set = jobRates[id] else { return file }
        return set == 0 ? nil : set
    }
}

/// Which ended jobs `purge` forgets, as a person writes it (`transferd purge`, POST /v1/purge):
/// states done, failed or cancelled (comma-separated; default done) and an age such as 90s,
/// 30m, 12h or 7d.
package struct PurgeSelection: Sendable, Equatable {
    package var states: [JobState]
    /// Only jobs that ended longer ago than this many seconds (nil: whenever).
    package var olderThan: TimeInterval?

    package init(states: String?, olderThan: String?) throws {
        self.states = try (states ?? "done").split(separator: ",").map { name in
            let trimmed = name.trimmingCharacters(in: .whitespaces)
            guard let state = JobState(rawValue: trimmed), state.isFinal else {
                throw PurgeSelectionError("the states are done, failed or cancelled (comma-separated), not '\(trimmed)'; "
                                          + "only ended jobs are purged")
            }
            return state
        }
        guard !self.states.isEmpty else { throw PurgeSelectionError("give done, failed or cancelled (comma-separated)") }
        self.olderThan = try olderThan.map(Self.age)
    }

    /// An age such as 90s, 30m, 12h or 7d, in seconds.
    static func age(_ text: String) throws -> TimeInterval {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        let digits = text.dropLast()
        guard let unit = text.last.flatMap({ units[$0] }), !digits.isEmpty,
              digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), let number = Double(digits), number.isFinite else {
            throw PurgeSelectionError("an age is a number and a unit, such as 90s, 30m, 12h or 7d, not '\(text)'")
        }
        return number * unit
    }

    /// While a run works the queue, jobs that ended this recently are not purged: it writes their
    /// result files every couple of seconds, and a purged job would never reach them.
    package static let minimumAge: TimeInterval = 10

    /// The ended jobs' end before which they are purged, from `now`; `runActive`: a run (or,
    /// in a fleet, any worker) may still be writing result files.
    package func finishedBefore(now: Date = Date(), runActive: Bool) -> Date? {
        let age = max(olderThan ?? 0, runActive ? Self.minimumAge : 0)
        return age > 0 ? now.addingTimeInterval(-age) : nil
    }
}

/// A purge selection that cannot be read, with what to write instead.
package struct PurgeSelectionError: Error, CustomStringConvertible, Equatable {
    package let description: String
    init(_ description: String) { self.description = description }
}

/// A change to the queue's limits as a person writes it (`transferd limit`, POST /v1/limit):
/// each part nil (unchanged), `default` (dropped: each run's own flag again) or a value — a
/// rate or timetable (`RateSchedule`), jobs at once and connections per host (1 to
/// `QueueSettings.maximumJobs`). Read whole before anything is written, so a mistake in one
/// part changes none.
package struct LimitChange: Sendable, Equatable {
    /// Per setting: nil unchanged, `.some(nil)` dropped, `.some(value)` the stored text.
    package private(set) var values: [QueueSettings.Key: String?] = [:]

    /// Every limit dropped (`--clear`, `clear=1`).
    package static let clearAll = LimitChange(values: [.rateLimit: nil, .jobs: nil, .perHost: nil])

    private init(values: [QueueSettings.Key: String?]) {
        self.values = values
    }

    package init(rate: String?, jobs: String?, perHost: String?) throws {
        if let rate {
            do { values[.rateLimit] = .some(rate == "default" ? nil : try RateSchedule.parse(rate).text) } catch {
                throw LimitChangeError(description: "\(error)")
            }
        }
        for (key, text, name) in [(QueueSettings.Key.jobs, jobs, "jobs at once"), (.perHost, perHost, "connections per host")] {
            guard let text else { continue }
            if text == "default" {
                values[key] = .some(nil)
                continue
            }
            guard let count = Int(text), (1...QueueSettings.maximumJobs).contains(count) else {
                throw LimitChangeError(description: "\(name) must be a whole number from 1 to \(QueueSettings.maximumJobs), "
                                           + "or default, not '\(text)'")
            }
            values[key] = .some(String(count))
        }
    }

    /// Whether it changes anything.
    package var isEmpty: Bool { values.isEmpty }

    /// Writes the change.
    package func apply(to store: QueueStore) throws {
        for key in QueueSettings.Key.allCases {
            if let value = values[key] { try store.setSetting(key, to: value) }
        }
    }
}

/// A job's own rate as a person writes it (`transferd limit --job ID RATE`, POST
/// /v1/jobs/ID/limit): a rate such as 512K, `off` (no limit at all, its file's neither), or
/// `default` (its file's `limit_rate` again). The text `QueueStore.setJobRate` stores.
package enum JobRateChange {
    package static func stored(_ text: String) throws -> String? {
        switch text {
        case "default": return nil
        case "off": return "0"
        default:
            guard let bytes = ByteSize.parse(text), bytes > 0 else {
                throw LimitChangeError(description: "a job's rate is a size per second like 512K or 10M, off, or default, not '\(text)'")
            }
            return String(bytes)
        }
    }

    /// As a person reads a stored rate (0: unlimited).
    package static func described(_ bytesPerSecond: Int64?) -> String {
        guard let bytesPerSecond, bytesPerSecond > 0 else { return "unlimited" }
        return RateLimit.rate(bytesPerSecond)
    }
}

/// A limit change that cannot be read, with what to write instead.
package struct LimitChangeError: Error, CustomStringConvertible, Equatable {
    package let description: String
}
