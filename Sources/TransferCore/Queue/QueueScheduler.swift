import Foundation

/// The run loop's decisions, as a value tested without I/O: when to claim and
/// how many jobs, which candidates fit the per-host limits (adapted to 429s and
/// 503s), which claimed download must wait for another job writing the same
/// file, and what each finished attempt becomes in the store. `QueueRunner`
/// does the I/O (the store, the tasks, the renames) and tells it what happened.
struct QueueScheduler: Sendable {
    /// A job being transferred, as the decisions see it.
    struct Slot: Sendable, Equatable {
        var host: String
        var connections: Int
        /// The file a download writes (nil for uploads).
        var destination: String?
    }

    /// What a finished attempt becomes.
    enum Disposition: Sendable, Equatable {
        /// A complete download: synced and recorded done with the next durable batch.
        case awaitBatch
        /// Recorded done now (an upload, or a prefix that made its files durable itself).
        case done(size: Int64)
        /// Runs again after `delay`, with `attempts` failures counted against its budget.
        case retry(delay: TimeInterval, reason: String, attempts: Int)
        case fail(String)
        case cancelled
        /// Stopped by this run's shutdown: resumed by the next run (or another worker).
        case pause
    }

    /// Jobs transferring at once: the run's `--jobs`, or the queue's `jobs` setting
    /// (`transferd limit --jobs`), changed while the run goes on (`setMaxJobs`).
    private(set) var maxJobs: Int
    /// Range connections of a job that does not set its own.
    let defaultConnections: Int
    private(set) var hostLimits: HostLimits
    private(set) var running: [String: Slot] = [:]
    /// Completed downloads waiting to be renamed into place, by destination: their files are still busy.
    private var renaming: [String: String] = [:]
    /// The last claim that found fewer jobs than it asked for, while it is news: nothing else
    /// was runnable then beyond the hosts that had no room.
    private var shortClaim: ShortClaim?
    /// When the longest-free slot became free since the last claim (system uptime).
    private var slotFreeSince: TimeInterval?
    /// Connections other workers of a fleet held on each host at the last claim that saw its
    /// jobs: a refusal's cut counts them with this worker's own (a host's limit is the fleet's).
    private var heldElsewhere: [String: Int] = [:]

    /// Whether free slots are gathered into groups before a claim (see `claimSize`).
    let claimsInGroups: Bool
    /// How many jobs may hold a file open at once, running ones and completed downloads waiting
    /// for their rename (each keeps its partial file open, its lock): a run out of descriptors
    /// could open neither files nor sockets.
    let heldFilesLimit: Int

    init(maxJobs: Int, defaultConnections: Int, maxConnectionsPerHost: Int, claimsInGroups: Bool = true,
         heldFilesLimit: Int = .max) {
        self.maxJobs = maxJobs
        self.claimsInGroups = claimsInGroups
        self.heldFilesLimit = heldFilesLimit
        self.defaultConnections = defaultConnections
        self.hostLimits = HostLimits(maximum: maxConnectionsPerHost)
    }

    // MARK: Claiming

    /// A claim that came back short, and the room its hosts without room had then.
    private struct ShortClaim: Sendable {
        var at: TimeInterval
        var room: [String: Int]
    }

    /// How many jobs to ask the store for now; nil: not now. With `claimsInGroups` (a shared
    /// store), claims come in groups (half the slots, or whatever is free once a slot has
    /// waited `claimPause`) rather than one job per transaction: each claim costs round trips
    /// (with many small jobs, claims of a quarter of the slots were most of PostgreSQL's work).
    /// A run's own SQLite file claims every free slot at once (unless the hosts are the limit,
    /// below): waiting for half of them kept
    /// `--jobs 16` at 12.4 jobs running on average (1,000 × 256 KiB), and every job that waits
    /// for a free slot against a distant server waits for the slowest of a group. Finished jobs
    /// that arrive together still make one claim (the run reads its mailbox whole).
    ///
    /// After a claim that came back short, the store had nothing runnable beyond hosts with no
    /// room: the next claim waits until one of those hosts has more room than then (and asks
    /// for no more than their room), a change it could not see (new files, a user's action),
    /// or `recheckInterval` (a retry coming due, another worker's jobs). Claiming again on
    /// every finished job read past all of a full host's queued jobs each time: `--jobs 64`
    /// against one host (limit 16), 10,000 jobs, spent 1.4 ms of CPU per job against 0.26.
    func claimSize(now: TimeInterval) -> Int? {
        // Running jobs count against both limits: the job slots and the files held open.
        let free = min(maxJobs, heldFilesLimit - renaming.count) - running.count
        guard free > 0 else { return nil }
        var wanted = free
        var group = maxJobs
        var hostsLimit = false
        if let short = shortClaim, now - short.at < Self.recheckInterval {
            hostsLimit = true
            let current = claimRound()
            guard short.room.contains(where: { current.room(on: $0.key) > $0.value }) else { return nil }
            wanted = min(free, short.room.keys.reduce(0) { $0 + current.room(on: $1) })
            group = min(maxJobs, short.room.keys.reduce(0) { $0 + hostLimits.limit(for: $1) })
        }
        let waited = slotFreeSince.map { now - $0 >= Self.claimPause } ?? true
        // With the hosts as the limit (a claim came back short), room is gathered whatever the store:
        // a claim for one slot could read past thousands of a host's rows that do not fit yet.
        let grouped = claimsInGroups || hostsLimit
        guard !grouped || wanted >= max(1, group / 2) || running.isEmpty || waited else { return nil }
        return wanted
    }

    /// How long a free slot waits for others before it is claimed for alone (seconds).
    static let claimPause: TimeInterval = 0.1
    /// How long a short claim's picture of the queue is trusted (seconds).
    static let recheckInterval: TimeInterval = 0.5

    /// Something changed that a claim that came back short did not see.
    mutating func somethingChanged() { shortClaim = nil }

    /// Changes the connections one host gets at once (`--per-host`); the connections under way
    /// go on.
    mutating func setMaxConnectionsPerHost(_ connections: Int) {
        guard connections != hostLimits.maximum else { return }
        hostLimits.setMaximum(connections)
        somethingChanged()
    }

    /// Changes how many jobs transfer at once. Fewer: the jobs under way go on, and none starts
    /// until fewer run than that. More: free slots are claimed at once.
    mutating func setMaxJobs(_ jobs: Int) {
        guard jobs != maxJobs else { return }
        maxJobs = max(1, jobs)
        somethingChanged()
    }

    /// Another worker cut its limit for `host` (`HostLimits.adopt`).
    mutating func adoptHostLimit(_ host: String, limit: Int, now: TimeInterval) {
        if hostLimits.adopt(host, limit: limit, now: now) { somethingChanged() }
    }

    /// Time passed: host limits no refusal has cut for a while rise (`HostLimits.recover`),
    /// and a claim that came back short for want of room is tried again.
    mutating func timePassed(now: TimeInterval) {
        if hostLimits.recover(now: now) { somethingChanged() }
    }

    /// A claim asked for `asked` jobs in `round` and came back with `found`.
    mutating func claimed(found: Int, asked: Int, in round: ClaimRound, now: TimeInterval) {
        slotFreeSince = nil
        heldElsewhere.merge(round.heldElsewhere) { $1 }
        // The room is the round's: it counts the round's own picks (they start after this call).
        if found < asked {
            var room: [String: Int] = [:]
            for host in round.hostsWithoutRoom { room[host] = round.room(on: host) }
            shortClaim = ShortClaim(at: now, room: room)
        } else if var short = shortClaim, now - short.at < Self.recheckInterval {
            // A claim held to the room of the hosts a short claim left: the picture still holds.
            for host in short.room.keys { short.room[host] = round.room(on: host) }
            shortClaim = short
        } else {
            shortClaim = nil
        }
    }

    /// Range connections for a job: its own setting or the run's, within the per-host maximum.
    func connections(jobSetting: Int?) -> Int {
        min(jobSetting ?? defaultConnections, hostLimits.maximum)
    }

    /// One claim's weighing of candidates, in the store's order.
    struct ClaimRound: Sendable {
        fileprivate var hostUse: [String: Int]
        fileprivate let limits: HostLimits
        fileprivate let scheduler: QueueScheduler
        /// Hosts a candidate was refused for in this round.
        fileprivate var refused: Set<String> = []
        /// Other workers' connections on each host a candidate was weighed for.
        fileprivate var heldElsewhere: [String: Int] = [:]

        /// Hosts already at their limit: the store need not offer their jobs.
        var fullHosts: Set<String> { Set(hostUse.filter { $0.value >= limits.limit(for: $0.key) }.keys) }
        /// Hosts whose jobs this round could not take: full, or refused a candidate.
        var hostsWithoutRoom: Set<String> { fullHosts.union(refused) }

        /// Connections `host` could still take (this worker's view).
        func room(on host: String) -> Int { max(0, limits.limit(for: host) - hostUse[host, default: 0]) }

        /// The connections `candidate` will use if it fits its host's limit (other workers'
        /// connections included); nil: not now. A job wider than the limit may run alone.
        mutating func accept(_ candidate: ClaimCandidate) -> Int? {
            let connections = scheduler.connections(jobSetting: candidate.connections)
            let used = hostUse[candidate.host, default: 0] + candidate.heldElsewhere
            heldElsewhere[candidate.host] = candidate.heldElsewhere
            guard used == 0 || used + connections <= limits.limit(for: candidate.host) else {
                refused.insert(candidate.host)
                return nil
            }
            hostUse[candidate.host, default: 0] += connections
            return connections
        }
    }

    /// Each host in use or with a lowered limit: connections now and the limit.
    var hostUse: [HostUse] {
        var use: [String: Int] = [:]
        for slot in running.values { use[slot.host, default: 0] += slot.connections }
        for host in hostLimits.reduced.keys where use[host] == nil { use[host] = 0 }
        return use.map { HostUse(host: $0.key, connections: $0.value, limit: hostLimits.limit(for: $0.key)) }
    }

    func claimRound() -> ClaimRound {
        var use: [String: Int] = [:]
        for slot in running.values { use[slot.host, default: 0] += slot.connections }
        return ClaimRound(hostUse: use, limits: hostLimits, scheduler: self)
    }

    /// The job already writing `destination`, if any: a claimed download for it waits its
    /// turn instead of sharing the partial file. (No destination can be another's partial
    /// file, `PartialNames`, so the destination alone tells.)
    func writer(of destination: String) -> String? {
        running.first { $0.value.destination == destination }?.key ?? renaming[destination]
    }

    mutating func started(_ id: String, _ slot: Slot) { running[id] = slot }

    // MARK: Outcomes

    /// What a finished attempt of job `id` becomes. The host's limit learns from it: a
    /// success counts towards raising it, a 429 or 503 cuts it. `attempts` is the job's
    /// failure count before this attempt; `sent` when it started, `serving` the connections
    /// to its host seen receiving data when it was refused (all by system uptime).
    mutating func settle(_ id: String, outcome: QueueRunner.JobOutcome, attempts: Int,
                         sent: TimeInterval, now: TimeInterval, serving: Int) -> Disposition {
        guard let slot = running.removeValue(forKey: id) else { return .pause }
        if slotFreeSince == nil { slotFreeSince = now }
        switch outcome {
        case .done(let result):
            hostLimits.succeeded(slot.host, now: now)
            renaming[result.path] = id
            return .awaitBatch
        case .completed(let size):
            hostLimits.succeeded(slot.host, now: now)
            return .done(size: size)
        case .retry(let delay, let reason, let failures, let throttled):
            var counted = failures
            if throttled {
                // The server wants fewer requests at once: the host's limit shrinks. A refusal of a
                // request sent under a limit already cut is the run's overshoot, not the job's failure.
                // Seen serving: this worker's connections receiving data, and the fleet's others.
                let fleet = serving > 0 ? serving + heldElsewhere[slot.host, default: 0] : 0
                let refusal = hostLimits.throttled(slot.host, retryAfter: delay, sent: sent, now: now, serving: fleet)
                if refusal == .overshoot { counted = attempts }
            }
            return .retry(delay: delay, reason: reason, attempts: counted)
        case .failed(let message):
            return .fail(message)
        case .cancelled:
            return .cancelled
        case .interrupted:
            return .pause
        }
    }

    /// A job another worker took over: nothing it did is recorded or learnt from.
    mutating func forget(_ id: String) {
        running.removeValue(forKey: id)
    }

    /// A batch of completed downloads was renamed (or given up): their files are free.
    mutating func renamed(_ ids: Set<String>) {
        renaming = renaming.filter { !ids.contains($0.value) }
    }
}
