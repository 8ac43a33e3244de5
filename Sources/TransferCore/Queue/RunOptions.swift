import Foundation

/// How `transferd run` works a queue.
public struct RunOptions: Sendable {
    /// Jobs transferring at once.
    public var maxJobs = 8
    /// Connections to one host at once, over all jobs (a segmented job counts each segment).
    public var maxConnectionsPerHost = 16
    /// Range connections per download job, unless the job says otherwise.
    public var connections = 1
    /// Backend for jobs that do not name one.
    public var transport = "curl"
    /// Attempts without progress before a job fails, unless the job says otherwise.
    public var retries = 5
    /// Total receive rate over all jobs (nil: unlimited).
    public var limitRate: Int64?
    public var tls = TLSOptions()
    public var connectTimeout: TimeInterval = 15
    public var idleTimeout: TimeInterval = 30
    /// The speed under which a download's attempt is abandoned (nil: none).
    public var lowSpeed: LowSpeedLimit? = .default
    public var maxRedirects = 10
    /// Keep running and pick up new job files as they appear.
    public var watch = false
    /// Base of the backoff between a job's attempts (tests shorten it).
    package var retryBaseDelay: TimeInterval = 1
    /// Hooks for jobs that have none of their own.
    package var hooks = RunHooks()
    /// The first wait between notify attempts (tests shorten it).
    package var notifyBaseDelay: TimeInterval = 1
    /// Receives the debug log of every HTTP exchange, secrets redacted (nil: no log).
    public var requestLog: (@Sendable (String) -> Void)?

    public init() {}
}

/// How a run ended.
public struct RunSummary: Sendable {
    public var done = 0
    public var failed = 0
    public var cancelled = 0
    /// Jobs of earlier runs that are in the failed state.
    public var failedInStore = 0
    /// Job files rejected during this run.
    public var rejectedFiles = 0
    public var interrupted = false
    /// Running jobs this run stopped because a person paused them (`transferd pause`).
    public var held = 0
    /// Jobs held (paused by a person) when the run ended: nothing runs them until they are resumed.
    public var heldInStore = 0
    /// Whether the whole queue was paused when the run ended (`transferd pause --all`).
    public var queuePaused = false
    /// Jobs left that a run would take (queued, waiting to retry, paused by a shutdown).
    public var runnableLeft = 0

    public init() {}
}

/// A run that stopped on an error of its own (its store unreachable past `--store-outage`, a
/// local failure), with what it had done by then. The jobs it held stay in the store: a shared
/// store hands them to another worker once their leases run out, and the next run takes them.
public struct RunAbandoned: Error, CustomStringConvertible {
    public let summary: RunSummary
    /// Jobs that were running when it stopped.
    public let running: Int
    public let cause: Error

    public var description: String {
        "stopped: \(cause) — this run had finished \(summary.done) job\(summary.done == 1 ? "" : "s") "
            + "(\(summary.failed) failed, \(summary.cancelled) cancelled); the \(running) running were stopped and stay queued for the next run"
    }
}
