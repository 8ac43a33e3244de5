import Foundation

/// What to do when the destination already exists.
public enum OverwritePolicy: String, Sendable, Codable, CaseIterable {
    /// Fail with a clear error; the existing file is untouched.
    case refuse
    /// Replace it, but only once the new file is complete and verified.
    case overwrite
    /// Keep it when it matches: same SHA-256 if one is given, else same size
    /// and modification time as the remote Last-Modified.
    case skipIfIdentical = "skip"
}

/// One download's settings.
public struct DownloadOptions: Sendable {
    public var url: URL
    public var destination: String
    public var headers: HTTPHeaders
    /// Parallel range connections for one large file.
    public var connections: Int
    /// Other URLs serving the same file (a job's `mirrors`, a metalink's list): the file's
    /// ranges are spread over `url` and these by their measured speed (`MirrorSet`).
    public var mirrors: [URL] = []
    /// Connections one mirror may take at once (aria2's `--max-connection-per-server`).
    public var connectionsPerMirror = 2
    /// A metalink's piece hashes: checked when the file is complete; a failing piece is fetched
    /// again (from another mirror, when the one that served it is known), at most three times.
    package var pieces: PieceHashes?
    /// Segments smaller than this are not split further.
    public var minSegmentSize: Int64
    /// Expected SHA-256 in hex; checked before the file appears.
    public var sha256: String?
    /// Whether the rate may be changed while the download runs (`DownloadEngine.setRate`): the
    /// engine then keeps a bucket even without `maxRate`.
    package var rateAdjustable = false
    /// A published SHA256SUMS list (`ChecksumList`) whose line for `checksumsName` gives the
    /// expected SHA-256, when `sha256` does not. Fetched at the start of each run.
    public var checksumsURL: URL?
    /// The name to look up in the list (default: the URL's last path component).
    public var checksumsName: String?
    public var overwrite: OverwritePolicy
    public var retry: RetryPolicy
    public var tls: TLSOptions
    public var connectTimeout: TimeInterval
    public var idleTimeout: TimeInterval
    public var maxRedirects: Int
    /// Bytes per second for the whole download (nil: unlimited).
    public var maxRate: Int64?
    /// Seconds between durable checkpoints.
    public var checkpointInterval: TimeInterval
    /// Adds authentication to each request just before it is sent (S3's
    /// SigV4): given method, URL and headers, returns the headers to send.
    public var signer: (@Sendable (String, URL, HTTPHeaders) -> HTTPHeaders)?
    /// The least one request of a segmented download asks for (see `SegmentPlan.requestWindow`);
    /// an S3 source asks for more (`S3Client.requestFloor`).
    package var requestFloor: Int64 = 16 << 20
    /// A rate cap shared with other downloads (the queue's `--limit-rate`).
    public var sharedLimiter: BandwidthLimiter?
    /// False in the queue: a failure that needs a backoff delay ends the attempt
    /// with `DownloadDeferred` so the job waits without holding a slot.
    package var retryInPlace = true
    /// fsync the file before each checkpoint and before the rename. The queue
    /// turns this off and syncs the filesystem once per batch of finished jobs.
    package var syncEachFile = true
    /// Also checkpoint whenever this many bytes were written since the last
    /// one, without syncing the file: a killed process re-fetches at most
    /// about this much per connection (a crash of the machine: what came after
    /// the last synced checkpoint). 4 MiB; the queue uses 256 KiB (a database row).
    package var checkpointBytes: Int64? = 4 << 20
    /// Also sync the file with a checkpoint whenever this many bytes were
    /// written since the last sync (nil: only by time, `checkpointInterval`;
    /// the queue, without a timer: 64 MiB).
    package var syncBytes: Int64?
    /// Also record on the partial file itself how far each segment is written
    /// whenever this many bytes were written since the last record (nil:
    /// never): a process killed in the same boot then re-fetches about this
    /// much in all, at any speed (see `WrittenOffsets`). 1 MiB.
    package var writtenRecordBytes: Int64? = 1 << 20
    /// Bytes gathered before each write to the file. 64 KiB: the page cache
    /// takes a write into folios of about its size, and on this machine's VM
    /// large folios fault in slowly whenever the balloon has handed freed
    /// memory back to the host (`dd bs=1M` of 1 GiB then takes 1-2 s instead
    /// of 0.2-0.3 s). 1 GiB from nginx, one connection, 10 interleaved rounds
    /// in such a state (2026-12-02), medians: 256 KiB writes 1.79 s (1.33-3.04),
    /// 64 KiB 1.25 s (1.06-1.59), 32 KiB 1.44 s, 16 KiB 1.48 s, `curl -o`
    /// (16 KiB writes, not synced) 1.46 s; 64 KiB was the fastest of the four
    /// in 9 rounds of 10 and tied in one. Eight connections: 0.64-0.81 s
    /// against 0.65-0.95 s with 256 KiB. (1 MiB writes took 3.9-5.5 s.)
    package var writeBufferSize = DownloadOptions.defaultWriteBufferSize
    static let defaultWriteBufferSize = 64 << 10
    /// Run a timer task that reports `.progress` and checkpoints by time. The
    /// queue turns it off: it polls `DownloadEngine.progress()` for all jobs
    /// from one timer and checkpoints by bytes (`checkpointBytes`).
    package var ownTicker = true
    /// Leave the verified file at `partPath` and let the caller rename it (the
    /// queue renames a batch after recording it as `finishing`).
    package var deferRename = false
    /// Failed attempts without progress before this run (the job's count in the queue).
    package var priorFailures = 0
    /// Write the partial file even while another process holds its lock. For a queue job a shared
    /// store handed over with a checkpoint: the worker that wrote it lost its lease (it may be
    /// frozen, still holding the lock), and the store fences it off at its next checkpoint, so the
    /// lease, not the lock, says who writes. Otherwise a held partial file stops the download.
    package var takesOverBusyPart = false
    /// The size the file must have, known beforehand (an S3 listing): a body
    /// of another length is never saved as the file.
    public var expectedSize: Int64?
    /// The version the caller expects (an S3 listing's ETag, quoted as a response carries it):
    /// an answer naming another version is a change, never saved under the expected one.
    package var expectedValidators: ResponseValidators?
    /// The speed under which an exchange is abandoned (nil: none); see `LowSpeedLimit`.
    public var lowSpeed: LowSpeedLimit? = .default
    /// On a transport without backpressure, the most that all of this
    /// download's requests together may have asked for and not yet received.
    package var windowBudgetWithoutBackpressure: Int64 = 4 << 20

    public init(url: URL, destination: String, headers: HTTPHeaders = [:], connections: Int = 1,
                minSegmentSize: Int64 = 4 << 20, sha256: String? = nil, overwrite: OverwritePolicy = .refuse,
                retry: RetryPolicy = .default, tls: TLSOptions = TLSOptions(), connectTimeout: TimeInterval = 15,
                idleTimeout: TimeInterval = 30, maxRedirects: Int = 10, maxRate: Int64? = nil,
                checkpointInterval: TimeInterval = 1) {
        self.url = url
        self.destination = destination
        self.headers = headers
        self.connections = max(1, connections)
        self.minSegmentSize = max(1, minSegmentSize)
        self.sha256 = sha256?.lowercased()
        self.overwrite = overwrite
        self.retry = retry
        self.tls = tls
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.maxRedirects = maxRedirects
        self.maxRate = maxRate
        self.checkpointInterval = checkpointInterval
    }

    package var partPath: String { PartialNames.part(of: destination) }
    package var statePath: String { PartialNames.state(of: destination) }
}

/// A download attempt failed in a way that wants a pause before the next
/// (only when `retryInPlace` is false): the queue schedules the retry.
package struct DownloadDeferred: Error, CustomStringConvertible {
    package var delay: TimeInterval
    package var reason: String
    package var failures: Int
    /// The server refused with 429 or 503: it wants fewer requests at once.
    package var throttled = false
    package var description: String { reason }
}

/// What a finished download did.
public struct DownloadResult: Sendable {
    public var path: String
    public var size: Int64
    /// The file's SHA-256 when one was checked.
    public var sha256: String?
    /// Body bytes received over the network in this run (all attempts).
    public var bytesFetched: Int64
    /// Bytes already on disk from an earlier run when this one started.
    public var resumedFrom: Int64
    public var skipped: Bool
    /// Set when `deferRename` left the complete file at the partial path.
    package var completedPartPath: String?
    public var restarts: Int
    /// Segments in the final plan (more than planned when idle connections took over slow ones).
    public var segments: Int
    public var elapsed: TimeInterval
    /// With `deferRename`: the partial file, still open and locked against other writers; the
    /// caller lets go of it (and so of the lock) once the file is renamed into place.
    var partFile: PartFile? = nil
    /// The version the saved bytes are (the answers' ETag and Last-Modified): what was received,
    /// to record, not what a listing said.
    package var validators = ResponseValidators()
    /// With mirrors: what each served in this run, and why any was dropped.
    public var mirrors: [MirrorShare] = []
}

/// What one mirror of a download did in a run.
public struct MirrorShare: Sendable, Equatable {
    /// The mirror's URL, redacted.
    public var url: String
    /// Body bytes it delivered in this run.
    public var bytes: Int64
    /// Of those, the bytes the finished file holds (the rest were fetched again from another).
    public var kept: Int64
    /// Why it was dropped (nil: used to the end).
    public var dropped: String?
}

/// Things a download reports while it runs.
public enum DownloadEvent: Sendable {
    /// Size known (or not), resuming from `resumedFrom` bytes, over `segments` connections.
    case started(totalSize: Int64?, resumedFrom: Int64, segments: Int)
    case progress(written: Int64, totalSize: Int64?, received: Int64)
    /// An attempt failed; the next starts after `delay`. `resumeAt` is set when
    /// the failed attempt moved bytes and the next one continues from there.
    case retrying(attempt: Int, delay: TimeInterval, reason: String, resumeAt: Int64?)
    case restarted(reason: String)
    case verifying
    /// A mirror is no longer asked (its URL redacted), with the reason; its bytes were not used,
    /// or failed a checksum.
    case mirrorDropped(url: String, reason: String)
    /// The complete file failed its checksum: `bytes` other mirrors served are fetched again.
    case refetching(bytes: Int64, reason: String)
}
